"""A request's project: listed and loaded off the request thread on first use (§4, §7a).

Layer adapter (trio), trio thread only. With a watcher (a mount), the watcher lists the
source roots and builds projects in worker threads, one load per project however many
requests wait for it; without one (the adapter tests), a worker call reads the same (the
listing, what the state folder keeps of a project, its folders' scans) and the catalog
builds the project from them here.
"""

from __future__ import annotations

import errno

import pyfuse3

from memfs.adapter import workers
from memfs.adapter.inodes import Key
from memfs.adapter.moves import Moves
from memfs.adapter.watch import Watcher
from memfs.disk import roots, sources, state
from memfs.view.catalog import Catalog, is_project_name
from memfs.view.project import Origin, Project


class Projects:
    """The catalog's projects as requests need them."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.watcher: Watcher | None = None  # set by mount.py
        self.moves: Moves | None = None  # moved projects followed (fs.py)

    async def listed(self) -> None:
        """Every source root listed (the root's entries), off this thread."""
        if self.watcher is not None:
            await self.watcher.listing()
        elif not self.catalog.listed:
            self.catalog.set_listing(*await workers.run(roots.list_folders, self.catalog.config))

    async def get(self, slug: str) -> Project:
        """``slug``'s project, loaded off this thread on first use; an empty one for a
        canonical slug no source holds yet (§4: `here` never dangles)."""
        project = self.catalog.loaded().get(slug)
        if project is not None:
            return project
        await self.listed()
        if self.watcher is not None:
            project = await self.watcher.load(slug)
        elif self.catalog.has(slug):
            config = self.catalog.config
            folders = [(o, o.root, o.parts, o.only) for o in self.catalog.origins(slug)]

            def read() -> tuple[state.Saved, dict[Origin, tuple[sources.Scan, int]]]:
                saved = state.load_project(config.state_dir, slug)
                return saved, sources.scan_each(folders, config.limits.max_file_bytes)

            saved, scans = await workers.run(read)
            project = self.catalog.loaded().get(slug) or self.catalog.adopt(
                self.catalog.build(slug, saved, scans)
            )
        # Asked for by name and held by no source: it may be a moved project (§4.2)
        unheld = project is None and not self.catalog.has(slug) and is_project_name(slug)
        if unheld and self.moves is not None and await self.moves.asked(slug):
            return await self.get(slug)
        if project is None:
            project = self.catalog.empty(slug)
        if project is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return project

    def recheck(self, project: Project, origin: int, path: str) -> None:
        """A request found ``path`` changed on disk before inotify told: the watcher looks."""
        if self.watcher is not None:
            self.watcher.recheck(project, origin, path)

    def exists(self, key: Key) -> bool:
        """Whether ``key`` names something the view shows now (memory only: no load)."""
        slug, path = key
        if not slug:  # the root, `here`, global/ and what it serves
            return True
        if not path:
            return self.catalog.has(slug)
        project = self.catalog.loaded().get(slug)
        return project is not None and (
            project.tree.leaf(path) is not None or project.tree.is_dir(path)
        )
