"""A thin inotify(7) binding over libc: watches, the events queued, and memfs's own renames.

Layer disk: imports neither pyfuse3 nor trio. Nothing here waits: the descriptor is
non-blocking, `Inotify.read_queued` returns what is queued now (nothing when nothing is),
and the adapter's watcher waits for the descriptor to become readable (watch.py).

memfs's own renames: right after each rename(2), in the folder it renamed into, a worker
makes and removes a mark (`staging.mark_commit`, a name with the prefix
`sources.OWN_MARK_PREFIX` that only this process uses). `sift` drops a file's
IN_MOVED_FROM and IN_MOVED_TO of one cookie when that mark's IN_CREATE comes right after
them: the plan that renamed reads both names back. Any other event between them, and the
rename is read as usual.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from memfs.disk import sources

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_MASK_ADD = 0x20000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_EVENT = struct.Struct("iIII")  # struct inotify_event without its name: wd, mask, cookie, len
Raw = tuple[int, int, int, str]  # (wd, mask, cookie, name): an event as the kernel gives it
Event = tuple[int, int, str]  # (wd, mask, name): an event as the watcher reads it


def parse(data: bytes) -> Iterator[Raw]:
    """The events in ``data`` as (wd, mask, cookie, name)."""
    pos = 0
    while pos + _EVENT.size <= len(data):
        wd, mask, cookie, length = _EVENT.unpack_from(data, pos)
        pos += _EVENT.size
        yield wd, mask, cookie, os.fsdecode(data[pos : pos + length].rstrip(b"\0"))
        pos += length


class Inotify:
    """One inotify instance, its descriptor non-blocking and closed on exec."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd

    def add(self, path: Path, mask: int) -> int:
        wd: int = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")
        return wd

    def remove(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self.fd, wd)

    def read_queued(self) -> list[Raw]:
        """The events queued now (up to 64 KiB of them); none when none is, without waiting."""
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        return list(parse(data))

    def close(self) -> None:
        os.close(self.fd)


class Sifted(NamedTuple):
    """What `sift` made of a run of events."""

    events: list[Event]  # to read, in order
    held: list[Raw]  # a rename's events, until the next event says whether the mark follows
    own_renames: int  # renames of this process's, skipped
    own_arrivals: list[Event]  # their IN_MOVED_TO events, for whom still needs them


def sift(raw: Iterable[Raw], held: Iterable[Raw] = ()) -> Sifted:
    """The events of ``raw``, after those ``held`` from the run before, without the two
    events of each rename this process made itself, when its mark follows them.

    A file's IN_MOVED_FROM, then its IN_MOVED_TO of the same cookie, are held until the
    next event: dropped if it is the mark, read as usual otherwise. A folder's rename is
    never held (the watcher rescans it). What is still held at the end is returned held:
    the caller waits a moment for the mark, then sifts on or takes them (`unheld`).
    """
    events: list[Event] = []
    kept = list(held)
    own = 0
    arrivals: list[Event] = []
    for event in raw:
        wd, mask, cookie, name = event
        if len(kept) == 2 and _marks(event, kept[1]):
            own += 1
            arrivals += unheld(kept[1:])
            kept = []
        elif len(kept) == 1 and mask & IN_MOVED_TO and cookie == kept[0][2]:
            kept = [*kept, event]
            continue
        events += unheld(kept)
        if mask & IN_MOVED_FROM and not mask & IN_ISDIR:  # a folder's is rescanned
            kept = [event]
            continue
        events.append((wd, mask, name))
        kept = []
    return Sifted(events, kept, own, arrivals)


def unheld(held: Iterable[Raw]) -> list[Event]:
    """Held events, to read as usual (no mark followed them)."""
    return [(wd, mask, name) for wd, mask, _, name in held]


def _marks(event: Raw, arrival: Raw) -> bool:
    """Whether ``event`` is this process's mark (`staging.mark_commit`) in the folder of
    the rename ``arrival`` (an IN_MOVED_TO) that came right before it."""
    wd, mask, _, name = event
    return bool(mask & IN_CREATE) and wd == arrival[0] and name.startswith(sources.OWN_MARK_PREFIX)
