"""Tier 1: the change journal and the hidden lines' history in the state folder's store
(§7.2, §5.3)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.disk import journal, store
from memfs.disk.journal import Change


@pytest.fixture(autouse=True)
def closed() -> Iterator[None]:
    yield
    store.close_all()


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
    assert journal.read(state, limit=1)[0].path == "b.md"
    assert journal.read(state, project="-q") == []
    for name in os.listdir(state):  # the database, its WAL and shared memory
        assert os.stat(state / name).st_mode & 0o777 == 0o600, name
    assert os.stat(state).st_mode & 0o777 == 0o700


def test_a_change_names_its_process_not_its_thread(tmp_path: Path) -> None:
    # Issue 36: FUSE names the calling thread; `claude[2727]` was logged for process 2715.
    ids: list[int] = []
    started = threading.Event()

    def hold() -> None:
        ids.append(threading.get_native_id())
        started.set()
        done.wait(10)

    done = threading.Event()
    thread = threading.Thread(target=hold)
    thread.start()
    started.wait(10)
    try:
        journal.record(tmp_path, Change("-p", "a.md", "write", pid=ids[0]))
    finally:
        done.set()
        thread.join()
    assert ids[0] != os.getpid()
    assert journal.read(tmp_path)[0].pid == os.getpid()


def test_a_state_folder_removed_while_mounted_comes_back_private(tmp_path: Path) -> None:
    """The folder is made private at mount start, not at every change: one removed since
    is made again, 0700 with a 0600 database, whatever the umask, and the changes after
    land there, not in the removed database."""
    state = tmp_path / "state"
    journal.record(state, Change("-p", "a.md", "write"))
    shutil.rmtree(state)
    old = os.umask(0)
    try:
        journal.record(state, Change("-p", "b.md", "write"))
    finally:
        os.umask(old)
    store.close_all()  # a new process reads what is on disk
    assert [c.path for c in journal.read(state)] == ["b.md"]
    assert os.stat(state / store.NAME).st_mode & 0o777 == 0o600
    assert os.stat(state).st_mode & 0o777 == 0o700


def test_a_line_for_a_person_escapes_every_name(tmp_path: Path) -> None:
    c = Change("-p", "a.md", "rename", pid=7, comm="claude", to="b.md", before=3, after=None)
    c.at_ns = 1_767_225_600 * 10**9
    c.kept = ".history/b.md/work@20260101T000000Z.md"
    assert journal.render(c) == (
        "2026-01-01 00:00:00Z  rename   -p/a.md -> b.md  3 B -> -  "
        "kept .history/b.md/work@20260101T000000Z.md  by claude[7]"
    )
    # A name with a newline must not forge a line; an escape sequence is spelled out.
    forged = Change("-p", "x.md\n2026-01-01 00:00:00Z  unlink   -p/all.md", "write", pid=7)
    forged.comm = "sh\x1b[2J"
    line = journal.render(forged)
    assert "\n" not in line
    assert "x.md\\n2026" in line
    assert "sh\\x1b[2J[7]" in line
    disk = Change("-p", "a.md", "rewrite", way=journal.DISK, source="gemini")
    assert journal.render(disk).endswith("by on disk (gemini), process unknown")


def test_an_older_journal_is_read_in_once(tmp_path: Path) -> None:
    old = {"project": "-p", "path": "old.md", "what": "write", "at_ns": 5}
    (tmp_path / journal.LEGACY).write_text(
        json.dumps(old) + "\nnot json\n[1, 2]\n" + json.dumps(old | {"path": "older.md"}) + "\n"
    )
    journal.record(tmp_path, Change("-p", "new.md", "write"))
    assert [c.path for c in journal.read(tmp_path)] == ["new.md", "older.md", "old.md"]
    assert not (tmp_path / journal.LEGACY).exists()


def test_the_journal_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "JOURNAL_ROWS", 50)
    monkeypatch.setattr(store, "TRIM_EVERY", 10)
    for n in range(200):
        journal.record(tmp_path, Change("-p", f"f{n}.md", "write"))
    found = journal.read(tmp_path)
    assert found[0].path == "f199.md"  # the newest stay
    assert 50 <= len(found) <= 60


def test_an_unwritable_state_folder_never_fails_the_change(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the state folder would be")
    journal.record(blocked, Change("-p", "a.md", "write"))  # logged, not raised
    assert journal.read(tmp_path / "missing") == []
    assert not (tmp_path / "missing").exists()  # a question makes no database


def test_hidden_lines_over_time(tmp_path: Path) -> None:
    db = store.of(tmp_path)
    assert db.hidden_at("-p", "MEMORY.md", 100) is None  # no history: not known
    db.hidden_changed("-p", "MEMORY.md", {"old"}, {"old", "b"}, ".history/MEMORY.md/c@1.md", 100)
    db.hidden_changed("-p", "MEMORY.md", {"old", "b"}, set(), ".history/MEMORY.md/c@2.md", 200)
    db.hidden_changed("-p", "other/MEMORY.md", set(), {"x"}, "", 150)
    # What was hidden before memfs kept history is its first record, a moment earlier.
    assert db.hidden_at("-p", "MEMORY.md", 99) == {"old"}
    assert db.hidden_at("-p", "MEMORY.md", 150) == {"old", "b"}
    assert db.hidden_at("-p", "MEMORY.md", 250) == frozenset()
    # What a kept version was shown with: the set before the change that replaced it.
    assert db.hidden_under("-p", "MEMORY.md", ".history/MEMORY.md/c@1.md") == {"old"}
    assert db.hidden_under("-p", "MEMORY.md", ".history/MEMORY.md/c@2.md") == {"old", "b"}
    assert db.hidden_under("-p", "MEMORY.md", ".history/MEMORY.md/c@9.md") is None


def test_a_name_that_is_no_utf8_is_journaled_and_read_back(tmp_path: Path) -> None:
    # stress-ng's filename stressor: names of any bytes but '/' and NUL. SQLite's text
    # cannot hold them; the change must never fail for its journal.
    odd = os.fsdecode(b"a\xff\xfe.md")
    journal.record(tmp_path, Change("-p", odd, "create", to=odd, comm=odd))
    (found,) = journal.read(tmp_path, project="-p")
    assert (found.path, found.to, found.comm) == (odd, odd, odd)
    assert "a\\udcff\\udcfe.md" in journal.render(found)
