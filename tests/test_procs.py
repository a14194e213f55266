"""Tier 1: which processes hold a folder busy, read from /proc (for `memfs umount`)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounting import wait_until

from memfs.app.mount import busy_message
from memfs.disk import procs

EXEC_DEADLINE = 10.0  # seconds for a child to exec its command


def start_sleep(cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """A `sleep 600`, returned once it runs `sleep`: until the child has exec'd it,
    /proc/<pid>/comm still names the interpreter that forked it (`python`)."""
    child = subprocess.Popen(["sleep", "600"], cwd=cwd, stdin=subprocess.DEVNULL)
    comm = Path(f"/proc/{child.pid}/comm")
    try:
        wait_until(lambda: comm.read_text().strip() == "sleep", EXEC_DEADLINE, "it execs sleep")
    except BaseException:
        child.kill()
        child.wait()
        raise
    return child


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `sleep` whose working folder is ``tmp_path/in/deep``."""
    deep = tmp_path / "in" / "deep"
    deep.mkdir(parents=True)
    child = start_sleep(deep)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_a_working_folder_below_holds_it(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    found = procs.holders(str(tmp_path / "in"))
    assert procs.Holder(sleeper.pid, "sleep") in found
    assert procs.holders(str(tmp_path / "in"), skip={sleeper.pid}) == []
    # A sibling whose name merely starts the same is not below.
    assert procs.holders(str(tmp_path / "i")) == []


def test_an_open_descriptor_below_holds_it(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    held = tmp_path / "in" / "notes.md"
    held.write_text("x")
    code = "import sys; f = open(sys.argv[1]); print('open', flush=True); sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", code, str(held)],
        cwd="/",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == b"open\n"
            found = procs.holders(str(tmp_path / "in"), skip={os.getpid()})
            assert [h.pid for h in found] == [child.pid]
        finally:
            child.kill()


def test_the_busy_message_is_one_line_with_who_and_the_fix() -> None:
    held = [procs.Holder(123, "vim"), procs.Holder(456, "bash")]
    assert busy_message(Path("/home/u/memfs"), held) == (
        "/home/u/memfs is busy: held by vim (pid 123), bash (pid 456); close them, or run "
        "'memfs umount -z /home/u/memfs' to detach it now (lazy unmount)"
    )
    many = [procs.Holder(pid, "sh") for pid in range(1, 9)]
    assert "sh (pid 5) and 3 more; close them" in busy_message(Path("/m"), many)
    unseen = busy_message(Path("/m m"), [])
    assert "cannot see" in unseen
    assert "memfs umount -z '/m m'" in unseen


def test_a_process_names_its_command_and_none_once_gone() -> None:
    """What `memfs log` shows of a change's process: its command name, '?' once gone."""
    with start_sleep() as child:
        try:
            assert procs.tgid(child.pid) == child.pid
            assert procs.command_name(child.pid) == "sleep"
        finally:
            child.kill()
    assert procs.tgid(child.pid) == child.pid  # gone: the task id itself
    assert procs.command_name(child.pid) == "?"


def test_a_thread_id_names_its_process() -> None:
    """FUSE names the calling thread, not its process."""
    ready, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def work() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        done.wait(10)

    thread = threading.Thread(target=work)
    thread.start()
    try:
        assert ready.wait(10)
        assert tid[0] != os.getpid()
        assert procs.tgid(tid[0]) == os.getpid()
    finally:
        done.set()
        thread.join()
