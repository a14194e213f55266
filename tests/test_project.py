"""Tier 1: a loaded project: heads, history, MEMORY.md union, incremental changes, preamble.

§4, §5.2, §5.3, §6. Projects load from a fake home in tmp_path; ``_check()`` runs after
every change. The merge must not depend on the order files are scanned or changed in: the
property tests apply the same versions in different orders and compare the views, with
each other and with a fresh load of the same files from disk.
"""

from __future__ import annotations

import dataclasses
import gc
import shutil
import time
import weakref
from pathlib import Path

import pytest
from helpers import (
    CLAUDE_SLUG,
    DISCOVERED,
    PI_SLUG,
    FakeHome,
    at,
    fake_home,
    load_project,
    project_of,
    view,
    write,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.app import offline
from memfs.disk import sources
from memfs.disk.config import Config, PreambleSettings, SourceSpec
from memfs.disk.sources import FileStat
from memfs.rules.tree import ancestors
from memfs.view.project import HISTORY, Kind, Leaf, Origin, Project, history_stamp

PROPS = settings(deadline=None, max_examples=100, database=None)
FILES_AT = "/mnt/memfs/-home-a-my-proj-v2"


@pytest.fixture
def fh(tmp_path: Path) -> FakeHome:
    """Sources claude (own), work and pi, in that config order."""
    fh = fake_home(tmp_path)
    assert [s.name for s in fh.config().sources] == list(DISCOVERED)
    return fh


def hist(path: str, source: str, mtime_ns: int, suffix: str = "") -> str:
    return f"{HISTORY}/{path}/{source}@{history_stamp(mtime_ns)}{suffix}.md"


def shown(project: Project) -> dict[str, tuple[Kind, str | None]]:
    """Every view path -> (kind, source of the version it shows)."""
    return {
        path: (leaf.kind, project.source_name(leaf.version) if leaf.version else None)
        for path, leaf in project.tree.leaves()
    }


def test_history_stamp_is_utc_basic_format() -> None:
    assert history_stamp(at(0)) == "20260101T000000Z"
    assert history_stamp(at(3661.9)) == "20260101T010101Z"


def test_preamble_leaf_exists_in_an_empty_project(fh: FakeHome) -> None:
    project = load_project(fh.config())
    assert shown(project) == {"PREAMBLE.md": (Kind.PREAMBLE, None)}
    assert project.memory_index() == b""


def test_head_is_the_own_version_even_when_older(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "a.md", "own", at(1))
    write(fh.memory(".claude-work") / "a.md", "work, newer", at(5))
    write(fh.pi() / "a.md", "pi, newest", at(9))
    project = load_project(fh.config())
    assert shown(project) == {
        "PREAMBLE.md": (Kind.PREAMBLE, None),
        "a.md": (Kind.FILE, "claude"),
        hist("a.md", "work", at(5)): (Kind.HISTORY, "work"),
        hist("a.md", "pi", at(9)): (Kind.HISTORY, "pi"),
    }
    head = project.head("a.md")
    assert head is not None
    assert project.documents.read(head) == b"own"
    assert len(project.versions("a.md")) == 3


def test_an_own_version_memfs_cannot_read_stays_the_head(fh: FakeHome) -> None:
    # `chmod 000 a.md` through the mount, as a normal user: the own file stays the head,
    # shown with its mode (a read gets EACCES, as on a local folder), so that `chmod 644`
    # changes it back and never copies the older read-only version over it.
    write(fh.memory(".claude") / "a.md", "own", at(1))
    write(fh.memory(".claude-work") / "a.md", "work, newer", at(5))
    project = load_project(fh.config())
    project.set_version(0, FileStat("a.md", 3, at(1), mode=0, readable=False))
    project._check()
    assert shown(project)["a.md"] == (Kind.FILE, "claude")
    head = project.head("a.md")
    assert head is not None
    assert head.mode == 0
    assert not any(e[1] == "a.md" for e in project.counts.left_out)
    project.set_version(0, FileStat("a.md", 3, at(1), mode=0o644))
    project._check()
    assert shown(project)["a.md"] == (Kind.FILE, "claude")


def test_a_read_only_file_memfs_cannot_read_is_left_out(fh: FakeHome) -> None:
    write(fh.memory(".claude-work") / "a.md", "work", at(5))
    write(fh.pi() / "a.md", "pi, older", at(2))
    project = load_project(fh.config())
    work = next(n for n, o in enumerate(project.origins) if o.source == 1)
    project.set_version(work, FileStat("a.md", 4, at(5), mode=0, readable=False))
    project._check()
    assert shown(project)["a.md"] == (Kind.FILE, "pi")  # no version it cannot serve wins
    assert ("work", "a.md") in left_out(project)
    assert len(project.versions("a.md")) == 1


def test_head_is_the_newest_without_an_own_version(fh: FakeHome) -> None:
    write(fh.memory(".claude-work") / "a.md", "work", at(5))
    write(fh.pi() / "a.md", "pi, newer", at(5.5))
    project = load_project(fh.config())
    assert shown(project)["a.md"] == (Kind.FILE, "pi")
    assert shown(project)[hist("a.md", "work", at(5))] == (Kind.HISTORY, "work")


def test_mtime_ties_go_to_config_order(fh: FakeHome) -> None:
    write(fh.memory(".claude-work") / "a.md", "work", at(5))
    write(fh.pi() / "a.md", "pi", at(5))
    project = load_project(fh.config())
    assert shown(project)["a.md"] == (Kind.FILE, "work")
    # The same folders with pi listed first: pi wins the tie.
    config = fh.config()
    reordered = dataclasses.replace(config, sources=(config.sources[2], *config.sources[:2]))
    project = load_project(reordered)
    assert shown(project)["a.md"] == (Kind.FILE, "pi")


def test_pi_slug_and_claude_slug_are_one_project(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "a.md", "a", at(1))
    write(fh.pi() / "b.md", "b", at(2))
    project = load_project(fh.config())
    assert shown(project)["a.md"] == (Kind.FILE, "claude")
    assert shown(project)["b.md"] == (Kind.FILE, "pi")


def test_two_folders_of_one_source_in_the_same_second(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "a.md", "own", at(1))
    write(fh.pi(PI_SLUG) / "a.md", "pi one", at(7.1))
    write(fh.pi(CLAUDE_SLUG) / "a.md", "pi two", at(7.6))  # same canonical slug
    project = load_project(fh.config())
    assert [o.parts for o in project.origins if o.source == 2] == [(CLAUDE_SLUG,), (PI_SLUG,)]
    views = shown(project)
    assert views[hist("a.md", "pi", at(7))] == (Kind.HISTORY, "pi")
    assert views[hist("a.md", "pi", at(7), "~2")] == (Kind.HISTORY, "pi")


def test_subfolders_merge(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "sub" / "a.md", "a", at(1))
    write(fh.memory(".claude-work") / "sub" / "b.md", "b", at(2))
    (fh.memory(".claude-work") / "empty").mkdir()
    project = load_project(fh.config())
    assert list(project.tree.children("sub") or ()) == ["a.md", "b.md"]
    assert project.tree.is_dir("empty")
    assert not project.tree.children("empty")


def test_a_source_preamble_is_history_only(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "PREAMBLE.md", "someone's own preamble", at(3))
    project = load_project(fh.config())
    assert shown(project) == {
        "PREAMBLE.md": (Kind.PREAMBLE, None),
        hist("PREAMBLE.md", "claude", at(3)): (Kind.HISTORY, "claude"),
    }
    assert project.head("PREAMBLE.md") is None


def test_a_source_preamble_n_is_history_only(fh: FakeHome) -> None:
    # §4: PREAMBLE-<N>.md is memfs's own at every N it serves (256 to 1 MiB), listed or not;
    # a source's file or folder of that name would shadow it, so it shows as history.
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "PREAMBLE-1200.md", "someone's own cut preamble", at(3))
    write(work / "PREAMBLE-1048576.md", "another", at(4))
    write(own / "PREAMBLE-300.md" / "x.md", "in a folder of that name", at(5))
    # Names memfs does not serve are ordinary files, at the top and below it.
    for name in (
        "PREAMBLE-255.md",
        "PREAMBLE-0256.md",
        "PREAMBLE-1048577.md",
        "sub/PREAMBLE-1200.md",
    ):
        write(own / name, "ordinary", at(6))
    project = load_project(fh.config())
    assert shown(project) == {
        "PREAMBLE.md": (Kind.PREAMBLE, None),
        hist("PREAMBLE-1200.md", "claude", at(3)): (Kind.HISTORY, "claude"),
        hist("PREAMBLE-1048576.md", "work", at(4)): (Kind.HISTORY, "work"),
        hist("PREAMBLE-300.md/x.md", "claude", at(5)): (Kind.HISTORY, "claude"),
        "PREAMBLE-255.md": (Kind.FILE, "claude"),
        "PREAMBLE-0256.md": (Kind.FILE, "claude"),
        "PREAMBLE-1048577.md": (Kind.FILE, "claude"),
        "sub/PREAMBLE-1200.md": (Kind.FILE, "claude"),
    }
    for path in ("PREAMBLE-1200.md", "PREAMBLE-1048576.md", "PREAMBLE-300.md/x.md"):
        assert project.head(path) is None
    assert not project.tree.is_dir("PREAMBLE-300.md")
    # History is never in PREAMBLE.md; the ordinary files are.
    text = project.preamble(FILES_AT)
    assert b"someone's own" not in text
    assert b"PREAMBLE-1200.md" not in text.replace(b"sub/PREAMBLE-1200.md", b"")
    assert b"PREAMBLE-255.md" in text


def test_source_history_files_are_shown_verbatim(fh: FakeHome) -> None:
    kept = f"{HISTORY}/handoff.md/claude@20251231T235959Z.md"
    write(fh.memory(".claude") / kept, "kept handoff", at(-1))
    write(fh.memory(".claude") / "handoff.md", "now", at(2))
    write(fh.memory(".claude-work") / "handoff.md", "work's", at(1))
    write(fh.memory(".claude-work") / HISTORY / "notes.md", "work's history", at(1))
    project = load_project(fh.config())
    assert shown(project) == {
        "PREAMBLE.md": (Kind.PREAMBLE, None),
        "handoff.md": (Kind.FILE, "claude"),
        kept: (Kind.HISTORY, "claude"),
        hist("handoff.md", "work", at(1)): (Kind.HISTORY, "work"),
        f"{HISTORY}/notes.md": (Kind.HISTORY, "work"),
    }
    assert project.head(kept) is None
    assert project.tree.leaf(kept) == Leaf(Kind.HISTORY, project.versions(kept)[0])


def test_memory_index_is_the_head_alone_with_one_source(fh: FakeHome) -> None:
    write(fh.memory(".claude-work") / "MEMORY.md", "- [a](a.md)\n", at(1))
    project = load_project(fh.config())
    assert shown(project)["MEMORY.md"] == (Kind.FILE, "work")
    assert project.memory_index() == b"- [a](a.md)\n"


def test_memory_index_is_the_union_of_several_sources(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "MEMORY.md", "# Index\n- [a](a.md)\n", at(1))
    write(fh.memory(".claude-work") / "MEMORY.md", "- [A again](a.md)\n- [b](b.md)\n", at(3))
    write(fh.pi() / "MEMORY.md", "# Index\n- [c](c.md)\nplain note\n", at(2))
    project = load_project(fh.config())
    leaf = project.tree.leaf("MEMORY.md")
    assert leaf is not None
    assert leaf.kind is Kind.MEMORY
    assert [project.source_name(v) for v in leaf.others] == ["work", "pi"]  # newest first
    assert project.memory_index() == (
        b"# Index\n- [a](a.md)\n- [b](b.md)\n- [c](c.md)\nplain note\n"
    )
    # The other versions stay readable under .history/.
    assert shown(project)[hist("MEMORY.md", "work", at(3))] == (Kind.HISTORY, "work")
    assert shown(project)[hist("MEMORY.md", "pi", at(2))] == (Kind.HISTORY, "pi")
    # Dropping down to one source makes it a plain file again, and the cache follows.
    project.drop_version(1, "MEMORY.md")
    project.drop_version(2, "MEMORY.md")
    project._check()
    assert shown(project)["MEMORY.md"] == (Kind.FILE, "claude")
    assert project.memory_index() == b"# Index\n- [a](a.md)\n"


def test_a_folder_beats_a_file_of_the_same_path(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "notes", "a file called notes", at(1))
    write(fh.memory(".claude-work") / "notes" / "x.md", "x", at(2))
    project = load_project(fh.config())
    assert project.tree.is_dir("notes")
    views = shown(project)
    assert views["notes/x.md"] == (Kind.FILE, "work")
    assert views[hist("notes", "claude", at(1))] == (Kind.HISTORY, "claude")
    assert project.head("notes") is None
    # The folder goes: the file is the head again.
    work = 1
    project.drop_version(work, "notes/x.md")
    project._check()
    project.set_dir(work, "notes", present=False)
    project._check()
    assert shown(project)["notes"] == (Kind.FILE, "claude")
    assert not project.tree.is_dir("notes")
    assert hist("notes", "claude", at(1)) not in shown(project)


def test_an_empty_folder_beats_a_file_too(fh: FakeHome) -> None:
    write(fh.memory(".claude-work") / "notes", "a file called notes", at(1))
    project = load_project(fh.config())
    own = 0
    project.set_dir(own, "notes", present=True)
    project._check()
    assert project.tree.is_dir("notes")
    assert shown(project)[hist("notes", "work", at(1))] == (Kind.HISTORY, "work")
    project.set_dir(own, "notes", present=False)
    project._check()
    assert shown(project)["notes"] == (Kind.FILE, "work")


def test_whiteout_hides_read_only_versions(fh: FakeHome) -> None:
    write(fh.memory(".claude-work") / "a.md", "work", at(1))
    write(fh.pi() / "a.md", "pi", at(2))
    write(fh.memory(".claude") / "b.md", "own", at(1))
    write(fh.memory(".claude-work") / "b.md", "work", at(2))
    project = load_project(fh.config())
    records = project.whiteout("a.md")
    project._check()
    assert sorted(records) == [("a.md", "pi", at(2)), ("a.md", "work", at(1))]
    assert project.tree.leaf("a.md") is None
    assert project.head("a.md") is None
    assert project.whiteout("a.md") == []  # nothing new
    # The own version is never whited out: only work's b.md is.
    assert project.whiteout("b.md") == [("b.md", "work", at(2))]
    project._check()
    assert shown(project)["b.md"] == (Kind.FILE, "claude")
    # A fresh project given the same records shows the same view.
    again = load_project(fh.config())
    again.set_whiteouts(project.whiteouts)
    again._check()
    assert view(again) == view(project)
    # A read-only source writing the file anew shows through the whiteout.
    project.set_version(1, FileStat("a.md", 9, at(50)))
    project._check()
    assert shown(project)["a.md"] == (Kind.FILE, "work")


def test_whiteout_hides_a_read_only_empty_folder(fh: FakeHome) -> None:
    (fh.memory(".claude-work") / "old").mkdir()
    (fh.memory(".claude") / "mine").mkdir()
    project = load_project(fh.config())
    assert project.tree.is_dir("old")
    assert project.whiteout("old") != []
    project._check()
    assert not project.tree.is_dir("old")
    assert project.whiteout("mine") == []  # the own folder is removed, never whited out
    assert project.tree.is_dir("mine")
    again = project_of(CLAUDE_SLUG, project.config, project.origins, project.whiteouts)
    again._check()
    assert view(again) == view(project)
    project.set_whiteouts(set())
    project._check()
    assert project.tree.is_dir("old")


def test_memory_union_does_not_depend_on_change_order(fh: FakeHome) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
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


def test_files_below_a_source_folder_named_preamble_stay_visible(fh: FakeHome) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # §4/5.2: every version is the head or under .history/. A source folder at the
    # root named PREAMBLE.md is hidden (_hidden), and a file in it is eligible as a head,
    # but tree.add("PREAMBLE.md/x.md") fails under the synthetic PREAMBLE.md leaf: the
    # version is shown nowhere, not even under .history/.
    write(fh.memory(".claude") / "PREAMBLE.md" / "x.md", "x", at(1))
    project = load_project(fh.config())
    shown = [path for path, leaf in project.tree.leaves() if leaf.kind is not Kind.PREAMBLE]
    assert any("x.md" in path for path in shown), shown


# --- incremental changes match a fresh load ------------------------------------------------


def test_rescan_matches_a_fresh_load(fh: FakeHome) -> None:
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "a.md", "a", at(1))
    write(own / "sub" / "b.md", "b", at(2))
    write(work / "a.md", "work a", at(3))
    write(work / "c.md", "c", at(4))
    write(fh.pi() / "MEMORY.md", "- [x](x.md)\n", at(5))
    project = load_project(fh.config())
    # Change every source behind the project's back, then tell it.
    (own / "sub" / "b.md").unlink()
    (own / "sub").rmdir()
    write(own / "c.md", "own c", at(6))
    write(work / "a.md", "work a, again", at(7))
    write(work / "d" / "e.md", "e", at(8))
    write(fh.memory(".claude") / "MEMORY.md", "- [a](a.md)\n", at(9))
    (fh.pi() / "MEMORY.md").unlink()
    for i in range(len(project.origins)):
        offline.rescan(project, i)
        project._check()
    assert view(project) == view(load_project(fh.config()))


def test_single_changes_match_a_fresh_load(fh: FakeHome) -> None:
    own, work, pi = fh.memory(".claude"), fh.memory(".claude-work"), fh.pi()
    write(own / "a.md", "a", at(1))
    project = load_project(fh.config())
    steps = [
        (1, work, "a.md", at(3)),
        (1, work, "sub/b.md", at(2)),
        (0, own, "sub/b.md", at(1)),
        (2, pi, "handoff-20260101.md", at(4)),
        (0, own, "a.md", at(5)),
    ]
    for i, folder, rel, mtime in steps:
        st = write(folder / rel, f"{i} {rel}", mtime).stat()
        project.set_version(i, FileStat(rel, st.st_size, st.st_mtime_ns))
        project._check()
        if "/" in rel:
            project.set_dir(i, "sub", present=True)
            project._check()
        assert view(project) == view(load_project(fh.config()))
    (work / "sub" / "b.md").unlink()
    (work / "sub").rmdir()
    project.drop_version(1, "sub/b.md")
    project._check()
    project.set_dir(1, "sub", present=False)
    project._check()
    assert view(project) == view(load_project(fh.config()))


def test_a_kept_copy_with_the_computed_history_name_outlives_the_original(
    fh: FakeHome,
) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # Adopt (§11) keeps another source's body in the own source under exactly the
    # name memfs computes for that version's history entry. Both claimed one view entry,
    # and when the other source's file went, the entry went too, though the own copy
    # was still on disk.
    write(fh.memory(".claude") / "a.md", "own head", at(5))
    write(fh.memory(".claude-work") / "a.md", "old body", at(1))
    project = load_project(fh.config())
    (name,) = [p for p, _ in project.tree.leaves() if p.startswith(".history/a.md/")]
    write(fh.memory(".claude") / name, "old body", at(1))
    offline.rescan(project, 0)
    project._check()
    project.drop_version(1, "a.md")
    project._check()
    leaf = project.tree.leaf(name)
    assert leaf is not None
    assert leaf.version is not None
    assert project.documents.read(leaf.version) == b"old body"


# --- order independence: a property ----------------------------------------------------------

SLUG = CLAUDE_SLUG
PATHS = (
    "a.md",
    "MEMORY.md",
    "handoff-20260101.md",
    "PREAMBLE.md",
    f"{HISTORY}/h.md",
    "d",
    "d/x.md",
    "sub/y.md",
    # Conflict copies are history of their original; a temp name is never shown.
    "a.sync-conflict-20260101-000000-AAAAAAA.md",
    "MEMORY.sync-conflict-20260101-000000-BBBBBBB.md",
    "sub/.y.md.swp",
)
FOLDERS = ("d", "sub", "empty")
MTIMES = (at(0), at(0.5), at(1), at(2))


def three_sources(base: Path) -> Config:
    def spec(name: str, tail: tuple[str, ...], own: bool = False) -> SourceSpec:
        template = "/".join((str(base / name), "{slug}", *tail))
        return SourceSpec(name, template, base / name, tail, own)

    return Config(
        sources=(spec("claude", ("memory",), True), spec("work", ("memory",)), spec("pi", ())),
        state_dir=base / "state",
        home=base,
    )


def four_origins(base: Path) -> list[Origin]:
    """claude, work and two pi folders that share one canonical slug."""
    return [
        Origin(0, base / "claude", (SLUG, "memory")),
        Origin(1, base / "work", (SLUG, "memory")),
        Origin(2, base / "pi", (PI_SLUG,)),
        Origin(2, base / "pi", (SLUG,)),
    ]


Files = dict[tuple[int, str], int]  # (origin, path) -> mtime_ns
Dirs = set[tuple[int, str]]  # (origin, folder)


@st.composite
def states(draw: st.DrawFn) -> tuple[Files, Dirs]:
    """What four origins hold, as a disk could: no origin has a file and a folder at one path."""
    files: Files = draw(
        st.dictionaries(
            # "d" twice: a file in one origin where another has a folder is the hard case.
            st.tuples(st.integers(0, 3), st.sampled_from((*PATHS, "d"))),
            st.sampled_from(MTIMES),
        )
    )
    dirs: Dirs = draw(st.sets(st.tuples(st.integers(0, 3), st.sampled_from(FOLDERS))))
    for i, path in files:
        dirs.update((i, a) for a in ancestors(path))
    files = {(i, p): m for (i, p), m in files.items() if (i, p) not in dirs}
    return files, dirs


def body(i: int, path: str, mtime_ns: int) -> bytes:
    return f"{i} {path} {mtime_ns}\n".encode()


def stat_of(i: int, path: str, mtime_ns: int) -> FileStat:
    return FileStat(path, len(body(i, path, mtime_ns)), mtime_ns)


Op = tuple[str, int, str, int]  # ("file" | "drop" | "dir" | "undir", origin, path, mtime)


def apply(project: Project, ops: list[Op]) -> None:
    for kind, i, path, mtime in ops:
        if kind == "file":
            project.set_version(i, stat_of(i, path, mtime))
        elif kind == "drop":
            project.drop_version(i, path)
        else:
            project.set_dir(i, path, present=kind == "dir")
        project._check()


def empty_project(base: Path) -> Project:
    """A project whose origins are registered but hold nothing yet (their folders are absent)."""
    return project_of(SLUG, three_sources(base), four_origins(base / "absent"))


def normalised(project: Project) -> list[tuple[str, Kind, object, frozenset[object]]]:
    """The view's leaves; a union's other versions as a set (see test_core_bugs.py)."""
    return [
        (path, leaf.kind, leaf.version, frozenset(leaf.others))
        for path, leaf in sorted(project.tree.leaves())
    ]


def folders(project: Project) -> dict[str, list[str]]:
    return view(project)[1]


@PROPS
@given(state=states(), data=st.data())
def test_merge_does_not_depend_on_order(
    tmp_path_factory: pytest.TempPathFactory, state: tuple[Files, Dirs], data: st.DataObject
) -> None:
    files, dirs = state
    finals: list[Op] = [("file", i, p, m) for (i, p), m in files.items()]
    finals += [("dir", i, p, 0) for i, p in dirs]
    # A: the scan's own order, sorted. B: any order, with detours through versions and
    # folders that come and go before the final state.
    a_ops = sorted(finals)
    b_ops = list(data.draw(st.permutations(finals)))
    detours = data.draw(
        st.lists(
            st.tuples(st.integers(0, 3), st.sampled_from(("a.md", "MEMORY.md", "sub/y.md"))),
            max_size=4,
        )
    )
    for i, path in detours:
        final = files.get((i, path))
        temp: Op = ("file", i, path, at(99))
        pos = data.draw(st.integers(0, len(b_ops)))
        if final is not None:
            # The version changes before it reaches its final mtime.
            end = next(n for n, op in enumerate(b_ops) if op == ("file", i, path, final))
            b_ops.insert(min(pos, end), temp)
        else:
            b_ops.insert(pos, temp)
            b_ops.insert(data.draw(st.integers(pos + 1, len(b_ops))), ("drop", i, path, 0))
    # Folders that come and go, above all where another origin has a file.
    taken = sorted({p for _, p in files} | set(FOLDERS))
    comings = st.tuples(st.integers(0, 3), st.sampled_from(taken))
    for i, folder in data.draw(st.lists(comings, min_size=1, max_size=2)):
        if (i, folder) in dirs or (i, folder) in files:
            continue
        pos = data.draw(st.integers(0, len(b_ops)))
        b_ops.insert(pos, ("dir", i, folder, 0))
        b_ops.insert(data.draw(st.integers(pos + 1, len(b_ops))), ("undir", i, folder, 0))

    base = tmp_path_factory.mktemp("order")
    a, b = empty_project(base), empty_project(base)
    apply(a, a_ops)
    apply(b, b_ops)
    assert normalised(a) == normalised(b)
    assert folders(a) == folders(b)

    # C: the same state written to disk and loaded fresh.
    origins = four_origins(base)
    for (i, path), mtime in files.items():
        write(origins[i].folder / path, body(i, path, mtime), mtime)
    for i, path in dirs:
        (origins[i].folder / path).mkdir(parents=True, exist_ok=True)
    c = project_of(SLUG, three_sources(base), origins)
    c._check()
    assert normalised(c) == normalised(a)
    assert folders(c) == folders(a)


# --- PREAMBLE.md -----------------------------------------------------------------------------


def with_preamble(fh: FakeHome, **settings: int) -> Config:
    return dataclasses.replace(fh.config(), preamble=PreambleSettings(**settings))


def test_preamble_picks_the_latest_dated_handoff(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    write(own / "handoff-a_20260101.md", "the latest by date", at(10))
    write(own / "handoff-b_20251231.md", "an older date, touched later", at(20))
    write(own / "handoff.md", "undated, newest by mtime", at(30))
    write(fh.memory(".claude-work") / "handoff-c_20251230.md", "older still", at(40))
    project = load_project(fh.config())
    text = project.preamble(FILES_AT, at(100))
    assert b"## Handoff: handoff-a_20260101.md (from claude, 2026-01-01 00:00 UTC)\n" in text
    assert b"the latest by date" in text
    assert text.count(b"## Handoff:") == 1
    # The other handoffs are superseded: only in the index, marked, never inlined.
    assert b"## Recent" not in text
    for name in ("handoff.md", "handoff-b_20251231.md", "handoff-c_20251230.md"):
        line = text.split(f"\n- {name} (".encode())[1].split(b"\n")[0]
        assert line.endswith(b"; superseded handoff)")
    assert b"undated, newest by mtime" not in text
    assert b"older still" not in text


def test_preamble_sections_and_index(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    write(own / "MEMORY.md", "- [a](a.md)\n", at(1))
    write(fh.memory(".claude-work") / "MEMORY.md", "- [b](b.md)\n", at(2))
    for n in range(6):
        head = f"---\nname: t{n}\ndescription: topic number {n}\n---\nbody {n}\n"
        write(own / f"t{n}.md", head, at(10 + n))
    project = load_project(with_preamble(fh, budget=8192, newest=2, file_cap=4096, index_max=3))
    text = project.preamble(FILES_AT, at(100))
    assert text.startswith(b"# Project memory: ")
    assert FILES_AT.encode() in text
    assert b"## Index: MEMORY.md\n\n- [a](a.md)\n- [b](b.md)\n" in text
    assert b"## Recent: t5.md" in text
    assert b"## Recent: t4.md" in text
    assert b"## Recent: t3.md" not in text
    assert b"- t3.md (" in text
    assert b": topic number 3\n" in text
    assert b"- t1.md (" in text
    assert b"- t0.md" not in text
    assert b"+1 more" in text
    # Same sources, same bytes.
    assert load_project(project.config).preamble(FILES_AT, at(100)) == text


def test_preamble_leaves_out_files_from_the_future(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    write(own / "past.md", "from the past", at(10))
    write(own / "future.md", "from the future", at(100))
    write(own / "handoff-20260301.md", "a future handoff", at(100))
    write(own / "handoff-20260101.md", "today's handoff", at(5))
    project = load_project(fh.config())
    text = project.preamble(FILES_AT, at(50))
    assert b"today's handoff" in text
    assert b"future" not in text
    assert b"past.md" in text
    # The view still shows them.
    assert project.tree.leaf("future.md") is not None
    # Once their time has come they are in, though nothing changed in between.
    later = project.preamble(FILES_AT, at(200))
    assert b"a future handoff" in later
    assert b"## Recent: future.md" in later


@pytest.mark.parametrize("budget", [0, 50, 300, 700, 2000])
def test_preamble_stays_within_budget(fh: FakeHome, budget: int) -> None:
    own = fh.memory(".claude")
    write(own / "MEMORY.md", "".join(f"- [t{n}](t{n}.md) é\n" for n in range(200)), at(1))
    write(own / "handoff-20260101.md", "h" * 5000, at(2))
    for n in range(30):
        write(own / f"t{n}.md", f"topic {n} ü\n" * 100, at(3 + n))
    project = load_project(with_preamble(fh, budget=budget, newest=3, file_cap=900, index_max=50))
    text = project.preamble(FILES_AT, at(100))
    assert len(text) <= budget
    text.decode("utf-8")  # never a split character


def test_preamble_is_cached_until_the_project_changes(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    write(own / "a.md", "first", at(1))
    project = load_project(fh.config())
    text = project.preamble(FILES_AT, at(100))
    assert project.preamble(FILES_AT, at(101)) is text
    write(own / "b.md", "second", at(2))
    offline.rescan(project, 0)
    project._check()
    assert b"second" in project.preamble(FILES_AT, at(102))


def test_preamble_sees_a_future_memory_index_once_its_time_has_come(fh: FakeHome) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # §6: a file dated after the open is left out, and comes in once its time has come.
    # valid_until only looks at _by_mtime, which excludes MEMORY.md, so the preamble cached
    # without the index is served until something else changes.
    write(fh.memory(".claude") / "a.md", "a", at(1))
    write(fh.memory(".claude") / "MEMORY.md", "- [a](a.md)\n", at(100))
    project = load_project(fh.config())
    assert b"## Index" not in project.preamble(FILES_AT, at(50))
    assert b"## Index" in project.preamble(FILES_AT, at(200))


def test_preamble_leaves_out_future_lines_of_other_memory_indexes(fh: FakeHome) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # §6: "Files with an mtime later than the moment of the open are left out of the
    # preamble." The union inlined as the index takes every other MEMORY.md, future or not.
    write(fh.memory(".claude") / "MEMORY.md", "- [a](a.md)\n", at(1))
    write(fh.memory(".claude-work") / "MEMORY.md", "- [later](later.md)\n", at(100))
    project = load_project(fh.config())
    text = project.preamble(FILES_AT, at(50))
    assert b"- [a](a.md)" in text
    assert b"later.md" not in text


def test_preamble_cache_follows_files_at(fh: FakeHome) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # Project.preamble caches per generation only; a call with another files_at (another
    # mount path, or None for `memfs preamble`) gets text pointing at the first one.
    write(fh.memory(".claude") / "a.md", "a", at(1))
    project = load_project(fh.config())
    project.preamble("/mnt/one/x", at(50))
    assert b"/mnt/two/x" in project.preamble("/mnt/two/x", at(50))


# --- sync tools' files and conflict copies (§5.1) ----------------------------------------

CONFLICT = "notes.sync-conflict-20261201-075022-C7DWIIF.md"
TEMP = ".syncthing.x.md.tmp"


def left_out(project: Project) -> set[tuple[str, str]]:
    """(source, path) of each left-out file; status labels them `<source>:<origin>`."""
    return {(source.split(":")[0], path) for source, path, _ in project.counts.left_out}


def test_temp_and_tool_files_are_left_out_and_counted(fh: FakeHome) -> None:
    work = fh.memory(".claude-work")
    write(work / "notes.md", "notes", at(1))
    write(work / TEMP, b"\0" * 4096, at(9))
    write(work / "sub" / ".notes.md.swp", b"b0VIM 9.0\0\0", at(9))
    write(work / ".stversions" / "notes~20261201-075022.md", "archived", at(9))
    write(work / ".git" / "HEAD", "ref: refs/heads/main\n", at(9))
    write(work / ".memfs-stage.0011223344556677", "a stage in a read-only source", at(9))
    project = load_project(fh.config())
    assert set(shown(project)) == {"PREAMBLE.md", "notes.md"}
    assert not project.tree.is_dir(".stversions")
    assert left_out(project) == {
        ("work", TEMP),
        ("work", "sub/.notes.md.swp"),
        ("work", ".stversions"),
        ("work", ".git"),
        ("work", ".memfs-stage.0011223344556677"),
    }
    text = project.preamble(FILES_AT, now_ns=at(100))
    assert b"\0" not in text
    for name in (b"syncthing", b"swp", b"stversions", b"archived", b"memfs-stage", b"HEAD"):
        assert name not in text


def test_single_path_updates_follow_the_same_rule(fh: FakeHome) -> None:
    # The watcher and the adapter re-read one path with stat_file, then call set_version.
    work = fh.memory(".claude-work")
    write(work / "notes.md", "notes", at(1))
    project = load_project(fh.config())
    i = next(n for n, o in enumerate(project.origins) if o.source == 1)
    for path in (TEMP, "~syncthing~x.md.tmp", ".notes.md.AbC123", ".git/config", "n.md~"):
        project.set_version(i, FileStat(path, 10, at(5)))
        project._check()
        assert project.tree.leaf(path) is None
        assert ("work", path) in left_out(project)
        project.set_version(i, FileStat(path, 20, at(6)))  # it grows: still one entry
        assert len([e for e in project.counts.left_out if e[1] == path]) == 1
        project.drop_version(i, path)  # renamed away or deleted: no longer counted
        project._check()
        assert ("work", path) not in left_out(project)
    assert set(shown(project)) == {"PREAMBLE.md", "notes.md"}


def test_a_writers_temp_file_in_the_own_source_stays_shown_across_loads(fh: FakeHome) -> None:
    # rsync through the mount: `.notes.md.AbC123` is created, closed (committed), given its
    # mtime, then renamed over notes.md. Written through the mount, it lands in the own
    # source, and a name accepted there is shown for as long as it is on disk: by every
    # later load too (a remount), not only while one mount remembers its writer.
    own = fh.memory(".claude")
    work = fh.memory(".claude-work")
    write(own / "notes.md", "old", at(1))
    temp = ".notes.md.AbC123"
    write(own / temp, "RSYNCED-BODY", at(2))
    write(work / temp, "another writer's temp, in flight", at(3))
    for project in (load_project(fh.config()), load_project(fh.config())):
        project._check()
        assert shown(project)[temp] == (Kind.FILE, "claude")
        assert ("claude", temp) not in left_out(project)
        assert ("work", temp) in left_out(project)  # never a version, not even history
        assert len(project.versions(temp)) == 1
        # The writer's temp file is its own business: never in PREAMBLE.md.
        assert temp.encode() not in project.preamble(FILES_AT, now_ns=at(100))
        assert b"RSYNCED-BODY" not in project.preamble(FILES_AT, now_ns=at(100))
    offline.rescan(project, 0)  # a rescan (an inotify overflow) keeps it too
    assert shown(project)[temp] == (Kind.FILE, "claude")
    (own / temp).rename(own / "notes.md")
    project.drop_version(0, temp)
    project.set_version(0, FileStat("notes.md", 12, at(2)))
    project._check()
    assert project.tree.leaf(temp) is None
    project.set_version(0, FileStat(temp, 5, at(4)))  # a look at a new one (the watcher's)
    project._check()
    assert shown(project)[temp] == (Kind.FILE, "claude")


def test_a_tools_file_is_left_out_of_the_own_source_too(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    for name in (".memfs-stage.0011", "._notes.md", ".DS_Store", ".git", ".syncthing.a.tmp"):
        write(own / name, "a tool's", at(1))
    write(own / "notes.md.tmp.123.0123456789ab", "Claude Code's temp: ordinary", at(1))
    project = load_project(fh.config())
    project.set_version(0, FileStat(".stignore", 1, at(1)))
    project._check()
    assert set(shown(project)) == {"PREAMBLE.md", "notes.md.tmp.123.0123456789ab"}
    assert ("claude", "._notes.md") in left_out(project)
    assert ("claude", ".stignore") in left_out(project)


def test_a_conflict_copy_is_a_version_of_its_original(fh: FakeHome) -> None:
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "notes.md", "own notes", at(1))
    write(work / "notes.md", "work notes", at(2))
    write(work / CONFLICT, "the losing edit", at(3))
    write(work / "sub" / "b (Alice's conflicted copy 2026-12-01).md", "dropbox", at(4))
    project = load_project(fh.config())
    assert shown(project) == {
        "PREAMBLE.md": (Kind.PREAMBLE, None),
        "notes.md": (Kind.FILE, "claude"),
        hist("notes.md", "work", at(2)): (Kind.HISTORY, "work"),
        hist("notes.md", "work", at(3)): (Kind.HISTORY, "work"),
        hist("sub/b.md", "work", at(4)): (Kind.HISTORY, "work"),
    }
    leaf = project.leaf(hist("notes.md", "work", at(3)))
    assert leaf is not None
    assert leaf.version is not None
    assert project.documents.read(leaf.version) == b"the losing edit"
    assert project.conflicts("notes.md") == 1
    assert project.conflicts("sub/b.md") == 1
    assert project.conflicts("other.md") == 0
    assert project.head("sub/b.md") is None  # never a head, even with no original
    assert project.versions("notes.md") == [v for v in project.versions("notes.md")]
    assert len(project.versions("notes.md")) == 2  # what writes act on: not the copies
    text = project.preamble(FILES_AT, now_ns=at(100))
    assert b"sync-conflict" not in text
    assert b"conflicted copy" not in text
    assert b"the losing edit" not in text
    # The preamble marks a file with unresolved conflict copies, where they are (§5.1).
    assert b"1 unresolved conflict copy under .history/notes.md/" in text
    project.drop_version(1, CONFLICT)  # resolved: the copy is deleted
    assert b"unresolved conflict" not in project.preamble(FILES_AT, now_ns=at(100))


def test_conflict_copies_come_and_go_one_at_a_time(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    write(own / "notes.md", "own notes", at(1))
    project = load_project(fh.config())
    second = "notes.sync-conflict-20261202-010203-ABCDEFG.md"
    project.set_version(0, FileStat(CONFLICT, 5, at(3)))
    project._check()
    project.set_version(0, FileStat(second, 5, at(3)))  # same second: a second name
    project._check()
    assert project.conflicts("notes.md") == 2
    assert set(shown(project)) == {
        "PREAMBLE.md",
        "notes.md",
        hist("notes.md", "claude", at(3)),
        hist("notes.md", "claude", at(3), "~2"),
    }
    project.drop_version(0, CONFLICT)  # resolved: the user deleted the copy
    project._check()
    assert project.conflicts("notes.md") == 1
    project.drop_version(0, second)
    project._check()
    assert project.conflicts("notes.md") == 0
    assert set(shown(project)) == {"PREAMBLE.md", "notes.md"}


def test_a_memory_conflict_copy_joins_the_union(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    write(own / "MEMORY.md", "- [a](a.md)\n", at(1))
    write(own / "MEMORY.sync-conflict-20261201-075022-C7DWIIF.md", "- [b](b.md)\n", at(2))
    project = load_project(fh.config())
    assert project.memory_index() == b"- [a](a.md)\n- [b](b.md)\n"
    leaf = project.leaf("MEMORY.md")
    assert leaf is not None
    assert leaf.kind is Kind.MEMORY
    assert project.conflicts("MEMORY.md") == 1


def test_looks_at_vanished_paths_are_forgotten_in_time(fh: FakeHome) -> None:
    # Every temp name a writer used is looked at twice (made, renamed away): the record of
    # those looks must not grow for ever (the soak's RSS), nor forget a live path's.
    from memfs.view import holdings

    write(fh.memory(".claude") / "kept.md", "kept", at(1))
    project = load_project(fh.config())
    start = time.monotonic_ns()  # looks after the load's scan, as a watcher's are
    project.observe(0, "kept.md", FileStat("kept.md", 4, at(1)), start)
    for n in range(3 * holdings.SEEN_SLACK):
        t = start + n * holdings.SEEN_KEEP_NS // 100
        name = f"kept.md.tmp.1.{n:012x}"
        project.observe(0, name, FileStat(name, 1, at(2)), t)
        project.observe(0, name, None, t + 1)
    assert len(project._seen) <= 2 * holdings.SEEN_SLACK
    assert (0, "kept.md") in project._seen  # a path that is there keeps its look
    project._check()


def test_a_rescan_under_a_folder_changes_what_lies_below_it_alone(fh: FakeHome) -> None:
    """A folder made, moved or gone (the watcher's folder events): its scan brings what
    lies below it up to date, and leaves the rest of the origin as it stands, even where
    the disk changed unseen (that change has its own event)."""
    own = fh.memory(".claude")
    write(own / "a.md", "a", at(1))
    write(own / "old" / "o.md", "o", at(2))
    write(own / "old" / "in" / "i.md", "i", at(3))
    project = load_project(fh.config())
    i = 0
    write(own / "new" / "n.md", "n", at(4))
    (own / "a.md").unlink()  # unseen by a scan of new/ alone
    project.rescan(i, offline.scan(project, i, "new"), None, "new")
    project._check()
    assert project.tree.leaf("new/n.md") is not None
    assert project.tree.is_dir("new")
    assert project.tree.leaf("a.md") is not None
    shutil.rmtree(own / "old")
    project.rescan(i, offline.scan(project, i, "old"), None, "old")
    project._check()
    for gone in ("old/o.md", "old/in/i.md"):
        assert project.tree.leaf(gone) is None
    assert not project.tree.is_dir("old")
    assert not project.tree.is_dir("old/in")
    assert project.tree.leaf("new/n.md") is not None


def test_a_rescan_that_finds_nothing_new_changes_nothing(fh: FakeHome) -> None:
    # The common rescan (an inotify overflow, a folder appearing): every file known already.
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    for k in range(20):
        write(own / "sub" / f"n{k}.md", f"own {k}", at(k + 1))
        write(work / f"w{k}.md", f"work {k}", at(k + 1))
    write(work / ".w0.md.swp", "a swap file", at(1))  # left out by name, every time
    project = load_project(fh.config())
    before, generation = view(project), project.generation
    project.tree.changes.clear()
    for i in range(len(project.origins)):
        offline.rescan(project, i)
        project._check()
    assert project.generation == generation
    assert not project.tree.changes
    assert view(project) == before
    assert ("work", ".w0.md.swp") in left_out(project)
    # A file that did change is still taken in by the same rescan.
    w = project.origins.index(next(o for o in project.origins if o.source == 1))
    write(work / "w3.md", "work 3, longer now", at(40))
    offline.rescan(project, w)
    project._check()
    assert project.generation > generation
    assert project.tree.changes == {"w3.md"}
    # The rescan's time is taken in for the files it found unchanged too: an older look
    # coming back late loses, a later one wins, and a later one stays over the rescan.
    scan, t = offline.scan(project, w), 10**15
    project.rescan(w, scan, t)
    project.observe(w, "w5.md", None, t - 1)
    assert project.tree.leaf("w5.md") is not None
    project.observe(w, "w5.md", None, t + 1)
    assert project.tree.leaf("w5.md") is None
    later = FileStat("w6.md", 99, at(50))
    project.observe(w, "w6.md", later, t + 10)
    project.rescan(w, scan, t + 5)
    leaf = project.tree.leaf("w6.md")
    assert leaf is not None
    assert leaf.version is not None
    assert leaf.version.size == 99
    project._check()


def test_a_dropped_project_is_freed_by_reference_counting_alone(fh: FakeHome) -> None:
    # The watcher freezes every loaded project out of the collector's sight (watch.Turns),
    # so only reference counting frees one dropped since: a project and its documents
    # (which hold it weakly) must make no reference cycle, caches filled or not.
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "MEMORY.md", "- [a](a.md)\n", at(1))
    write(work / "MEMORY.md", "- [b](b.md)\n", at(2))
    write(own / "notes.md", "own\n", at(3))
    write(work / "notes.md", "newer elsewhere\n", at(4))
    project = load_project(fh.config())
    project.preamble(FILES_AT, now_ns=at(100))
    project.documents.stale_own_heads()
    project.documents.memory_over_limit()
    project.keep_bodies(sources.read_bodies(project.bodies_wanted(now_ns=at(100))))
    project._check()
    gone = weakref.ref(project)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        del project
        assert gone() is None
    finally:
        if was_enabled:
            gc.enable()


def test_bodies_read_ahead_leave_the_renderings_nothing_to_read(
    fh: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    # §7a: the watcher reads what the next PREAMBLE.md and MEMORY.md need in a worker
    # (bodies_wanted, read_bodies, keep_bodies); the renderings, on the request thread,
    # then read nothing, and are byte for byte what reading the disk gives.
    own, work, pi = fh.memory(".claude"), fh.memory(".claude-work"), fh.pi()
    write(own / "MEMORY.md", "- [a](a.md)\n", at(1))
    write(work / "MEMORY.md", "- [b](b.md)\nwork line\n", at(2))
    write(pi / "MEMORY.md", "- [c](c.md)\n", at(3))
    write(own / "handoff-x_20260105.md", "latest handoff\n", at(4))
    write(work / "handoff-y_20260102.md", "an older handoff\n", at(40))
    write(own / "blob.md", b"binary\0body", at(30))
    for k in range(80):
        body = f"---\ndescription: topic {k}\n---\nbody {k}\n"
        write((own if k % 2 else work) / f"t{k:02d}.md", body, at(5 + k / 10))
    expected = load_project(fh.config())
    want_preamble = expected.preamble(FILES_AT, now_ns=at(100))
    want_memory = expected.memory_index()
    for part in (b"latest handoff", b"work line", b"[c](c.md)", b"topic 40", b"body 79"):
        assert part in want_preamble, part  # handoff, union, descriptions, newest inlined
    project = load_project(fh.config())
    project.keep_bodies(sources.read_bodies(project.bodies_wanted(now_ns=at(100))))
    reads: list[str] = []

    def refuse(root: Path, parts: object, path: str, limit: int) -> bytes:
        reads.append(path)
        raise AssertionError(f"read {path} on the request thread")

    monkeypatch.setattr(project, "read_body", refuse)
    assert project.memory_index() == want_memory
    assert project.preamble(FILES_AT, now_ns=at(100)) == want_preamble
    assert reads == []
    # A second look wants nothing more; a change wants only what it changed.
    assert project.bodies_wanted(now_ns=at(100)) == []
    write(own / "t79.md", "---\ndescription: changed\n---\nbody 79, changed\n", at(20))
    offline.rescan(project, 0)
    assert [v.path for v, _ in project.bodies_wanted(now_ns=at(100))] == ["t79.md"]
    project.documents.drop_bodies()  # dropped: the disk again
    with pytest.raises(AssertionError, match="on the request thread"):
        project.documents.read(project.versions("t00.md")[0])
