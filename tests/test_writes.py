"""The rules of writing through the mount, as plain functions (tier 1, §7)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from helpers import CLAUDE_SLUG, FakeHome, at, fake_home, load_project, write

from memfs.view import writes
from memfs.view.catalog import Catalog
from memfs.view.writes import RENAME_EXCHANGE, RENAME_NOREPLACE, Refused


@pytest.fixture
def fh(tmp_path: Path) -> FakeHome:
    home = fake_home(tmp_path)
    write(home.memory(".claude") / "own.md", "own", at(1))
    write(home.memory(".claude-work") / "theirs.md", "theirs", at(2))
    write(home.memory(".claude-work") / "sub" / "deep.md", "deep", at(3))
    write(home.memory(".claude") / "mine" / "x.md", "x", at(4))
    return home


def refusal(call: object, *args: object) -> int:
    with pytest.raises(Refused) as refused:
        call(*args)  # type: ignore[operator]
    return refused.value.errno


def test_writes_land_in_the_own_source_and_never_in_what_memfs_serves(fh: FakeHome) -> None:
    catalog = Catalog(fh.config())
    place = writes.target_folder(catalog, CLAUDE_SLUG, "sub/new.md")
    assert place.root.joinpath(*place.parts) == fh.memory(".claude") / "sub"
    assert refusal(writes.target_folder, catalog, CLAUDE_SLUG, "PREAMBLE.md") == errno.EACCES
    assert refusal(writes.target_folder, catalog, CLAUDE_SLUG, ".history/a/b.md") == errno.EACCES
    assert refusal(writes.target_folder, catalog, CLAUDE_SLUG, ".memfs-stage.x") == errno.EINVAL


def test_every_memory_file_keeps_what_it_replaces_but_writers_files_do_not(
    fh: FakeHome,
) -> None:
    config = fh.config()
    project = load_project(config)
    catalog = Catalog(config)
    assert config.own is not None
    for path in ("handoff-x_20261130.md", "notes.md", "sub/deep.md", "MEMORY.md"):
        keep = writes.keep_for(config, catalog, project, path)
        assert keep is not None, path
        assert keep.prefix == config.own.name
        assert keep.last == config.limits.versions
        assert keep.folder.parts[-2:] == (".history", *path.split("/"))[-2:], path
    # A writer's swap or backup file and what lies under .history/ keep nothing.
    for path in (".notes.md.swp", "notes.md~", ".history/notes.md/claude@x.md"):
        assert writes.keep_for(config, catalog, project, path) is None, path


def test_rename_rules(fh: FakeHome) -> None:
    project = load_project(fh.config())
    check = writes.check_rename
    assert refusal(check, project, "own.md", "x.md", RENAME_EXCHANGE) == errno.EINVAL
    assert refusal(check, project, "missing.md", "x.md", 0) == errno.ENOENT
    assert refusal(check, project, "own.md", "theirs.md", RENAME_NOREPLACE) == errno.EEXIST
    assert refusal(check, project, "own.md", "sub", 0) == errno.EISDIR
    assert refusal(check, project, "sub", "own.md", 0) == errno.ENOTDIR
    assert refusal(check, project, "sub", "sub/inner", 0) == errno.EINVAL
    assert refusal(check, project, "mine", "sub", 0) == errno.ENOTEMPTY
    assert refusal(check, project, "PREAMBLE.md", "p.md", 0) == errno.EACCES
    check(project, "own.md", "theirs.md", 0)  # replacing a file is allowed
    check(project, "own.md", "own.md", RENAME_NOREPLACE)  # onto itself: nothing to do


def test_a_folder_is_renamed_whole_only_when_the_own_source_alone_holds_it(
    fh: FakeHome,
) -> None:
    config = fh.config()
    project = load_project(config)
    assert writes.folder_is_own_only(config, project, "mine")
    assert not writes.folder_is_own_only(config, project, "sub")
    own = writes.own_folder_of(config, project, project.versions("own.md")[0])
    assert own is not None
    assert writes.own_folder_of(config, project, project.versions("theirs.md")[0]) is None


def test_only_a_writers_temporary_name_skips_the_folder_fsync() -> None:
    # Claude Code's `<file>.tmp.<pid>.<12 hex>`: its name is made durable by the rename.
    assert writes.is_temp_name("MEMORY.md.tmp.4242.0123456789ab")
    assert writes.is_temp_name("a b.md.tmp.1.abcdefabcdef")
    for name in ("MEMORY.md", "x.tmp", "x.md.tmp.12.0123456789", "x.md.tmp.pid.0123456789ab"):
        assert not writes.is_temp_name(name), name
    assert not writes.is_temp_name("x.md.tmp.12.0123456789AB")  # upper case: not its form
