"""The bare mountpoint folder (§9) and the one-line mount refusals (tier 1).

No mount here: the sealing, the not-empty refusal and the commands it names are checked on
tmp folders, and each named command is run with ``sh`` to show it moves everything where
memfs will serve it, losing nothing. The mount-level versions, as a normal user, are in
test_mount_mountpoint.py. Permission bits are checked as bits: root ignores them, so whether a
write is refused is only tested there.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CLAUDE_SLUG, FakeHome, fake_home

from memfs.app import mount
from memfs.app import mountpoint as bare
from memfs.disk import config as cfg
from memfs.rules.slug import project_slug


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def fh(tmp_path: Path) -> FakeHome:
    """Two Claude Code accounts (own: ~/.claude) and pi, discovered."""
    return fake_home(tmp_path)


@pytest.fixture
def mnt(fh: FakeHome) -> Path:
    folder = fh.home / "memfs"
    folder.mkdir(mode=0o755)
    return folder


def shell(command: str, cwd: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=15, check=False
    )
    assert done.returncode == 0, (command, done.stderr)


def refusal_of(config: cfg.Config, mnt: Path) -> str:
    with pytest.raises(bare.NotEmptyError) as refused:
        bare.refuse_if_not_empty(config, mnt)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"mountpoint {mnt} is not empty: it holds ")
    return line


def command_in(line: str) -> str:
    return line.split("move it first: ", 1)[1]


# --- seal and unseal --------------------------------------------------------------------


def test_seal_takes_every_write_bit_and_keeps_the_rest(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    folder.chmod(0o775)
    assert bare.seal(folder)
    assert mode(folder) == 0o555
    assert bare.is_sealed(folder)
    bare.unseal(folder)
    assert mode(folder) == 0o755  # the owner's write bit only: what fusermount3 checks
    bare.seal(folder)
    assert mode(folder) == 0o555


def test_seal_through_a_descriptor(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir(mode=0o755)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert bare.seal(fd)
    finally:
        os.close(fd)
    assert mode(folder) == 0o555


def test_seal_of_a_missing_folder_says_false(tmp_path: Path) -> None:
    assert not bare.seal(tmp_path / "missing")


def test_no_fuse_connection_on_a_plain_folder(tmp_path: Path) -> None:
    assert bare.fuse_connection(tmp_path) is None


# --- the not-empty refusal and its commands ---------------------------------------------


def test_an_empty_folder_is_not_refused(fh: FakeHome, mnt: Path) -> None:
    bare.refuse_if_not_empty(fh.config(), mnt)


def test_a_slug_folder_new_to_the_own_source_is_moved_whole(fh: FakeHome, mnt: Path) -> None:
    (mnt / CLAUDE_SLUG / "sub").mkdir(parents=True)
    (mnt / CLAUDE_SLUG / "a.md").write_text("a\n")
    (mnt / CLAUDE_SLUG / "sub" / "b.md").write_text("b\n")
    bare.seal(mnt)
    line = refusal_of(fh.config(), mnt)
    assert f"it holds {CLAUDE_SLUG}/ (2 files), written while memfs was not mounted" in line
    shell(command_in(line), fh.home)
    own = fh.home / ".claude" / "projects" / CLAUDE_SLUG / "memory"
    assert (own / "a.md").read_text() == "a\n"
    assert (own / "sub" / "b.md").read_text() == "b\n"
    assert os.listdir(mnt) == []
    assert bare.is_sealed(mnt), "the command gives the folder's seal back"


def test_a_slug_folder_the_own_source_has_keeps_both_versions(fh: FakeHome, mnt: Path) -> None:
    own = fh.memory(".claude")
    (own / "notes.md").write_text("own\n")
    (mnt / CLAUDE_SLUG).mkdir()
    (mnt / CLAUDE_SLUG / "notes.md").write_text("written bare\n")
    (mnt / CLAUDE_SLUG / "new.md").write_text("new\n")
    line = refusal_of(fh.config(), mnt)
    shell(command_in(line), fh.home)
    assert (own / "notes.md").read_text() == "written bare\n"
    assert (own / "notes.md.~1~").read_text() == "own\n"  # nothing lost
    assert (own / "new.md").read_text() == "new\n"
    assert os.listdir(mnt) == []


def test_a_here_folder_goes_to_the_project_it_was_written_from(
    fh: FakeHome, mnt: Path, tmp_path: Path
) -> None:
    project = tmp_path / "src" / "shop"
    project.mkdir(parents=True)
    (mnt / "here").mkdir()
    (mnt / "here" / "MEMORY.md").write_text("# Memory\n")
    line = refusal_of(fh.config(), mnt)
    assert "here/ (1 file, from a project's folder: run the command there)" in line
    memfs_bin = tmp_path / "bin"
    memfs_bin.mkdir()
    # `memfs slug` as the command names it, run in the project's folder.
    fake = memfs_bin / "memfs"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -P -m memfs "$@"\n')
    fake.chmod(0o755)
    command = f"PATH={memfs_bin}:$PATH; {command_in(line)}"
    shell(command, project)
    own = fh.home / ".claude" / "projects" / project_slug(project) / "memory"
    assert (own / "MEMORY.md").read_text() == "# Memory\n"
    assert os.listdir(mnt) == []


def test_a_loose_file_is_moved_to_the_home(fh: FakeHome, mnt: Path) -> None:
    (mnt / "stray.md").write_text("x\n")
    line = refusal_of(fh.config(), mnt)
    assert "stray.md (in no project: moved to the home folder)" in line
    shell(command_in(line), fh.home)
    assert (fh.home / "stray.md").read_text() == "x\n"
    assert os.listdir(mnt) == []


def test_without_an_own_source_everything_goes_to_the_home(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, accounts=())  # pi only: no own source
    config = fh.config()
    assert config.own is None
    mnt = fh.home / "memfs"
    (mnt / CLAUDE_SLUG).mkdir(parents=True)
    (mnt / CLAUDE_SLUG / "a.md").write_text("a\n")
    line = refusal_of(config, mnt)
    assert f"{CLAUDE_SLUG} (no own source to move it to: moved to the home folder)" in line
    shell(command_in(line), fh.home)
    assert (fh.home / CLAUDE_SLUG / "a.md").read_text() == "a\n"


def test_many_entries_name_three_and_count_the_rest(fh: FakeHome, mnt: Path) -> None:
    for name in ("a.md", "b.md", "c.md", "d.md", "e.md"):
        (mnt / name).write_text(name)
    line = refusal_of(fh.config(), mnt)
    assert "a.md (in no project" in line
    assert "c.md (in no project" in line
    assert "d.md" not in line
    assert "and 2 more" in line
    shell(command_in(line), fh.home)
    assert sorted(os.listdir(mnt)) == ["d.md", "e.md"]  # the next refusal names them


def test_awkward_names_are_quoted(fh: FakeHome, mnt: Path) -> None:
    name = "it's $HOME; rm -rf x"
    (mnt / name).write_text("y\n")
    line = refusal_of(fh.config(), mnt)
    shell(command_in(line), fh.home)
    assert (fh.home / name).read_text() == "y\n"


# --- prepare(): the folder before a mount ------------------------------------------------


def test_prepare_creates_the_mountpoint_sealed(fh: FakeHome) -> None:
    target = fh.home / "deep" / "memfs"
    if os.path.exists("/dev/fuse"):
        assert mount.prepare(fh.config(), target) == target
    else:  # checked last: the folder is ready all the same
        with pytest.raises(mount.MountError, match="/dev/fuse is missing"):
            mount.prepare(fh.config(), target)
    assert mode(target) == 0o555


def test_prepare_refuses_a_folder_that_is_not_empty_and_seals_it(fh: FakeHome, mnt: Path) -> None:
    (mnt / "stray.md").write_text("x\n")
    with pytest.raises(mount.MountError, match=r"is not empty: it holds stray\.md"):
        mount.prepare(fh.config(), mnt)
    assert mode(mnt) == 0o555
    assert (mnt / "stray.md").read_text() == "x\n"


# --- fusermount3's words -> one line with the fix ----------------------------------------

REFUSALS = [
    (
        "fusermount3: user has no write access to mountpoint /m\n",
        "fusermount3: user has no write access to mountpoint /m; choose a mountpoint folder",
    ),
    (
        "fusermount3: failed to open /dev/fuse: Permission denied\n",
        "/dev/fuse: Permission denied; your user may not use FUSE",
    ),
    (
        "fusermount3: option allow_other only allowed if 'user_allow_other' is set in "
        "/etc/fuse.conf\n",
        "/etc/fuse.conf; add the line user_allow_other",
    ),
    (
        "fuse: failed to exec fusermount3: No such file or directory\n",
        "fuse: failed to exec fusermount3: No such file or directory; install the fuse3",
    ),
    ("", "fuse_session_mount failed; see README 'Troubleshooting'"),
    ("fuse: something new\nfusermount3: the real reason\nfuse: trailer\n", ": the real reason;"),
]


@pytest.mark.parametrize(("said", "expected"), REFUSALS)
def test_refusal_is_one_line_with_the_reason_and_a_fix(said: str, expected: str) -> None:
    line = mount.refusal(Path("/m"), said, "fuse_session_mount failed")
    assert "\n" not in line
    assert line.startswith("cannot mount /m: ")
    assert expected in line


def test_the_daemon_never_imports_from_the_current_folder() -> None:
    command = mount.daemon_command(["mount", "--foreground", "/m"])
    assert command[1:4] == ["-P", "-m", "memfs"]
