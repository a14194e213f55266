"""Tier 3: memfs's own state folder is private to its user through a real mount (§3).

The daemon runs under umask 022, as a login shell's would; still the state folder is 0700
and each file in it 0600: the log (it names project paths), the whiteouts (names of
deleted files). A folder an older memfs left 0755/0644 is narrowed when a mount starts.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, alive, errno_of, slug_of, wait_until

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
LOOSE_UMASK = 0o022


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The test, and every daemon it starts, under umask 022; the old one put back."""
    old = os.umask(LOOSE_UMASK)
    try:
        yield
    finally:
        os.umask(old)


def modes(top: Path) -> dict[str, int]:
    """relative path -> permission bits, of ``top`` and everything below it."""
    found = {".": stat.S_IMODE(os.lstat(top).st_mode)}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder, name)
            found[str(path.relative_to(top))] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


@pytest.mark.usefixtures("loose_umask")
def test_state_folder_log_and_whiteouts_are_private(sandbox: Sandbox, mounts: Mounts) -> None:
    sandbox.write("work", SLUG, "deploys.md", "Fridays, never.\n")
    sandbox.write("personal", SLUG, "MEMORY.md", "# Memory\n")
    assert not sandbox.state_dir.exists()
    done = sandbox.memfs("mount", sandbox.mountpoint, "--config", sandbox.config_path)
    pid = mounts.adopt_output(done.stdout)
    assert done.returncode == 0, done.stderr
    assert pid is not None, done.stdout

    # A file of a read-only source only: its removal is a whiteout in the state folder.
    sandbox.out("rm", sandbox.mnt(SLUG, "deploys.md"))
    assert errno_of(os.stat, sandbox.mnt(SLUG, "deploys.md")) is not None
    assert modes(sandbox.state_dir) == {
        ".": 0o700,
        "journal.jsonl": 0o600,  # the change journal (§7.2): names deleted files too
        "memfs.log": 0o600,
        "whiteouts": 0o700,
        f"whiteouts/{SLUG}.json": 0o600,
    }

    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: not alive(pid), 10, "the daemon exits")
    assert modes(sandbox.state_dir)["memfs.log"] == 0o600


@pytest.mark.usefixtures("loose_umask")
def test_an_older_looser_state_folder_is_narrowed_at_start(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("work", SLUG, "deploys.md", "Fridays, never.\n")
    whiteouts = sandbox.state_dir / "whiteouts"
    whiteouts.mkdir(parents=True)
    (sandbox.state_dir / "memfs.log").write_text("memfs ready at /home/u/memfs\n")
    (whiteouts / f"{SLUG}.json").write_text("[]")
    (sandbox.state_dir / "adopt").mkdir()
    for path in (sandbox.state_dir, whiteouts, sandbox.state_dir / "adopt"):
        path.chmod(0o755)
    assert modes(sandbox.state_dir) == {
        ".": 0o755,
        "memfs.log": 0o644,
        "whiteouts": 0o755,
        f"whiteouts/{SLUG}.json": 0o644,
        "adopt": 0o755,
    }

    mounts()  # the foreground daemon, as the service unit starts it
    assert modes(sandbox.state_dir) == {
        ".": 0o700,
        "memfs.log": 0o600,
        "whiteouts": 0o700,
        f"whiteouts/{SLUG}.json": 0o600,
        "adopt": 0o700,
    }
    assert "deploys.md" in os.listdir(sandbox.mnt(SLUG))
