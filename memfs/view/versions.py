"""The values a project's view is made of: the source folders it reads (`Origin`), the
versions they hold (`Version`), what a view path shows (`Kind`, `Leaf`), and the names
memfs serves itself.

Apart from project.py so that the documents derived from a view (documents.py) name them
without importing the view, which owns its documents. Layer view: plain values, no I/O.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from pathlib import Path

from memfs.rules import history, index, preamble

HISTORY = history.HISTORY
PREAMBLE = "PREAMBLE.md"
MEMORY = index.MEMORY
# Names at a project's root that memfs itself serves; a source file there is history only.
# `reserved` adds PREAMBLE-<N>.md: a name for every N memfs serves (§6).
RESERVED = frozenset({HISTORY, PREAMBLE})


def reserved(name: str) -> bool:
    """Whether a project's top-level ``name`` is one memfs serves itself (§4): a source's
    file or folder of that name shows under ``.history/`` only."""
    return name in RESERVED or preamble.sized_budget(name) is not None


DIR_WHITEOUT = -1  # the mtime field of a folder's whiteout
FOREVER_NS = 1 << 62  # a moment no file is dated at: "never", for what comes due later


@dataclass(frozen=True)
class Origin:
    """One source folder that belongs to this project (a source may bring several)."""

    source: int  # index into the config's sources
    root: Path
    parts: tuple[str, ...]  # slug folder name, then the template's tail
    # The top-level names it holds memory under, None for all: a Claude Code config folder
    # is global/claude's origin for its CLAUDE.md and agent-memory/ only (§4.1).
    only: frozenset[str] | None = None
    # The state folder's mirror of a read-only source's folder, holding only the versions
    # a change on disk replaced (issue 37, catalog.kept_origin): no folder of the source.
    kept: bool = False
    # A folder of the project's earlier path, followed since it moved (issue 38, §4.2):
    # read-only here whatever its source, so the own account's old folder is never
    # written, pruned or taken for the own version; writes land under the new slug.
    moved: bool = False
    # A folder reached through a link, or kept outside its source's root (goose's, in the
    # project): ``root`` is the real folder and ``parts`` empty, and this names it as the
    # source's root does (its folder name, then the tail), for the state folder's mirror
    # and the catalog's map (issue 38). Empty for every other folder.
    via: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, ...]:
        """The folder as its source's root names it: ``via``, else ``parts``."""
        return self.via or self.parts

    def admits(self, path: str) -> bool:
        """Whether ``path`` (in this folder) is memory of this origin."""
        return self.only is None or path.split("/", 1)[0] in self.only

    def writable(self, own: int | None) -> bool:
        """Whether this is the own source's folder of the project (own: the config's
        `own_index`), where its writes land and its own versions are."""
        return self.source == own and not self.moved

    @property
    def folder(self) -> Path:
        return self.root.joinpath(*self.parts)


@dataclass(frozen=True, slots=True)
class Version:
    origin: int  # index into Project.origins
    path: str
    size: int
    mtime_ns: int
    mode: int = 0o644  # permission bits
    atime_ns: int = field(default=0, compare=False)  # shown, never compared (see FileStat)
    # Another inode is another version, whatever its size and mtime: Holdings and the
    # kernel's tokens ask for it; equality does not (a version stands for what it shows).
    ino: int = field(default=0, compare=False)


def fill_times(times: tuple[int | None, int | None], v: Version | None) -> tuple[int, int]:
    """utimensat's (atime, mtime) with each side not asked for (None) as ``v`` has it; with
    no version, the mtime now and the atime that mtime."""
    atime, mtime = times
    old_m = v.mtime_ns if v is not None else time.time_ns()
    old_a = (v.atime_ns if v is not None else 0) or old_m
    return (old_a if atime is None else atime, old_m if mtime is None else mtime)


class Kind(enum.Enum):
    FILE = "file"  # a head version
    HISTORY = "history"  # any other version, read-only
    MEMORY = "memory"  # MEMORY.md when several sources have one: the union
    PREAMBLE = "preamble"  # synthetic, computed on open


@dataclass(frozen=True, slots=True)
class Leaf:
    kind: Kind
    version: Version | None = None
    others: tuple[Version, ...] = ()  # MEMORY: the other versions, newest first
