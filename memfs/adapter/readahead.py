"""Reading ahead the bodies a changed project's renderings will ask for (§7a).

Role: once a project changed (a write through the mount, or a change the watcher took in)
and its changes paused, read in one worker call the bodies its next ``PREAMBLE.md`` and
``MEMORY.md`` need, so that rendering them reads nothing on the request thread. Knows
trio but not pyfuse3. An optimisation only: a rendering asked for before the bodies came
reads what it needs itself, and nothing here holds up an invalidation (§5.4).
"""

from __future__ import annotations

import trio

from memfs.adapter import workers
from memfs.disk import sources
from memfs.view.catalog import Catalog
from memfs.view.project import Project

SETTLE_S = 0.01  # a project's bodies are read ahead once its changes pause this long


class ReadAhead:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._slugs: set[str] = set()  # asked for since the last read (`soon`)
        self._settling: trio.CancelScope | None = None  # while waiting for a pause
        self._wake = trio.Event()

    def soon(self, project: Project) -> None:
        """``project`` changed: read its renderings' bodies once its changes pause."""
        self._slugs.add(project.slug)
        self._wake.set()
        if self._settling is not None:
            self._settling.deadline = trio.current_time() + SETTLE_S

    async def run(self) -> None:
        """The projects asked for by `soon`, read once no ask came for `SETTLE_S`: in a
        burst of writes each read would be moot by the next write, and would only take
        the interpreter from the requests. Its own task, so the watcher's next events
        never wait for it."""
        while True:
            await self._wake.wait()
            # Each ask moves this scope's deadline on (`soon`).
            with trio.CancelScope(deadline=trio.current_time() + SETTLE_S) as settling:
                self._settling = settling
                await trio.sleep_forever()
            self._settling = None
            self._wake = trio.Event()
            slugs, self._slugs = self._slugs, set()
            loaded = self.catalog.loaded()
            await self._read([loaded[s] for s in sorted(slugs) if s in loaded])

    async def _read(self, projects: list[Project]) -> None:
        """In one worker call, the bodies the projects' renderings want; kept on the trio
        thread. Asked after the adapter is told: its invalidations are what makes a
        change show whole (§5.4) and must not wait for an optimisation."""
        wanted = [(project, project.bodies_wanted()) for project in projects]
        wanted = [(project, reads) for project, reads in wanted if reads]
        if not wanted:
            return
        found = await workers.run(lambda: [sources.read_bodies(reads) for _, reads in wanted])
        for (project, _), bodies in zip(wanted, found, strict=True):
            project.keep_bodies(bodies)
