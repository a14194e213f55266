"""Mapped sources (Gemini CLI) for the watcher: which folders to watch so that a new id
folder, a new marker or a new projects.json shows without a remount, and the map itself,
read in a worker (§3, §5.4).

Layer adapter, plain (no pyfuse3, no trio). A mapped source's folders are named by ids that
markers map to projects (disk/gemini.py). The watcher watches the source's root (ids
appearing and going, as for any source), each ``tmp/<id>`` folder for its
``.project_root``, and the Gemini folder for ``projects.json``; an event that may change
the map has the whole map read again (`read`), a listing and a few small reads a folder.
Each folder is watched before its marker is read, so a marker written after the read
raises an event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memfs.disk import gemini
from memfs.disk.config import Config
from memfs.disk.inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DONT_FOLLOW,
    IN_MASK_ADD,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
)

# A marker is created, then written and closed: its close says it is whole. Added to what
# else may watch the folder (IN_MASK_ADD: a missing memory folder's pending watch), never
# narrowing it.
MASK = (
    IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CLOSE_WRITE
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_MASK_ADD
)


@dataclass(frozen=True)
class Role:
    """A watched folder whose entries map a mapped source's folders to projects: a
    ``tmp/<id>`` folder (its marker), or with ``folder`` None the Gemini folder
    (projects.json, and the root ``tmp`` itself). Kept apart from the watcher's targets:
    inotify gives a folder one watch, and the same folder may be a pending watch too."""

    source: int
    folder: str | None

    def asks(self, name: str) -> bool:
        """Whether an event of entry ``name`` may change the map."""
        if self.folder is None:
            return name in (gemini.REGISTRY, gemini.TMP)
        return name == gemini.MARKER


@dataclass
class Read:
    """One source's map as a worker read it, and the watches it added on the way."""

    source: int
    mapping: dict[str, str]  # folder name -> slug, for the folders that map to a project
    root: int | None  # the source root's watch, once the root exists
    roles: list[tuple[int, Role]] = field(default_factory=list)

    def watches(self) -> list[int]:
        """Every watch the read added (their events may have come before it returned)."""
        return [wd for wd, _ in self.roles] + ([self.root] if self.root is not None else [])


def read(
    config: Config, remaps: Sequence[int], add: Callable[[Path, int], int | None], root_mask: int
) -> list[Read]:
    """Worker thread: each mapped source's map, every folder watched (``add``: the watch
    descriptor, None for a folder that is not there) before it is read; the source's root
    is watched with ``root_mask``, as the watcher watches every root."""
    return [_read_one(config, i, add, root_mask) for i in remaps]


def _read_one(
    config: Config, i: int, add: Callable[[Path, int], int | None], root_mask: int
) -> Read:
    spec = config.sources[i]
    found = Read(i, {}, add(spec.root, root_mask))

    def watch(folder: Path, role: Role) -> None:
        wd = add(folder, MASK)
        if wd is not None:
            found.roles.append((wd, role))

    watch(spec.gemini_dir, Role(i, None))
    entries = gemini.read_map(
        spec.gemini_dir, lambda folder: watch(folder, Role(i, folder.name)), config.moved(spec)
    )
    found.mapping = {m.folder: m.slug for m in entries if m.slug is not None}
    return found
