"""Tier 3: a read through the mount never fails because its file changed.

A `touch`, an append or a rewrite in place, made on disk in a source folder or through
the mount, with a descriptor open or not, must leave every read through the mount
succeeding: the reader gets the version it opened or what the disk shows, never ``EIO``.
A local folder gives that for free; these tests hold memfs to it.

Each test changes one file in a loop while readers read it through the mount: two threads
doing what ``cat`` does (open, read to the end, close) and a thread running the real
``cat``. Every read is checked against what the disk can hold at that moment: the same
bytes for a touch, the original plus whole appended lines for an append, each byte one of
the two versions' for a rewrite in place. The loops that caught the failures in the field
run 20 s (a touch, an append, on disk); the others 8 s.

One more change on disk: a project folder moved away, seen from a process inside it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, TOOL_DEADLINE, Mounts, Sandbox, slug_of, wait_until

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/changes"))
NAME = "notes.md"
# Two pages and a bit, so a read reaches memfs more than once per open. Every line is
# LINE bytes and LINE divides the page size: no appended line ever straddles a page, so
# even on disk a reader sees each append whole (a write is copied into the page cache page
# by page, the size raised after each).
LINE = 32
BODY = b"".join(b"- note %03d, never changed here.\n" % i for i in range(300))
LONG_LOOP = 20.0  # seconds: the touch and append loops that failed in the field
SHORT_LOOP = 8.0  # seconds: the other changes
SOON = 1.0  # a change on disk shows through the mount within a second
JOIN_DEADLINE = 20.0  # seconds for a client to notice the end (a hung mount: the watchdog)
CHANGE_PAUSE = 0.001  # seconds between two changes: a shell loop running `touch`, not a flood
MIN_READS = 100  # a run with fewer reads than this tested nothing
EXAMPLES = 5  # problems of each kind described; the rest counted
OWN, READ_ONLY = "personal", "work"

Check = Callable[[bytes], str | None]


# --- the changes --------------------------------------------------------------------------


def touch(path: Path, n: int) -> None:
    """One `touch` of an existing file: even turns as coreutils' touch does it (an open for
    writing, futimens, close: inotify reports IN_ATTRIB and IN_CLOSE_WRITE), odd turns a bare
    utimensat (Python's ``Path.touch``: IN_ATTRIB only)."""
    if n % 2:
        os.utime(path)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def appended_line(k: int) -> bytes:
    return b"appended line %06d, whole....\n" % k


assert len(BODY) % LINE == 0
assert 4096 % LINE == 0
assert len(appended_line(0)) == LINE


def append(path: Path, n: int) -> None:
    """``echo ... >> notes.md``: one O_APPEND write of one whole line, so that the disk only
    ever holds the original followed by whole lines."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        line = appended_line(n)
        assert os.write(fd, line) == len(line)
    finally:
        os.close(fd)


# --- the checks ----------------------------------------------------------------------------


def same_bytes(expected: bytes) -> Check:
    def check(data: bytes) -> str | None:
        if data == expected:
            return None
        first = next(
            (i for i, (a, b) in enumerate(zip(data, expected, strict=False)) if a != b), None
        )
        return f"{len(data)} bytes, expected {len(expected)}; first differing byte {first}"

    return check


def base_and_whole_lines(base: bytes) -> Check:
    """The original followed by appended lines 0..k-1, for some k; never a torn line."""

    def check(data: bytes) -> str | None:
        if not data.startswith(base):
            return f"{len(data)} bytes that do not start with the original {len(base)}"
        tail = data[len(base) :]
        k = tail.count(b"\n")
        if tail == b"".join(appended_line(i) for i in range(k)):
            return None
        return (
            f"the original and {len(tail)} bytes that are not whole appended lines: "
            f"ends {tail[-40:]!r}"
        )

    return check


def byte_of_either(a: bytes, b: bytes) -> Check:
    """A file rewritten in place, same size: each byte is one version's byte at that place."""
    assert len(a) == len(b)

    def check(data: bytes) -> str | None:
        if len(data) != len(a):
            return f"{len(data)} bytes of a file that always holds {len(a)}"
        bad = next((i for i, c in enumerate(data) if c not in (a[i], b[i])), None)
        return None if bad is None else f"byte {bad} is neither version's"

    return check


# --- readers and a run --------------------------------------------------------------------


@dataclass
class Reads:
    """What the readers saw; one lock, taken after each read."""

    done: Counter[str] = field(default_factory=Counter)  # reader kind -> reads
    failed: Counter[str] = field(default_factory=Counter)  # "kind errno" -> failed reads
    wrong: Counter[str] = field(default_factory=Counter)  # kind -> reads with wrong bytes
    examples: list[str] = field(default_factory=list)
    changes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def saw(self, kind: str, failure: str | None, problem: str | None) -> None:
        with self.lock:
            self.done[kind] += 1
            if failure is not None:
                self.failed[f"{kind} {failure}"] += 1
                if self.failed[f"{kind} {failure}"] <= EXAMPLES:
                    self.examples.append(f"{kind}: {failure}")
            elif problem is not None:
                self.wrong[kind] += 1
                if self.wrong[kind] <= EXAMPLES:
                    self.examples.append(f"{kind}: {problem}")

    def summary(self) -> str:
        total, failed = sum(self.done.values()), sum(self.failed.values())
        share = 100 * failed / total if total else 0.0
        lines = [
            f"{total:,} reads ({dict(self.done)}) during {self.changes:,} changes; "
            f"failed {failed:,} ({share:.1f} %): {dict(self.failed)}; "
            f"wrong bytes {sum(self.wrong.values()):,}: {dict(self.wrong)}",
            *(f"  {e}" for e in self.examples),
        ]
        return "\n".join(lines)


def read_whole(path: Path) -> bytes:
    """What cat does: open, read to the end, close."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 128 * 1024):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def syscall_reader(path: Path, check: Check, reads: Reads, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            data = read_whole(path)
        except OSError as exc:
            reads.saw("open/read", errno.errorcode.get(exc.errno or 0, str(exc.errno)), None)
            continue
        reads.saw("open/read", None, check(data))


def cat_reader(box: Sandbox, path: Path, check: Check, reads: Reads, stop: threading.Event) -> None:
    while not stop.is_set():
        done = subprocess.run(
            ["cat", str(path)], env=box.env, capture_output=True, timeout=TOOL_DEADLINE, check=False
        )
        if done.returncode != 0:
            # cat: <path>: Input/output error -> the error's words only
            said = done.stderr.decode(errors="replace").strip().rsplit(": ", 1)[-1]
            reads.saw("cat", said or f"exit status {done.returncode}", None)
        else:
            reads.saw("cat", None, check(done.stdout))


def run_while_changing(
    box: Sandbox,
    view: Path,
    check: Check,
    change: Callable[[int], None],
    seconds: float,
    *,
    cats: int | None = None,
) -> Reads:
    """Read ``view`` with two syscall readers and one ``cat`` reader for ``seconds`` (or
    until ``cats`` cats are done) while ``change(n)`` runs in a loop, n = 0, 1, ...; every
    read checked."""
    reads = Reads()
    stop = threading.Event()
    crashes: list[BaseException] = []

    def changer() -> None:
        n = 0
        while not stop.wait(CHANGE_PAUSE):
            change(n)
            n += 1
            with reads.lock:
                reads.changes = n

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                fn()
            except BaseException as exc:  # a crashed client fails the test, never silently
                crashes.append(exc)
                stop.set()

        return body

    clients = [
        partial(syscall_reader, view, check, reads, stop),
        partial(syscall_reader, view, check, reads, stop),
        partial(cat_reader, box, view, check, reads, stop),
        changer,
    ]
    threads = [threading.Thread(target=guarded(fn), daemon=True) for fn in clients]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    while not stop.wait(0.05) and time.monotonic() < deadline:
        if cats is not None and reads.done["cat"] >= cats:
            break
    stop.set()
    for thread in threads:
        thread.join(JOIN_DEADLINE)
    assert not any(t.is_alive() for t in threads), "a client is still blocked on the mount"
    assert not crashes, f"a client crashed: {crashes[0]!r}\n{reads.summary()}"
    return reads


def assert_no_read_failed(reads: Reads) -> None:
    print(reads.summary())
    assert sum(reads.done.values()) >= MIN_READS, reads.summary()
    assert reads.changes > 0, reads.summary()
    assert not reads.failed, reads.summary()
    assert not reads.wrong, reads.summary()


def warm(view: Path, body: bytes) -> None:
    """Read it once: the project loaded and the kernel's caches warm, as agents find it."""
    assert read_whole(view) == body


# --- the rows ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_touch_on_disk_while_reading_never_fails(
    sandbox: Sandbox, mounts: Mounts, source: str
) -> None:
    """A touch loop on the source's file for 20 s: every read succeeds, with the same bytes
    (a touch changes the mtime, never the bytes)."""
    disk = sandbox.write(source, SLUG, NAME, BODY, age_days=1)
    mounts()
    view = sandbox.mnt(SLUG, NAME)
    warm(view, BODY)
    reads = run_while_changing(sandbox, view, same_bytes(BODY), partial(touch, disk), LONG_LOOP)
    assert_no_read_failed(reads)


def test_append_on_disk_while_reading_never_fails(sandbox: Sandbox, mounts: Mounts) -> None:
    """An append loop on the own source's file for 20 s: every read succeeds and is the
    original followed by some number of whole appended lines."""
    disk = sandbox.write(OWN, SLUG, NAME, BODY, age_days=1)
    mounts()
    view = sandbox.mnt(SLUG, NAME)
    warm(view, BODY)
    reads = run_while_changing(
        sandbox, view, base_and_whole_lines(BODY), partial(append, disk), LONG_LOOP
    )
    assert_no_read_failed(reads)
    on_disk = disk.read_bytes()
    assert base_and_whole_lines(BODY)(on_disk) is None
    assert len(on_disk) < 1 << 20, "the file outgrew the size cap: the test changed"


def reads_on(fd: int) -> dict[str, str]:
    """Read the whole file three ways on ``fd``: what -> how it failed or what was wrong."""
    os.lseek(fd, 0, os.SEEK_SET)
    ways = {
        "pread from 0": (lambda: os.pread(fd, len(BODY) + 100, 0), BODY),
        "pread of the second page": (lambda: os.pread(fd, 4096, 4096), BODY[4096:8192]),
        "read to the end": (lambda: read_to_end(fd), BODY),
    }
    problems = {}
    for what, (call, want) in ways.items():
        try:
            data = call()
        except OSError as exc:
            problems[what] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            continue
        if data != want:
            problems[what] = f"{len(data)} bytes, not the file's {len(want)}"
    return problems


def read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1000):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_descriptor_open_across_a_touch_on_disk_reads(
    sandbox: Sandbox, mounts: Mounts, source: str
) -> None:
    """Open through the mount, touch the file on disk: reads on the descriptor opened before
    the touch give the bytes, once the mount shows the touch and 1.5 s later."""
    disk = sandbox.write(source, SLUG, NAME, BODY, age_days=1)
    mounts()
    view = sandbox.mnt(SLUG, NAME)
    warm(view, BODY)
    fd = os.open(view, os.O_RDONLY | os.O_CLOEXEC)
    try:
        assert os.pread(fd, 100, 0) == BODY[:100]
        before = os.stat(view).st_mtime_ns
        touch(disk, 0)
        touched = disk.stat().st_mtime_ns
        assert touched != before
        wait_until(lambda: os.stat(view).st_mtime_ns == touched, 3 * SOON, "the touch shown")
        shown = reads_on(fd)
        # An agent keeps a file open across seconds: past the second the watcher has to show
        # a change, whatever it and the kernel did meanwhile. There is no condition to wait
        # for here; the time is the case.
        time.sleep(1.5)
        later = reads_on(fd)
        assert (shown, later) == ({}, {}), (
            f"reads on a descriptor opened before a touch: once shown {shown}, 1.5 s later {later}"
        )
    finally:
        os.close(fd)
    assert read_whole(view) == BODY


def test_a_project_moved_away_on_disk_is_gone_for_a_process_inside_it(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """The project's only folder moved out of its source on disk (one event, at the
    source's root): a process whose working folder is in the project sees its file go,
    not the kernel's entry of an hour."""
    disk = sandbox.write(OWN, SLUG, NAME, BODY, age_days=1)
    mounts()
    inside = os.open(sandbox.mnt(SLUG), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        assert os.stat(NAME, dir_fd=inside).st_size == len(BODY)  # the kernel holds it
        os.rename(disk.parent.parent, sandbox.base / "moved-away")

        def gone() -> bool:
            try:
                os.stat(NAME, dir_fd=inside)
            except FileNotFoundError:
                return True
            return False

        wait_until(gone, 3 * SOON, "the file gone for a process inside the project")
    finally:
        os.close(inside)
    assert os.listdir(sandbox.mnt(SLUG)) == ["PREAMBLE.md"]  # a project no source holds (§4)


def test_touch_through_the_mount_while_reading_never_fails(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """The real ``touch`` through the mount in a loop while readers read it (1,000 cats, or
    8 s): every read succeeds, with the same bytes."""
    sandbox.write(OWN, SLUG, NAME, BODY, age_days=1)
    mounts()
    view = sandbox.mnt(SLUG, NAME)
    warm(view, BODY)

    def touch_tool(n: int) -> None:
        sandbox.out("touch", view)

    reads = run_while_changing(sandbox, view, same_bytes(BODY), touch_tool, SHORT_LOOP, cats=1_000)
    assert_no_read_failed(reads)
    assert sandbox.folder(OWN, SLUG).joinpath(NAME).read_bytes() == BODY


def test_rewrite_in_place_on_disk_while_reading_never_fails(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """The file rewritten in place on disk, same size, other bytes (open without O_TRUNC,
    pwrite): no read fails; each is the disk's bytes, of either version or both."""
    other = BODY.replace(b"never changed", b"REWRITTEN!!!!")
    assert len(other) == len(BODY)
    disk = sandbox.write(OWN, SLUG, NAME, BODY, age_days=1)
    mounts()
    view = sandbox.mnt(SLUG, NAME)
    warm(view, BODY)

    def rewrite(n: int) -> None:
        fd = os.open(disk, os.O_WRONLY | os.O_CLOEXEC)
        try:
            body = other if n % 2 == 0 else BODY
            assert os.pwrite(fd, body, 0) == len(body)
        finally:
            os.close(fd)

    reads = run_while_changing(sandbox, view, byte_of_either(BODY, other), rewrite, SHORT_LOOP)
    assert_no_read_failed(reads)
