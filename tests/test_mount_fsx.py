"""Tier 3: a seeded random test through a real mount, in the spirit of fsx (issue 10, §7.1).

Random writes (at random offsets, sometimes past EOF), truncates (grow and shrink), reads,
fsyncs and close/reopen, on three files: an own plain file, a handoff (each commit keeps a
version) and a file only a read-only source has (the first change copies it up). A shadow
copy in memory is checked after every operation: the range just written or read, the
writer's ``st_size``, and at every close the whole file through the mount (a fresh open and
``stat``) and on disk in the own source. A fresh reader opened while the writer is open sees
the last committed version, whole, unless it is the writer's own thread: that one sees what
it wrote (§7.1).

Deterministic given the seed: every choice and every byte comes from ``random.Random(seed)``.
Each run prints its seed and operation count; a failure names them, the operation and the
last few before it. ``MEMFS_FSX_SEED`` replays one seed: ``MEMFS_FSX_SEED=7 pytest -k fsx``.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, wait_until
from test_mount_write import SLUG, SOON, Writes, read, stages, writes

pytestmark = MOUNT_MARKS

SEEDS = [int(os.environ["MEMFS_FSX_SEED"])] if "MEMFS_FSX_SEED" in os.environ else [1, 2]
TOTAL_OPS = 10_000  # over all seeds of a run
MAX_SIZE = 48 << 10  # bytes: files stay well under max_file_bytes (1 MiB)
MAX_WRITE = 6 << 10
HISTORY = 8  # operations shown before a failing one
HANDOFF = "handoff-fsx_20260101.md"
HANDOFF_VERSIONS = 20  # the default of [limits] versions
PLAIN = "plain.md"
COPIED = "copied.md"  # only the work source has it: copied up at the first change


@pytest.fixture
def rw(sandbox: Sandbox, mounts: Mounts) -> Iterator[Writes]:
    yield from writes(sandbox, mounts)


@dataclass
class Target:
    """One file under test: its shadow (the writer's view) and what a reader must see."""

    name: str
    path: Path
    disk: Path
    shadow: bytearray
    committed: bytes  # the last version a close() made the file
    synced: bytes | None = None  # fsynced while open: a reader may see it already
    fd: int = -1
    append: bool = False
    changed: bool = False  # written or truncated through the mount at least once


@dataclass
class Run:
    seed: int
    ops: int
    rng: random.Random
    targets: list[Target]
    done: int = 0
    log: deque[str] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def fail(self, what: str) -> None:
        recent = "\n  ".join(self.log)
        pytest.fail(
            f"fsx seed={self.seed} op #{self.done} of {self.ops}: {what}\n"
            f"last operations:\n  {recent}\n(replay: MEMFS_FSX_SEED={self.seed})"
        )

    def expect(self, got: object, want: object, what: str) -> None:
        if got != want:
            self.fail(f"{what}: got {short(got)}, want {short(want)}")


def short(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return f"{len(value)} bytes {bytes(value[:24])!r}..."
    return repr(value)


def read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


# --- operations ------------------------------------------------------------------------


def ensure_open(run: Run, t: Target) -> None:
    """Open for writing when closed: read-write, sometimes O_TRUNC or O_APPEND."""
    if t.fd >= 0:
        return
    roll = run.rng.random()
    flags = os.O_RDWR
    t.append = False
    if roll < 0.12:
        flags |= os.O_TRUNC
        del t.shadow[:]
    elif roll < 0.24:
        flags |= os.O_APPEND
        t.append = True
    run.log.append(f"open {t.name} flags={flags:#o}")
    t.fd = os.open(t.path, flags)
    if flags & os.O_TRUNC:
        t.changed = True
        # An O_TRUNC open is a change of its own: it lands at close, not now (§7.1).
        run.expect(os.fstat(t.fd).st_size, 0, f"{t.name}: st_size after O_TRUNC")


def op_write(run: Run, t: Target) -> None:
    ensure_open(run, t)
    size = len(t.shadow)
    length = run.rng.randint(1, MAX_WRITE)
    if t.append:
        length = min(length, MAX_SIZE - size)
        if length <= 0:
            return op_truncate(run, t)
    # Offsets up to 4 KiB past EOF: the gap reads as zeros.
    off = size if t.append else run.rng.randint(0, min(size + 4096, MAX_SIZE - length))
    data = run.rng.randbytes(length)
    t.changed = True
    run.log.append(f"write {t.name} off={off} len={length}" + (" (append)" if t.append else ""))
    if t.append:
        run.expect(os.write(t.fd, data), length, f"{t.name}: append returned")
    else:
        run.expect(os.pwrite(t.fd, data, off), length, f"{t.name}: pwrite returned")
    if off > size:
        t.shadow.extend(bytes(off - size))
    t.shadow[off : off + length] = data
    check_range(run, t, max(0, off - 16), length + 32)


def op_truncate(run: Run, t: Target) -> None:
    ensure_open(run, t)
    size = len(t.shadow)
    new = run.rng.randint(0, size) if run.rng.random() < 0.5 else run.rng.randint(size, MAX_SIZE)
    run.log.append(f"ftruncate {t.name} {size} -> {new}")
    os.ftruncate(t.fd, new)
    t.changed = True
    if new < size:
        del t.shadow[new:]
    else:
        t.shadow.extend(bytes(new - size))
    check_range(run, t, max(0, new - 64), 128)


def op_read(run: Run, t: Target) -> None:
    if t.fd >= 0 and run.rng.random() < 0.7:
        off = run.rng.randint(0, len(t.shadow) + 64)
        length = run.rng.randint(1, 8192)
        run.log.append(f"pread {t.name} (writer) off={off} len={length}")
        check_range(run, t, off, length)
        return
    # A fresh reader. Another thread (FUSE tells memfs the calling thread) sees the last
    # committed version, whole, while a writer is open or not; the writer's own thread
    # sees what it wrote, as its st_size says.
    own = t.fd >= 0 and run.rng.random() < 0.5
    run.log.append(
        f"read {t.name} (fresh open{', the writer' if own else ''})"
        + (" while open" if t.fd >= 0 else "")
    )
    got = read_fresh(t.path) if own else in_another_thread(read_fresh, t.path)
    if own:
        allowed = [bytes(t.shadow)]
    else:
        allowed = [t.committed] if t.synced is None else [t.committed, t.synced]
    if got not in allowed:
        run.fail(f"{t.name}: a fresh reader got {short(got)}, want {short(allowed[0])}")


def read_fresh(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def in_another_thread(fn: Callable[[Path], bytes], path: Path) -> bytes:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, path).result(timeout=30)


def op_fsync(run: Run, t: Target) -> None:
    if t.fd < 0:
        return op_read(run, t)
    run.log.append(f"fsync {t.name}")
    os.fsync(t.fd)
    t.synced = bytes(t.shadow)
    check_range(run, t, 0, len(t.shadow) + 1)


def op_close(run: Run, t: Target) -> None:
    if t.fd < 0:
        return op_read(run, t)
    run.log.append(f"close {t.name} ({len(t.shadow)} bytes)")
    fd, t.fd = t.fd, -1
    os.close(fd)
    t.committed, t.synced = bytes(t.shadow), None
    check_closed(run, t)


OPS = (
    (op_write, 40),
    (op_truncate, 14),
    (op_read, 26),
    (op_fsync, 5),
    (op_close, 15),
)


# --- checks ----------------------------------------------------------------------------


def check_range(run: Run, t: Target, off: int, length: int) -> None:
    """Through the writer's descriptor: the range, and st_size."""
    run.expect(os.fstat(t.fd).st_size, len(t.shadow), f"{t.name}: fstat st_size")
    got = os.pread(t.fd, length, off)
    run.expect(got, bytes(t.shadow[off : off + length]), f"{t.name}: pread({length}, {off})")


def check_closed(run: Run, t: Target) -> None:
    """After close(): a fresh open, stat and the own source on disk hold the shadow."""
    want = bytes(t.shadow)
    run.expect(os.stat(t.path).st_size, len(want), f"{t.name}: stat st_size after close")
    run.expect(read(t.path), want, f"{t.name}: whole file through the mount after close")
    if t.changed or t.disk.exists():
        # (A file only the work source has lands in the own source at its first change.)
        run.expect(read(t.disk), want, f"{t.name}: whole file on disk after close")


def drive(run: Run) -> None:
    funcs = [f for f, _ in OPS]
    weights = [w for _, w in OPS]
    for n in range(1, run.ops + 1):
        run.done = n
        t = run.rng.choice(run.targets)
        op = run.rng.choices(funcs, weights)[0]
        try:
            op(run, t)
        except OSError as exc:
            run.fail(f"{op.__name__} on {t.name}: {exc!r}")
    for t in run.targets:  # the last close of each, checked like every other
        op_close(run, t)


def build(box: Sandbox, seed: int) -> dict[str, bytes]:
    rng = random.Random(-seed)  # the starting bytes, apart from the run's own stream
    bodies = {
        PLAIN: rng.randbytes(3000),
        HANDOFF: b"# Handoff\n" + rng.randbytes(5000),
        COPIED: b"WORK copied\n" + rng.randbytes(7000),
    }
    box.write("personal", SLUG, PLAIN, bodies[PLAIN], 2)
    box.write("personal", SLUG, HANDOFF, bodies[HANDOFF], 2)
    box.write("work", SLUG, COPIED, bodies[COPIED], 1)
    box.write("work", SLUG, "guard.md", "the work source is never written\n", 1)
    return bodies


@pytest.mark.parametrize("seed", SEEDS)
def test_random_operations_match_a_shadow_copy(sandbox: Sandbox, rw: Writes, seed: int) -> None:
    bodies = build(sandbox, seed)
    rw.mount()
    ops = TOTAL_OPS // len(SEEDS)
    print(f"fsx seed={seed} ops={ops}")
    targets = [
        Target(name, rw.mnt(name), rw.own(name), bytearray(body), body)
        for name, body in bodies.items()
    ]
    run = Run(seed, ops, random.Random(seed), targets)
    try:
        drive(run)
    finally:
        for t in targets:
            if t.fd >= 0:
                os.close(t.fd)
    print(f"fsx seed={seed}: {run.done} operations matched the shadow copy")
    assert run.done == ops, f"fsx seed={seed}: ran {run.done} of {ops} operations"
    # Every commit of the handoff kept the version it replaced, the last 20 of them (§7.2).
    kept = os.listdir(rw.mnt(".history", HANDOFF))
    assert 1 <= len(kept) <= HANDOFF_VERSIONS, f"fsx seed={seed}: {len(kept)} kept versions"
    # Releases follow the closes: then no stage file may be left.
    wait_until(lambda: stages(rw.own_root) == [], SOON, f"fsx seed={seed}: no stage left")
