"""What a request's inode numbers and names mean: the keys of the view (decode, §4, §10).

Layer adapter (pyfuse3's errno), trio thread only, memory only. A key is (slug, view path):
("", "") the root, (slug, "") a project folder, HERE_KEY the `here` link, GLOBAL_KEY the
`global/` folder, whose folders are the projects ("global/<kind>", "") (§4.1).
"""

from __future__ import annotations

import errno
import os

import pyfuse3

from memfs.adapter.inodes import (
    GLOBAL,
    GLOBAL_KEY,
    HERE,
    HERE_INODE,
    HERE_KEY,
    ROOT_INODE,
    ROOT_KEY,
    Inodes,
    Key,
)
from memfs.disk import sources
from memfs.rules.tree import parent_of
from memfs.view import userlevel


def key_of(inodes: Inodes, ino: int) -> Key:
    """The key an inode number the kernel holds names; ENOENT for one it does not."""
    key = inodes.key(ino)
    if key is None:
        raise pyfuse3.FUSEError(errno.ENOENT)
    return key


def child_key(inodes: Inodes, parent: int, name: bytes) -> Key:
    """The key of ``name`` in folder ``parent``: ENAMETOOLONG past 255 bytes, EINVAL for a
    name no folder may hold, ENOTDIR below `here` (a link)."""
    if len(name) > sources.NAME_MAX:
        raise pyfuse3.FUSEError(errno.ENAMETOOLONG)
    slug, path = key_of(inodes, parent)
    text = os.fsdecode(name)
    if not sources.valid_name(text):
        raise pyfuse3.FUSEError(errno.EINVAL)
    if parent == ROOT_INODE:
        return {HERE: HERE_KEY, GLOBAL: GLOBAL_KEY}.get(text, (text, ""))
    if parent == HERE_INODE:
        raise pyfuse3.FUSEError(errno.ENOTDIR)
    if (slug, path) == GLOBAL_KEY:
        child = f"{GLOBAL}/{text}"
        return (child, "") if userlevel.kind_of(child) else ("", child)
    if not slug:
        raise pyfuse3.FUSEError(errno.ENOTDIR)  # a file global/ serves
    return (slug, f"{path}/{text}" if path else text)


def parent_key(key: Key) -> Key:
    slug, path = key
    if userlevel.kind_of(slug) and not path:
        return GLOBAL_KEY
    if not slug:  # the root, `here`, global/, or a file global/ serves
        return GLOBAL_KEY if path.startswith(GLOBAL + "/") else ROOT_KEY
    if not path:
        return ROOT_KEY
    return (slug, parent_of(path)[0])
