"""Stand-ins for the pyfuse3 objects the tier-2 adapter tests cannot build from Python.

``pyfuse3.RequestContext`` and ``pyfuse3.ReaddirToken`` are made by pyfuse3 for each kernel
request; the tests hand the handlers plain objects with the same attributes instead, and
replace ``pyfuse3.readdir_reply`` (as ``memfs.fs`` calls it) with `fake_readdir_reply`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyfuse3


@dataclass
class FakeContext:
    """What a handler reads from a request: the caller's pid, uid, gid and umask."""

    pid: int = field(default_factory=os.getpid)
    uid: int = field(default_factory=os.getuid)
    gid: int = field(default_factory=os.getgid)
    umask: int = 0o022


@dataclass
class FakeToken:
    """One readdir call's reply buffer, full after ``room`` entries (None: never full)."""

    room: int | None = None
    # (name, attributes, next_id) of every entry accepted, then of every entry refused
    accepted: list[tuple[bytes, pyfuse3.EntryAttributes, int]] = field(default_factory=list)
    refused: list[tuple[bytes, pyfuse3.EntryAttributes, int]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [os.fsdecode(name) for name, _, _ in self.accepted]

    @property
    def next_id(self) -> int:
        """The ``start_id`` that resumes after the last accepted entry."""
        return self.accepted[-1][2] if self.accepted else 0


# Every field of an EntryAttributes the adapter sets.
ENTRY_FIELDS = (
    "st_ino",
    "generation",
    "entry_timeout",
    "attr_timeout",
    "st_mode",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_rdev",
    "st_size",
    "st_blksize",
    "st_blocks",
    "st_atime_ns",
    "st_mtime_ns",
    "st_ctime_ns",
)


def fields(attrs: pyfuse3.EntryAttributes) -> dict[str, float]:
    return {f: getattr(attrs, f) for f in ENTRY_FIELDS}


def fake_readdir_reply(
    token: FakeToken, name: bytes, attrs: pyfuse3.EntryAttributes, next_id: int
) -> bool:
    """``pyfuse3.readdir_reply``: True while the buffer has room, as the kernel's would.
    It copies the attributes as pyfuse3 does (into the reply buffer): the caller may
    change the object for the next entry."""
    sent = pyfuse3.EntryAttributes()
    for f, value in fields(attrs).items():
        setattr(sent, f, value)
    attrs = sent
    if token.room is not None and len(token.accepted) >= token.room:
        token.refused.append((name, attrs, next_id))
        return False
    token.accepted.append((name, attrs, next_id))
    return True


@dataclass
class SetattrFields:
    """``pyfuse3.SetattrFields``: its attributes cannot be set from Python."""

    update_atime: bool = False
    update_mtime: bool = False
    update_ctime: bool = False
    update_mode: bool = False
    update_uid: bool = False
    update_gid: bool = False
    update_size: bool = False
