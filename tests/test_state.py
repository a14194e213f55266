"""Tier 1: memfs's own state folder is private to its user (§3).

It names the user's projects (the log) and the files they deleted (whiteouts): whatever
the umask, its folders are 0700 and its files 0600, and an older, looser one is narrowed
at start. Each test sets the umask itself and puts the old one back.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import CLAUDE_SLUG, at, fake_home, write

from memfs.app import adopt
from memfs.disk import state

UMASKS = [0o022, 0o000, 0o077]
NOBODY = 65534  # a user id no test runs as


@pytest.fixture(params=UMASKS, ids=[f"umask{u:03o}" for u in UMASKS])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(top: Path) -> dict[str, int]:
    """relative path -> permission bits, of ``top`` and everything below it."""
    found = {".": mode(top)}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder, name)
            found[str(path.relative_to(top))] = mode(path)
    return found


def test_saved_whiteouts_are_private_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "state" / "memfs"
    state.save_whiteouts(state_dir, CLAUDE_SLUG, {("deploys.md", "work", 7)})
    state.save_whiteouts(state_dir, CLAUDE_SLUG, {("deploys.md", "work", 7), ("a.md", "pi", 1)})
    assert modes(state_dir) == {
        ".": 0o700,
        "whiteouts": 0o700,
        f"whiteouts/{CLAUDE_SLUG}.json": 0o600,
    }
    assert state.load_whiteouts(state_dir, CLAUDE_SLUG) == {
        ("deploys.md", "work", 7),
        ("a.md", "pi", 1),
    }


def test_a_save_narrows_a_looser_existing_folder(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "memfs"
    (state_dir / "whiteouts").mkdir(parents=True)
    state_dir.chmod(0o755)
    (state_dir / "whiteouts").chmod(0o777)
    state.save_whiteouts(state_dir, CLAUDE_SLUG, set())
    assert mode(state_dir) == 0o700
    assert mode(state_dir / "whiteouts") == 0o700


def test_the_log_is_private_and_an_older_one_narrowed(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "memfs"
    with state.open_log(state_dir) as log:
        log.write(b"first\n")
    assert modes(state_dir) == {".": 0o700, "memfs.log": 0o600}
    state.log_path(state_dir).chmod(0o644)
    with state.open_log(state_dir) as log:
        log.write(b"second\n")
    assert mode(state.log_path(state_dir)) == 0o600
    assert state.log_path(state_dir).read_bytes() == b"first\nsecond\n"
    assert state.last_log_line(state.log_path(state_dir)) == "second"


def test_make_private_narrows_an_old_install(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "memfs"
    (state_dir / "whiteouts").mkdir(parents=True, mode=0o755)
    (state_dir / "adopt").mkdir(mode=0o775)
    for path in ("memfs.log", f"whiteouts/{CLAUDE_SLUG}.json", "adopt/0badc0de.json"):
        (state_dir / path).write_text("[]\n")
        (state_dir / path).chmod(0o644)
    (state_dir / "whiteouts" / "run.sh").write_text("")
    (state_dir / "whiteouts" / "run.sh").chmod(0o755)  # no execute bit is kept either
    state_dir.chmod(0o755)
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    outside.chmod(0o755)
    (state_dir / "elsewhere").symlink_to(outside)  # a link is never followed below the top
    state.make_private(state_dir)
    found = modes(state_dir)
    link = found.pop("elsewhere")
    assert stat.S_ISLNK(os.lstat(state_dir / "elsewhere").st_mode), link
    assert found == {
        ".": 0o700,
        "memfs.log": 0o600,
        "whiteouts": 0o700,
        f"whiteouts/{CLAUDE_SLUG}.json": 0o600,
        "whiteouts/run.sh": 0o600,
        "adopt": 0o700,
        "adopt/0badc0de.json": 0o600,
    }
    assert mode(outside) == 0o755


def test_make_private_creates_a_missing_folder(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "state" / "memfs"
    state.make_private(state_dir)
    assert modes(state_dir) == {".": 0o700}


def test_the_folders_made_above_it_are_private_and_the_others_untouched(
    tmp_path: Path, umask: int
) -> None:
    # Issue 36: under umask 000 `mkdir -p` left ~/.local and ~/.local/state 0777.
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    state_dir = home / ".local" / "state" / "memfs"
    state.make_private(state_dir)
    assert modes(home) == {
        ".": 0o755,  # there already: never memfs's to change
        ".local": 0o700,
        ".local/state": 0o700,
        ".local/state/memfs": 0o700,
    }


def test_a_folder_above_it_that_was_there_keeps_its_mode(tmp_path: Path, umask: int) -> None:
    local = tmp_path / ".local"
    local.mkdir()
    local.chmod(0o751)
    state.make_private(local / "state" / "memfs")
    assert modes(local) == {".": 0o751, "state": 0o700, "state/memfs": 0o700}


@pytest.mark.parametrize("loose", [0o777, 0o770, 0o702, 0o720], ids=lambda m: f"{m:04o}")
def test_a_state_folder_others_may_write_is_refused_not_narrowed(
    tmp_path: Path, loose: int
) -> None:
    state_dir = tmp_path / "memfs"
    state_dir.mkdir()
    (state_dir / "memfs.log").write_text("whoever put this here\n")
    state_dir.chmod(loose)
    with pytest.raises(state.StateError) as refused:
        state.make_private(state_dir)
    line = str(refused.value)
    assert "\n" not in line
    assert f"{state_dir} is writable by" in line
    assert f"(mode {loose:04o})" in line
    assert line.endswith(f"then run 'chmod 700 {state_dir}'")
    assert mode(state_dir) == loose  # refused, not narrowed: its files stay for the user


def test_a_state_folder_only_others_may_read_is_narrowed(tmp_path: Path) -> None:
    state_dir = tmp_path / "memfs"
    state_dir.mkdir()
    state_dir.chmod(0o755)
    state.make_private(state_dir)
    assert mode(state_dir) == 0o700


def test_a_state_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        state_dir = tmp_path / "memfs"
        state_dir.mkdir(mode=0o700)
        os.chown(state_dir, NOBODY, NOBODY)
    else:
        state_dir = Path("/")  # root's: another user's for anyone running this
    before = os.stat(state_dir)
    with pytest.raises(state.StateError) as refused:
        state.make_private(state_dir)
    assert f"{state_dir} belongs to another user (uid {before.st_uid})" in str(refused.value)
    assert "XDG_STATE_HOME" in str(refused.value)
    after = os.stat(state_dir)
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)


def test_an_adopt_list_is_private(tmp_path: Path, umask: int) -> None:
    fh = fake_home(tmp_path)
    write(fh.memory(".claude") / "MEMORY.md", "# Memory\n", at(10))
    write(fh.memory(".claude-work") / "deploy.md", "deploy steps\n", at(4))
    config = fh.config()
    made = adopt.make_list(config, CLAUDE_SLUG)
    assert made.list_id
    assert modes(config.state_dir) == {
        ".": 0o700,
        "adopt": 0o700,
        f"adopt/{made.list_id}.json": 0o600,
    }


def test_hidden_lines_of_a_long_agent_name_keep_a_safe_name(tmp_path: Path) -> None:
    agent = "a" * 250
    path = f"agent-memory/{agent}/MEMORY.md"
    state.save_hidden_lines(tmp_path, "global/claude", ["x"], path)
    (name,) = os.listdir(tmp_path / state.HIDDEN_LINES)
    assert len(name) <= 255
    assert name.startswith("global.claude.")
    assert state.load_hidden_lines(tmp_path, "global/claude", path) == {"x"}
    assert state.load_project(tmp_path, "global/claude")[1] == {path: frozenset({"x"})}
    state.save_hidden_lines(tmp_path, "global/claude", [], path)
    assert os.listdir(tmp_path / state.HIDDEN_LINES) == []
