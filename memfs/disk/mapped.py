"""What mapped sources share: a folder's map to a project, and folders reached through a link.

§3, issue 38. A *mapped* source's folders are not named by slugs: Gemini CLI names them by
a short id (gemini.py), Kilo Code by a name and a hash of the root (kilo.py), and goose
keeps them inside each project (goose.py). Each kind reads what maps a folder to its root
and returns one `Mapping` a folder; roots.py lists them, the watcher re-reads them.

Links: users link memory folders to synced places (and Gemini CLI follows a linked
``tmp/<id>/`` or ``memory/``). A source's root and a project's memory folder may be a
symlink to a folder the user owns: it is resolved here, once per listing (and again when
its source's root changes), and the project then reads the real folder. Below it nothing
is followed (sources.py opens every component with ``O_NOFOLLOW``), so containment stands.

Layer disk: ``lstat``, ``realpath`` and ``stat`` of a few paths; a worker's job while a
mount serves.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Called with a folder whose entries may change a map, and the names in it that may, before
# it is read: the watcher watches it first, so that a change after the read raises an event.
Before = Callable[[Path, frozenset[str]], object]


@dataclass(frozen=True)
class Mapping:
    """One folder of a mapped source: the project root named for it, that root's project."""

    folder: str  # its name in the source's root (Gemini's id, Kilo's folder, goose's key)
    root: str | None  # the absolute root its markers name
    slug: str | None  # the canonical slug of the root's project; None: not mapped
    why: str  # where the root was read, or why the folder is not mapped
    # Its memory folder when it is not the source's ``root/folder/tail`` without a link:
    # reached through a link (resolved), or kept inside the project (goose).
    real: Path | None = None


def is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def followed(path: Path) -> tuple[Path | None, str]:
    """The folder ``path`` leads to through a link, or why it is not followed.

    (None, '') when no component of ``path`` below ``/`` is a link: the folder is read as
    it is. A link is followed only to a real folder the user running memfs owns: another
    user's folder (a link planted in a shared place) is no memory of this user's.
    """
    if not any(is_link(p) for p in (path, *path.parents[:-1])):
        return None, ""
    try:
        real = Path(os.path.realpath(path, strict=True))
        st = os.stat(real)
    except (OSError, ValueError) as exc:
        return None, f"a link to nothing: {getattr(exc, 'strerror', None) or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return None, f"a link to {real}, not a folder"
    if st.st_uid != os.geteuid():
        return None, f"a link to {real}, owned by another user"
    return real, ""


def real_memory(root: Path, folder: str, tail: Sequence[str]) -> Path | None:
    """The real memory folder of ``root/folder/tail`` when a link leads to it (the folder
    or a component of the tail); None when there is no link below ``root``, or one that
    is not followed (the scan then reports the folder left out)."""
    path = root.joinpath(folder, *tail)
    if not any(is_link(root.joinpath(folder, *tail[:d])) for d in range(len(tail) + 1)):
        return None
    real, why = followed(path)
    if real is None:
        log.warning("memory folder %s is %s; left out", path, why)
    return real


def _linked(root: Path, entry: os.DirEntry[str]) -> bool:
    return entry.is_symlink() and followed(root / entry.name)[0] is not None


def list_folders(root: Path) -> list[str]:
    """The entries of a source's root that are folders, or links to folders the user owns
    (`followed`): one ``scandir``, and a ``stat`` per link."""
    try:
        with os.scandir(root) as entries:
            return [e.name for e in entries if e.is_dir(follow_symlinks=False) or _linked(root, e)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("cannot list source root %s: %s", root, exc)
        return []


def line(m: Mapping) -> str:
    """One folder as `memfs sources` prints it: its root and project, or why none."""
    through = f" (its memory: {m.real})" if m.real is not None else ""
    if m.slug is not None:
        return f"{m.folder} -> {m.root} -> {m.slug} ({m.why}){through}"
    return f"{m.folder}: not mapped: {m.why}"
