"""Tier 1: regressions for core bugs found in review; each failed before its fix."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from helpers import CLAUDE_SLUG, FakeHome, at, fake_home, load_project, write

from memfs.disk import config as cfg
from memfs.disk import sources, staging
from memfs.disk.sources import FileStat
from memfs.disk.staging import Place
from memfs.view.project import Kind

FILES_AT = "/mnt/memfs/-home-a-my-proj-v2"


@pytest.fixture
def fh(tmp_path: Path) -> FakeHome:
    return fake_home(tmp_path)


# --- config.py ------------------------------------------------------------------------------


def test_config_file_without_sources_still_discovers_them(fh: FakeHome) -> None:
    # §3: "Every key has a default; the file is optional." A file that only tunes the
    # preamble must not drop every source: `source` defaults to the discovered ones.
    path = cfg.config_path(fh.env)
    path.parent.mkdir(parents=True)
    path.write_text("[preamble]\nbudget = 4096\n", encoding="utf-8")
    config = cfg.load(fh.env)
    assert config.preamble.budget == 4096
    assert [s.name for s in config.sources] == [s.name for s in cfg.discover(fh.env)]


# --- sources.py ---------------------------------------------------------------------------


def test_scan_of_a_deep_tree_does_not_crash(tmp_path: Path) -> None:
    # §5.1: odd entries are left out, never fatal. _scan_dir/_scan_subdir recurse two
    # frames per level, so ~500 nested folders raise RecursionError out of scan().
    root = tmp_path / "root"
    (root / "s").mkdir(parents=True)
    fd = os.open(root / "s", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(600):
            os.mkdir("a", dir_fd=fd)
            child = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    result = sources.scan(root, ("s",), 1000)
    assert result.exists


# --- project.py -----------------------------------------------------------------------------


def test_memory_union_does_not_depend_on_change_order(fh: FakeHome) -> None:
    # §5.3 and §6 ("the same sources give byte-identical output"): two other MEMORY.md
    # versions with the same mtime are ordered by dict insertion order in _show_head, so
    # the union's lines come out in the order the files were scanned or changed.
    write(fh.memory(".claude") / "MEMORY.md", "- [a](a.md)\n", at(1))
    work = write(fh.memory(".claude-work") / "MEMORY.md", "- [w](w.md)\n", at(5))
    pi = write(fh.pi() / "MEMORY.md", "- [p](p.md)\n", at(5))
    one = load_project(fh.config())  # work (origin 1) scanned before pi (origin 2)
    two = load_project(fh.config())
    two.drop_version(1, "MEMORY.md")
    two.set_version(1, FileStat("MEMORY.md", work.stat().st_size, at(5)))  # work again, last
    two._check()
    assert pi.exists()
    assert one.memory_index() == two.memory_index()


def test_preamble_sees_a_future_memory_index_once_its_time_has_come(fh: FakeHome) -> None:
    # §6: a file dated after the open is left out, and comes in once its time has come.
    # valid_until only looks at _by_mtime, which excludes MEMORY.md, so the preamble cached
    # without the index is served until something else changes.
    write(fh.memory(".claude") / "a.md", "a", at(1))
    write(fh.memory(".claude") / "MEMORY.md", "- [a](a.md)\n", at(100))
    project = load_project(fh.config())
    assert b"## Index" not in project.preamble(FILES_AT, at(50))
    assert b"## Index" in project.preamble(FILES_AT, at(200))


def test_preamble_leaves_out_future_lines_of_other_memory_indexes(fh: FakeHome) -> None:
    # §6: "Files with an mtime later than the moment of the open are left out of the
    # preamble." The union inlined as the index takes every other MEMORY.md, future or not.
    write(fh.memory(".claude") / "MEMORY.md", "- [a](a.md)\n", at(1))
    write(fh.memory(".claude-work") / "MEMORY.md", "- [later](later.md)\n", at(100))
    project = load_project(fh.config())
    text = project.preamble(FILES_AT, at(50))
    assert b"- [a](a.md)" in text
    assert b"later.md" not in text


def test_preamble_cache_follows_files_at(fh: FakeHome) -> None:
    # Project.preamble caches per generation only; a call with another files_at (another
    # mount path, or None for `memfs preamble`) gets text pointing at the first one.
    write(fh.memory(".claude") / "a.md", "a", at(1))
    project = load_project(fh.config())
    project.preamble("/mnt/one/x", at(50))
    assert b"/mnt/two/x" in project.preamble("/mnt/two/x", at(50))


def test_files_below_a_source_folder_named_preamble_stay_visible(fh: FakeHome) -> None:
    # §4/5.2: every version is the head or under .history/. A source folder at the
    # root named PREAMBLE.md is hidden (_hidden), and a file in it is eligible as a head,
    # but tree.add("PREAMBLE.md/x.md") fails under the synthetic PREAMBLE.md leaf: the
    # version is shown nowhere, not even under .history/.
    write(fh.memory(".claude") / "PREAMBLE.md" / "x.md", "x", at(1))
    project = load_project(fh.config())
    shown = [path for path, leaf in project.tree.leaves() if leaf.kind is not Kind.PREAMBLE]
    assert any("x.md" in path for path in shown), shown


# --- staging.py -----------------------------------------------------------------------------


@pytest.fixture
def place(tmp_path: Path) -> Place:
    root = tmp_path / "projects"
    (root / CLAUDE_SLUG / "memory").mkdir(parents=True)
    return Place(root, (CLAUDE_SLUG, "memory"))


def test_rename_noreplace_moves_a_folder(place: Place) -> None:
    # staging.rename(noreplace=True) uses link+unlink, and link(2) refuses directories
    # (EPERM): `mv` of a folder with RENAME_NOREPLACE fails although the name is free.
    folder = place.root.joinpath(*place.parts)
    (folder / "sub").mkdir()
    staging.rename(place, "sub", place, "moved", noreplace=True)
    assert (folder / "moved").is_dir()


def test_set_attrs_mode_does_not_follow_a_symlink_out_of_the_source(
    place: Place, tmp_path: Path
) -> None:
    # §10: memfs writes only in the own source. set_attrs(mode=...) calls os.chmod
    # with follow_symlinks=True, so a symlink planted in the own source (or a file swapped
    # for one between lookup and setattr) lets chmod change a file anywhere.
    outside = write(tmp_path / "outside.txt", "not memfs's")
    os.chmod(outside, 0o644)
    folder = place.root.joinpath(*place.parts)
    (folder / "a.md").symlink_to(outside)
    with pytest.raises(OSError):  # noqa: PT011 (any refusal will do)
        staging.set_attrs(place, "a.md", mode=0o600)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644


def test_set_attrs_size_and_times_in_one_call_keeps_the_times(place: Place) -> None:
    # set_attrs applies times before size; the ftruncate then stamps mtime with the
    # current time, so a setattr asking for both gets the wrong mtime.
    target = write(place.root.joinpath(*place.parts) / "a.md", "0123456789")
    staging.set_attrs(place, "a.md", times_ns=(at(1), at(2)), size=3)
    assert target.read_bytes() == b"012"
    assert target.stat().st_mtime_ns == at(2)


def test_a_kept_copy_with_the_computed_history_name_outlives_the_original(
    fh: FakeHome,
) -> None:
    # Adopt (§11) keeps another source's body in the own source under exactly the
    # name memfs computes for that version's history entry. Both claimed one view entry,
    # and when the other source's file went, the entry went too, though the own copy
    # was still on disk.
    write(fh.memory(".claude") / "a.md", "own head", at(5))
    write(fh.memory(".claude-work") / "a.md", "old body", at(1))
    project = load_project(fh.config())
    (name,) = [p for p, _ in project.tree.leaves() if p.startswith(".history/a.md/")]
    write(fh.memory(".claude") / name, "old body", at(1))
    project.rescan(0)
    project._check()
    project.drop_version(1, "a.md")
    project._check()
    leaf = project.tree.leaf(name)
    assert leaf is not None
    assert leaf.version is not None
    assert project.documents.read(leaf.version) == b"old body"
