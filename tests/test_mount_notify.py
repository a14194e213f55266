"""Tier 3: sd_notify from `memfs mount --foreground` (§9): READY=1 only once files are
served, STOPPING=1 on a stop, both from the main process, and nothing from a mount that
cannot start.

sd_notify is checked with a real ``AF_UNIX``/``SOCK_DGRAM`` socket bound by the test
(``NotifySocket``, mounting.py), with ``SO_PASSCRED`` on, so every datagram carries the
sender's pid: the unit says ``NotifyAccess=main``, and systemd drops a READY=1 sent by any
other process. Also here, each failed before its fix: a background mount's stop logs no
notify warning, and SIGTERM sends STOPPING=1 once.

Nothing sleeps a fixed time: every wait is a condition polled under a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest
from mounting import (
    MOUNT_MARKS,
    NOTES,
    READY,
    SLUG,
    STOP_DEADLINE,
    STOPPING,
    TOOL_DEADLINE,
    Mounts,
    NotifySocket,
    Sandbox,
    alive,
    in_mountinfo,
    read,
    shop,
    wait_until,
)

pytestmark = MOUNT_MARKS


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request: pytest.FixtureRequest, sandbox: Sandbox) -> Iterator[NotifySocket]:
    """A bound notify socket, named in the sandbox's NOTIFY_SOCKET."""
    sock = NotifySocket.path(sandbox.base) if request.param == "path" else NotifySocket.abstract()
    sandbox.env["NOTIFY_SOCKET"] = sock.address
    try:
        yield sock
    finally:
        sock.close()


def test_ready_only_once_files_are_served_and_stopping_on_sigterm(
    sandbox: Sandbox, mounts: Mounts, notify_socket: NotifySocket
) -> None:
    shop(sandbox)
    mount = mounts(wait=False)
    assert mount.proc is not None

    ready = notify_socket.expect(READY, mount.proc, freeze=True)
    try:
        # The daemon is stopped as READY=1 is read, so a mount it had not made yet cannot
        # appear now; mountinfo asks nothing of the stopped daemon.
        assert in_mountinfo(mount.mountpoint), "READY=1 before the mount exists"
    finally:
        mount.signal(signal.SIGCONT)
    # Checked at once, in this order: READY=1 promises a mount that already serves files.
    assert os.path.ismount(mount.mountpoint)
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES
    assert ready.pid == mount.pid  # NotifyAccess=main: the main process itself sends it
    assert notify_socket.received == [ready], "nothing before READY=1"
    status = [line for line in ready.lines if line.startswith("STATUS=")]
    assert len(status) == 1, ready.text
    assert "3 sources" in status[0]
    assert "own: personal" in status[0]
    assert str(mount.mountpoint) in status[0]

    mount.signal(signal.SIGTERM)
    stopping = notify_socket.expect(STOPPING, mount.proc, STOP_DEADLINE)
    assert stopping.pid == mount.pid
    assert mount.wait_exit() == 0, mount.log_text()
    later = notify_socket.drain()
    assert all(d.text == STOPPING for d in later), [d.text for d in later]
    assert not in_mountinfo(mount.mountpoint)
    assert os.listdir(sandbox.mountpoint) == []
    assert "Traceback" not in mount.log_text()


def test_outside_unmount_sends_stopping_and_exits_zero(
    sandbox: Sandbox, mounts: Mounts, notify_socket: NotifySocket
) -> None:
    shop(sandbox)
    mount = mounts(wait=False)
    assert mount.proc is not None
    notify_socket.expect(READY, mount.proc)
    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert notify_socket.expect(STOPPING, mount.proc, STOP_DEADLINE).pid == mount.pid
    assert mount.wait_exit() == 0, mount.log_text()
    assert not in_mountinfo(mount.mountpoint)


def test_a_mount_that_cannot_start_sends_no_ready(
    sandbox: Sandbox, mounts: Mounts, notify_socket: NotifySocket
) -> None:
    inside = sandbox.source("work").root / "mnt"  # a mountpoint inside a source: refused
    done = sandbox.memfs(
        "mount", "--foreground", inside, "--config", sandbox.config_path, timeout=TOOL_DEADLINE
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert notify_socket.drain() == []
    assert not in_mountinfo(inside)


def test_background_mount_stops_without_notify_warnings(sandbox: Sandbox, mounts: Mounts) -> None:
    """BUG: mount.start_background handed the child a NOTIFY_SOCKET in a temporary folder it
    deletes once READY=1 arrives (it now uses its own MEMFS_READY_SOCKET). On every stop the
    daemon still sent STOPPING=1 there (twice, see below) and logged two WARNING lines
    'sd_notify 'STOPPING=1' to /tmp/memfs-ready-.../notify failed: No such file or
    directory' into memfs.log."""
    shop(sandbox)
    done = sandbox.memfs("mount", sandbox.mountpoint, "--config", sandbox.config_path)
    pid = mounts.adopt_output(done.stdout)
    assert done.returncode == 0, done.stderr
    assert pid is not None
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES
    assert sandbox.memfs("umount", sandbox.mountpoint).returncode == 0
    wait_until(lambda: not alive(pid), STOP_DEADLINE, "the daemon exits")
    log = (sandbox.state_dir / "memfs.log").read_text(encoding="utf-8", errors="replace")
    assert "WARNING" not in log, log


def test_sigterm_sends_stopping_once(sandbox: Sandbox, mounts: Mounts) -> None:
    """BUG (minor): on SIGTERM, STOPPING=1 was sent twice: by mount._signals and again by
    mount.run_foreground after trio.run returns. Harmless to systemd, but it is the second
    send that failed and warned when the socket was gone."""
    shop(sandbox)
    with contextlib.closing(NotifySocket.path(sandbox.base)) as sock:
        sandbox.env["NOTIFY_SOCKET"] = sock.address
        mount = mounts(wait=False)
        assert mount.proc is not None
        sock.expect("READY=1", mount.proc)
        mount.signal(signal.SIGTERM)
        assert mount.wait_exit() == 0
        stops = [d for d in sock.drain() if STOPPING in d.lines]
    assert len(stops) == 1, [d.text for d in stops]
