"""Tier 3: regressions for service-lifecycle bugs found while writing the service tests.

Each failed before its fix; each docstring names the bug it showed."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mounting import (
    MOUNT_DEADLINE,
    MOUNT_MARKS,
    STOP_DEADLINE,
    Mounts,
    Sandbox,
    alive,
    in_mountinfo,
    release_mountpoint,
    require_fuse,
    wait_until,
)
from test_mount_unit import (
    NOTES,
    SLUG,
    STOPPING,
    Daemon,
    NotifySocket,
    demo_env,
    read,
    read_until,
    shop,
    start_daemon,
)

pytestmark = MOUNT_MARKS


def daemons_serving(mnt: Path) -> list[int]:
    """Pids whose command line names ``mnt`` (the demo's daemon, found without its output)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if os.fsencode(mnt) in argv and b"memfs" in argv:
                found.append(int(entry.name))
    return found


def demo_base(box: Sandbox) -> Path | None:
    bases = list((box.base / "tmp").glob("memfs-demo-*"))
    return bases[0] if bases else None


def test_demo_ctrl_c_while_starting_leaves_nothing_behind(sandbox: Sandbox) -> None:
    """BUG: memfs/cli.py cmd_demo called mount.start_background outside the try/finally
    that runs _stop_demo, and start_background (memfs/mount.py) did not stop its child on
    KeyboardInterrupt. Ctrl-C while the demo starts exited 130 and left the temporary
    folder, and the daemon went on to mount it."""
    require_fuse()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memfs", "demo"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=demo_env(sandbox),
        start_new_session=True,
    )
    base = None
    try:
        # start_background creates the daemon's log first thing: the demo is starting.
        (base, _) = wait_until(
            lambda: (
                (b := demo_base(sandbox)) and (b / "state" / "memfs" / "memfs.log").exists() and b
            ),
            MOUNT_DEADLINE,
            "the demo starts its daemon",
        )
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=STOP_DEADLINE + 5)
        assert not (base / "mnt").exists() or not in_mountinfo(base / "mnt")
        assert daemons_serving(base / "mnt") == [], "the daemon outlived the demo"
        assert not base.exists(), f"Ctrl-C while starting left {base} behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=STOP_DEADLINE)
        if base is not None:
            mnt = base / "mnt"
            pids = daemons_serving(mnt)
            # The orphaned daemon may still be coming up: let it mount, then stop it.
            for pid in pids:
                wait_until(
                    lambda pid=pid: in_mountinfo(mnt) or not alive(pid),
                    MOUNT_DEADLINE,
                    "the orphaned daemon settles",
                    must=False,
                )
            release_mountpoint(mnt, pids)
            shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_demo_closed_terminal_cleans_up(sandbox: Sandbox, signum: signal.Signals) -> None:
    """BUG: memfs/cli.py cmd_demo (foreground) cleaned up only on KeyboardInterrupt. Closing
    the terminal (SIGHUP) or `kill` (SIGTERM) killed it at signal.pause() with the default
    action; the daemon runs in its own session, so the mount and the temporary folder
    stayed forever."""
    require_fuse()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memfs", "demo"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=demo_env(sandbox),
        start_new_session=True,
    )
    mnt, pid = None, None
    try:
        said = read_until(proc, b"Press Ctrl-C", MOUNT_DEADLINE).decode()
        found = re.search(r"mounted at (\S+) \(pid (\d+)\)", said)
        assert found is not None, said
        mnt, pid = Path(found[1]), int(found[2])
        proc.send_signal(signum)
        proc.communicate(timeout=STOP_DEADLINE + 5)
        assert not in_mountinfo(mnt), f"{signum.name} left the demo mounted"
        assert not mnt.parent.exists(), f"{signum.name} left {mnt.parent} behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=STOP_DEADLINE)
        if mnt is not None:
            release_mountpoint(mnt, [pid] if pid else [])
            shutil.rmtree(mnt.parent, ignore_errors=True)


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


PAUSE_AFTER_MOUNT = """\
import os, sys, time
import memfs.app.mount
from memfs.app.cli import main

real_watcher = memfs.app.mount.Watcher
marker, go = sys.argv[1], sys.argv[2]

def slow_watcher(*args, **kwargs):
    # Stands for slow start-up work after pyfuse3.init() (inotify watches on many
    # folders, a loaded machine): the kernel mount exists, trio has no signal handler yet.
    open(marker, "w").close()
    deadline = time.monotonic() + 60  # the test gives the go long before
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("no go from the test within 60 s")
        time.sleep(0.01)
    return real_watcher(*args, **kwargs)

memfs.app.mount.Watcher = slow_watcher
raise SystemExit(main(sys.argv[3:]))
"""


def test_sigterm_during_startup_unmounts_cleanly(sandbox: Sandbox, mounts: Mounts) -> None:
    """BUG (race): mount.run_foreground mounted (pyfuse3.init) before any SIGTERM/SIGINT
    handler existed; the trio receiver is opened only when the _signals task first runs. A
    `systemctl --user stop` (or Ctrl-C) in that window killed memfs with the default
    action: exit -15 and a dead ENOTCONN mount, not the clean unmount §9 promises on
    stop. (The stop signals are now blocked from the mount until _signals listens.)"""
    shop(sandbox)
    marker, go = sandbox.base / "mounted", sandbox.base / "go"
    argv = [sys.executable, "-c", PAUSE_AFTER_MOUNT, str(marker), str(go)]
    argv += ["mount", "--foreground", str(sandbox.mountpoint), "--config", str(sandbox.config_path)]
    daemon = start_daemon(mounts, Daemon(sandbox, argv, sandbox.mountpoint), wait=False)
    wait_until(marker.exists, MOUNT_DEADLINE, "memfs mounted and paused")
    assert in_mountinfo(daemon.mountpoint)
    daemon.signal(signal.SIGTERM)
    go.touch()
    assert daemon.wait_exit() == 0, daemon.log_text()
    assert not in_mountinfo(daemon.mountpoint)
