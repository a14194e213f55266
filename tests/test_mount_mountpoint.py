"""Tier 3: the bare mountpoint, as a normal user (§9): `memfs mount ~/memfs` in the home
folder, the folder sealed against writes after `memfs umount`, a file left there named
with the command that moves it, fusermount3's refusals said in one line with the fix, a
background mount typed where an empty memfs/ folder lies, and a write racing the mount.

Nothing sleeps a fixed time: every wait is a condition polled under a deadline.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator

import pytest
from mounting import (
    MEMFS_SCRIPT,
    MOUNT_DEADLINE,
    MOUNT_MARKS,
    NOTES,
    SLUG,
    Daemon,
    Mounts,
    NormalUser,
    Sandbox,
    alive,
    in_mountinfo,
    normal_user,
    read,
    shop,
    start_daemon,
    unavailable,
)

pytestmark = MOUNT_MARKS


@pytest.fixture
def user() -> Iterator[NormalUser]:
    """A normal user whose home holds a discovered Claude Code account with one project."""
    yield from normal_user(SLUG, NOTES)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("memfs: "), done.stderr
    return lines[0]


def test_mount_in_the_home_folder_umount_then_the_folder_refuses_writes(
    user: NormalUser,
) -> None:
    """The issue's must-show, as a normal user in the home folder: `memfs mount ~/memfs`
    works (though ~/memfs, empty, looks like a package to `python -m`); after
    `memfs umount ~/memfs`, `mkdir -p ~/memfs/x` fails; a file left there is named."""
    mnt = user.home / "memfs"
    mnt.mkdir()  # as an older memfs or a `mkdir -p` left it: empty and writable
    os.chown(mnt, user.uid, user.gid)

    done = user.memfs("mount", mnt)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    (pid,) = user.pids
    assert os.readlink(f"/proc/{pid}/cwd") == "/", "the daemon holds the user's folder busy"
    assert user.read(mnt / SLUG / "notes.md") == NOTES

    done = user.memfs("umount", mnt)
    assert done.returncode == 0, done.stderr
    assert not in_mountinfo(mnt)
    assert not alive(pid), "`memfs umount` returned before the daemon exited"

    mkdir = user.run("mkdir", "-p", mnt / "x")
    assert mkdir.returncode != 0
    assert "Permission denied" in mkdir.stderr
    write = user.run("sh", "-c", f"echo lost > {mnt}/{SLUG}.md")
    assert write.returncode != 0
    assert os.listdir(mnt) == []
    assert stat.S_IMODE(mnt.stat().st_mode) & 0o222 == 0

    # Something written there anyway (by root, or before this memfs sealed it).
    os.chmod(mnt, 0o755)
    (mnt / SLUG).mkdir()
    (mnt / SLUG / "left.md").write_bytes(b"written while unmounted\n")
    for path in (mnt / SLUG, mnt / SLUG / "left.md"):
        os.chown(path, user.uid, user.gid)
    line = one_line_error(user.memfs("mount", mnt))
    assert f"mountpoint {mnt} is not empty" in line
    assert f"{SLUG}/ (1 file)" in line
    assert not in_mountinfo(mnt)
    assert (mnt / SLUG / "left.md").exists()
    assert stat.S_IMODE(mnt.stat().st_mode) & 0o222 == 0, "refused, but sealed"

    # The command it names moves the file into the own source, and then the mount works.
    command = line.split("move it first: ", 1)[1]
    moved = user.run("sh", "-c", command)
    assert moved.returncode == 0, moved.stderr
    own = user.home / ".claude" / "projects" / SLUG / "memory" / "left.md"
    assert own.read_bytes() == b"written while unmounted\n"
    done = user.memfs("mount", mnt)
    assert done.returncode == 0, done.stderr
    assert user.read(mnt / SLUG / "left.md") == b"written while unmounted\n"
    assert user.read(mnt / SLUG / "notes.md") == NOTES
    assert user.memfs("umount", mnt).returncode == 0
    assert os.listdir(mnt) == []


@pytest.mark.parametrize("mode", ["background", "foreground"])
def test_a_refused_mount_says_fusermount3s_reason_and_the_fix(user: NormalUser, mode: str) -> None:
    if os.geteuid() != 0:
        unavailable("a folder this user cannot write can only be made by root (CI runs as root)")
    theirs = user.base / "not-yours"
    theirs.mkdir(mode=0o755)  # root's: the user may look in, not write nor chmod
    args = ["mount", theirs] if mode == "background" else ["mount", "--foreground", theirs]
    line = one_line_error(user.memfs(*args))
    assert f"memfs: cannot mount {theirs}: " in line, line
    assert f"fusermount3: user has no write access to mountpoint {theirs}" in line
    assert "choose a mountpoint folder you own" in line
    assert "fuse_session_mount" not in line
    assert not in_mountinfo(theirs)


def test_a_refused_option_says_fusermount3s_reason_and_the_fix(user: NormalUser) -> None:
    with open("/etc/fuse.conf", encoding="utf-8", errors="replace") as f:
        allowed = any(line.strip() == "user_allow_other" for line in f)
    if allowed:
        pytest.fail("/etc/fuse.conf has user_allow_other: this test needs Debian's default")
    mnt = user.home / "memfs"
    line = one_line_error(user.memfs("mount", mnt, "-o", "allow_other"))
    assert "fusermount3: option allow_other only allowed if 'user_allow_other'" in line
    assert "add the line user_allow_other to /etc/fuse.conf" in line
    assert not in_mountinfo(mnt)
    assert stat.S_IMODE(mnt.stat().st_mode) & 0o222 == 0


def test_background_mount_from_a_folder_holding_an_empty_memfs_folder(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """`memfs mount` typed where an empty memfs/ folder lies (the home, with the default
    mountpoint): the background daemon must not import that folder as the package."""
    shop(sandbox)
    (sandbox.base / "memfs").mkdir()
    done = subprocess.run(
        [MEMFS_SCRIPT, "mount", sandbox.mountpoint, "--config", sandbox.config_path],
        cwd=sandbox.base,
        env=sandbox.env,
        capture_output=True,
        text=True,
        timeout=40,
        check=False,
    )
    pid = mounts.adopt_output(done.stdout)
    assert done.returncode == 0, done.stderr
    assert pid is not None
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES
    assert sandbox.memfs("umount", sandbox.mountpoint).returncode == 0
    assert not alive(pid)


WRITE_DURING_MOUNT = """\
import sys
from pathlib import Path
import memfs.app.mount
from memfs.app.cli import main

real_init = memfs.app.mount.pyfuse3.init

def init_after_a_write(ops, mountpoint, options):
    # An agent's write that lands in the moment the bare folder is writable for the mount.
    (Path(mountpoint) / "raced.md").write_text("written while mounting\\n")
    real_init(ops, mountpoint, options)

memfs.app.mount.pyfuse3.init = init_after_a_write
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_write_while_mounting_undoes_the_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    """The bare folder is writable for the moment of the mount: anything that lands in it
    then is found under the new mount, through a descriptor, and the mount is undone."""
    shop(sandbox)
    argv = [sys.executable, "-c", WRITE_DURING_MOUNT, "mount", "--foreground"]
    argv += [str(sandbox.mountpoint), "--config", str(sandbox.config_path)]
    daemon = start_daemon(mounts, Daemon(sandbox, argv, sandbox.mountpoint), wait=False)
    assert daemon.wait_exit(MOUNT_DEADLINE) == 2, daemon.log_text()
    (line,) = [ln for ln in daemon.log_text().splitlines() if ln.startswith("memfs: ")]
    assert f"mountpoint {daemon.mountpoint} is not empty: it holds raced.md" in line
    assert not in_mountinfo(daemon.mountpoint)
    assert os.listdir(sandbox.mountpoint) == ["raced.md"]
    assert stat.S_IMODE(sandbox.mountpoint.stat().st_mode) & 0o222 == 0
