"""PREAMBLE.md's inodes: one rendering per inode number, for as long as the kernel holds it.

Layer adapter, plain (no pyfuse3, no trio), trio thread only. §6 asks for PREAMBLE.md
to be served like a plain file (its real size, the page cache, mmap) while every open
reads one consistent rendering. A rendering that differs from the last gets a new inode
number when the kernel next looks the name up: an inode then shows one rendering for ever,
so no page the kernel caches, nor the size it holds, can mix two of them. A change of the
project only makes the kernel look the name up again (the adapter queues that); what is
open keeps its rendering.
"""

from __future__ import annotations

from pathlib import Path

from memfs.adapter.inodes import Inodes, Key
from memfs.disk.config import Config
from memfs.view.catalog import Catalog
from memfs.view.documents import empty_preamble
from memfs.view.project import PREAMBLE, Project


class Renderings:
    def __init__(self, config: Config, catalog: Catalog, inodes: Inodes, mountpoint: Path) -> None:
        self.config = config
        self.catalog = catalog
        self.inodes = inodes
        self.mountpoint = mountpoint
        self._by_ino: dict[int, bytes] = {}  # PREAMBLE.md inode -> the rendering it shows

    def render(self, project: Project) -> bytes:
        """PREAMBLE.md of ``project`` now (cached per project generation)."""
        files_at = f"{self.mountpoint}/{project.slug}"
        if not self.catalog.has(project.slug):
            # No memory yet: the frame says so, and where the first write lands (§4).
            return empty_preamble(self.config, project.slug, files_at)
        return project.preamble(files_at)

    def inode_of(self, key: Key) -> int:
        """The inode number of ``key`` when the kernel looks it up: PREAMBLE.md gets a new
        one per rendering (see above), any other key keeps its own."""
        if key[1] != PREAMBLE:
            return self.inodes.number(key)
        project = self.catalog.loaded().get(key[0]) or self.catalog.empty(key[0])
        assert project is not None
        return self.number(key, project)

    def number(self, key: Key, project: Project) -> int:
        """The inode number of ``project``'s PREAMBLE.md (at ``key``) as looked up now."""
        data = self.render(project)
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

    def size(self, ino: int, project: Project) -> int:
        return len(self.of(ino, project))

    def of(self, ino: int, project: Project) -> bytes:
        """What inode ``ino`` shows: its own rendering, else the current one."""
        return self._by_ino.get(ino) or self.render(project)

    def holds(self, ino: int) -> bool:
        return ino in self._by_ino

    def forgotten(self, ino: int) -> None:
        self._by_ino.pop(ino, None)

    def _check(self) -> None:
        for ino in self._by_ino:
            assert self.inodes.key(ino) is not None, ("a rendering of no inode", ino)
