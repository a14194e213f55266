"""The keeper: every source's files watched, and the version a change on disk replaced
kept (§7.2, issue 37: nothing lost, whoever writes).

Layer adapter (trio). The watcher (watch.py) keeps the loaded projects' views true to
disk; the keeper keeps what they held: every memory folder of every source, loaded or not,
watched with an inotify instance of its own, and each file's bytes read once it stands
still (its baseline, disk/baselines.py). When a file is replaced by a rename, rewritten in
place or removed, by any process, the baseline is the version kept: in the own source's
``.history/``, or for a read-only source in the state folder's mirror, which the view
shows under ``.history/`` as that source's (view/catalog.py `kept_origin`). The journal
records each change, marked as made on disk, its process unknown.

Threading: events are read and decided on the trio thread (memory only: which file to
look at, and when); every look, read and keep runs in a worker call (`workers.run`), a
batch of files at a time; nothing here holds up a request. The first pass over every
folder runs once the mount serves (`run`), a folder at a time, so that a large source
slows no agent's first look at a project; `memfs status` says when it is done.

A file renamed in is looked at at once (it is whole, and may be replaced again soon); one
changed in place or removed, and a folder that came or went, once it stood still for
`baselines.STILL_NS` (a tool removing or swapping a folder is done by then: a version kept
into a folder being removed would fail its `rm -rf`). A change memfs itself made through
the mount is no change here: the plan that made it told the store what it left
(steps.apply, under `baselines.GUARD`), and it kept and journaled its version itself.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass

import trio

from memfs.adapter import workers
from memfs.adapter.status import Stats
from memfs.disk import baselines, roots, sources, store
from memfs.disk.config import Config
from memfs.disk.inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_EXCL_UNLINK,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
    sift,
    unheld,
)
from memfs.rules import history
from memfs.rules import slug as slugs
from memfs.rules.history import HISTORY
from memfs.view import userlevel
from memfs.view.kept import KeptVersions

log = logging.getLogger(__name__)

FOLDER_MASK = (
    IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
ROOT_MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW
BATCH = 64  # files looked at in one worker call
SWEEP = ""  # a due look at a whole folder, not one file
# A folder above a kept folder that is not there yet (Claude Code makes
# `projects/<slug>/` before its `memory/`): watched for the folder to come.
ABOVE = "\0above"
ABOVE_MASK = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW


@dataclass(frozen=True)
class Kept:
    """A folder the keeper keeps: the disk's view of it, and its project's slug (for the
    journal)."""

    folder: baselines.Folder
    slug: str


class Keeper:
    """Watches every source folder and keeps what a change on disk replaced (the module)."""

    def __init__(self, config: Config, stats: Stats) -> None:
        self.config = config
        self.stats = stats
        self.inotify = Inotify()
        self.limits = config.limits
        self._kept: dict[bytes, Kept] = {}  # folder key -> the folder
        self._watched: dict[int, tuple[bytes, str]] = {}  # wd -> (folder key, folder in it)
        self._roots: dict[int, int] = {}  # wd -> the source whose root it watches
        self._due: dict[tuple[bytes, str], int] = {}  # (folder key, path or SWEEP) -> when
        self._live: set[bytes] = set()  # folder keys whose folder itself is watched
        self._more_sources = trio.Event()  # sources added while serving (`sources_added`)
        self._wake = trio.Event()

    # --- the folders ---------------------------------------------------------------

    def _listing(self) -> list[Kept]:
        """Worker: every memory folder of every source (and global/'s), as the roots hold
        them now."""
        config = self.config
        found: list[Kept] = []
        listing, reals = roots.list_folders(config)
        for i, name, mapped in listing:
            if (i, name) in reals:
                # Reached through a link, or in the project (goose's): its mirror would need
                # the name its root gives it (Origin.via); not kept yet (issue 38).
                continue
            spec = config.sources[i]
            slug = mapped if mapped is not None else slugs.canonical_slug(name)
            if mapped is None and spec.their_home:  # another machine's (§12): as shown here
                slug = slugs.rehome(slug, spec.their_home, str(config.home))
            folder = baselines.Folder(
                spec.name, spec.root, (name, *spec.tail), spec.own, spec.memory_names
            )
            found.append(Kept(folder, slug))
        for kind in userlevel.kinds(config):
            slug = userlevel.slug_of(kind)
            for o in userlevel.origins(config, slug):
                spec = config.sources[o.source]
                found.append(
                    Kept(baselines.Folder(spec.name, o.root, o.parts, spec.own, o.only), slug)
                )
        return found

    def _watch_roots(self) -> list[tuple[int, int]]:
        """Worker: each root that holds projects, watched for folders coming and going."""
        added = []
        for i, spec in enumerate(self.config.sources):
            if not spec.projects:
                continue
            try:
                added.append((self.inotify.add(spec.root, ROOT_MASK), i))
            except OSError:
                continue  # not there yet: found by a later listing
        return added

    def _watch_tree(self, kept: Kept) -> list[tuple[int, str]]:
        """Worker: ``kept``'s folder and every folder below it but ``.history/``, watched
        (again: a folder made since is added, one watched already keeps its watch); if the
        folder is not there, the nearest folder above it in its source, for it to come."""
        folder = kept.folder
        scan = sources.scan(folder.root, folder.parts, self.limits.max_file_bytes, folder.only)
        if not scan.exists:
            return self._watch_above(folder)
        added = []
        for rel in ["", *scan.dirs]:
            if rel == HISTORY or rel.startswith(HISTORY + "/"):
                continue
            try:
                added.append((self.inotify.add(folder.path / rel, FOLDER_MASK), rel))
            except OSError:
                continue
        return added

    def _watch_above(self, folder: baselines.Folder) -> list[tuple[int, str]]:
        """Worker: the nearest folder between the source's root (watched by `run`, for a
        source of projects) and ``folder`` that is there, watched for what comes in it."""
        for depth in range(len(folder.parts) - 1, 0, -1):
            above = folder.root.joinpath(*folder.parts[:depth])
            try:
                return [(self.inotify.add(above, ABOVE_MASK), ABOVE)]
            except OSError:
                continue
        return []

    def _watching(self, key: bytes, added: list[tuple[int, str]]) -> None:
        for wd, rel in added:
            self._watched[wd] = (key, rel)
            if rel == "":
                self._live.add(key)

    async def _add(self, kept: Kept) -> None:
        """Keep ``kept``'s folder from now on: watched first, then swept (a file changed
        between the two is looked at twice, never missed)."""
        key = kept.folder.key
        self._kept[key] = kept
        await self._look([(key, SWEEP)])  # a sweep watches the folder first (`_looked`)

    async def _relist(self) -> None:
        """The roots listed again: a folder new to the keeper is added; one it keeps whose
        watch went (the folder was removed, and is back) is swept, which watches it."""
        for kept in await workers.run(self._listing):
            key = kept.folder.key
            if key not in self._kept:
                await self._add(kept)
            elif key not in self._live:
                self._schedule(key, SWEEP, 0)

    # --- running -------------------------------------------------------------------

    async def run(self) -> None:
        """The first pass over every folder, then events as they come."""
        await self._take_sources()
        self.stats.disk_swept = True
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read)
            nursery.start_soon(self._looks)
            nursery.start_soon(self._sources)

    def sources_added(self) -> None:
        """Trio thread: the config gained sources while serving (another machine's folders
        arrived, §12): they are watched and swept as the first pass did the others."""
        self._more_sources.set()

    async def _take_sources(self) -> None:
        for wd, i in await workers.run(self._watch_roots):
            self._roots[wd] = i
        await self._relist()

    async def _sources(self) -> None:
        while True:
            await self._more_sources.wait()
            self._more_sources = trio.Event()
            await self._take_sources()

    async def _read(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.inotify.fd)
            raw = self.inotify.read_queued()
            # memfs's own commits need no look: the store learnt what they left
            # (steps.apply), and they kept their versions themselves.
            sifted = sift(raw)
            relist = False
            for wd, mask, name in sifted.events + unheld(sifted.held):
                relist |= self._event(wd, mask, name)
            if relist:
                await self._relist()

    def _event(self, wd: int, mask: int, name: str) -> bool:
        """Trio thread, memory only: when to look at what one event names. True when the
        roots must be listed again (a project folder came)."""
        if mask & IN_Q_OVERFLOW:
            log.warning("the keeper's inotify queue overflowed: every folder looked at again")
            for key in self._kept:
                self._schedule(key, SWEEP, 0)
            return True
        if wd in self._roots:
            return bool(mask & (IN_CREATE | IN_MOVED_TO))
        where = self._watched.get(wd)
        if where is None:
            return False
        key, rel = where
        if mask & IN_IGNORED:
            del self._watched[wd]
            if rel == "":
                self._live.discard(key)
            return False
        if rel == ABOVE:
            if key not in self._live:  # the folder, or one on the way to it, came
                self._schedule(key, SWEEP, 0)
            return False
        path = _join(rel, name)
        if mask & IN_ISDIR or mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            if name == HISTORY and not rel:
                return False  # the own source's kept versions: versions, not memory
            # A folder came or went: what lies in it, once the tool is done with it (a
            # version kept at once in a folder being removed would fail its `rm -rf`, or
            # make the folder a `mv` of another one onto it expects gone).
            self._schedule(key, SWEEP, baselines.STILL_NS)
            return False
        if not history.keeps_versions(path):
            return False  # a writer's temp, swap or backup file: no memory
        if mask & IN_MOVED_TO:
            self._schedule(key, path, 0)  # renamed in: read now, before the next replace
        else:  # written in place, or gone: once still (gone: as a folder, above)
            self._schedule(key, path, baselines.STILL_NS)
        return False

    def _schedule(self, key: bytes, path: str, after_ns: int) -> None:
        """Look at ``path`` after ``after_ns``: a later wish postpones a look already due,
        but one for now (a file renamed in, read before it is replaced again) wins; a
        look that comes too early for a file still being written asks again itself."""
        at = time.monotonic_ns() + after_ns
        due = self._due.get((key, path))
        self._due[(key, path)] = at if due is None or after_ns == 0 else max(at, due)
        self._wake.set()

    async def _looks(self) -> None:
        """Look at what is due, a batch at a time, in a worker."""
        while True:
            if not self._due:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            now = time.monotonic_ns()
            first = min(self._due.values())
            if first > now:
                with trio.move_on_after((first - now) / 1e9):
                    await self._wake.wait()
                self._wake = trio.Event()
                continue
            batch = sorted(k for k, at in self._due.items() if at <= now)[:BATCH]
            for k in batch:
                del self._due[k]
            await self._look(batch)

    async def _look(self, batch: list[tuple[bytes, str]]) -> None:
        """Look at each (folder, path or SWEEP) of ``batch`` in one worker call; what
        did not stand still is looked at again later, what a folder's sweep found watched."""
        jobs = [(self._kept[key], path) for key, path in batch if key in self._kept]
        again, seen, watched = await workers.run(self._looked, jobs)
        for key, added in watched:
            if any(wd not in self._watched for wd, _ in added):
                # Watched in that worker call, but known here only now: a change between
                # the two had its event dropped, so the folder is swept once more.
                self._schedule(key, SWEEP, 0)
            self._watching(key, added)
        self.stats.disk_changes += len(seen)
        self.stats.disk_versions += sum(bool(s.version) for s in seen)
        for key, path in again:
            self._schedule(key, path, baselines.STILL_NS)

    def _looked(
        self, jobs: list[tuple[Kept, str]]
    ) -> tuple[
        list[tuple[bytes, str]], list[baselines.Seen], list[tuple[bytes, list[tuple[int, str]]]]
    ]:
        """Worker: the looks, the versions kept and the journal's rows; what to look at
        again, the changes seen, and the watches a sweep added (a folder's sweep watches
        it and what came in it first: a change after the watch is an event, one before
        it the sweep's)."""
        db = store.of(self.config.state_dir)
        again: list[tuple[bytes, str]] = []
        changes: list[baselines.Seen] = []
        watched: list[tuple[bytes, list[tuple[int, str]]]] = []
        grown: dict[bytes, Kept] = {}  # own folders that kept a new version
        for kept, path in jobs:
            try:
                if path == SWEEP:
                    watched.append((kept.folder.key, self._watch_tree(kept)))
                    seen, later = baselines.sweep(
                        db, kept.folder, self.limits, self.config.state_dir
                    )
                    again += [(kept.folder.key, p) for p in later]
                else:
                    found = baselines.look(
                        db, kept.folder, path, self.limits, self.config.state_dir
                    )
                    seen = [found.seen] if found.seen is not None else []
                    if found.again:
                        again.append((kept.folder.key, path))
            except (OSError, sqlite3.Error) as exc:
                log.warning("cannot keep the versions of %s/%s: %s", kept.folder.path, path, exc)
                continue
            changes += seen
            for s in seen:
                baselines.record(self.config.state_dir, kept.slug, kept.folder.source, s)
                if kept.folder.own and s.version in s.kept:
                    grown[kept.folder.key] = kept
        for kept in grown.values():
            self._bound_own(kept)
        return again, changes, watched

    def _bound_own(self, kept: Kept) -> None:
        """Worker: the own folder's kept versions back within ``history_bytes``, kept first
        out, never a path's newest (view/kept.py's rule, as a write through the mount
        keeps it; the read-only sources' are bounded where they are kept, baselines.py)."""
        folder = kept.folder
        scan = sources.scan(folder.root, folder.parts, self.limits.max_file_bytes, folder.only)
        versions = KeptVersions()
        for f in scan.files:
            if history.in_history(f.path):
                versions.put(f.path, f.size, f.ctime_ns or f.mtime_ns)
        gone = versions.over_budget("", 0, self.limits.history_bytes)
        if gone:
            baselines.drop(folder, gone)

    def close(self) -> None:
        self.inotify.close()


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name
