"""Other machines' folders served as they arrive, without a remount (§12).

Role: watch the folder other machines' memory arrives in (``$XDG_DATA_HOME/memfs/machines``,
disk/machines.py) with an inotify instance of its own, and when a folder's machine file has
arrived, add its read-only source to the running mount: appended to the config
(`Config.add_sources`, so every index held stays true) and handed to the watcher, which
watches its root and lists its projects (`Watcher.sources_added`). Knows trio, not pyfuse3.

Threading: the watches and the reading of machine files run in a worker (`workers.run`);
the config and the watcher are changed on the trio thread. Event driven, no timer: a
machine's folders are few, so each event re-reads all of them (a few ``stat`` calls each).
A machine removed (`memfs sync remove`) takes its folders with it: its sources stay in the
config until the next mount, holding nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from memfs.adapter import workers
from memfs.adapter.keeper import Keeper
from memfs.adapter.watch import Watcher
from memfs.disk import config as configs
from memfs.disk import machines
from memfs.disk.inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE_SELF,
    IN_MOVE_SELF,
    IN_MOVED_TO,
    IN_ONLYDIR,
    Inotify,
)

log = logging.getLogger(__name__)

# A folder made or moved in, a machine file written or renamed into place (Syncthing
# renames its temp file over it).
MASK = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR


class MachineWatch:
    def __init__(self, watcher: Watcher, keeper: Keeper | None = None) -> None:
        self.watcher = watcher
        self.keeper = keeper  # keeps the versions of what arrives too (§7.2)
        self.config = watcher.catalog.config
        self.inotify = Inotify()
        self.added = 0  # sources added while serving
        self.looks = 0  # looks taken at the machines' folders

    def _look(self, folder: Path) -> list[machines.Received]:
        """Worker: watch ``folder`` (or the nearest folder on its way, until it exists) and
        every machine and source folder in it; what has arrived there."""
        for way in (folder, *folder.parents):
            try:
                self.inotify.add(way, MASK)
                break
            except OSError:
                continue
        found = machines.received(folder)
        for machine in machines.listed(folder):
            for below in [folder / machine, *machines.folders_of(folder / machine)]:
                try:
                    self.inotify.add(below, MASK)
                except OSError:
                    continue  # gone meanwhile: its parent's event brings a look
        return found

    def _take(self, found: list[machines.Received]) -> None:
        """Trio thread: the sources of folders not served yet, appended and watched."""
        known = {s.root for s in self.config.sources}
        taken = {s.name for s in self.config.sources}
        added = []
        for received in found:
            if received.folder in known:
                continue
            spec = configs.received_source(received, taken)
            if spec is None or not spec.projects:
                # A name taken, or Codex's user-level memory (global/ is fixed while
                # serving): the next mount serves it.
                continue
            taken.add(spec.name)
            added.append(spec)
        if not added:
            return
        first = len(self.config.sources)
        self.config.add_sources(tuple(added))
        self.added += len(added)
        log.info("serving %s from other machines", ", ".join(s.name for s in added))
        self.watcher.sources_added(first)
        if self.keeper is not None:
            self.keeper.sources_added()

    async def run(self) -> None:
        folder = self.config.machines_dir
        if folder is None:
            return
        try:
            while True:
                self._take(await workers.run(self._look, folder))
                self.looks += 1
                await trio.lowlevel.wait_readable(self.inotify.fd)
                while self.inotify.read_queued():
                    pass  # every event asks the same look
        finally:
            self.inotify.close()
