"""Tier 3: `memfs umount` of a busy mount names who holds it and the way out (§8).

A `sleep` started by the test with its working folder inside the mount holds it busy.
Teardown always kills the holder and unmounts (`fusermount3 -u`, then `-uz`), before the
`mounts` fixture stops the daemon.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mounting import (
    MOUNT_MARKS,
    STOP_DEADLINE,
    Mounts,
    Sandbox,
    fusermount,
    in_mountinfo,
    slug_of,
)

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))


def test_umount_of_a_busy_mount_names_the_holder_and_z_detaches(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "notes.md", "kept\n")
    mount = mounts()
    holder = subprocess.Popen(
        ["sleep", "600"], cwd=sandbox.mnt(SLUG), stdin=subprocess.DEVNULL, env=sandbox.env
    )
    try:
        # Popen returns once sleep was exec'ed: its working folder is in the mount already.
        assert os.readlink(f"/proc/{holder.pid}/cwd") == str(mount.mountpoint / SLUG)

        done = sandbox.memfs("umount", sandbox.mountpoint)
        assert done.returncode != 0
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(f"memfs: {sandbox.mountpoint} is busy: held by "), lines
        assert f"sleep (pid {holder.pid})" in lines[0]
        assert "memfs umount -z" in lines[0]
        assert "(pid " + str(mount.pid) + ")" not in lines[0]  # the daemon holds nothing
        assert in_mountinfo(mount.mountpoint)
        assert (sandbox.mnt(SLUG) / "notes.md").read_text() == "kept\n"

        done = sandbox.memfs("umount", "-z", sandbox.mountpoint)
        assert done.returncode == 0, done.stderr
        assert f"sleep (pid {holder.pid})" in done.stdout
        assert not in_mountinfo(mount.mountpoint)
        # The holder still reads through the detached mount; once it goes, so does memfs.
        assert Path(f"/proc/{holder.pid}/cwd", "notes.md").read_text() == "kept\n"
        holder.kill()
        holder.wait(STOP_DEADLINE)
        assert mount.wait_exit() == 0, mount.log_text()
    finally:
        holder.kill()
        holder.wait(STOP_DEADLINE)
        if in_mountinfo(mount.mountpoint):
            fusermount(mount.mountpoint, "-u")
        if in_mountinfo(mount.mountpoint):
            fusermount(mount.mountpoint, "-uz")


def test_umount_z_of_an_idle_mount_waits_for_the_daemon(sandbox: Sandbox, mounts: Mounts) -> None:
    mount = mounts()
    done = sandbox.memfs("umount", "--lazy", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert not in_mountinfo(mount.mountpoint)
    assert mount.proc is not None
    assert mount.proc.poll() is not None  # the daemon is gone on return
