"""Tier 3: a file rewritten in place on disk while agents read it through the mount: no read
ever returns bytes no version had (§5.4, issue 36).

Gemini CLI's `write_file` rewrites a memory file in place (O_TRUNC, then write), and so do
`echo >`, Codex, goose. Readers through the mount opened before a rewrite read the version
they opened, whole; those that open during one read what the disk shows, as a local reader
would. What no reader may get is what neither shows: NUL bytes where the kernel padded a
read that came back short against the size of a version before. Each case rewrites one
file over and over for a few seconds while three readers read it whole, again and again,
as `cat` does (open, fstat, read to the end, close), and a fourth thread stats it.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, slug_of

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
SECONDS = 4.0
NUL = b"\0"


def versions(seed: int, biggest: int) -> list[bytes]:
    """Bodies of many sizes (none holding a NUL), the biggest up to ``biggest`` bytes."""
    rng = random.Random(seed)
    return [
        (f"version {n}: ".encode() + b"x" * rng.randint(10, biggest)).replace(b"\0", b"0") + b"\n"
        for n in range(16)
    ]


def hammer(disk: Path, view: Path, bodies: list[bytes], pause: float) -> tuple[int, list[str]]:
    """Rewrite ``disk`` in place in a loop while reading ``view``; returns (reads, faults)."""
    stop = time.monotonic() + SECONDS
    faults: list[str] = []
    reads = [0]

    def rewrite() -> None:
        n = 0
        while time.monotonic() < stop:
            fd = os.open(disk, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, bodies[n % len(bodies)])
            finally:
                os.close(fd)
            n += 1
            if pause:
                time.sleep(pause)  # the writer's own pace (an agent saving now and then)

    def cat() -> None:
        while time.monotonic() < stop:
            fd = os.open(view, os.O_RDONLY)
            try:
                os.fstat(fd)
                chunks = []
                while chunk := os.read(fd, 1 << 17):
                    chunks.append(chunk)
            finally:
                os.close(fd)
            got = b"".join(chunks)
            reads[0] += 1
            at = got.find(NUL)
            if at >= 0:
                faults.append(f"NUL at {at} of {len(got)} bytes")

    def stat() -> None:
        while time.monotonic() < stop:
            os.stat(view)

    threads = [threading.Thread(target=f) for f in (rewrite, cat, cat, cat, stat)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return reads[0], faults


@pytest.mark.parametrize("source", ["personal", "work"])
@pytest.mark.parametrize(
    ("biggest", "pause"),
    [(20_000, 0.0), (1_000_000, 0.0), (1_000_000, 0.3)],
    ids=["small", "1MB", "1MB-now-and-then"],
)
def test_no_read_returns_bytes_no_version_had(
    sandbox: Sandbox, mounts: Mounts, source: str, biggest: int, pause: float
) -> None:
    bodies = versions(biggest, biggest)
    disk = sandbox.write(source, SLUG, "notes.md", bodies[0])
    mounts()
    view = sandbox.mnt(SLUG, "notes.md")
    assert view.read_bytes() == bodies[0]
    reads, faults = hammer(disk, view, bodies, pause)
    print(f"{source}, {biggest} bytes, pause {pause}: {reads} reads, {len(faults)} faulty")
    assert faults == [], faults[:5]
    assert reads > 50
