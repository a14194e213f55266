"""What one pass of the watcher (watch.py) works on: what a batch of events asks a worker
to read (`Work`), and each look the worker takes for it (`Job`).

Layer adapter; plain values, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from memfs.view.project import Origin, Project


@dataclass
class Work:
    """What a batch of events asks to read: single paths, and whole origins."""

    stats: set[tuple[str, int, str]] = field(default_factory=set)  # (slug, origin, path)
    # (slug, origin, folder): what lies below a folder made, moved or gone is scanned;
    # folder '' is the whole origin
    scans: set[tuple[str, int, str]] = field(default_factory=set)
    remaps: set[int] = field(default_factory=set)  # mapped sources whose map to read again

    def __bool__(self) -> bool:
        return bool(self.stats or self.scans or self.remaps)

    def take(self, other: Work) -> None:
        self.stats |= other.stats
        self.scans |= other.scans
        self.remaps |= other.remaps


class Job(NamedTuple):
    """One look a worker takes for a pass: a path's stat, a folder's scan or the origin's."""

    project: Project
    i: int  # the origin's index
    origin: Origin
    path: str | None  # the path to stat; None: scan (the origin, or `under`)
    watched: set[str]  # for a scan: the folders watched already, copied
    under: str = ""  # for a scan: the folder of the origin it is of ('' the whole)


def covers(folder: tuple[str, int, str], other: tuple[str, int, str]) -> bool:
    """Whether a scan of ``folder`` (slug, origin, path) looks at ``other`` too: what lies
    below it, or anything of the origin for its scan. Not the folder's own path, which may
    be a file now (the scan then finds no folder, and the file needs its own look)."""
    return folder[:2] == other[:2] and (not folder[2] or other[2].startswith(f"{folder[2]}/"))


def jobs_of(
    work: Work, loaded: Mapping[str, Project], folders: Mapping[tuple[int, int], Iterable[str]]
) -> list[Job]:
    """Each piece of ``work`` with what the worker needs, copied (``folders``: the folders
    watched already, by project id and origin). A look that a wider one covers (a folder's
    scan in the origin's, a stat in either) is left out."""
    jobs: list[Job] = []
    scanned: list[tuple[str, int, str]] = []  # sorted: a folder before what is below it
    for slug, i, under in sorted(work.scans):
        project = loaded.get(slug)
        if project is None or i >= len(project.origins):
            continue
        if scanned and covers(scanned[-1], (slug, i, under)):
            continue
        scanned.append((slug, i, under))
        watched = set(folders.get((id(project), i), ()))
        jobs.append(Job(project, i, project.origins[i], None, watched, under))
    for slug, i, path in sorted(work.stats):
        project = loaded.get(slug)
        if project is None or i >= len(project.origins):
            continue
        if any(covers(s, (slug, i, path)) for s in scanned):
            continue
        jobs.append(Job(project, i, project.origins[i], path, set()))
    return jobs
