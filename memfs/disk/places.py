"""Folders of the own source, opened without following any link, and plain descriptor
copies: what staging.py and keeping.py both stand on.

§10. Layer disk: imports neither pyfuse3 nor trio; every call may block on the disk
(worker threads only while serving).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memfs.disk import sources
from memfs.disk.sources import DIR_FLAGS

DIR_MODE = 0o755


@dataclass(frozen=True)
class Place:
    """A folder in the own source: the project folder's root and its components below it."""

    root: Path
    parts: tuple[str, ...]

    def below(self, *names: str) -> Place:
        return Place(self.root, (*self.parts, *names))

    def __str__(self) -> str:
        return str(self.root.joinpath(*self.parts))


def open_dir(place: Place, *, create: bool, near: tuple[Place, int] | None = None) -> int:
    """A descriptor for ``place``; with ``create``, missing folders are made (mkdir -p).

    The source root is the user's (a fresh account may not have its ``projects/`` yet: with
    ``create`` it is made); below it no component may be a symlink (`sources.open_below`).
    ``near`` is a folder already open (its place and descriptor, which stays the
    caller's): when it holds ``place``, the walk starts there instead of at the root (a
    kept version's folder, below the project folder its writer's stage has open).
    """
    if near is not None and _holds(near[0], place):
        base, parts, mine = near[1], place.parts[len(near[0].parts) :], False
    else:
        base, parts, mine = _open_root(place, create=create), place.parts, True
    try:
        try:
            return sources.open_below(base, parts)
        except FileNotFoundError:
            if not create:
                raise
        return _make_below(base, parts)
    finally:
        if mine:
            os.close(base)


def _make_below(dir_fd: int, parts: Sequence[str]) -> int:
    """`open_dir`'s mkdir -p below ``dir_fd`` (which stays open), one component at a time."""
    fd = dir_fd
    try:
        for part in parts:
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # a concurrent writer made it
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = child
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise
    return fd


def _holds(folder: Place, place: Place) -> bool:
    return folder.root == place.root and place.parts[: len(folder.parts)] == folder.parts


def _open_root(place: Place, *, create: bool) -> int:
    try:
        return os.open(place.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise
    # Only now: a mkdir that finds the folder costs two syscalls at every stage made.
    place.root.mkdir(parents=True, exist_ok=True)
    return os.open(place.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def copy_fd(src: int, dst: int) -> None:
    offset = 0
    while True:
        chunk = os.pread(src, 1 << 20, offset)
        if not chunk:
            return
        os.pwrite(dst, chunk, offset)
        offset += len(chunk)


def read_all(fd: int) -> bytes:
    """Every byte behind ``fd``, from its start."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
