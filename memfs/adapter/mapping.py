"""Mapped sources (Gemini CLI, Kilo Code, goose) for the watcher: which folders to watch
so that a new id folder, a new marker or manifest, or a project's new ``.goose/memory``
shows without a remount, and the map itself, read in a worker (§3, §5.4).

Layer adapter, plain (no pyfuse3, no trio). A mapped source's folders are named by ids that
markers map to projects (disk/gemini.py, kilo.py) or found in projects (goose.py). The
watcher watches the source's root (ids appearing and going, as for any source) and each
folder its kind names as it reads the map (`roots.read_map`'s ``before``: a ``tmp/<id>``
for its ``.project_root``, the Gemini folder for ``projects.json``, a Kilo folder for its
manifest, a project root for ``.goose``); an event that may change the map has the whole
map read again (`read`), a listing and a few small reads a folder. Each folder is watched
before it is read, so a marker written after the read raises an event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memfs.disk import roots
from memfs.disk.config import GOOSE, Config
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
from memfs.disk.sources import Scan
from memfs.view.versions import Origin

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


def found_link(config: Config, origin: Origin, scan: Scan, under: str = "") -> bool:
    """Whether a scan of a slug source's memory folder found the folder itself a link (made
    before its watch could tell, issue 38): its root is listed again, so it is followed."""
    return (
        not under
        and not config.sources[origin.source].mapped
        and any(not path and why.startswith("symlink") for path, why in scan.left_out)
    )


def relinks(config: Config, origin: Origin, name: str) -> set[int]:
    """The slug source whose root to list again when entry ``name`` is made where a missing
    memory folder of ``origin`` waits: it may be that folder, or its project folder, as a
    link (issue 38). None for any other entry, or a mapped source (its map is re-read)."""
    source = config.sources[origin.source]
    return {origin.source} if not source.mapped and name in origin.key else set()


def goose_sources(config: Config) -> set[int]:
    """The goose sources, whose map looks in the roots the other sources name: read again
    when a project comes or goes at any root."""
    return {i for i, s in enumerate(config.sources) if s.kind == GOOSE}


@dataclass(frozen=True)
class Role:
    """A watched folder whose entries map a mapped source's folders to projects: Gemini
    CLI's folder (projects.json, tmp) or a ``tmp/<id>`` (its marker), a Kilo folder (its
    manifest), a project root or its ``.goose`` (goose's memory folder coming). Kept apart
    from the watcher's targets: inotify gives a folder one watch, and the same folder may
    be a pending watch too."""

    source: int
    names: frozenset[str]

    def asks(self, name: str) -> bool:
        """Whether an event of entry ``name`` may change the map."""
        return name in self.names


@dataclass
class Read:
    """One source's map as a worker read it, and the watches it added on the way; of a slug
    source (Claude Code's, pi's), its root's folders (each name its own)."""

    source: int
    mapping: dict[str, str]  # folder name -> slug, for the folders that map to a project
    root: int | None  # the source root's watch, once the root exists
    roles: list[tuple[int, Role]] = field(default_factory=list)
    # folder name -> its real memory folder, for one reached through a link or in a project
    reals: dict[str, Path] = field(default_factory=dict)

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
    if not spec.mapped:  # a slug source's root listed again: a link made or changed there
        names, found.reals = roots.list_source(config, i)
        found.mapping = {name: name for name in names}
        return found

    def watch(folder: Path, names: frozenset[str]) -> None:
        wd = add(folder, MASK)
        if wd is not None:
            found.roles.append((wd, Role(i, names)))

    entries = roots.read_map(config, i, watch)
    found.mapping = {m.folder: m.slug for m in entries if m.slug is not None}
    found.reals = {m.folder: m.real for m in entries if m.slug is not None and m.real}
    return found
