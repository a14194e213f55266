"""Tier 1: which version `memfs restore` puts back (view/restore.py, §7.2): the own one
kept last, or the newest own one by the time its name shows, never another source's
unless asked; a folder refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FakeHome, at, fake_home, load_project, write

from memfs.rules.history import stamp
from memfs.view import restore
from memfs.view.restore import Ask, NotRestorable


@pytest.fixture
def project_dirs(tmp_path: Path) -> tuple[Path, Path, FakeHome]:
    home = fake_home(tmp_path)
    own, work = home.memory(".claude"), home.memory(".claude-work")
    return own, work, home


def stamp_of(seconds: float) -> str:
    return stamp(at(seconds))


def test_undo_takes_the_own_version_kept_last_not_the_newest_by_mtime(
    project_dirs: tuple[Path, Path, FakeHome],
) -> None:
    own, work, home = project_dirs
    write(own / "notes.md", "head\n", at(100))
    kept = own / ".history" / "notes.md"
    write(kept / f"claude@{stamp_of(50)}.md", "kept first\n", at(50))
    # Kept second, though written long before (cp -p): its number says it was kept last.
    write(kept / f"claude@{stamp_of(-9000)}~2.md", "kept last, old mtime\n", at(-9000))
    write(work / "notes.md", "work's, newest of all\n", at(200))
    project = load_project(home.config())
    choice = restore.choose(project, Ask("notes.md"))
    assert choice.view == f".history/notes.md/claude@{stamp_of(-9000)}~2.md"
    assert choice.own
    assert not choice.nothing
    # --from takes another source's version, the head among them.
    other = restore.choose(project, Ask("notes.md", source="work"))
    assert other.version.origin != choice.version.origin
    assert not other.own


def test_at_a_time_on_the_clock_of_the_name(project_dirs: tuple[Path, Path, FakeHome]) -> None:
    own, _, home = project_dirs
    write(own / "notes.md", "head\n", at(100))
    kept = own / ".history" / "notes.md"
    write(kept / f"claude@{stamp_of(10)}.md", "v1\n", at(10))
    write(kept / f"claude@{stamp_of(50)}~2.md", "v2\n", at(50))
    project = load_project(home.config())
    assert restore.choose(project, Ask("notes.md", at_ns=at(10))).view.endswith(
        f"@{stamp_of(10)}.md"
    )
    assert restore.choose(project, Ask("notes.md", at_ns=at(60))).view.endswith(
        f"@{stamp_of(50)}~2.md"
    )
    # At or after the head's own time: the file is that version already.
    assert restore.choose(project, Ask("notes.md", at_ns=at(150))).nothing
    with pytest.raises(NotRestorable, match="no kept own version"):
        restore.choose(project, Ask("notes.md", at_ns=at(5)))


def test_never_another_accounts_version_unless_asked(
    project_dirs: tuple[Path, Path, FakeHome],
) -> None:
    _, work, home = project_dirs
    write(work / "notes.md", "work's\n", at(10))
    project = load_project(home.config())
    with pytest.raises(NotRestorable, match="--from work"):
        restore.choose(project, Ask("notes.md"))


def test_a_folder_is_refused(project_dirs: tuple[Path, Path, FakeHome]) -> None:
    own, _, home = project_dirs
    write(own / "sub" / "a.md", "a\n", at(1))
    project = load_project(home.config())
    with pytest.raises(NotRestorable, match="is a folder"):
        restore.choose(project, Ask("sub"))


def test_a_version_named_directly(project_dirs: tuple[Path, Path, FakeHome]) -> None:
    own, _, home = project_dirs
    write(own / "notes.md", "head\n", at(100))
    write(own / ".history" / "notes.md" / f"claude@{stamp_of(1)}.md", "v1\n", at(1))
    project = load_project(home.config())
    ask = restore.split(f".history/notes.md/claude@{stamp_of(1)}.md")
    assert ask == Ask("notes.md", version=f".history/notes.md/claude@{stamp_of(1)}.md")
    assert restore.choose(project, ask).own
    with pytest.raises(NotRestorable):
        restore.split(".history/notes.md/not-a-version.txt")
