"""The rules of writing through the mount (SPEC 7): what a change may touch, where it lands.

Pure core: imports neither pyfuse3 nor trio, and does no I/O (staging.py does the writes).
Every refusal is a `Refused` carrying the errno the SPEC names; the adapter returns it
as is.
"""

from __future__ import annotations

import errno

from memfs import preamble, sources, staging
from memfs.catalog import Catalog
from memfs.config import Config
from memfs.project import HISTORY, PREAMBLE, Kind, Leaf, Project, Version
from memfs.tree import parent_of

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class Refused(Exception):
    """A change the SPEC does not allow: ``errno`` says which refusal."""

    def __init__(self, code: int) -> None:
        super().__init__(errno.errorcode.get(code, str(code)))
        self.errno = code


def in_history(path: str) -> bool:
    return path == HISTORY or path.startswith(HISTORY + "/")


def target_folder(catalog: Catalog, slug: str, path: str) -> staging.Place:
    """The own source's folder that receives a write to ``path`` of project ``slug``.

    Raises:
        Refused: EACCES for what memfs serves read-only (SPEC 7.4), EINVAL for a name of
            memfs's own temp files, EROFS with no own source.
    """
    if path == PREAMBLE or in_history(path):
        raise Refused(errno.EACCES)
    if parent_of(path)[1].startswith(sources.STAGE_PREFIX):
        raise Refused(errno.EINVAL)  # never served, and swept after a crash
    place = catalog.own_place(slug)
    if place is None:
        raise Refused(errno.EROFS)
    folder, _ = parent_of(path)
    return place.below(*sources.split(folder))


def keep_for(config: Config, catalog: Catalog, slug: str, path: str) -> staging.Keep | None:
    """Handoffs keep the version a write replaces (SPEC 7.2), in the own source under
    ``.history/<path>/<own>@<UTC>.md``; other files keep nothing."""
    own = config.own
    place = catalog.own_place(slug)
    if own is None or place is None or not preamble.is_handoff(parent_of(path)[1]):
        return None
    folder = place.below(HISTORY, *sources.split(path))
    return staging.Keep(folder, own.name, config.limits.handoff_versions)


def own_folder_of(config: Config, project: Project, v: Version) -> staging.Place | None:
    """The writable folder holding version ``v``, or None when a read-only source has it."""
    origin = project.origins[v.origin]
    if origin.source != config.own_index:
        return None
    folder, _ = parent_of(v.path)
    return staging.Place(origin.root, (*origin.parts, *sources.split(folder)))


def writable_leaf(project: Project, path: str) -> Leaf:
    """The file at ``path`` that a write, unlink or rename may change."""
    leaf = project.tree.leaf(path)
    if leaf is None:
        raise Refused(errno.EISDIR if project.tree.is_dir(path) else errno.ENOENT)
    if leaf.kind not in (Kind.FILE, Kind.MEMORY):
        raise Refused(errno.EACCES)
    return leaf


def check_rename(project: Project, src: str, dst: str, flags: int) -> None:
    """rename(2)'s rules on the merged view: what may replace what.

    Raises:
        Refused: EINVAL for RENAME_EXCHANGE (no atomic swap across sources) and for a
            folder moved into itself; the usual ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY.
    """
    if flags & RENAME_EXCHANGE:
        raise Refused(errno.EINVAL)
    tree = project.tree
    if tree.leaf(src) is None and not tree.is_dir(src):
        raise Refused(errno.ENOENT)
    if src == dst:
        return
    dst_exists = tree.leaf(dst) is not None or tree.is_dir(dst)
    if flags & RENAME_NOREPLACE and dst_exists:
        raise Refused(errno.EEXIST)
    if tree.is_dir(src):
        if dst.startswith(src + "/"):
            raise Refused(errno.EINVAL)
        if tree.leaf(dst) is not None:
            raise Refused(errno.ENOTDIR)
        children = tree.children(dst)
        if children is not None and len(children):
            raise Refused(errno.ENOTEMPTY)
    elif tree.is_dir(dst):
        raise Refused(errno.EISDIR)
    else:
        writable_leaf(project, src)


def folder_is_own_only(config: Config, project: Project, folder: str) -> bool:
    """Whether only the own source holds anything in ``folder`` (it may be renamed whole).

    O(versions in the project): renaming a whole folder is rare.
    """
    own = config.own_index
    inside = project.versions_under(folder)
    if any(project.origins[v.origin].source != own for v in inside):
        return False
    below = [p for p in project.folders() if p == folder or p.startswith(folder + "/")]
    return all(
        project.origins[i].source == own for path in below for i in project.dir_holders(path)
    )
