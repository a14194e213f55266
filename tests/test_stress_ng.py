"""Tier 3: stress-ng's filesystem stressors on a memfs mount (§7.6, issue 12).

Each stressor runs alone, on a fresh mount, with ``--verify``, for a few seconds, in a
project folder of the mount (``--temp-path <mnt>/<slug>``): the place an agent's tools write.
A stressor fails the test when stress-ng exits non-zero, prints a failure (a ``fail:`` or
``error:`` line, "FAIL", a failed verification, "unsuccessful run"), reports no bogo
operation (it did nothing), or leaves anything behind in the project folder, through the
mount or on disk (an unlinked temp file whose writes brought its name back, a stage file).

The stressors' working files are far bigger than memory notes (copy-file's minimum is
128 MiB), so the sandbox raises ``max_file_bytes`` to 1 GiB; the limit itself is tested in
test_mount_posix.py. Files are kept small where stress-ng allows it (1 MiB minimum).

The list comes from ``stress-ng --class filesystem?`` and ``--class io?`` in stress-ng
0.15.06 (Debian 12). Stressors not run, by design (a list that is never run, not skips):

``SKIPPED_AS_DESIGNED``: each one's whole purpose is a call memfs refuses with ``EPERM``
(§7.3: ``symlink``, ``link`` and device nodes are not served). ``dirdeep`` also calls
link and symlink at each level, but it tolerates the refusal and still exercises deep
folders and files, so it runs.

``NOT_FILESYSTEM_STRESSORS``: in the class but not a test of a folder's files, or not
meaningful on a FUSE mount; each with why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, slug_of, wait_until

PROJECT = "/home/u/src/stressed"
SLUG = slug_of(Path(PROJECT))
SECONDS = 2  # per stressor: "a few seconds each", and the module under 4 minutes
RUN_DEADLINE = 40.0  # seconds: a hard cap on one stress-ng run (subprocess timeout)
# Stressors whose bogo count is a race the filesystem's open latency decides, not a
# correctness check: lease counts the write leases its holder takes between its breakers'
# opens, and F_SETLEASE fails (EAGAIN) while any open of the file is in flight. On FUSE an
# open is a round trip to the daemon: eight 2 s runs on one memfs mount counted 4 to 1,920
# leases, and a run may end with none. It must still exit 0 with no failure line.
RACES_ON_OPEN_LATENCY = frozenset({"lease"})
SOON = 5.0  # seconds: releases the kernel sends after close() (stage files dropped)
STAGE_PREFIX = ".memfs-stage."
BIG_FILES = 1 << 30  # max_file_bytes for these runs: copy-file needs 128 MiB at least
MIB = "1m"

pytestmark = MOUNT_MARKS  # a 60 s pytest-timeout per stressor, over RUN_DEADLINE

# stressor -> its extra arguments ("{dir}" is the project folder in the mount).
STRESSORS: dict[str, tuple[str, ...]] = {
    # filesystem class
    "access": (),
    "chdir": ("--chdir-dirs", "512"),  # 8192 folders by default: slow to remove
    "chmod": (),
    "chown": (),
    "copy-file": ("--copy-file-bytes", "128m"),  # the smallest size it accepts
    "dentry": ("--dentries", "512"),
    "dir": ("--dir-dirs", "512"),
    "dirdeep": (),
    "dirmany": (),
    "dnotify": (),
    "fallocate": ("--fallocate-bytes", MIB),
    "fanotify": (),
    "fcntl": (),
    # It first probes which names the filesystem takes (a create per byte value), then
    # works in rounds of many files: bounded by rounds, with a longer time cap.
    "filename": ("--filename-ops", "2"),
    "flock": (),
    "fpunch": (),
    # Bounded by rounds, never by the time cap: fallocate is EOPNOTSUPP here, and stress-ng
    # 0.15's fallback (shim_emulate_fallocate) writes zeros only while its keep-stressing
    # flag is set. When the end-of-run SIGALRM lands during a round, the next emulated
    # fallocate writes nothing and "succeeds" past RLIMIT_FSIZE, and the stressor reports
    # a failure that is its own (strace: lseek, then no write at all). A local filesystem
    # never takes that path, as it has a real fallocate.
    "fsize": ("--fsize-ops", "8"),
    "fstat": ("--fstat-dir", "{dir}"),  # /dev by default
    "inotify": (),
    "iomix": ("--iomix-bytes", MIB),
    "ioprio": (),
    "lease": (),
    "locka": (),
    "lockf": (),
    "lockofd": (),
    "open": (),
    "rename": (),
    "sync-file": ("--sync-file-bytes", MIB),
    "touch": (),
    "utime": (),
    # io class
    "aio": (),
    "aiol": (),
    "hdd": ("--hdd-bytes", MIB),
    "readahead": ("--readahead-bytes", MIB),
    "revio": ("--revio-bytes", MIB),
    "seek": ("--seek-size", MIB),
}

# Stressors whose time cap is longer than SECONDS (their work is bounded by --*-ops).
LONGER: dict[str, int] = {"filename": 10, "fsize": 30}

# Never run: their subject is a call §7.3 answers with EPERM.
SKIPPED_AS_DESIGNED: dict[str, str] = {
    "link": "hard links: link() is EPERM (§7.3)",
    "symlink": "symbolic links: symlink() is EPERM; symlinks are never served (§5.1, §7.3)",
    "mknod": "device nodes and FIFOs: mknod() is EPERM (§7.3)",
}

# Never run: not about the files of a folder, or not meaningful on a FUSE mount.
NOT_FILESYSTEM_STRESSORS: dict[str, str] = {
    "bind-mount": "bind-mounts / in a private namespace: no file of the temp path is used",
    "binderfs": "mounts binderfs: Android IPC, no file of the temp path",
    "procfs": "reads /proc",
    "dup": "dup()s descriptors of /dev/zero: the descriptor table, not a filesystem",
    "eventfd": "eventfd descriptors, no file",
    "getdent": "lists /proc, /dev, /sys, /tmp (no option points it elsewhere in 0.15.06)",
    "handle": "name_to_handle_at on /proc/self/mountinfo; FUSE exports no file handles here",
    "io": "calls sync() only: nothing of the temp path",
    "rawdev": "reads a raw block device",
    "chattr": "FS_IOC_SETFLAGS ioctls: FUSE passes no inode-flag ioctls to memfs",
    "inode-flags": "FS_IOC_SETFLAGS ioctls: as chattr",
    "file-ioctl": "FIFREEZE/FIEMAP/FS_IOC_* ioctls: as chattr",
    "fiemap": "FS_IOC_FIEMAP: not on FUSE (stress-ng skips itself)",
    "verity": "fs-verity: not on FUSE (stress-ng skips itself)",
    "xattr": "user xattrs: memfs serves none (stress-ng skips itself: exit 3)",
    "io-uring": (
        "fails on a local ext4/ext2 folder too in stress-ng 0.15.06: IORING_OP_STATX on the "
        "name of the file it has just unlinked gives ENOENT (a stress-ng bug, not memfs)"
    ),
}

# A summary line of stress-ng: "failed: 0", "skipped: 0", "metrics untrustworthy: 0".
SUMMARY = re.compile(r"\b(failed|skipped|untrustworthy): (\d+)")
# Any word of failure outside debug output: a fail: or error: line, "failed", "FAIL", a failed
# verification, "unsuccessful run"; and a stressor that stopped early did not stress.
FAILURE = re.compile(r"fail|error:|unsuccessful|finished prematurely", re.I)


def require_stress_ng() -> str:
    """stress-ng's path; its absence fails (CI installs it: .ci/setup-tests)."""
    found = shutil.which("stress-ng")
    if found is None:
        pytest.fail("stress-ng is not installed: apt-get install stress-ng (.ci/setup-tests does)")
    return found


def failures(output: str) -> list[str]:
    """Every line of a stress-ng run that reports a failure."""
    bad = []
    for line in output.splitlines():
        if ": debug: " in line or ": dbug: " in line:
            continue  # debug chatter ("can't set oom_score_adj", ...) is not a result
        summary = SUMMARY.search(line)
        if summary is not None:
            if int(summary.group(2)) > 0:
                bad.append(line)
            continue
        if FAILURE.search(line):
            bad.append(line)
    return bad


def bogo_ops(output: str, stressor: str) -> int | None:
    """The stressor's bogo-ops count from the metrics table (None: no row)."""
    row = re.compile(rf"metrc: \[\d+\] {re.escape(stressor)}\s+(\d+)\s+\d+\.\d+")
    for line in output.splitlines():
        found = row.search(line)
        if found is not None:
            return int(found.group(1))
    return None


def leftovers(folder: Path, before: set[str]) -> list[str]:
    """Names in ``folder`` (recursively) that were not there before the run, but for the
    versions its changes kept under `.history/` (§7.2: kept on purpose)."""
    names = set()
    for parent, dirs, files in os.walk(folder):
        if os.path.relpath(parent, folder) == ".":
            dirs[:] = [d for d in dirs if d != ".history"]
        for name in dirs + files:
            names.add(os.path.relpath(os.path.join(parent, name), folder))
    return sorted(names - before)


def build(box: Sandbox) -> None:
    """A project with an own MEMORY.md and a note, and a read-only topic in work."""
    box.write_config(limits={"max_file_bytes": BIG_FILES})
    box.write("personal", SLUG, "MEMORY.md", "# Memory\n- [Notes](notes.md)\n", 2)
    box.write("personal", SLUG, "notes.md", "own notes\n", 2)
    box.write("work", SLUG, "deploys.md", "WORK deploys\n", 1)


def test_lists_cover_every_stressor_of_the_classes() -> None:
    """Every filesystem and io stressor of this stress-ng is run or named as not run."""
    exe = require_stress_ng()
    named = set(STRESSORS) | set(SKIPPED_AS_DESIGNED) | set(NOT_FILESYSTEM_STRESSORS)
    assert not set(STRESSORS) & (set(SKIPPED_AS_DESIGNED) | set(NOT_FILESYSTEM_STRESSORS))
    listed: set[str] = set()
    for cls in ("filesystem", "io"):
        done = subprocess.run(
            [exe, "--class", f"{cls}?"], capture_output=True, text=True, timeout=30, check=False
        )
        found = re.search(rf"class '{cls}' stressors: (.*)", done.stdout + done.stderr)
        assert found is not None, f"stress-ng --class {cls}? printed: {done.stdout!r}"
        listed |= set(found.group(1).split())
    assert listed - named == set(), "stressors neither run nor listed as not run"


def test_failures_finds_every_kind_of_failure_line() -> None:
    """The output check itself: lines from real runs on a broken mount, and passing ones."""
    passing = [
        "stress-ng: debug: [9] hdd: can't set oom_score_adj (failed to write)",
        "stress-ng: info:  [9] successful run completed in 2.00s",
        "stress-ng: info:  [9] failed: 0",
        "stress-ng: info:  [9] skipped: 0",
        "stress-ng: info:  [9] metrics untrustworthy: 0",
        "stress-ng: metrc: [9] hdd               11776      2.00      1.12      0.29",
    ]
    failing = [
        "stress-ng: fail:  [7] seek: lseek SEEK_END failed, errno=2 (No such file or directory)",
        "stress-ng: info:  [7] fsize: truncating file to zero bytes failed, errno=2",
        "stress-ng: error: [7] sync-file: ftruncate failed: errno=2 (No such file or directory)",
        "stress-ng: warn:  [7] sync-file: WARNING: finished prematurely after just 0.50s",
        "stress-ng: info:  [7] unsuccessful run completed in 0.01s",
        "stress-ng: info:  [7] skipped: 1: xattr (1)",
        "stress-ng: info:  [7] failed: 1: hdd (1)",
        "stress-ng: fail:  [7] hdd: FAIL: verify error at offset 4096",
    ]
    assert failures("\n".join(passing + failing)) == failing
    assert bogo_ops("\n".join(passing), "hdd") == 11776
    assert bogo_ops("\n".join(passing), "seek") is None


@pytest.mark.parametrize("stressor", sorted(STRESSORS))
def test_stressor_passes_on_a_project_folder(
    sandbox: Sandbox, mounts: Mounts, stressor: str
) -> None:
    exe = require_stress_ng()
    build(sandbox)
    mounts()
    work = sandbox.mnt(SLUG)
    own = sandbox.source("personal").folder(SLUG)
    before_mount, before_disk = set(os.listdir(work)), set(os.listdir(own))
    extra = [arg.replace("{dir}", str(work)) for arg in STRESSORS[stressor]]
    cmd = [
        exe,
        f"--{stressor}",
        "1",
        "-t",
        f"{LONGER.get(stressor, SECONDS)}s",
        "--verify",
        "--verbose",
        "--metrics",
        "--temp-path",
        str(work),
        *extra,
    ]
    try:
        done = subprocess.run(
            cmd,
            cwd=work,
            env=sandbox.env,
            capture_output=True,
            text=True,
            timeout=RUN_DEADLINE,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{stressor}: still running after {RUN_DEADLINE}s: {exc.stdout!r}")
    output = done.stdout + done.stderr
    report = f"{' '.join(cmd)}\nexit {done.returncode}\n" + "\n".join(
        line for line in output.splitlines() if ": debug: " not in line
    )
    assert failures(output) == [], report
    assert done.returncode == 0, report
    assert "successful run completed" in output, report
    ops = bogo_ops(output, stressor)
    assert ops is not None, f"no metrics row for {stressor}:\n{report}"
    if stressor not in RACES_ON_OPEN_LATENCY:
        assert ops > 0, f"{stressor} did no bogo operation:\n{report}"
    # Nothing the stressor made is left: its temp folder is gone through the mount and on
    # disk (an unlinked file never comes back), and so is every stage file (after release).
    wait_until(
        lambda: leftovers(work, before_mount) == [] and leftovers(own, before_disk) == [],
        SOON,
        f"{stressor} left nothing behind",
        must=False,
    )
    assert leftovers(work, before_mount) == [], f"left in the mount by {stressor}"
    assert leftovers(own, before_disk) == [], f"left in the own source by {stressor}"
    assert [n for n in os.listdir(own) if n.startswith(STAGE_PREFIX)] == []
