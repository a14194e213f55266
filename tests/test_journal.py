"""Tier 1: the change journal in the state folder (§7.2)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from memfs.disk import journal
from memfs.disk.journal import Change


def test_changes_read_back_newest_first_and_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal.record(state, Change("-p", "a.md", "write", before=1, after=2, at_ns=10**18))
    journal.record(state, Change("-p", "a.md", "rename", to="b.md", kept=".history/b.md/x.md"))
    journal.record(state, Change("-p", "b.md", "unlink", pid=os.getpid(), before=2))
    found = journal.read(state)
    assert [c.what for c in found] == ["unlink", "rename", "write"]
    assert found[0].comm != ""  # this process's command name, read when recorded
    assert found[1].target == "b.md"
    assert found[2].at_ns == 10**18
    assert os.stat(state / journal.NAME).st_mode & 0o777 == 0o600
    assert os.stat(state).st_mode & 0o777 == 0o700


def test_a_state_folder_removed_while_mounted_comes_back_private(tmp_path: Path) -> None:
    """The folder is made private at mount start, not at every change: one removed since
    is made again, 0700 with a 0600 journal, whatever the umask."""
    state = tmp_path / "state"
    journal.record(state, Change("-p", "a.md", "write"))
    shutil.rmtree(state)
    old = os.umask(0)
    try:
        journal.record(state, Change("-p", "b.md", "write"))
    finally:
        os.umask(old)
    assert [c.path for c in journal.read(state)] == ["b.md"]
    assert os.stat(state / journal.NAME).st_mode & 0o777 == 0o600
    assert os.stat(state).st_mode & 0o777 == 0o700


def test_a_line_for_a_person(tmp_path: Path) -> None:
    c = Change("-p", "a.md", "rename", pid=7, comm="claude", to="b.md", before=3, after=None)
    c.at_ns = 1_767_225_600 * 10**9
    c.kept = ".history/b.md/work@20260101T000000Z.md"
    assert journal.render(c) == (
        "2026-01-01 00:00:00Z  rename   -p/a.md -> b.md  3 B -> -  "
        "kept .history/b.md/work@20260101T000000Z.md  by claude[7]"
    )


def test_lines_that_do_not_parse_are_skipped(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal.record(state, Change("-p", "a.md", "write"))
    with open(state / journal.NAME, "a") as f:
        f.write('not json\n[1, 2]\n{"path": 1}\n')
    journal.record(state, Change("-p", "b.md", "write"))
    assert [c.path for c in journal.read(state)] == ["b.md", "a.md"]


def test_the_journal_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "MAX_BYTES", 4096)
    state = tmp_path / "state"
    for n in range(200):
        journal.record(state, Change("-p", f"f{n}.md", "write"))
    assert (state / journal.NAME).stat().st_size <= 4096 + 200
    found = journal.read(state)
    assert found[0].path == "f199.md"  # the newest stay, whole
    assert 10 < len(found) < 200
    assert os.stat(state / journal.NAME).st_mode & 0o777 == 0o600


def test_an_unwritable_state_folder_never_fails_the_change(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the state folder would be")
    journal.record(blocked, Change("-p", "a.md", "write"))  # logged, not raised
    assert journal.read(tmp_path / "missing") == []
