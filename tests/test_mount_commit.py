"""Who commits a write through a real mount, and what the writer sees meanwhile.

Only the writer's own close commits: a child process that inherited the descriptor and
closes it (a `subprocess` run mid-write) commits nothing, so no reader sees bytes the
writer has not closed. The writer itself sees what it wrote: its `fstat` and a fresh
read of its own agree. A create whose write fails with EFBIG leaves the empty file, as on
a local folder.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, errno_of, slug_of

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
STEP = 15.0  # seconds: deadline for one step of the driven writer

WRITER = r"""
import os, subprocess, sys
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"N" * 12_000)
subprocess.run(["true"], check=True)  # the child's close of the inherited descriptor
print(os.fstat(fd).st_size, flush=True)
with open(path, "rb") as mine:  # a fresh read of its own
    print(len(mine.read()), flush=True)
sys.stdin.readline()  # the test looks from outside meanwhile
os.write(fd, b"N" * 4_000)
os.close(fd)
print("closed", flush=True)
"""


class Driven:
    """A child process the test steps through line by line, killed at the end."""

    def __init__(self, script: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline().strip()
        assert got, f"the writer ended early (exit {self.proc.poll()})"
        return got

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=STEP)  # waits, and closes the pipes


@pytest.fixture
def driven() -> Iterator[list[Driven]]:
    started: list[Driven] = []
    yield started
    for child in started:
        child.close()


def test_a_writers_child_commits_nothing_and_the_writer_sees_its_own_bytes(
    sandbox: Sandbox, mounts: Mounts, driven: list[Driven]
) -> None:
    on_disk = sandbox.write("personal", SLUG, "notes.md", "o" * 3_999 + "\n")
    mounts()
    path = sandbox.mnt(SLUG, "notes.md")
    writer = Driven(WRITER, str(path))
    driven.append(writer)
    # The writer's stat and its own read agree on what it wrote.
    assert int(writer.line()) == 12_000
    assert int(writer.line()) == 12_000
    # Nobody else sees it: the child's close committed nothing.
    assert on_disk.read_bytes() == b"o" * 3_999 + b"\n"
    assert path.read_bytes() == b"o" * 3_999 + b"\n"
    assert os.stat(path).st_size == 4_000
    writer.go()
    assert writer.line() == "closed"
    # Its own close commits the whole file.
    assert on_disk.read_bytes() == b"N" * 16_000
    assert path.read_bytes() == b"N" * 16_000


def test_a_create_whose_write_fails_with_efbig_leaves_the_empty_file(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "notes.md", "notes\n")
    sandbox.write_config(limits={"max_file_bytes": 4096})
    mounts()
    path = sandbox.mnt(SLUG, "big.md")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    assert errno_of(os.write, fd, b"x" * 8192) == errno.EFBIG
    # close() returns the write's error.
    assert errno_of(os.close, fd) == errno.EFBIG
    assert path.read_bytes() == b""
    assert "big.md" in os.listdir(sandbox.mnt(SLUG))
    assert sandbox.source("personal").folder(SLUG).joinpath("big.md").read_bytes() == b""
