"""PREAMBLE.md's inodes: one rendering per inode number, for as long as the kernel holds it.

Layer adapter, plain (no pyfuse3, no trio), trio thread only. §6 asks for PREAMBLE.md
to be served like a plain file (its real size, the page cache, mmap) while every open
reads one consistent rendering. A rendering that differs from the last gets a new inode
number when the kernel next looks the name up: an inode then shows one rendering for ever,
so no page the kernel caches, nor the size it holds, can mix two of them. A change of the
project only makes the kernel look the name up again (the adapter queues that); what is
open keeps its rendering.

PREAMBLE-<N>.md, found by name and never listed, is served the same way, each name
with inodes of its own. The kernel keeps no entry nor attributes of it (attrs.py): it
looks the name up at every use, so no change needs an invalidation of the names the
kernel may hold (any of 1,048,321), and the lookup finds the current rendering.
"""

from __future__ import annotations

from pathlib import Path

from memfs.adapter.inodes import Inodes, Key
from memfs.disk import sources
from memfs.disk.config import Config
from memfs.rules.preamble import sized_budget
from memfs.view.catalog import Catalog
from memfs.view.documents import empty_preamble
from memfs.view.project import PREAMBLE, Project


def read_body(root: Path, parts: tuple[str, ...], path: str, limit: int) -> bytes:
    """A body a rendering needs that no worker read ahead (a file changed within the 10 ms
    before the read-ahead, or one the read-ahead did not foresee): read here, on the
    request thread, the one disk read a rendering makes (§7a's known exception). Every
    loaded project's reader (`Catalog.read_body`)."""
    return sources.read_file(root, parts, path, limit)


class Renderings:
    def __init__(self, config: Config, catalog: Catalog, inodes: Inodes, mountpoint: Path) -> None:
        self.config = config
        self.catalog = catalog
        self.inodes = inodes
        self.mountpoint = mountpoint
        # PREAMBLE.md or PREAMBLE-<N>.md inode -> the rendering it shows
        self._by_ino: dict[int, bytes] = {}

    def render(self, project: Project, path: str = PREAMBLE) -> bytes:
        """PREAMBLE.md (or the PREAMBLE-<N>.md at ``path``) of ``project`` now, cached per
        project generation."""
        files_at = f"{self.mountpoint}/{project.slug}"
        budget = sized_budget(path)
        if not self.catalog.has(project.slug):
            # No memory yet: the frame says so, and where the first write lands (§4).
            return empty_preamble(self.config, project.slug, files_at, budget)
        return project.preamble(files_at, budget=budget)

    def inode_of(self, key: Key) -> int:
        """The inode number of ``key`` when the kernel looks it up: PREAMBLE.md and
        PREAMBLE-<N>.md get a new one per rendering (see above), any other key keeps its
        own."""
        if not is_rendered(key[1]):
            return self.inodes.number(key)
        project = self.catalog.loaded().get(key[0]) or self.catalog.empty(key[0])
        assert project is not None
        return self.number(key, project)

    def number(self, key: Key, project: Project) -> int:
        """The inode number of ``project``'s PREAMBLE.md or PREAMBLE-<N>.md (at ``key``) as
        looked up now."""
        data = self.render(project, key[1])
        ino = self.inodes.known(key)
        if ino is not None and self._by_ino.get(ino, data) != data:
            self.inodes.detach(key)
            if self.inodes.key(ino) is None:  # the kernel held none of it
                del self._by_ino[ino]
        ino = self.inodes.number(key)
        self._by_ino.setdefault(ino, data)
        return ino

    def warm(self, project: Project) -> None:
        """Render ``project``'s PREAMBLE.md and MEMORY.md (the watcher calls this in the
        worker that built it, before publishing)."""
        project.preamble(f"{self.mountpoint}/{project.slug}")
        project.memory_index()

    def size(self, ino: int, project: Project, path: str = PREAMBLE) -> int:
        return len(self.of(ino, project, path))

    def of(self, ino: int, project: Project, path: str = PREAMBLE) -> bytes:
        """What inode ``ino`` shows: its own rendering, else the current one of ``path``."""
        return self._by_ino.get(ino) or self.render(project, path)

    def holds(self, ino: int) -> bool:
        return ino in self._by_ino

    def forgotten(self, ino: int) -> None:
        self._by_ino.pop(ino, None)

    def _check(self) -> None:
        for ino in self._by_ino:
            assert self.inodes.key(ino) is not None, ("a rendering of no inode", ino)


def is_rendered(path: str) -> bool:
    """Whether a project's view ``path`` is a rendering: PREAMBLE.md or PREAMBLE-<N>.md."""
    return path == PREAMBLE or sized_budget(path) is not None
