"""Gemini CLI's per-project folders: which project each ``~/.gemini/tmp/<id>/`` is (§1, §3).

Gemini CLI (measured with 0.61.0) keeps a project's memory in ``tmp/<id>/memory/``
(``MEMORY.md`` and topic files, written in place) below its folder, ``~/.gemini``. The id
is a short name of the project root's basename, not a slug, so the folder's name says
nothing of the project. What does:

- ``tmp/<id>/.project_root``, the ownership marker: the root's absolute path, written
  once with O_EXCL right after the folder is made, when the id is claimed;
- else ``projects.json``, ``{"projects": {"/abs/root": "<id>"}}``, rewritten through a
  temporary file and a rename after the marker.

Gemini's project root is its working folder; memfs maps it to its project by the rule
``here`` uses (`slug.project_slug`: the git work tree's top, a linked worktree mapped to its
main checkout, else the folder itself), so a Gemini session in ``shop/src`` and a Claude
Code session in ``shop`` share one project. A root that does not exist is not mapped (its
parents may lie in another repository), nor is a marker memory cannot read as one
absolute path.

A ``tmp/<id>`` folder or its ``memory/`` may be a link to a folder the user owns (Gemini
CLI follows both): followed once, here (mapped.py), and the project reads the real folder.

Layer disk: reads the markers and projects.json (small files, no link followed below the
Gemini folder but a linked id folder) and walks up each root for ``.git``. Blocking: a
worker thread's job while a mount serves.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from memfs.disk import mapped, sources
from memfs.disk.mapped import Mapping
from memfs.rules import slug as slugs

MARKER = ".project_root"
REGISTRY = "projects.json"
TMP = "tmp"
MARKER_MAX = 4096  # a path; a bigger file is not a marker
REGISTRY_MAX = 1 << 20


__all__ = ["Mapping", "describe", "read_map", "read_registry"]
MEMORY = "memory"


def read_map(
    gemini: Path,
    before: mapped.Before | None = None,
    moved: Callable[[str], str] | None = None,
) -> list[Mapping]:
    """Every folder of ``gemini/tmp`` (a real one, or a link to one the user owns; dot names
    aside), sorted by id, and its project.

    ``before`` is called with the Gemini folder (projects.json, tmp) and each id folder (its
    marker) before it is read: the watcher watches it first, so that a change after the
    read raises an event. ``moved`` maps a root read to this machine's, for another
    machine's folder (§12, `slugs.rehome_path`).
    """
    if before is not None:
        before(gemini, frozenset({REGISTRY, TMP}))
    registry, _ = read_registry(gemini)
    by_id: dict[str, str] = {}
    for root, folder in sorted(registry.items()):
        by_id.setdefault(folder, root)
    found = []
    tmp = gemini / TMP
    for folder in sorted(mapped.list_folders(tmp)):
        if folder.startswith(".") or not sources.valid_name(folder):
            continue
        if before is not None:
            linked = mapped.followed(tmp / folder)[0] if mapped.is_link(tmp / folder) else None
            # its marker, and memory/ (made, or replaced by a link)
            before(linked or tmp / folder, frozenset({MARKER, MEMORY}))
        found.append(_mapping(tmp, folder, by_id.get(folder), moved))
    return found


def _mapping(
    tmp: Path, folder: str, registered: str | None, moved: Callable[[str], str] | None = None
) -> Mapping:
    found = _mapped_root(tmp, folder, registered, moved)
    real = mapped.real_memory(tmp, folder, (MEMORY,))
    return dataclasses.replace(found, real=real) if real is not None else found


def _mapped_root(
    tmp: Path, folder: str, registered: str | None, moved: Callable[[str], str] | None
) -> Mapping:
    root: str | None
    try:
        root, where = _read_marker(tmp, folder), MARKER
    except FileNotFoundError:
        root, where = registered, REGISTRY
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return Mapping(folder, None, None, f"unreadable {MARKER}: {why}")
    if root is None:
        return Mapping(folder, None, None, f"no {MARKER}, and not in {REGISTRY}")
    if not root:
        return Mapping(folder, None, None, f"empty {where}")
    if not os.path.isabs(root) or "\0" in root:
        return Mapping(folder, None, None, f"{where} names no absolute path: {root!r}")
    if moved is not None:
        # Another machine's project (§12): its slug as here, whether or not it is checked
        # out here too (then, up to its work tree, as `here` maps it).
        root = moved(root)
        if not os.path.isdir(root):
            return Mapping(folder, root, slugs.claude_slug(root), f"from {where}, elsewhere")
    try:
        is_dir = os.path.isdir(root)
    except ValueError:
        is_dir = False
    if not is_dir:
        return Mapping(folder, root, None, f"its root {root} ({where}) does not exist")
    return Mapping(folder, root, slugs.project_slug(root), f"from {where}")


def _read_marker(tmp: Path, folder: str) -> str:
    """The root ``tmp/<folder>/.project_root`` names, trimmed as Gemini reads it.

    Raises:
        FileNotFoundError: no marker; OSError or UnicodeDecodeError: one that cannot be
            read as a path (a link, a special file, too big, not UTF-8).
    """
    # A linked id folder is read where it leads (followed once, mapped.py); the marker
    # itself is never a link.
    linked = mapped.followed(tmp / folder)[0] if mapped.is_link(tmp / folder) else None
    place = (linked, []) if linked is not None else (tmp, [folder])
    with sources.open_folder(*place) as dir_fd:
        fd = os.open(MARKER, sources.FILE_FLAGS, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, MARKER_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > MARKER_MAX:
        raise OSError(errno.EFBIG, f"over {MARKER_MAX} bytes")
    return data.decode("utf-8").strip()


def read_registry(gemini: Path) -> tuple[dict[str, str], str | None]:
    """projects.json's ``{root: id}``, and why it could not be read (None: read, or none).

    Entries that are not a string mapped to a string are skipped: the file is another
    program's, and one bad entry must not hide the others.
    """
    try:
        with sources.open_folder(gemini, []) as dir_fd:
            fd = os.open(REGISTRY, sources.FILE_FLAGS, dir_fd=dir_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}, "not a regular file"
            data = os.read(fd, REGISTRY_MAX + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, exc.strerror or str(exc)
    if len(data) > REGISTRY_MAX:
        return {}, f"over {REGISTRY_MAX} bytes"
    try:
        projects = json.loads(data).get("projects")
    except (ValueError, AttributeError) as exc:
        return {}, f"not JSON of projects: {exc}"
    if not isinstance(projects, dict):
        return {}, "no 'projects' object"
    return {r: i for r, i in projects.items() if isinstance(r, str) and isinstance(i, str)}, None


def describe(gemini: Path) -> list[str]:
    """What `memfs sources` says of a Gemini CLI folder: each id, its root and its
    project, or why it is not mapped."""
    found = read_map(gemini)
    _, broken = read_registry(gemini)
    lines = [f"{REGISTRY}: unreadable ({broken})"] if broken else []
    if not found:
        lines.append(f"no project folders in {gemini / TMP} yet")
    lines += [mapped.line(m) for m in found]
    return lines
