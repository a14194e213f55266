"""Tier 3: regressions for write-path bugs found by test_mount_write.py.

Each failed before its fix; each docstring describes the bug as it was ("today" is the
day it was found). Same harness and fixtures as test_mount_write.py (the ``rw`` fixture
fingerprints the read-only sources before mounting and checks them at the end).
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from collections.abc import Iterator

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, abort_mount, errno_of, wait_until
from test_mount_write import (
    CLAUDE_WRITE,
    HANDOFF,
    MKSTEMP_WRITE,
    PLAIN_WRITE,
    SOON,
    STEP,
    Writes,
    body_of,
    build,
    eight_writers,
    finish_burst,
    kill_writer_mid_write,
    py_write,
    read,
    sh,
    sigkill,
    slow_write,
    stages,
    start_burst,
    verify,
    writes,
)

pytestmark = MOUNT_MARKS


@pytest.fixture
def rw(sandbox: Sandbox, mounts: Mounts) -> Iterator[Writes]:
    yield from writes(sandbox, mounts)


def test_readers_through_the_mount_never_see_a_slow_writers_part(
    sandbox: Sandbox, rw: Writes
) -> None:
    """§7.1: readers through the mount see the old or the new whole file, never a part.

    Today a fresh open through the mount reads the writer's bytes so far, and stat shows
    their size: the writer's pages land in the inode's page cache (shared by every opener),
    the kernel grows (and at an O_TRUNC open zeroes) the inode's size, and getattr answers
    the stage's size to everyone (fs.py `getattr`, `_stage_of_inode`).
    """
    bad = slow_write(sandbox, rw, through_mount=True)
    assert bad == [], "readers through the mount saw a part:\n" + "\n".join(bad[:6])


def test_writer_killed_mid_write_commits_nothing(sandbox: Sandbox, rw: Writes) -> None:
    """A writer SIGKILLed mid-write: the target stays the old whole file.

    Today the kernel closes the dead writer's descriptor, which sends FLUSH, and memfs
    commits whatever was staged (fs.py `flush` -> `_commit`): the part becomes the file.
    """
    seen = kill_writer_mid_write(sandbox, rw)
    assert seen["disk after"] == seen["old"], f"committed: {seen['disk after'][:40]!r}..."
    assert seen["mount after"] == seen["old"]
    assert seen["mount mid-write"] == seen["old"]


def test_handoff_versions_replaced_within_one_second_keep_the_newest(
    sandbox: Sandbox, rw: Writes
) -> None:
    """§7.2: the last N versions replaced are kept.

    Kept names are `<own>@<stamp of the replaced version's mtime>.md`, with `~2`, `~3`...
    for versions of one second. staging.keep_version takes the first free number, so once
    pruning freed `@<stamp>.md`, the next version kept gets that name, sorts as the oldest
    (`_kept_order`) and is pruned at once: the newest replaced version is lost.
    """
    build(sandbox)
    sandbox.write_config(limits={"handoff_versions": 3})
    rw.mount()
    target = rw.mnt(HANDOFF)
    clients = [PLAIN_WRITE, CLAUDE_WRITE, MKSTEMP_WRITE]
    for n in range(1, 7):
        py_write(sandbox, clients[n % 3], target, body_of(f"v{n}", 3000))
        # All versions in one second, as when an agent rewrites its handoff in a loop.
        sandbox.out("touch", "-d", "@1767225600", target)
    wait_until(lambda: stages(rw.own_root) == [], SOON, "no stage left")
    kept_dir = rw.own(".history", HANDOFF)
    kept = sorted(os.listdir(kept_dir))
    tags = sorted(verify(read(kept_dir / k)) for k in kept)
    assert verify(read(target)) == "v6"
    assert tags == ["v3", "v4", "v5"], kept


def test_eight_writers_of_a_new_handoff_keep_seven_versions(sandbox: Sandbox, rw: Writes) -> None:
    """§7.2 with a handoff name that did not exist yet.

    Today none of the 7 replaced versions is kept: the first writer's create makes the name
    pending, the others open the pending name (fs.py `_open_pending`), and neither a created
    handle nor a pending-open handle has ``keeps_history`` set (fs.py `create`,
    `_open_pending`), so each commit replaces the last without keeping it.
    """
    head, kept = eight_writers(sandbox, rw, existing=False)
    assert kept == sorted({f"writer{n}" for n in range(8)} - {head})


def test_sigkill_during_a_write_burst_leaves_a_dead_mount_not_a_hung_one(
    sandbox: Sandbox, rw: Writes
) -> None:
    """§7.5, §9: memfs killed mid-write leaves ENOTCONN, and the next mount clears it.

    Today the killed daemon often cannot exit: a worker thread is blocked in the kernel in
    `pyfuse3.invalidate_entry` (fuse_reverse_inval_entry waits for the folder's inode lock,
    held by a writer's open(O_CREAT|O_TRUNC) waiting for an answer the dead main thread will
    never send). /dev/fuse stays open, so the connection is never aborted: every process that
    touches the mount hangs, and `memfs mount` hangs in its stale check (statvfs). Only an
    abort through fusectl frees it. Up to five bursts are tried.
    """
    build(sandbox)
    sandbox.write_config(limits={"handoff_versions": 5})
    rw.freeze()
    mnt_path = str(sandbox.mountpoint)
    stuck: list[str] = []
    for _ in range(5):
        mount = rw.mounts()
        procs = start_burst(rw)
        try:
            wait_until(lambda m=mount: m.status()["commits"] >= 150, 30, "150 commits")
            stuck = sigkill(mount)
            if stuck:
                # What `memfs mount` would do first (its stale check): does statvfs answer?
                probe = subprocess.Popen(
                    [sys.executable, "-c", "import os, sys; os.statvfs(sys.argv[1])", mnt_path],
                    stderr=subprocess.DEVNULL,
                )
                try:
                    probe.wait(2.0)
                    stuck.append(f"statvfs of the mountpoint returned {probe.returncode}")
                except subprocess.TimeoutExpired:
                    stuck.append("statvfs of the mountpoint (memfs mount's stale check) hangs")
                    probe.kill()
                    probe.wait(STEP)
                abort_mount(mount.mountpoint)  # so the test can go on and report
                mount.wait_exit()
                break
            assert errno_of(os.statvfs, sandbox.mountpoint) == errno.ENOTCONN
        finally:
            finish_burst(procs)
    assert stuck == [], "memfs survived SIGKILL, its mount hung:\n" + "\n".join(stuck)


def test_folder_mode_and_mtime_show_through_the_mount(sandbox: Sandbox, rw: Writes) -> None:
    """§7.3: chmod and utimens work on the own source's folders, and show.

    Today the change lands on disk, but the mount shows every folder as 0755 with the
    mount's start time (fs.py `_attrs` -> `_dir_attrs(ino, self._dir_mode(), started_ns)`).
    """
    build(sandbox)
    rw.mount()
    sandbox.out("chmod", "700", rw.mnt("sub"))
    sandbox.out("touch", "-d", "@1700000000", rw.mnt("sub"))
    assert stat.S_IMODE(os.stat(rw.own("sub")).st_mode) == 0o700
    assert os.stat(rw.own("sub")).st_mtime_ns == 1_700_000_000 * 10**9
    st = os.stat(rw.mnt("sub"))
    assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns) == (0o700, 1_700_000_000 * 10**9)


def test_a_bare_truncation_is_seen_right_after_close(sandbox: Sandbox, rw: Writes) -> None:
    """§7.1: a read after close() returns sees the new file, here the empty one.

    Today `: > file` (O_TRUNC, nothing written) commits only at RELEASE (fs.py `release`,
    `Handle.unsaved`), which the kernel sends after close() has returned: a read right after
    still finds the old bytes on disk. Twenty tries.
    """
    build(sandbox)
    rw.mount()
    target, disk = rw.mnt("notes.md"), rw.own("notes.md")
    late = []
    for n in range(20):
        sh(sandbox, 'printf "%s\\n" "$2" > "$1"', target, f"version {n}")
        assert read(disk) == f"version {n}\n".encode()
        sh(sandbox, ': > "$1"', target)
        on_disk, through_mount = read(disk), read(target)
        if on_disk or through_mount:
            late.append(f"try {n}: disk {on_disk!r}, mount {through_mount!r}")
    assert late == [], "the emptied file was not there after close():\n" + "\n".join(late[:5])
