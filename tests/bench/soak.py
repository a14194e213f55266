"""The soak: many writers, readers and out-of-band changes on one project, every read checked.

Run from the repository root, with the environment memfs is installed in::

    .venv/bin/python -m tests.bench.soak [--seconds 600] [--writers 4] [--readers 4] [--oob 1]
        [--touch 1] [--append 1]

It mounts memfs on a sandbox (HOME and XDG_* in a temporary folder, two sources: an own one
and a read-only one), runs the mix for ``--seconds``, checks the end state and prints the
figures; it exits 1 when a read was torn, an operation failed or the end state is wrong
(correctness, never time). ``tests/test_soak.py`` runs the same code for about a minute
through the test harness. What runs, all at once, in threads (they block in syscalls, so
the GIL is not what they wait for):

- **Writers** through the mount, half with Claude Code's pattern (``X.tmp.<pid>.<12 hex>``
  created with ``O_EXCL|O_NOFOLLOW``, written, fchmod, fsync, close, renamed over ``X``),
  half a shell's rewrite in place (``O_CREAT|O_TRUNC``, written in 4 KiB pieces, close),
  all on the same few names, a handoff among them, so commits of one name collide.
- **Readers** through the mount, as ``cat`` does (open, fstat, read to the end, close), of
  those names, of the names changed out of band and of ``PREAMBLE.md``.
- **Out-of-band writers** on disk: each writes a new version in a scratch folder on the
  same filesystem and renames it into the read-only source, or into the own source, as a
  sync tool delivers a file (a rename: on disk, each name always holds a whole version).
- **Touchers** on disk: ``touch`` of the names the out-of-band writers rename and of the
  appended names, in both sources (the mtime changes, the bytes never do).
- **Appenders** on disk: ``echo ... >> X`` on one name in each source, one whole line per
  ``O_APPEND`` write; past ``APPEND_CAP`` a fresh first version is renamed in.

No read may fail: a change on disk or through the mount never turns a read into an error
(``failed reads`` in the figures). Every body checks itself: a first line
``len=<payload bytes> seed=<hex> sha=<hex>`` and a payload generated from the seed, 100 B to
20 KB in all. A read is torn when its header does not parse, its length or checksum is
wrong (the first differing byte is reported, which tells a stale size from pages of two
versions). ``PREAMBLE.md`` cannot carry a header: it
is torn when fewer or more bytes come than fstat reported at open, when it does not end
like a render (a line end), or when a body it inlines is neither whole nor an exact prefix
followed by the renderer's cut marker counting exactly the bytes left out. An appended name
is torn unless it is its first version followed by whole numbered lines 0, 1, 2, ...

At the end, with every client stopped: every file on disk is a whole version, every head
through the mount is whole and is the head the disk holds (within a deadline, for the
watcher), every ``.history/`` version is whole, no temporary file (``*.tmp.*``, memfs's
stage files) is left on disk or in the view, and memfs is alive. The daemon's RSS is
sampled from ``/proc`` all along (start, end, max; steady when the last quarter's maximum
is at most 25 % + 16 MiB above the first quarter's).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

STAGE_PREFIX = ".memfs-stage."  # memfs/sources.py STAGE_PREFIX; a leftover must never stay
TEMP_MARK = ".tmp."  # Claude Code's temporary names: X.tmp.<pid>.<12 hex>
MIN_BODY, MAX_BODY = 100, 20_000
READ_CHUNK = 128 * 1024  # as cat reads
SHELL_CHUNK = 4096  # as a shell's redirection writes
EXAMPLES = 3  # torn reads of each kind and errors of each op described; the rest counted
END_DEADLINE = 10.0  # seconds for the view to show every head the disk holds at the end
OOB_PAUSE = 0.002  # seconds between two out-of-band versions: a busy sync tool, not a flood
RSS_EVERY = 0.5  # seconds between two samples of the daemon's RSS
RSS_SLACK_KIB = 16 * 1024
HUNG_GRACE = 30.0  # seconds a client may take to notice the end (a slow commit, a hung mount)
PREAMBLE = "PREAMBLE.md"
MEMORY = "MEMORY.md"
HISTORY = ".history"  # where kept versions lie, in a source folder and the view

# The names, and who changes them. Writers through the mount share SHARED; out-of-band
# writers rename into RO_OOB (read-only source) and OWN_OOB (own source) on disk.
SHARED = (*(f"note-{k}.md" for k in range(6)), "handoff-soak_20261201.md")
OWN_OOB = tuple(f"own-{k}.md" for k in range(3))
RO_OOB = tuple(f"ro-{k}.md" for k in range(3))
# Appended to on disk: the first in the own source, the second in the read-only one.
APPENDED = ("log-own.md", "log-ro.md")
TOUCHED = (*OWN_OOB, *RO_OOB, *APPENDED)  # touched on disk, in whichever source holds them
# An appended line is APPEND_LINE bytes and APPEND_LINE divides the page size, and so does
# the first version: no line straddles a page, so even on disk a reader sees each whole (a
# write is copied into the page cache page by page, the size raised after each).
APPEND_LINE = 32
APPEND_FIRST = b"".join(b"# appended log, first line %04d\n" % i for i in range(64))
APPEND_CAP = 64 * 1024  # bytes: past this an appended name is renamed back to its first version

HEADER_RE = re.compile(rb"len=(\d+) seed=([0-9a-f]{16}) sha=([0-9a-f]{16})\n")
MARKER_RE = re.compile(rb"\n?\[\xe2\x80\xa6 (\d+) more bytes: ")
CREATE_EXCL = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CREATE_TRUNC = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
TOUCH_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC


# --- self-validating bodies ---------------------------------------------------------------


def payload(seed: int, n: int) -> bytes:
    """``n`` bytes of text lines drawn from ``seed``: hex digits, a line end every 80."""
    if n <= 0:
        return b""
    digits = hashlib.shake_256(seed.to_bytes(8, "big")).hexdigest(n // 2 + 1).encode()
    lines = [digits[i : i + 79] for i in range(0, n, 80)]
    return (b"\n".join(lines) + b"\n")[: n - 1] + b"\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def header(seed: int, data: bytes) -> bytes:
    return b"len=%d seed=%016x sha=%s\n" % (len(data), seed, _sha(data).encode())


def make_body(rng: random.Random, size: int | None = None) -> bytes:
    """A whole version of ``size`` bytes (default: log-uniform in 100 B .. 20 KB)."""
    if size is None:
        size = int(MIN_BODY * (MAX_BODY / MIN_BODY) ** rng.random())
    seed = rng.getrandbits(64)
    n = size
    for _ in range(3):  # the header's length depends on the digits of n: settle it
        n = max(1, size - len(b"len=%d seed=%016x sha=%016x\n" % (n, 0, 0)))
    data = payload(seed, n)
    return header(seed, data) + data


def expected_of(match: re.Match[bytes]) -> bytes:
    """The whole body a parsed header describes."""
    data = payload(int(match.group(2), 16), int(match.group(1)))
    return match.group(0) + data


def check_body(data: bytes) -> str | None:
    """None when ``data`` is one whole version; else what is wrong, in words."""
    if not data:
        return "0 bytes"
    found = HEADER_RE.match(data)
    if found is None:
        return f"{len(data)} bytes, no header: starts {data[:40]!r}"
    whole = expected_of(found)
    if data == whole and _sha(whole[found.end() :]) == found.group(3).decode():
        return None
    first = next((i for i, (a, b) in enumerate(zip(data, whole, strict=False)) if a != b), None)
    if first is None:
        first = min(len(data), len(whole))
    return (
        f"{len(data)} bytes of a {len(whole)}-byte version; first differing byte {first} "
        f"(page {first // 4096})"
    )


def check_preamble(data: bytes, fstat_size: int) -> str | None:
    """None when ``data`` is one whole render; else what is wrong."""
    if len(data) != fstat_size:
        return f"read {len(data)} bytes, fstat at open said {fstat_size}"
    if not data.startswith(b"# ") or not data.endswith(b"\n"):
        return f"{len(data)} bytes that do not start and end like a render: ends {data[-40:]!r}"
    for found in re.finditer(rb"(?m)^" + HEADER_RE.pattern, data):
        problem = _check_inlined(data, found)
        if problem is not None:
            return f"{len(data)} bytes; an inlined body at byte {found.start()}: {problem}"
    return None


def _check_inlined(data: bytes, found: re.Match[bytes]) -> str | None:
    """An inlined body is whole, or an exact prefix followed by a marker counting the rest."""
    whole = expected_of(found)
    rest = data[found.start() : found.start() + len(whole) + 200]
    if rest.startswith(whole):
        return None
    kept = next((i for i, (a, b) in enumerate(zip(rest, whole, strict=False)) if a != b), 0)
    marker = MARKER_RE.match(rest, kept)
    if marker is None:
        return f"{kept} bytes of a {len(whole)}-byte version, then no cut marker"
    if int(marker.group(1)) != len(whole) - kept:
        return (
            f"{kept} bytes of a {len(whole)}-byte version, the marker says "
            f"{int(marker.group(1))} more"
        )
    return None


def appended_line(k: int) -> bytes:
    return b"appended line %06d, whole....\n" % k


def check_appended(data: bytes) -> str | None:
    """None when ``data`` is an appended name's first version and lines 0..k-1, some k."""
    if not data.startswith(APPEND_FIRST):
        return f"{len(data)} bytes that do not start with the first version: {data[:40]!r}"
    tail = data[len(APPEND_FIRST) :]
    k = tail.count(b"\n")
    if tail == b"".join(appended_line(i) for i in range(k)):
        return None
    return f"the first version and {len(tail)} bytes that are not whole lines: ends {tail[-40:]!r}"


def check_named(name: str, data: bytes) -> str | None:
    """The check of ``name``'s bodies: appended, or self-checking."""
    return check_appended(data) if name in APPENDED else check_body(data)


# --- the project the soak runs on -----------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where one soak runs: the project through the mount and its two source folders."""

    view: Path  # <mount>/<slug>
    own: Path  # the own source's folder of the project
    readonly: Path  # a read-only source's folder of the project
    scratch: Path  # outside every source, on the sources' filesystem: out-of-band temp files

    @property
    def mountpoint(self) -> Path:
        return self.view.parent


def seed_project(layout: Layout, rng: random.Random) -> None:
    """Whole first versions of every name, before the mount: own, read-only, both."""
    for folder in (layout.own, layout.readonly, layout.scratch):
        folder.mkdir(parents=True, exist_ok=True)
    old = time.time() - 86_400
    for name in (*SHARED, *OWN_OOB):
        (layout.own / name).write_bytes(make_body(rng))
    for name in (*RO_OOB, *SHARED[:3]):  # SHARED[:3] also read-only: history beside a head
        path = layout.readonly / name
        path.write_bytes(make_body(rng))
        os.utime(path, (old, old))
    for folder, name in zip((layout.own, layout.readonly), APPENDED, strict=True):
        (folder / name).write_bytes(APPEND_FIRST)
    links = [f"- [{n[:-3]}]({n}) soak file" for n in (*SHARED, *OWN_OOB, *RO_OOB, *APPENDED)]
    (layout.own / MEMORY).write_text("# Memory\n\n" + "\n".join(links) + "\n", encoding="utf-8")


# --- counting -------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw; one lock, taken briefly, after each operation."""

    reads: Counter[str] = field(default_factory=Counter)  # kind -> reads
    torn: Counter[str] = field(default_factory=Counter)  # kind -> torn reads
    writes: Counter[str] = field(default_factory=Counter)  # pattern -> whole writes
    errors: Counter[str] = field(default_factory=Counter)  # "op errno" -> count
    torn_examples: list[str] = field(default_factory=list)
    error_examples: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def failed_reads(self) -> int:
        """Reads through the mount that failed (an errno), whatever the bytes would have been."""
        return sum(n for op, n in self.errors.items() if op.startswith("read "))

    def read(self, kind: str, path: Path, problem: str | None) -> None:
        with self.lock:
            self.reads[kind] += 1
            if problem is not None:
                self.torn[kind] += 1
                if self.torn[kind] <= EXAMPLES:
                    self.torn_examples.append(f"{path.name}: {problem}")

    def wrote(self, pattern: str) -> None:
        with self.lock:
            self.writes[pattern] += 1

    def crashed(self, client: str, exc: BaseException) -> None:
        with self.lock:
            self.errors[f"{client} crashed"] += 1
            if self.errors[f"{client} crashed"] <= EXAMPLES:
                self.error_examples.append(f"{client} crashed: {exc!r}")

    def error(self, op: str, path: Path, exc: OSError) -> None:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        with self.lock:
            self.errors[f"{op} {code}"] += 1
            if self.errors[f"{op} {code}"] <= EXAMPLES:
                self.error_examples.append(f"{op} {path.name}: {code} ({exc.strerror})")


class Failed(Exception):
    """One client operation failed; already counted."""


def _do(tally: Tally, op: str, path: Path, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except OSError as exc:
        tally.error(op, path, exc)
        raise Failed(op) from exc


# --- the clients ----------------------------------------------------------------------------


def read_whole(path: Path) -> tuple[bytes, int]:
    """open, fstat, read to the end, close: (bytes, size fstat gave at open)."""
    fd = os.open(path, READ_FLAGS)
    try:
        size = os.fstat(fd).st_size
        chunks = []
        while chunk := os.read(fd, READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks), size
    finally:
        os.close(fd)


def write_claude(tally: Tally, target: Path, body: bytes) -> None:
    """Claude Code's write: temp with O_EXCL, write, fchmod, fsync, close, rename over."""
    temp = target.with_name(f"{target.name}.tmp.{os.getpid()}.{secrets.token_hex(6)}")
    fd = _do(tally, "create O_EXCL", temp, lambda: os.open(temp, CREATE_EXCL, 0o644))
    try:
        try:
            _do(tally, "write", temp, lambda: os.write(fd, body))
            _do(tally, "fchmod", temp, lambda: os.fchmod(fd, 0o644))
            _do(tally, "fsync", temp, lambda: os.fsync(fd))
        finally:
            _do(tally, "close", temp, lambda: os.close(fd))
        _do(tally, "rename", temp, lambda: os.rename(temp, target))
    except Failed:
        with contextlib.suppress(OSError):
            os.unlink(temp)  # as Claude Code cleans up; a leftover is still found at the end
        raise
    tally.wrote("claude")


def write_shell(tally: Tally, target: Path, body: bytes) -> None:
    """A shell's ``printf ... > X``: O_CREAT|O_TRUNC, writes of 4 KiB, close."""
    fd = _do(tally, "open O_TRUNC", target, lambda: os.open(target, CREATE_TRUNC, 0o644))
    try:
        for i in range(0, len(body), SHELL_CHUNK):
            piece = body[i : i + SHELL_CHUNK]
            _do(tally, "write", target, partial(os.write, fd, piece))
    finally:
        _do(tally, "close", target, lambda: os.close(fd))
    tally.wrote("shell")


def write_out_of_band(tally: Tally, scratch: Path, target: Path, body: bytes) -> None:
    """A new version written beside the source and renamed in, as a sync tool delivers it."""
    temp = scratch / f"{target.name}.{secrets.token_hex(6)}"
    _do(tally, "write on disk", temp, lambda: temp.write_bytes(body))
    _do(tally, "rename on disk", target, lambda: os.rename(temp, target))
    tally.wrote("out-of-band")


def reader(layout: Layout, tally: Tally, rng: random.Random, stop: threading.Event) -> None:
    kinds = (
        ("through", SHARED),
        ("own-oob", OWN_OOB),
        ("ro-oob", RO_OOB),
        ("appended", APPENDED),
        ("preamble", ()),
    )
    while not stop.is_set():
        kind, names = kinds[rng.randrange(len(kinds))]
        path = layout.view / (rng.choice(names) if names else PREAMBLE)
        try:
            data, size = _do(tally, "read", path, partial(read_whole, path))
        except Failed:
            continue
        preamble = kind == "preamble"
        problem = check_preamble(data, size) if preamble else check_named(path.name, data)
        tally.read(kind, path, problem)


def writer(
    layout: Layout, tally: Tally, rng: random.Random, stop: threading.Event, pattern: str
) -> None:
    write = write_claude if pattern == "claude" else write_shell
    while not stop.is_set():
        with contextlib.suppress(Failed):
            write(tally, layout.view / rng.choice(SHARED), make_body(rng))


def out_of_band(layout: Layout, tally: Tally, rng: random.Random, stop: threading.Event) -> None:
    turn = 0
    while not stop.wait(OOB_PAUSE):
        folder, names = (layout.readonly, RO_OOB) if turn % 2 == 0 else (layout.own, OWN_OOB)
        turn += 1
        with contextlib.suppress(Failed):
            write_out_of_band(tally, layout.scratch, folder / rng.choice(names), make_body(rng))


def _on_disk(layout: Layout, name: str) -> Path:
    """The source folder holding a touched or appended name."""
    own = name in OWN_OOB or name == APPENDED[0]
    return (layout.own if own else layout.readonly) / name


def touch(path: Path) -> None:
    """coreutils' ``touch`` of an existing file: open for writing, futimens, close."""
    fd = os.open(path, TOUCH_FLAGS, 0o644)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def toucher(layout: Layout, tally: Tally, rng: random.Random, stop: threading.Event) -> None:
    while not stop.wait(OOB_PAUSE):
        path = _on_disk(layout, rng.choice(TOUCHED))
        with contextlib.suppress(Failed):
            _do(tally, "touch on disk", path, partial(touch, path))
            tally.wrote("touch on disk")


def append_line(path: Path, line: bytes) -> None:
    """``echo ... >> X``: the whole line in one O_APPEND write."""
    fd = os.open(path, APPEND_FLAGS)
    try:
        if os.write(fd, line) != len(line):
            raise OSError(errno.EIO, f"short append to {path}")
    finally:
        os.close(fd)


def appender(layout: Layout, tally: Tally, rng: random.Random, stop: threading.Event) -> None:
    lines = dict.fromkeys(APPENDED, 0)  # name -> lines appended since its first version
    while not stop.wait(OOB_PAUSE):
        name = rng.choice(APPENDED)
        path = _on_disk(layout, name)
        with contextlib.suppress(Failed):
            if len(APPEND_FIRST) + (lines[name] + 1) * APPEND_LINE > APPEND_CAP:
                write_out_of_band(tally, layout.scratch, path, APPEND_FIRST)
                lines[name] = 0
                continue
            _do(
                tally,
                "append on disk",
                path,
                partial(append_line, path, appended_line(lines[name])),
            )
            lines[name] += 1
            tally.wrote("append on disk")


# --- the daemon's memory --------------------------------------------------------------------


def rss_kib(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) if found else None


def sample_rss(pid: int, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    start = time.monotonic()
    while True:
        kib = rss_kib(pid)
        if kib is not None:
            out.append((time.monotonic() - start, kib))
        if stop.wait(RSS_EVERY):
            return


def rss_summary(samples: Sequence[tuple[float, int]]) -> dict[str, Any]:
    """Start, end and max RSS, and whether the last quarter stays near the first."""
    if not samples:
        return {"start_kib": None, "end_kib": None, "max_kib": None, "steady": False}
    values = [kib for _, kib in samples]
    quarter = max(1, len(values) // 4)
    early, late = max(values[:quarter]), max(values[-quarter:])
    return {
        "start_kib": values[0],
        "end_kib": values[-1],
        "max_kib": max(values),
        "first_quarter_max_kib": early,
        "last_quarter_max_kib": late,
        "steady": late <= early * 1.25 + RSS_SLACK_KIB,
        "samples": len(values),
    }


# --- one run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mix:
    writers: int = 4  # half Claude Code's pattern (the first), half the shell's
    readers: int = 4
    oob: int = 1  # out-of-band writers, alternating read-only and own targets
    touch: int = 1  # touchers on disk
    append: int = 1  # appenders on disk

    def describe(self) -> str:
        return (
            f"{self.writers} writers, {self.readers} readers, {self.oob} out-of-band, "
            f"{self.touch} touching, {self.append} appending"
        )


@dataclass
class Report:
    seconds: float
    mix: Mix
    tally: Tally
    rss: dict[str, Any]
    end_problems: list[str]
    hung: list[str]

    @property
    def torn(self) -> int:
        return sum(self.tally.torn.values())

    @property
    def errors(self) -> int:
        return sum(self.tally.errors.values())

    @property
    def failed_reads(self) -> int:
        return self.tally.failed_reads

    @property
    def ok(self) -> bool:
        growing = self.rss["start_kib"] is not None and not self.rss["steady"]
        return not (self.torn or self.errors or self.end_problems or self.hung or growing)

    def as_dict(self) -> dict[str, Any]:
        t = self.tally
        return {
            "seconds": round(self.seconds, 1),
            "mix": self.mix.describe(),
            "reads": sum(t.reads.values()),
            "reads_by_kind": dict(t.reads),
            "torn_reads": self.torn,
            "torn_by_kind": dict(t.torn),
            "torn_examples": t.torn_examples,
            "failed_reads": self.failed_reads,
            "writes": dict(t.writes),
            "errors": self.errors,
            "errors_by_op": dict(t.errors),
            "error_examples": t.error_examples,
            "end_problems": self.end_problems,
            "hung_clients": self.hung,
            "rss": self.rss,
            "ok": self.ok,
        }

    def render(self) -> str:
        d = self.as_dict()
        rss = self.rss
        mib = "-" if rss["start_kib"] is None else ""
        lines = [
            f"soak: {d['mix']}, {d['seconds']:.0f} s",
            f"  reads {d['reads']:,} ({_counts(self.tally.reads)}); torn {self.torn:,}"
            + (f" ({_counts(self.tally.torn)})" if self.torn else ""),
            f"  failed reads {self.failed_reads:,}",
            f"  whole writes: {_counts(self.tally.writes)}",
            f"  unexpected errors {self.errors:,}"
            + (f" ({_counts(self.tally.errors)})" if self.errors else ""),
        ]
        lines += [f"    torn: {e}" for e in self.tally.torn_examples]
        lines += [f"    error: {e}" for e in self.tally.error_examples]
        if mib:
            lines.append("  memfs RSS: not sampled")
        else:
            lines.append(
                f"  memfs RSS: start {rss['start_kib'] / 1024:.1f} MiB, end "
                f"{rss['end_kib'] / 1024:.1f} MiB, max {rss['max_kib'] / 1024:.1f} MiB "
                f"({'steady' if rss['steady'] else 'GROWING'})"
            )
        if self.end_problems:
            lines.append(f"  at the end: {len(self.end_problems)} problems")
            lines += [f"    {p}" for p in self.end_problems[: 4 * EXAMPLES]]
        else:
            lines.append(
                "  at the end: every head whole on disk and through the mount, no temporary "
                "file left, memfs alive"
            )
        if self.hung:
            lines.append(f"  clients still blocked {HUNG_GRACE:.0f} s after the end: {self.hung}")
        return "\n".join(lines)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counter.items())) or "none"


def run(
    layout: Layout,
    seconds: float,
    *,
    mix: Mix = Mix(),
    daemon_pid: int | None = None,
    seed: int = 20261201,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run ``mix`` for ``seconds`` on a mounted, seeded ``layout``; then check the end."""
    tally = Tally()
    stop = threading.Event()
    master = random.Random(seed)
    clients: list[tuple[str, Callable[[], None]]] = []
    for i in range(mix.writers):
        pattern = "claude" if i % 2 == 0 else "shell"
        rng = random.Random(master.getrandbits(64))
        clients.append((f"writer-{pattern}-{i}", _bind(tally, writer, layout, rng, stop, pattern)))
    for i in range(mix.readers):
        rng = random.Random(master.getrandbits(64))
        clients.append((f"reader-{i}", _bind(tally, reader, layout, rng, stop)))
    for i in range(mix.oob):
        rng = random.Random(master.getrandbits(64))
        clients.append((f"out-of-band-{i}", _bind(tally, out_of_band, layout, rng, stop)))
    for i in range(mix.touch):
        rng = random.Random(master.getrandbits(64))
        clients.append((f"toucher-{i}", _bind(tally, toucher, layout, rng, stop)))
    for i in range(mix.append):
        rng = random.Random(master.getrandbits(64))
        clients.append((f"appender-{i}", _bind(tally, appender, layout, rng, stop)))
    samples: list[tuple[float, int]] = []
    threads = [threading.Thread(target=fn, name=name, daemon=True) for name, fn in clients]
    if daemon_pid is not None:
        threads.append(
            threading.Thread(
                target=sample_rss, args=(daemon_pid, stop, samples), name="rss", daemon=True
            )
        )
    start = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        _wait(stop, start + seconds, tally, progress)
    finally:
        stop.set()
        elapsed = time.monotonic() - start
        grace = time.monotonic() + HUNG_GRACE
        for thread in threads:
            thread.join(max(0.0, grace - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    problems = [] if hung else check_end(layout, daemon_pid)
    return Report(elapsed, mix, tally, rss_summary(samples), problems, hung)


def _bind(tally: Tally, fn: Callable[..., None], *args: Any) -> Callable[[], None]:
    """A client's body: ``fn(layout, tally, *rest)``; a crash is counted, never silent."""
    layout, *rest = args

    def body() -> None:
        try:
            fn(layout, tally, *rest)
        except Exception as exc:
            tally.crashed(threading.current_thread().name, exc)

    return body


def _wait(
    stop: threading.Event, until: float, tally: Tally, progress: Callable[[str], None] | None
) -> None:
    next_report = time.monotonic() + 30.0
    while not stop.wait(min(1.0, max(0.0, until - time.monotonic()))):
        now = time.monotonic()
        if now >= until:
            return
        if progress is not None and now >= next_report:
            next_report = now + 30.0
            with tally.lock:
                progress(
                    f"{sum(tally.reads.values()):,} reads, {sum(tally.torn.values()):,} torn, "
                    f"{sum(tally.writes.values()):,} writes, "
                    f"{sum(tally.errors.values()):,} errors"
                )


# --- the end state --------------------------------------------------------------------------


def check_end(layout: Layout, daemon_pid: int | None) -> list[str]:
    """Everything wrong with the state the soak left; empty when all is well."""
    problems = check_disk(layout)
    problems += check_view(layout)
    if daemon_pid is not None and rss_kib(daemon_pid) is None:
        problems.append(f"memfs (pid {daemon_pid}) is not running")
    try:
        os.statvfs(layout.mountpoint)
        os.listdir(layout.mountpoint)
    except OSError as exc:
        problems.append(f"the mount does not answer: {exc}")
    return problems


def _temporary(name: str) -> bool:
    return name.startswith(STAGE_PREFIX) or TEMP_MARK in name


def check_disk(layout: Layout) -> list[str]:
    """Every file in both source folders is whole; no temporary file is left there."""
    problems = []
    for folder in (layout.own, layout.readonly):
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            if _temporary(path.name):
                problems.append(f"temporary file left on disk: {path}")
                continue
            # A kept version (`.history/<name>/<version>`, which memfs keeps of changes made
            # on disk too, issue 37) is checked as the name it is a version of.
            name = path.parent.name if HISTORY in path.relative_to(folder).parts else path.name
            if name != MEMORY and (problem := check_named(name, path.read_bytes())):
                problems.append(f"on disk {path}: {problem}")
    return problems


def expected_heads(layout: Layout) -> dict[str, bytes]:
    """name -> the head's bytes (§5.2): the own version, else the read-only one."""
    heads = {}
    for name in (*SHARED, *OWN_OOB, *RO_OOB, *APPENDED):
        for folder in (layout.own, layout.readonly):
            with contextlib.suppress(FileNotFoundError):
                heads[name] = (folder / name).read_bytes()
                break
    return heads


def check_view(layout: Layout, deadline: float = END_DEADLINE) -> list[str]:
    """Through the mount: every head whole and the disk's; history whole; no temp names."""
    heads = expected_heads(layout)
    missing = [n for n in (*SHARED, *OWN_OOB, *RO_OOB, *APPENDED) if n not in heads]
    problems = [f"no version of {n} on disk" for n in missing]
    stale: list[str] = []
    until = time.monotonic() + deadline
    while True:
        stale = [p for name, body in heads.items() if (p := _head_problem(layout, name, body))]
        if not stale or time.monotonic() >= until:
            break
        time.sleep(0.05)  # the watcher's turn: out-of-band renames show within a second
    problems += stale
    try:
        names = os.listdir(layout.view)
    except OSError as exc:
        return [*problems, f"cannot list {layout.view}: {exc}"]
    problems += [f"temporary name in the view: {n}" for n in names if _temporary(n)]
    problems += check_history(layout.view / ".history")
    return problems


def _head_problem(layout: Layout, name: str, body: bytes) -> str | None:
    path = layout.view / name
    try:
        data, _ = read_whole(path)
    except OSError as exc:
        return f"through the mount {name}: {errno.errorcode.get(exc.errno or 0)}"
    problem = check_named(name, data)
    if problem is not None:
        return f"through the mount {name}: {problem}"
    if data != body:
        return f"through the mount {name}: a whole version, not the head on disk"
    return None


def check_history(folder: Path) -> list[str]:
    """Every version under ``.history/`` through the mount is whole."""
    problems = []
    try:
        paths = sorted(p for p in folder.rglob("*") if p.is_file())
    except OSError as exc:
        return [f"cannot walk {folder}: {exc}"]
    for path in paths:
        if _temporary(path.parent.name):
            problems.append(f"history of a temporary name: {path}")
            continue
        try:
            data, _ = read_whole(path)
        except OSError as exc:
            problems.append(f"history {path.relative_to(folder)}: {exc}")
            continue
        if path.parent.name != MEMORY and (problem := check_named(path.parent.name, data)):
            problems.append(f"history {path.relative_to(folder)}: {problem}")
    return problems


# --- the command: a sandbox, a mount, a run -----------------------------------------------

SLUG = "-home-soak-src-project"


def sandbox(base: Path) -> tuple[dict[str, str], Path, Layout]:
    """(environment, config, layout) under ``base``: HOME and XDG_* there, two sources."""
    from .fixture import sandbox_env  # only the command needs the benchmark's sandbox

    env = sandbox_env(base)
    home = Path(env["HOME"])
    own_t = f"{home}/.claude/projects/{{slug}}/memory"
    ro_t = f"{home}/.claude-work/projects/{{slug}}/memory"
    config = base / "config.toml"
    config.write_text(
        f'[[source]]\nname = "own"\npath = "{own_t}"\nown = true\n\n'
        f'[[source]]\nname = "work"\npath = "{ro_t}"\n',
        encoding="utf-8",
    )
    layout = Layout(
        view=base / "mnt" / SLUG,
        own=Path(own_t.replace("{slug}", SLUG)),
        readonly=Path(ro_t.replace("{slug}", SLUG)),
        scratch=base / "scratch",
    )
    return env, config, layout


def soak_mounted(
    base: Path,
    seconds: float,
    *,
    mix: Mix = Mix(),
    logs: Path,
    log: Callable[[str], None] = print,
) -> Report:
    """Seed a sandbox under ``base``, mount memfs there, soak, unmount (always)."""
    from .mounts import Mounts

    env, config, layout = sandbox(base)
    seed_project(layout, random.Random(7))
    logs.mkdir(parents=True, exist_ok=True)
    mounts = Mounts(sys.executable, logs)
    try:
        mount = mounts.memfs(env, config, layout.mountpoint, "soak")
        mount.wait_ready(layout.view)
        for name in (*SHARED, *OWN_OOB, *RO_OOB, *APPENDED, PREAMBLE):
            read_whole(layout.view / name)  # the project loaded, the kernel's caches warm
        log(f"soak: {mix.describe()} for {seconds:.0f} s on {layout.view}")
        return run(layout, seconds, mix=mix, daemon_pid=mount.pid, progress=log)
    finally:
        mounts.close_all()
        if mounts.forced:
            log(f"soak teardown had to force: {mounts.forced}")


def _log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--writers", type=int, default=Mix.writers)
    parser.add_argument("--readers", type=int, default=Mix.readers)
    parser.add_argument("--oob", type=int, default=Mix.oob, help="out-of-band writers")
    parser.add_argument("--touch", type=int, default=Mix.touch, help="touchers on disk")
    parser.add_argument("--append", type=int, default=Mix.append, help="appenders on disk")
    repo = Path(__file__).resolve().parents[2]
    parser.add_argument("--out", type=Path, default=repo / "tests" / "bench" / "out")
    parser.add_argument(
        "--memfs-src", type=Path, help="a folder holding another memfs package to soak"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.memfs_src is not None:
        os.environ["PYTHONPATH"] = str(args.memfs_src.resolve())
    out = args.out.resolve()
    mix = Mix(args.writers, args.readers, args.oob, args.touch, args.append)
    base = Path(tempfile.mkdtemp(prefix="memfs-soak-"))
    from .fixture import sandbox_env

    os.environ.update(sandbox_env(base / "self"))  # this process never touches the real home

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    try:
        report = soak_mounted(base, args.seconds, mix=mix, logs=out / "logs", log=_log)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    print(report.render())
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(report.as_dict(), indent=1) + "\n")
    print(f"\nresults in {out / 'soak.json'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; everything it mounted is unmounted", file=sys.stderr)
        sys.exit(130)
