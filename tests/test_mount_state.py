"""Tier 3: memfs's own state folder is private to its user through a real mount (§3).

The daemon runs under umask 022, as a login shell's would; still the state folder is 0700
and each file in it 0600: the log (it names project paths), the whiteouts (names of
deleted files). A folder an older memfs left 0755/0644 is narrowed when a mount starts.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounting import (
    MOUNT_MARKS,
    Mounts,
    NormalUser,
    Sandbox,
    alive,
    errno_of,
    in_mountinfo,
    normal_user,
    slug_of,
    wait_until,
)

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
        "memfs.db": 0o600,  # the store: the change journal (§7.2) names deleted files too
        "memfs.db-wal": 0o600,
        "memfs.db-shm": 0o600,
        "memfs.log": 0o600,
        "mounts.json": 0o600,  # where it mounts, for a restore while it is down
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
        "mounts.json": 0o600,
        "whiteouts": 0o700,
        f"whiteouts/{SLUG}.json": 0o600,
        "adopt": 0o700,
    }
    assert "deploys.md" in os.listdir(sandbox.mnt(SLUG))


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a user error (exit 2), no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("memfs: "), done.stderr
    return lines[0]


@pytest.mark.parametrize("mode", ["background", "foreground"])
def test_a_state_folder_others_may_write_is_refused_before_mounting(
    sandbox: Sandbox, mounts: Mounts, mode: str
) -> None:
    """Issue 36: refused in one line (cause and fix), exit 2, nothing mounted, nothing in
    the folder changed (it is not narrowed: what others put there is for the user to see)."""
    sandbox.write("work", SLUG, "deploys.md", "Fridays, never.\n")
    sandbox.state_dir.mkdir()
    (sandbox.state_dir / "whiteouts").mkdir()
    os.chmod(sandbox.state_dir, 0o777)
    args = ["mount", sandbox.mountpoint, "--config", sandbox.config_path]
    done = sandbox.memfs(*args, *(["--foreground"] if mode == "foreground" else []))
    mounts.adopt_output(done.stdout)  # stopped at the end, should it have mounted
    line = one_line_error(done)
    assert f"the state folder {sandbox.state_dir} is writable by its group and others" in line
    assert f"'chmod 700 {sandbox.state_dir}'" in line
    assert not in_mountinfo(sandbox.mountpoint)
    assert modes(sandbox.state_dir) == {".": 0o777, "whiteouts": 0o755}


@pytest.fixture
def person() -> Iterator[NormalUser]:
    """A normal user with a discovered Claude Code account and no XDG_STATE_HOME: the state
    folder is ~/.local/state/memfs, and nothing of it exists yet."""
    for user in normal_user(SLUG, b"notes\n"):
        user.env.pop("XDG_STATE_HOME")
        yield user


def test_as_a_normal_user_under_umask_000(person: NormalUser) -> None:
    """Issue 36, as a user runs it: with no XDG_STATE_HOME, `memfs mount` made ~/.local and
    ~/.local/state 0777 under umask 000. What memfs makes is 0700; the home, there already,
    keeps its mode. Then a state folder another user owns is refused before mounting."""
    home = person.home
    home_mode = stat.S_IMODE(home.stat().st_mode)
    mnt = home / "memfs"
    umask_000 = f"umask 000 && exec {person.script} mount {mnt}"
    done = person.run("sh", "-c", umask_000)
    person.pids += [int(p) for p in re.findall(r"\(pid (\d+)\)", done.stdout)]
    assert done.returncode == 0, done.stderr
    made = modes(home / ".local")
    # The store (memfs.db and SQLite's -wal and -shm) comes as the keeper starts.
    store = {name for name in made if name.startswith("state/memfs/memfs.db")}
    assert store <= {f"state/memfs/memfs.db{end}" for end in ("", "-wal", "-shm", "-journal")}
    assert {made.pop(name) for name in store} <= {0o600}
    assert made == {
        ".": 0o700,
        "state": 0o700,
        "state/memfs": 0o700,
        "state/memfs/memfs.log": 0o600,
        "state/memfs/mounts.json": 0o600,
    }
    assert stat.S_IMODE(home.stat().st_mode) == home_mode
    assert person.memfs("umount", mnt).returncode == 0

    # The state folder is another user's (root's): refused, exit 2, before mounting.
    state_dir = home / ".local" / "state" / "memfs"
    if os.geteuid() == 0:
        os.chown(state_dir, 0, 0)
    else:  # no other user to give it to: a link the user made to a folder of root's
        shutil.rmtree(state_dir)
        state_dir.symlink_to("/")
    line = one_line_error(person.memfs("mount", mnt))
    assert f"the state folder {state_dir} belongs to another user (uid 0)" in line
    assert not in_mountinfo(mnt)
