"""What each writer read of MEMORY.md, so that its save lands as a change of it (§5.3).

Layer adapter, but plain: imports neither pyfuse3 nor trio; owned by the trio thread. No
I/O but `procs.tgid` (one small read of /proc, at a read open of MEMORY.md).

A save of MEMORY.md through the mount is taken against the version its writer read
(view/indexes.py). Writers read in one open and save through another, often from another
thread (Node's file system calls run on a pool), so the read is kept per process (its
thread group) and project: the body served by its last read open of that MEMORY.md
(`IndexReads.noted`). A save is taken against (`Stages.open`, `Stages.commit`): the view
its open for writing opened, when that open could read it (O_RDWR without O_TRUNC: its
stage starts from it) or appends to it; else what its process last read here; else the
view as it stood when the writer opened MEMORY.md for writing (a rename onto MEMORY.md:
when the change is planned). A truncate by path cuts the view as it stands, and is taken
against it (view/indexes.py).

Kept only as long as a save can follow the read (an agent reads the index right before it
edits it): at most `READS_KEPT` entries and `BYTES_KEPT` bytes, each for `READ_KEEP_S`
seconds (a pid reused later must not inherit a read). The bodies are the view's own bytes
objects (`Documents.memory_index` caches one per generation), so readers of one version
share one.

An editor's backup-then-write moves MEMORY.md away and writes it anew at once: the move is
kept for `MOVED_KEEP_S` seconds per project (`moved`), and the save that follows (a create,
an O_TRUNC write, a rename onto it) is the save of the index moved, its own index the one
the change applies to, not a new index (`saving`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from memfs.disk import procs
from memfs.view.indexes import IndexChange
from memfs.view.project import MEMORY, Project

Key = tuple[str, str]  # (slug, the index's path): as inodes.Key

READS_KEPT = 128
BYTES_KEPT = 16 << 20
READ_KEEP_S = 600.0
MOVED_KEEP_S = 60.0


@dataclass(frozen=True, slots=True)
class _Read:
    at: float
    data: bytes


class IndexReads:
    """The MEMORY.md each process last read, per project, and indexes just moved away."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._reads: OrderedDict[tuple[int, Key], _Read] = OrderedDict()
        self._bytes = 0
        self._moved: dict[Key, tuple[float, IndexChange]] = {}

    def noted(self, pid: int, index: Key, data: bytes) -> None:
        """Thread ``pid`` opened the index at ``index`` (a project's MEMORY.md, or a
        subagent's in global/claude) for reading, served ``data``."""
        key = (procs.tgid(pid), index)
        old = self._reads.pop(key, None)
        if old is not None:
            self._bytes -= len(old.data)
        self._reads[key] = _Read(self._clock(), data)
        self._bytes += len(data)
        while self._reads and (len(self._reads) > READS_KEPT or self._bytes > BYTES_KEPT):
            _, dropped = self._reads.popitem(last=False)
            self._bytes -= len(dropped.data)

    def read_by(self, tgid: int, index: Key) -> bytes | None:
        """What process ``tgid`` last read of the index at ``index``, if it is recent."""
        found = self._reads.get((tgid, index))
        if found is None or self._clock() - found.at > READ_KEEP_S:
            return None
        return found.data

    def change(self, tgid: int, project: Project, path: str = MEMORY) -> IndexChange:
        """What a save of ``project``'s index ``path`` by process ``tgid`` is taken against:
        what it last read here, else the view now."""
        key = (project.slug, path)
        read = self.read_by(tgid, key)
        return self.saving(key, project.memory_index(path) if read is None else read)

    def moved(self, index: Key, change: IndexChange) -> None:
        """The index at ``index`` was renamed away: ``change`` is what a save of it that
        follows soon is taken against (an editor's backup-then-write)."""
        self._moved = {k: m for k, m in self._moved.items() if not self._old(m[0])}
        self._moved[index] = (self._clock(), change)

    def saving(self, index: Key, read: bytes | None) -> IndexChange:
        """A save of the index at ``index`` by a writer that read ``read`` (None: nothing, a
        create where the view had none) begins: the save of an index moved away just before,
        if one was (its own index the one the change applies to, and, for a create, what
        the mover read); else a change of ``read`` (a create: a new index)."""
        found = self._moved.pop(index, None)
        if found is None or self._old(found[0]):
            return IndexChange(b"" if read is None else read)
        moved = found[1]
        return IndexChange(moved.read if read is None else read, moved.own_before)

    def _old(self, at: float) -> bool:
        return self._clock() - at > MOVED_KEEP_S

    def _check(self) -> None:
        assert self._bytes == sum(len(r.data) for r in self._reads.values())
        assert len(self._reads) <= READS_KEPT
