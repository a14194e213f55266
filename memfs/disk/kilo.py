"""Kilo Code's Kilo Memory: which project each ``<data>/kilo/memory/<folder>/`` is (issue 38).

Kilo Code (npm ``@kilocode/cli`` 7.7) keeps a project's memory in
``$XDG_DATA_HOME/kilo/memory/<display>-<sha1(canonical)[:12]>/`` (``project.md``,
``environment.md``, ``corrections.md``, ``sessions/*.md``), where the canonical root is the
git work tree's top, resolved. The folder's ``manifest.json`` names that root, so no hash
needs inverting; a manifest whose root would get another folder name is still taken (the
manifest is Kilo's word), and the root is mapped to its project by the rule ``here`` uses
(`slug.project_slug`), as Gemini CLI's are. Kilo's other files there (state.json, the
manifest, index.kmem, .lock/, decisions.jsonl, its temp files) are not memory: a Kilo
source reads its memory names only (`config.KILO_MEMORY`, names.py for the temp files).

Layer disk: one listing and one small read a folder, never following a link below the
Kilo folder but a linked project folder (mapped.py). A worker's job while a mount serves.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from memfs.disk import mapped, sources
from memfs.disk.mapped import Mapping
from memfs.rules import layouts
from memfs.rules import slug as slugs

MANIFEST_MAX = 64 << 10


def read_map(root: Path, before: mapped.Before | None = None) -> list[Mapping]:
    """Every folder of Kilo Memory's ``root`` (dot names aside), sorted, and its project;
    ``before`` is called with each folder (its manifest) before it is read."""
    found = []
    for folder in sorted(mapped.list_folders(root)):
        if folder.startswith(".") or not sources.valid_name(folder):
            continue
        real = mapped.followed(root / folder)[0] if mapped.is_link(root / folder) else None
        if before is not None:
            before(real or root / folder, frozenset({layouts.KILO_MANIFEST}))
        found.append(_mapping(root, folder, real))
    return found


def _mapping(root: Path, folder: str, real: Path | None) -> Mapping:
    try:
        canonical = layouts.kilo_manifest(_read_manifest(real or root / folder))
    except FileNotFoundError:
        return Mapping(folder, None, None, f"no {layouts.KILO_MANIFEST}", real)
    except OSError as exc:
        why = exc.strerror or str(exc)
        return Mapping(folder, None, None, f"unreadable {layouts.KILO_MANIFEST}: {why}", real)
    except ValueError as exc:
        return Mapping(folder, None, None, f"{layouts.KILO_MANIFEST}: {exc}", real)
    if not os.path.isdir(canonical):
        why = f"its root {canonical} ({layouts.KILO_MANIFEST}) does not exist"
        return Mapping(folder, canonical, None, why, real)
    why = f"from {layouts.KILO_MANIFEST}"
    if layouts.kilo_folder(canonical) != folder:
        why += f"; Kilo would name it {layouts.kilo_folder(canonical)}"
    return Mapping(folder, canonical, slugs.project_slug(canonical), why, real)


def _read_manifest(folder: Path) -> bytes:
    """The manifest's bytes, opened without following a link.

    Raises:
        OSError: no manifest, a link or special file, or one too big.
    """
    with sources.open_folder(folder, []) as dir_fd:
        fd = os.open(layouts.KILO_MANIFEST, sources.FILE_FLAGS, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, MANIFEST_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > MANIFEST_MAX:
        raise OSError(errno.EFBIG, f"over {MANIFEST_MAX} bytes")
    return data
