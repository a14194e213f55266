"""Tier 3: a crash fails visibly (§9): a SIGKILLed daemon, or an exception inside the serving
loop, leaves a dead mount that answers ENOTCONN to every call, never an empty folder; the
internal crash exits non-zero (Restart=on-failure) and `memfs umount` clears the dead mount.

Nothing sleeps a fixed time: every wait is a condition polled under a deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from pathlib import Path

from mounting import (
    MOUNT_MARKS,
    NOTES,
    READY,
    SLUG,
    STOPPING,
    Daemon,
    Mounts,
    NotifySocket,
    Sandbox,
    errno_of,
    in_mountinfo,
    read,
    shop,
    start_daemon,
)

pytestmark = MOUNT_MARKS


def assert_dead_not_empty(box: Sandbox, mountpoint: Path) -> None:
    """ENOTCONN on every call that reaches the connection: never an empty folder."""
    assert in_mountinfo(mountpoint)
    assert errno_of(os.statvfs, mountpoint) == errno.ENOTCONN
    assert errno_of(os.listdir, mountpoint) == errno.ENOTCONN
    assert errno_of(read, mountpoint / SLUG / "notes.md") == errno.ENOTCONN
    assert errno_of(os.mkdir, mountpoint / "new") == errno.ENOTCONN
    ls = box.run("ls", mountpoint, check=False)
    assert ls.returncode != 0
    assert b"Transport endpoint is not connected" in ls.stderr
    status = box.memfs("status", mountpoint)
    assert status.returncode == 2
    assert "no running memfs" in status.stderr


def test_sigkilled_daemon_leaves_enotconn(sandbox: Sandbox, mounts: Mounts) -> None:
    shop(sandbox)
    mount = mounts()
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES  # warm the kernel's caches
    mount.signal(signal.SIGKILL)
    assert mount.wait_exit() == -signal.SIGKILL
    assert_dead_not_empty(sandbox, mount.mountpoint)
    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert not in_mountinfo(mount.mountpoint)


CRASH_AFTER_READY = """\
import sys
import memfs.app.mount
from memfs.app.cli import main

announce = memfs.app.mount._announce_ready

async def crash_after_ready(ops, mountpoint):
    await announce(ops, mountpoint)
    raise RuntimeError("injected crash after READY=1")

memfs.app.mount._announce_ready = crash_after_ready
raise SystemExit(main(sys.argv[1:]))
"""


def test_internal_crash_leaves_enotconn_and_fails(sandbox: Sandbox, mounts: Mounts) -> None:
    """An exception inside the serving loop: exit non-zero (Restart=on-failure), mount dead."""
    shop(sandbox)
    argv = [sys.executable, "-c", CRASH_AFTER_READY, "mount", "--foreground"]
    argv += [str(sandbox.mountpoint), "--config", str(sandbox.config_path)]
    with contextlib.closing(NotifySocket.path(sandbox.base)) as sock:
        env = dict(sandbox.env, NOTIFY_SOCKET=sock.address)
        daemon = start_daemon(
            mounts, Daemon(sandbox, argv, sandbox.mountpoint, env=env), wait=False
        )
        assert daemon.proc is not None
        sock.expect(READY, daemon.proc)
        code = daemon.wait_exit()
        assert STOPPING not in [line for d in sock.drain() for line in d.lines]
    assert code == 1, daemon.log_text()
    log = daemon.log_text()
    assert "injected crash after READY=1" in log
    assert "memfs: internal error" in log
    assert_dead_not_empty(sandbox, daemon.mountpoint)
