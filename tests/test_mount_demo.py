"""Tier 3: `memfs demo`, in the background and in the foreground: it mounts a sample home
in a temporary folder and serves it, and leaves nothing behind however it stops: `memfs
umount`, Ctrl-C while it serves or while it is still starting, a closed terminal, `kill`.
The last three failed before their fixes; their docstrings name the bug.

Nothing sleeps a fixed time: every wait is a condition polled under a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mounting import (
    MEMFS_SCRIPT,
    MOUNT_DEADLINE,
    MOUNT_MARKS,
    STOP_DEADLINE,
    TOOL_DEADLINE,
    Sandbox,
    alive,
    in_mountinfo,
    release_mountpoint,
    require_fuse,
    slug_of,
    wait_until,
)

from memfs.app import cli

pytestmark = MOUNT_MARKS

DEMO_SLUG = slug_of(Path("/home/demo/src/webshop"))
BLOG_SLUG = slug_of(Path("/home/demo/src/blog"))
DEMO_LINE = re.compile(r"memfs demo mounted at (\S+) \(pid (\d+)\)")


def demo_env(box: Sandbox) -> dict[str, str]:
    tmp = box.base / "tmp"
    tmp.mkdir(exist_ok=True)
    return dict(box.env, TMPDIR=str(tmp))


def check_demo_mount(box: Sandbox, mnt: Path) -> None:
    base = mnt.parent
    assert base.parent == box.base / "tmp"
    assert os.path.ismount(mnt)
    assert sorted(os.listdir(mnt)) == sorted([DEMO_SLUG, BLOG_SLUG, "global", "here"])
    preamble = box.out("cat", mnt / DEMO_SLUG / "PREAMBLE.md")
    assert b"Deploy pipeline migrated" in preamble  # the latest handoff, from the work account
    target = mnt / DEMO_SLUG / "handoff-me_20261130.md"
    box.run("sh", "-c", f"echo 'Next: canary checks' > '{target}'")
    own = base / "home" / ".claude" / "projects" / DEMO_SLUG / "memory" / target.name
    assert own.read_bytes() == b"Next: canary checks\n"
    assert not (
        base / "home" / ".claude-work" / "projects" / DEMO_SLUG / "memory" / target.name
    ).exists()


def test_demo_background_mounts_serves_and_umounts(sandbox: Sandbox) -> None:
    require_fuse()
    done = subprocess.run(
        [sys.executable, "-m", "memfs", "demo", "--background"],
        env=demo_env(sandbox),
        capture_output=True,
        text=True,
        timeout=MOUNT_DEADLINE + 10,
        check=False,
    )
    found = DEMO_LINE.search(done.stdout)
    assert found is not None, (done.stdout, done.stderr)
    mnt, pid = Path(found[1]), int(found[2])
    try:
        assert done.returncode == 0, done.stderr
        check_demo_mount(sandbox, mnt)
        assert f"Stop it with: memfs umount {mnt}" in done.stdout
        umount = sandbox.memfs("umount", mnt)
        assert umount.returncode == 0, umount.stderr
        # `memfs umount` returns once the daemon is gone and the sample folder with it.
        assert not in_mountinfo(mnt)
        assert not alive(pid)
        assert not mnt.parent.exists(), f"the demo's {mnt.parent} outlived its umount"
        assert umount.stdout == f"removed the demo's sample folder {mnt.parent}\n"
    finally:
        release_mountpoint(mnt, [pid])
        shutil.rmtree(mnt.parent, ignore_errors=True)


def try_lines(said: str) -> list[str]:
    """The commands of the demo's "Try:" block, as printed, in order."""
    block = said.split("Try:\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_demos_try_lines_work_on_its_sample_in_order(sandbox: Sandbox) -> None:
    """Each command the demo prints runs as printed, in a shell of the user's (whose state
    folder is not the demo's), and does what its comment says; `memfs log` and `memfs
    restore` among them (issue 36: `memfs log <project>` said "no changes" before: it
    read the user's own journal, and a project folder matched no change)."""
    require_fuse()
    env = demo_env(sandbox)
    env["PATH"] = f"{MEMFS_SCRIPT.parent}:{env['PATH']}"  # `memfs`, as the user types it
    done = subprocess.run(
        [MEMFS_SCRIPT, "demo", "--background"],
        env=env,
        capture_output=True,
        text=True,
        timeout=MOUNT_DEADLINE + 10,
        check=False,
    )
    found = DEMO_LINE.search(done.stdout)
    assert found is not None, (done.stdout, done.stderr)
    mnt, pid = Path(found[1]), int(found[2])
    project = mnt / DEMO_SLUG
    try:
        testing = (project / "testing.md").read_bytes()
        said: dict[str, str] = {}
        for line in try_lines(done.stdout):
            ran = subprocess.run(
                ["sh", "-c", line],
                env=env,
                capture_output=True,
                text=True,
                timeout=TOOL_DEADLINE,
                check=False,
            )
            assert ran.returncode == 0, (line, ran.stdout, ran.stderr)
            assert ran.stderr == "", (line, ran.stderr)
            said[" ".join(line.split()[:2])] = ran.stdout
        log = said["memfs log"].splitlines()
        assert [(w.split()[2], w.split()[3]) for w in log] == [
            ("write", f"{DEMO_SLUG}/testing.md"),
            ("create", f"{DEMO_SLUG}/handoff-me_20261130.md"),
        ], log
        assert said["memfs restore"].startswith(
            f"restored {DEMO_SLUG}/testing.md from .history/testing.md/personal@"
        )
        assert (project / "testing.md").read_bytes() == testing  # as before the edit
        assert len(os.listdir(project / ".history" / "testing.md")) == 2  # the edit kept too
    finally:
        release_mountpoint(mnt, [pid])
        shutil.rmtree(mnt.parent, ignore_errors=True)


def read_until(proc: subprocess.Popen[bytes], marker: bytes, timeout: float) -> bytes:
    """Read ``proc``'s stdout until ``marker`` shows, under a deadline."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while marker not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {marker!r} within {timeout}s; output so far: {seen!r}")
            if selector.select(left):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    pytest.fail(f"output ended (exit {proc.wait(5)}) before {marker!r}: {seen!r}")
                seen += chunk
    return seen


def test_demo_foreground_cleans_up_on_ctrl_c(sandbox: Sandbox) -> None:
    require_fuse()
    with open(sandbox.base / "demo.err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memfs", "demo"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=demo_env(sandbox),
            start_new_session=True,
        )
    mnt: Path | None = None
    pid = None
    try:
        said = read_until(proc, b"Press Ctrl-C", MOUNT_DEADLINE).decode()
        found = DEMO_LINE.search(said)
        assert found is not None, said
        mnt, pid = Path(found[1]), int(found[2])
        check_demo_mount(sandbox, mnt)

        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=STOP_DEADLINE + 5)
        assert proc.returncode == 0, (sandbox.base / "demo.err").read_text()
        assert f"unmounted and removed {mnt.parent}" in rest.decode()
        assert "fusermount3" not in (sandbox.base / "demo.err").read_text()
        assert not in_mountinfo(mnt)
        assert not mnt.parent.exists()
        wait_until(lambda: not alive(pid), STOP_DEADLINE, "the demo daemon exits")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=STOP_DEADLINE)
        if mnt is not None:
            release_mountpoint(mnt, [pid] if pid else [])
            shutil.rmtree(mnt.parent, ignore_errors=True)


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


# Stands in for the demo's daemon in its last moment, as libfuse ends it: the connection
# closed first (the mount is dead: everything in it answers ENOTCONN, its root included),
# the unmount after. Here the two are apart until the test says so: it mounts, closes the
# connection, waits for SIGTERM and the test's word, then unmounts and exits with
# fusermount3's status.
UNMOUNTING_DAEMON = """\
import signal, subprocess, sys
import pyfuse3
mnt = sys.argv[1]
pyfuse3.init(pyfuse3.Operations(), mnt, {"fsname=fake-demo"})
pyfuse3.close(unmount=False)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
print("ready", flush=True)
signal.sigwait({signal.SIGTERM})
sys.stdin.readline()
done = subprocess.run(["fusermount3", "-uz", mnt], capture_output=True, text=True)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""


def test_demo_stop_leaves_the_unmount_to_its_daemon(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """BUG (issue 36): Ctrl-C of `memfs demo` printed `fusermount3: failed to unmount ...:
    Invalid argument` before "unmounted and removed". The daemon unmounts on SIGTERM by
    closing its connection first and unmounting after; in between, the mount answers
    ENOTCONN, and _stop_demo (memfs/app/cli.py) took it for a dead mount and ran
    `fusermount3 -uz` itself, racing the daemon's unmount: whichever came second failed."""
    require_fuse()
    mnt, base = tmp_path / "mnt", tmp_path / "demo-base"
    mnt.mkdir()
    base.mkdir()
    with subprocess.Popen(
        [sys.executable, "-c", UNMOUNTING_DAEMON, str(mnt)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as daemon:
        try:
            assert daemon.stdout is not None
            assert daemon.stdout.readline() == "ready\n", daemon.communicate(timeout=5)
            assert in_mountinfo(mnt)
            assert not os.path.ismount(mnt)  # what the demo saw: ENOTCONN

            def let_it_unmount() -> None:
                # Once someone else unmounted (the bug), or once the daemon has had its
                # unmount to itself a while: then it ends, as a real one does at once.
                wait_until(lambda: not in_mountinfo(mnt), 1.0, "an unmount", must=False)
                assert daemon.stdin is not None
                daemon.stdin.write("go\n")
                daemon.stdin.flush()

            helper = threading.Thread(target=let_it_unmount)
            helper.start()
            try:
                cli._stop_demo(mnt, daemon.pid, base)
            finally:
                helper.join()
            _, daemon_err = daemon.communicate(timeout=STOP_DEADLINE)
        finally:
            if daemon.poll() is None:
                daemon.kill()
            release_mountpoint(mnt, [])
    said = capfd.readouterr()
    assert daemon.returncode == 0, f"the daemon's own unmount failed: {daemon_err}"
    assert "fusermount3" not in said.err
    assert said.out == f"\nunmounted and removed {base}\n"
    assert not in_mountinfo(mnt)
    assert not base.exists()
