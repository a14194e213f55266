"""What the benchmark does to a tree: walk and stat, open+read+close, latency samples.

Each operation is written the way a tool does it, with plain syscalls, so every system is
asked exactly the same: the walk is scandir + lstat per entry (``find -ls``), a read is
open, fstat, read until end of file, close (``cat``). Python's ``open()`` is avoided: it
adds an ``isatty`` ioctl per file that is a round trip on a FUSE mount.
"""

from __future__ import annotations

import gc
import math
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC
CHUNK = 128 * 1024


def walk(roots: Iterable[Path]) -> tuple[int, int]:
    """Stat every entry below ``roots`` (symlinks not followed); returns (entries, folders)."""
    entries = folders = 0
    stack = [os.fspath(r) for r in roots]
    while stack:
        folder = stack.pop()
        folders += 1
        with os.scandir(folder) as listing:
            for entry in listing:
                st = os.lstat(entry.path)
                entries += 1
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return entries, folders


def walk_pieces(root: Path) -> list[Callable[[], tuple[int, int]]]:
    """`walk` of ``root`` in pieces, to time in turn with another system's (`in_turn`): the
    listing of ``root`` itself, then the walk of each of its folders."""
    with os.scandir(root) as listing:
        names = sorted(e.name for e in listing if e.is_dir(follow_symlinks=False))
    pieces: list[Callable[[], tuple[int, int]]] = [partial(_list, root)]
    return pieces + [partial(walk, [root / name]) for name in names]


def _list(folder: Path) -> tuple[int, int]:
    """One folder's listing and the stat of each entry: `walk` without going down."""
    entries = 0
    with os.scandir(folder) as listing:
        for entry in listing:
            os.lstat(entry.path)
            entries += 1
    return entries, 1


def in_turn(
    pieces: Mapping[str, Sequence[Callable[[], T]]],
) -> dict[str, tuple[float, list[T]]]:
    """Each side's pieces run in turn with the others' (a piece of each side, then the next,
    the sides' order flipped each time); per side, the seconds its pieces took in all and
    what they returned. On a shared machine whose speed drifts over seconds, two sides
    timed milliseconds apart see the same machine; timed a pass after the other, not."""
    sides = list(pieces)
    count = len(pieces[sides[0]])
    if any(len(p) != count for p in pieces.values()):
        raise ValueError("every side needs as many pieces")
    took = dict.fromkeys(sides, 0.0)
    results: dict[str, list[T]] = {side: [] for side in sides}
    # This process's own collector would stop whichever side's piece it lands in (timeit
    # turns it off for the same reason).
    gc.collect()
    gc.disable()
    try:
        for i in range(count):
            for side in sides if i % 2 == 0 else sides[::-1]:
                start = time.perf_counter()
                results[side].append(pieces[side][i]())
                took[side] += time.perf_counter() - start
    finally:
        gc.enable()
    return {side: (took[side], results[side]) for side in sides}


def shape(root: Path) -> dict[str, list[Any]]:
    """The folders and regular files (with sizes) below ``root``, relative to it."""
    dirs: list[str] = []
    files: list[list[Any]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as listing:
            for entry in listing:
                path = f"{rel}/{entry.name}" if rel else entry.name
                st = os.lstat(entry.path)
                if stat.S_ISDIR(st.st_mode):
                    dirs.append(path)
                    stack.append(path)
                elif stat.S_ISREG(st.st_mode):
                    files.append([path, st.st_size])
    return {"dirs": dirs, "files": files}


def read_file(path: Path | str) -> int:
    """open, fstat, read to the end, close; returns the bytes read."""
    fd = os.open(path, READ_FLAGS)
    try:
        os.fstat(fd)
        total = 0
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return total
            total += len(chunk)
    finally:
        os.close(fd)


def read_all(paths: Sequence[Path | str]) -> int:
    total = 0
    for path in paths:
        total += read_file(path)
    return total


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def sample_ns(fn: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - start


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def append_and_wait(source: Path, view: Path, suffix: bytes, deadline: float = 5.0) -> float:
    """Append ``suffix`` to ``source`` directly; seconds until ``view`` shows it.

    The mount is polled every millisecond with a fresh open and one ``pread`` of the whole
    expected body, so a stale size or stale cached pages both count as not yet visible.
    """
    expected = source.read_bytes() + suffix
    start = time.perf_counter()
    with open(source, "ab") as f:
        f.write(suffix)
    while True:
        fd = os.open(view, READ_FLAGS)
        try:
            seen = os.pread(fd, len(expected) + 1, 0)
        finally:
            os.close(fd)
        elapsed = time.perf_counter() - start
        if seen == expected:
            return elapsed
        if elapsed > deadline:
            return math.inf
        time.sleep(0.001)


def write_native(folder: Path, name: str, data: bytes, *, dir_fsync: bool) -> None:
    """What a careful program does without memfs: temp file, fsync, rename (fsync folder)."""
    temp = folder / f".{name}.tmp.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, folder / name)
    if dir_fsync:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def write_truncate(path: Path, data: bytes) -> None:
    """open(O_TRUNC) + write + close: memfs stages it and commits it atomically at close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_temp_rename(folder: Path, name: str, data: bytes) -> None:
    """Claude Code's write, through the mount: ``NAME.tmp.<pid>.<12 hex>`` created with
    ``O_EXCL|O_NOFOLLOW``, written, fsync, close, renamed over ``NAME`` (§7.3)."""
    temp = folder / f"{name}.tmp.{os.getpid()}.{secrets.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, folder / name)
