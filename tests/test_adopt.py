"""Tier 1 (and one tier-3 check): adopting an old account's memory (§11).

A fake home in tmp_path holds the own account (``.claude``, source ``claude``), an old one
(``.claude-work``, source ``work``) and pi. The clock is injected, so expiry never depends
on the real time; the list's state file lives in the fake ``$XDG_STATE_HOME``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import (
    CLAUDE_SLUG,
    PI_SLUG,
    SECOND_NS,
    XDG_VARS,
    FakeHome,
    at,
    fake_home,
    write,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.app import adopt, cli
from memfs.app.adopt import HASH_SHOWN, LIST_TTL_NS, AdoptError, AdoptionList
from memfs.disk import state
from memfs.disk.config import Config
from memfs.rules.index import link_target
from memfs.rules.slug import project_slug
from memfs.view.project import history_stamp

PROPS = settings(deadline=None, max_examples=100, database=None)

Tree = dict[str, tuple[str, bytes | None, int, int]]  # path -> (kind, bytes, mtime_ns, mode)


class Clock:
    """A settable clock for list expiry."""

    def __init__(self, now: int = at(1000)) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def tree(folder: Path) -> Tree:
    """Every entry below ``folder``: kind, bytes (files; link target for links), mtime, mode."""
    found: Tree = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(folder))
            st_ = path.lstat()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path).encode(), st_.st_mtime_ns, st_.st_mode)
            elif path.is_dir():
                found[rel] = ("dir", None, st_.st_mtime_ns, st_.st_mode)
            else:
                found[rel] = ("file", path.read_bytes(), st_.st_mtime_ns, st_.st_mode)
    return found


def reachable(own: Path, path: str, data: bytes) -> bool:
    """``data`` is the own head at ``path`` or a file in ``.history/<path>/``."""
    head = own / path
    if head.is_file() and not head.is_symlink() and head.read_bytes() == data:
        return True
    kept = own / ".history" / path
    return kept.is_dir() and any(
        p.is_file() and p.read_bytes() == data for p in kept.iterdir() if not p.is_symlink()
    )


def links(text: str) -> set[str]:
    return {t for line in text.split("\n") if (t := link_target(line)) is not None}


@pytest.fixture
def fh(tmp_path: Path) -> FakeHome:
    return fake_home(tmp_path)


@pytest.fixture
def clock() -> Clock:
    return Clock()


OWN_INDEX = "# Memory\n- [Style](style.md) - how we write\n"
WORK_INDEX = (
    "# Memory\n"
    "- [Style](style.md) - the old words\n"
    "- [Deploy](deploy.md) - how to deploy\n"
    "- [Notes](sub/notes.md)\n"
)


def two_accounts(fh: FakeHome) -> tuple[Path, Path]:
    """Own (claude) and old (work) folders of one project, overlapping in three files."""
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "MEMORY.md", OWN_INDEX, at(10))
    write(own / "style.md", "own style\n", at(10))
    write(own / "same.md", "same\n", at(5))
    write(work / "MEMORY.md", WORK_INDEX, at(3))
    write(work / "style.md", "work style\n", at(20))  # newer, yet the own head stays
    write(work / "same.md", "same\n", at(1))
    write(work / "deploy.md", "deploy steps\n", at(4))
    write(work / "sub" / "notes.md", "notes\n", at(6))
    return own, work


def listed(config: Config, clock: Clock, slug: str = CLAUDE_SLUG) -> AdoptionList:
    made = adopt.make_list(config, slug, clock=clock)
    assert made.list_id
    return made


def take_first(config: Config, made: AdoptionList, clock: Clock, i: int = 1) -> adopt.AdoptReport:
    digest = made.candidates[i - 1].digest[:HASH_SHOWN]
    return adopt.take(config, made.list_id, i, digest, clock=clock)


# --- list -------------------------------------------------------------------------------------


def test_list_offers_other_sources_with_count_size_and_hash(fh: FakeHome, clock: Clock) -> None:
    _, work = two_accounts(fh)
    write(fh.pi(PI_SLUG) / "pi-note.md", "from pi\n", at(7))
    config = fh.config()
    made = listed(config, clock)
    assert [c.source for c in made.candidates] == ["work", "pi"]
    first = made.candidates[0]
    assert first.files == 5
    assert first.size == sum(p.stat().st_size for p in work.rglob("*") if p.is_file())
    assert len(first.digest) == 64
    assert made.own == "claude"
    assert made.created_ns == clock.now
    stored = config.state_dir / "adopt" / f"{made.list_id}.json"
    assert stored.is_file()
    text = adopt.format_list(made)
    lines = text.splitlines()
    assert len(lines) == 3  # a header, then one line per folder
    assert lines[1].split()[:2] == ["1", "work"]
    assert f"memfs adopt take {made.list_id} 1 {first.digest[:HASH_SHOWN]}" in lines[1]
    assert "5 files" in lines[1]
    assert f"{first.size} bytes" in lines[1]
    assert str(fh.home) not in text  # no account's path is shown


def test_list_hash_covers_names_sizes_mtimes_and_bytes(fh: FakeHome, clock: Clock) -> None:
    _, work = two_accounts(fh)
    config = fh.config()
    digests = {listed(config, clock).candidates[0].digest}
    (work / "deploy.md").write_text("deploy stepz\n")  # same size, new bytes
    os.utime(work / "deploy.md", ns=(at(4), at(4)))  # and the old mtime
    digests.add(listed(config, clock).candidates[0].digest)
    os.utime(work / "deploy.md", ns=(at(5), at(5)))
    digests.add(listed(config, clock).candidates[0].digest)
    (work / "deploy.md").rename(work / "deploy2.md")
    digests.add(listed(config, clock).candidates[0].digest)
    assert len(digests) == 4


def test_list_leaves_out_what_scans_leave_out(fh: FakeHome, clock: Clock, tmp_path: Path) -> None:
    _, work = two_accounts(fh)
    config = fh.config()
    before = listed(config, clock).candidates[0]
    outside = write(tmp_path / "outside.md", "secret")
    (work / "link.md").symlink_to(outside)
    os.mkfifo(work / "fifo.md")
    write(work / "big.md", b"x" * (config.limits.max_file_bytes + 1))
    after = listed(config, clock).candidates[0]
    assert (after.files, after.size, after.digest) == (before.files, before.size, before.digest)


def test_list_names_several_folders_of_one_source_apart(fh: FakeHome, clock: Clock) -> None:
    write(fh.memory(".claude") / "a.md", "a")
    write(fh.pi(PI_SLUG) / "one.md", "1")
    write(fh.pi(CLAUDE_SLUG) / "two.md", "2")
    made = listed(fh.config(), clock)
    assert [c.label for c in made.candidates] == ["pi#1", "pi#2"]


def test_list_with_nothing_to_adopt_stores_nothing(fh: FakeHome, clock: Clock) -> None:
    write(fh.memory(".claude") / "a.md", "a")
    config = fh.config()
    made = adopt.make_list(config, CLAUDE_SLUG, clock=clock)
    assert made.list_id == ""
    assert made.candidates == ()
    assert "nothing to adopt" in adopt.format_list(made)
    assert not (config.state_dir / "adopt").exists()


def test_list_of_an_unknown_project_is_refused(fh: FakeHome, clock: Clock) -> None:
    with pytest.raises(AdoptError, match="no source has project -nowhere"):
        adopt.make_list(fh.config(), "-nowhere", clock=clock)


def test_new_list_removes_expired_ones(fh: FakeHome, clock: Clock) -> None:
    two_accounts(fh)
    config = fh.config()
    old = listed(config, clock)
    clock.now += LIST_TTL_NS
    new = listed(config, clock)
    names = sorted(p.name for p in (config.state_dir / "adopt").iterdir())
    assert names == [f"{new.list_id}.json"]
    with pytest.raises(AdoptError, match="unknown, or expired"):
        take_first(config, old, clock)


# --- take -------------------------------------------------------------------------------------


def test_take_merges_into_the_own_folder(fh: FakeHome, clock: Clock) -> None:
    own, work = two_accounts(fh)
    config = fh.config()
    report = take_first(config, listed(config, clock), clock)
    assert (report.adopted, report.history, report.index_lines, report.unchanged) == (2, 1, 2, 1)
    assert report.skipped == []
    assert report.summary().endswith(
        "adopted 2 files, kept 1 as history, index lines added 2, unchanged 1"
    )
    # Files the own source lacked: copied with their mtime.
    assert (own / "deploy.md").read_bytes() == b"deploy steps\n"
    assert (own / "deploy.md").stat().st_mtime_ns == at(4)
    assert (own / "sub" / "notes.md").stat().st_mtime_ns == at(6)
    # Files it had: the head stays, the adopted body is history with its own mtime.
    assert (own / "style.md").read_bytes() == b"own style\n"
    kept = own / ".history" / "style.md" / f"work@{history_stamp(at(20))}.md"
    assert kept.read_bytes() == b"work style\n"
    assert kept.stat().st_mtime_ns == at(20)
    assert (own / "same.md").stat().st_mtime_ns == at(5)  # equal bytes: untouched
    assert not (own / ".history" / "same.md").exists()
    # MEMORY.md: the union, the own lines first; the lines it adds are the adopted index's.
    assert (own / "MEMORY.md").read_text() == (
        OWN_INDEX + "- [Deploy](deploy.md) - how to deploy\n- [Notes](sub/notes.md)\n"
    )
    assert not (own / ".history" / "MEMORY.md").exists()
    for path in ("style.md", "same.md", "deploy.md", "sub/notes.md"):
        assert reachable(own, path, (work / path).read_bytes()), path
    assert not [p for p in own.rglob(".memfs-stage.*")]


def test_take_twice_changes_nothing(fh: FakeHome, clock: Clock) -> None:
    own, _ = two_accounts(fh)
    config = fh.config()
    made = listed(config, clock)
    take_first(config, made, clock)
    after_first = tree(own)
    clock.now += 60 * SECOND_NS
    again = take_first(config, made, clock)
    assert (again.adopted, again.history, again.index_lines) == (0, 0, 0)
    assert again.unchanged == 5
    assert tree(own) == after_first
    fresh = take_first(config, listed(config, clock), clock)  # a new list, the same folder
    assert (fresh.adopted, fresh.history, fresh.index_lines, fresh.unchanged) == (0, 0, 0, 5)
    assert tree(own) == after_first


def test_a_line_a_save_hid_is_not_adopted_back(fh: FakeHome, clock: Clock) -> None:
    # §5.3: a line removed from the view by a save through the mount stays out of it.
    own, _ = two_accounts(fh)
    config = fh.config()
    state.save_hidden_lines(config.state_dir, CLAUDE_SLUG, ["- [Notes](sub/notes.md)"])
    report = take_first(config, listed(config, clock), clock)
    assert report.index_lines == 1
    assert (own / "MEMORY.md").read_text() == OWN_INDEX + "- [Deploy](deploy.md) - how to deploy\n"


def test_the_adopted_folder_stays_byte_identical(fh: FakeHome, clock: Clock) -> None:
    _, work = two_accounts(fh)
    write(fh.pi(PI_SLUG) / "pi-note.md", "from pi\n", at(7))
    config = fh.config()
    before = {"work": tree(work), "pi": tree(fh.pi(PI_SLUG))}
    made = listed(config, clock)
    take_first(config, made, clock, 1)
    take_first(config, made, clock, 2)
    take_first(config, made, clock, 1)
    assert {"work": tree(work), "pi": tree(fh.pi(PI_SLUG))} == before


def test_take_into_a_fresh_own_account(tmp_path: Path, clock: Clock) -> None:
    fh = fake_home(tmp_path, accounts=(".claude-work",), pi=False)
    fh.account(".claude").mkdir()  # a new account: no projects/ yet
    work = fh.memory(".claude-work")
    write(work / "MEMORY.md", WORK_INDEX, at(3))
    write(work / "deploy.md", "deploy steps\n", at(4))
    config = fh.config()
    assert config.own is not None
    assert config.own.name == "claude"
    report = take_first(config, listed(config, clock), clock)
    assert (report.adopted, report.history, report.index_lines) == (2, 0, 0)
    own = fh.account(".claude") / "projects" / CLAUDE_SLUG / "memory"
    files = {p: v[:3] for p, v in tree(work).items() if v[0] == "file"}
    assert {p: v[:3] for p, v in tree(own).items() if v[0] == "file"} == files
    assert (own / "MEMORY.md").read_text() == WORK_INDEX
    assert (own / "deploy.md").stat().st_mtime_ns == at(4)


def test_a_file_deleted_through_the_mount_comes_back_only_as_history(
    fh: FakeHome, clock: Clock
) -> None:
    own, _ = two_accounts(fh)
    config = fh.config()
    state.save_whiteouts(config.state_dir, CLAUDE_SLUG, [("deploy.md", "work", at(4))])
    report = take_first(config, listed(config, clock), clock)
    assert not (own / "deploy.md").exists()
    kept = own / ".history" / "deploy.md" / f"work@{history_stamp(at(4))}.md"
    assert kept.read_bytes() == b"deploy steps\n"
    assert (report.adopted, report.history) == (1, 2)


def test_nothing_in_the_own_folder_is_replaced_by_a_link_or_folder(
    fh: FakeHome, clock: Clock, tmp_path: Path
) -> None:
    own, _ = two_accounts(fh)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (own / "sub").symlink_to(elsewhere)  # a link where the adopted sub/ folder would go
    (own / "deploy.md").mkdir()  # a folder where an adopted file would go
    config = fh.config()
    report = take_first(config, listed(config, clock), clock)
    assert os.readlink(own / "sub") == str(elsewhere)
    assert list(elsewhere.iterdir()) == []
    assert (own / "deploy.md").is_dir()
    assert list((own / "deploy.md").iterdir()) == []
    assert reachable(own, "deploy.md", b"deploy steps\n")
    assert reachable(own, "sub/notes.md", b"notes\n")
    assert report.adopted == 0
    assert report.skipped == []


def test_a_body_with_no_room_for_history_is_reported_as_skipped(fh: FakeHome, clock: Clock) -> None:
    own, _ = two_accounts(fh)
    write(own / ".history", "a file where the history folder would go\n")
    config = fh.config()
    report = take_first(config, listed(config, clock), clock)
    assert report.skipped == [("style.md", "no room under .history/style.md in the own folder")]
    assert "skipped 1: style.md (no room under .history/style.md" in report.summary()
    assert (own / ".history").read_text() == "a file where the history folder would go\n"
    assert report.adopted == 2


def test_same_second_versions_of_two_folders_get_numbered_names(fh: FakeHome, clock: Clock) -> None:
    own = fh.memory(".claude")
    write(own / "a.md", "own\n", at(1))
    # The catalog orders one source's folders by name: CLAUDE_SLUG's '-' sorts before '_'.
    write(fh.pi(CLAUDE_SLUG) / "a.md", "first\n", at(2))
    write(fh.pi(PI_SLUG) / "a.md", "second\n", at(2) + 5)  # the same second
    config = fh.config()
    made = listed(config, clock)
    take_first(config, made, clock, 1)
    take_first(config, made, clock, 2)
    take_first(config, made, clock, 1)
    stamp = history_stamp(at(2))
    kept = own / ".history" / "a.md"
    assert {p.name: p.read_text() for p in kept.iterdir()} == {
        f"pi@{stamp}.md": "first\n",
        f"pi@{stamp}~2.md": "second\n",
    }


def test_take_without_own_source_is_refused(fh: FakeHome, clock: Clock) -> None:
    two_accounts(fh)
    made = listed(fh.config(), clock)
    cfg_file = Path(fh.env["XDG_CONFIG_HOME"]) / "memfs" / "config.toml"
    write(
        cfg_file,
        f'[[source]]\nname = "work"\npath = "{fh.home}/.claude-work/projects/{{slug}}/memory"\n',
    )
    config = fh.config()
    assert config.own is None
    with pytest.raises(AdoptError, match="no own source") as caught:
        take_first(config, made, clock)
    assert "\n" not in str(caught.value)
    with pytest.raises(AdoptError, match="no own source"):
        adopt.make_list(config, CLAUDE_SLUG, clock=clock)


# --- refusals ---------------------------------------------------------------------------------


def test_a_folder_changed_after_the_list_is_refused(fh: FakeHome, clock: Clock) -> None:
    own, work = two_accounts(fh)
    config = fh.config()
    before = tree(own)
    made = listed(config, clock)
    os.utime(work / "deploy.md", ns=(at(40), at(40)))  # touched
    with pytest.raises(AdoptError, match="changed since the list") as caught:
        take_first(config, made, clock)
    assert "memfs adopt list" in str(caught.value)
    made = listed(config, clock)
    write(work / "new.md", "new\n")  # a file added
    with pytest.raises(AdoptError, match="changed since the list"):
        take_first(config, made, clock)
    made = listed(config, clock)
    shutil.rmtree(work)  # the folder gone
    with pytest.raises(AdoptError, match="changed since the list"):
        take_first(config, made, clock)
    assert tree(own) == before


def test_an_expired_list_is_refused(fh: FakeHome, clock: Clock) -> None:
    own, _ = two_accounts(fh)
    config = fh.config()
    made = listed(config, clock)
    before = tree(own)
    clock.now = made.created_ns + LIST_TTL_NS
    with pytest.raises(AdoptError, match="expired") as caught:
        take_first(config, made, clock)
    assert "memfs adopt list" in str(caught.value)
    assert tree(own) == before
    clock.now = made.created_ns + LIST_TTL_NS - 1  # the last nanosecond still counts
    assert take_first(config, made, clock).adopted == 2


@pytest.mark.parametrize(
    ("list_id", "index", "digest", "cause"),
    [
        ("deadbeef", 1, None, "no adopt list deadbeef"),
        ("../../x", 1, None, "is not one 'memfs adopt list' prints"),
        (None, 0, None, "index 0 is out of range"),
        (None, 2, None, "index 2 is out of range"),
        (None, 1, "0" * HASH_SHOWN, "does not match folder 1"),
        (None, 1, "abc", f"at least {HASH_SHOWN} hex digits"),
        (None, 1, "zz" * HASH_SHOWN, f"at least {HASH_SHOWN} hex digits"),
    ],
)
def test_bad_choices_are_refused_with_one_line(
    fh: FakeHome,
    clock: Clock,
    list_id: str | None,
    index: int,
    digest: str | None,
    cause: str,
) -> None:
    own, _ = two_accounts(fh)
    config = fh.config()
    made = listed(config, clock)
    before = tree(own)
    with pytest.raises(AdoptError, match=cause) as caught:
        adopt.take(
            config,
            made.list_id if list_id is None else list_id,
            index,
            made.candidates[0].digest[:HASH_SHOWN] if digest is None else digest,
            clock=clock,
        )
    assert "\n" not in str(caught.value)
    assert tree(own) == before


def test_the_full_hash_in_any_case_is_accepted(fh: FakeHome, clock: Clock) -> None:
    two_accounts(fh)
    config = fh.config()
    made = listed(config, clock)
    digest = made.candidates[0].digest.upper()
    assert adopt.take(config, made.list_id, 1, digest, clock=clock).adopted == 2


def test_a_damaged_list_is_refused(fh: FakeHome, clock: Clock) -> None:
    two_accounts(fh)
    config = fh.config()
    made = listed(config, clock)
    (config.state_dir / "adopt" / f"{made.list_id}.json").write_text('{"format": 1}')
    with pytest.raises(AdoptError, match="is damaged"):
        take_first(config, made, clock)


def test_a_source_gone_from_the_config_is_refused(fh: FakeHome, clock: Clock) -> None:
    two_accounts(fh)
    made = listed(fh.config(), clock)
    cfg_file = Path(fh.env["XDG_CONFIG_HOME"]) / "memfs" / "config.toml"
    write(
        cfg_file,
        f'[[source]]\nname = "claude"\nown = true\n'
        f'path = "{fh.home}/.claude/projects/{{slug}}/memory"\n',
    )
    with pytest.raises(AdoptError, match="no longer a read-only source"):
        take_first(fh.config(), made, clock)


# --- the property -------------------------------------------------------------------------------

PATHS = ["a.md", "b.md", "sub/c.md", "sub/d.md", "x/y/z.md", "handoff-w_20260101.md"]
BODIES = st.sampled_from([b"", b"one\n", b"two\n", b"three", "ü\n".encode()])
MTIMES = st.integers(min_value=0, max_value=3).map(lambda s: at(s * 0.6))
FILES = st.dictionaries(st.sampled_from(PATHS), st.tuples(BODIES, MTIMES), max_size=len(PATHS))
LINE = st.one_of(
    st.builds(
        "- [{}]({})".format, st.sampled_from(["t", "u"]), st.sampled_from([*PATHS, "gone.md"])
    ),
    st.sampled_from(["# Memory", "plain note", "", "  "]),
)
INDEX = st.one_of(st.none(), st.lists(LINE, max_size=6).map(lambda ls: "\n".join(ls)))


@PROPS
@given(
    own_files=FILES,
    own_index=INDEX,
    folders=st.lists(st.tuples(FILES, INDEX), min_size=1, max_size=3),
)
def test_after_take_everything_adopted_is_reachable_in_the_own_source(
    own_files: dict[str, tuple[bytes, int]],
    own_index: str | None,
    folders: list[tuple[dict[str, tuple[bytes, int]], str | None]],
) -> None:
    with tempfile.TemporaryDirectory() as base:
        fh = fake_home(Path(base))
        own = fh.memory(".claude")
        # Up to three other folders: work, and pi under both of its spellings of the slug.
        places = [fh.memory(".claude-work"), fh.pi(PI_SLUG), fh.pi(CLAUDE_SLUG)]
        for folder, (files, index) in [
            (own, (own_files, own_index)),
            *zip(places[: len(folders)], folders, strict=True),
        ]:
            for path, (body, mtime) in files.items():
                write(folder / path, body, mtime)
            if index is not None:
                write(folder / "MEMORY.md", index, at(2))
        clock = Clock()
        config = fh.config()
        made = listed(config, clock)
        before = {str(p): tree(p) for p in places}
        for i in range(1, len(made.candidates) + 1):
            take_first(config, made, clock, i)
        snapshot = tree(own)
        for i in range(1, len(made.candidates) + 1):
            report = take_first(config, listed(config, clock), clock, i)
            assert (report.adopted, report.history, report.index_lines) == (0, 0, 0)
        assert tree(own) == snapshot
        assert {str(p): tree(p) for p in places} == before
        own_links = (
            links((own / "MEMORY.md").read_text()) if (own / "MEMORY.md").exists() else set()
        )
        for folder in places[: len(folders)]:
            for path, (kind, data, _, _) in tree(folder).items():
                if kind == "file" and path != "MEMORY.md":
                    assert data is not None
                    assert reachable(own, path, data), (folder, path)
            if (folder / "MEMORY.md").exists():
                assert links((folder / "MEMORY.md").read_text()) <= own_links


# --- the command line -----------------------------------------------------------------------------


@pytest.fixture
def env(fh: FakeHome, monkeypatch: pytest.MonkeyPatch) -> FakeHome:
    monkeypatch.setenv("HOME", fh.env["HOME"])
    for var in XDG_VARS:
        monkeypatch.setenv(var, fh.env[var])
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return fh


def test_cli_list_then_take(
    env: FakeHome, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    slug = project_slug(project)
    own, work = env.memory(".claude", slug), env.memory(".claude-work", slug)
    write(work / "deploy.md", "deploy steps\n", at(4))
    write(work / "MEMORY.md", "- [Deploy](deploy.md)\n", at(4))
    assert cli.main(["adopt", "list", str(project)]) == 0
    out = capsys.readouterr().out
    assert str(env.home) not in out
    line = next(x for x in out.splitlines() if "memfs adopt take" in x)
    command = shlex.split(line[line.index("memfs adopt take") :])
    assert cli.main(command[1:]) == 0
    out = capsys.readouterr().out
    assert "adopted 2 files, kept 0 as history, index lines added 0, unchanged 0" in out
    assert (own / "deploy.md").read_bytes() == b"deploy steps\n"
    assert cli.main(command[1:]) == 0
    assert "adopted 0 files" in capsys.readouterr().out
    # Refusals: one line on stderr, exit code 2.
    list_id, _, digest = command[3:6]
    for argv, cause in [
        (["deadbeef", "1", digest], "no adopt list deadbeef"),
        ([list_id, "7", digest], "index 7 is out of range"),
        ([list_id, "1", "f" * HASH_SHOWN], "does not match folder 1"),
    ]:
        assert cli.main(["adopt", "take", *argv]) == cli.USER_ERROR
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("memfs: ")
        assert captured.err.count("\n") == 1
        assert cause in captured.err
    write(work / "late.md", "late\n")
    assert cli.main(["adopt", "take", *command[3:6]]) == cli.USER_ERROR
    assert "changed since the list" in capsys.readouterr().err


def test_cli_list_of_a_project_no_source_has(
    env: FakeHome, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["adopt", "list", str(tmp_path)]) == cli.USER_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no source has project" in err


# --- with a running mount -----------------------------------------------------------------------


@pytest.mark.mount
@pytest.mark.timeout(60)
def test_a_running_mount_serves_the_adopted_files_after_the_old_account_is_gone(
    mounts: object,
) -> None:
    from mounting import Mounts, wait_until

    assert isinstance(mounts, Mounts)
    box = mounts.sandbox
    project = box.project_dir("proj")
    slug = project_slug(project)
    box.write("personal", slug, "MEMORY.md", OWN_INDEX)
    box.write("personal", slug, "style.md", "own style\n")
    box.write("work", slug, "MEMORY.md", WORK_INDEX)
    box.write("work", slug, "style.md", "work style\n")
    box.write("work", slug, "deploy.md", "deploy steps\n")
    box.write("work", slug, "sub/notes.md", "notes\n")
    mounts()
    view = box.mnt(slug)
    assert (view / "deploy.md").read_bytes() == b"deploy steps\n"
    listing = box.memfs("adopt", "list", project, "--config", box.config_path)
    assert listing.returncode == 0, listing.stderr
    assert str(box.home) not in listing.stdout.replace(str(box.config_path), "")
    line = next(x for x in listing.stdout.splitlines() if "memfs adopt take" in x)
    taken = box.memfs(*shlex.split(line[line.index("memfs adopt take") :])[1:])
    assert taken.returncode == 0, taken.stderr
    assert "adopted 2 files, kept 1 as history, index lines added 2" in taken.stdout
    # The user retires the old account; everything it held is still served, from the own one.
    retired = box.base / "retired"
    shutil.move(box.source("work").folder(slug).parent, retired)
    stamp = history_stamp((box.base / "retired" / "memory" / "style.md").stat().st_mtime_ns)

    def served() -> bool:
        return (
            (view / "deploy.md").read_bytes() == b"deploy steps\n"
            and (view / "sub" / "notes.md").read_bytes() == b"notes\n"
            and (view / "style.md").read_bytes() == b"own style\n"
            and links((view / "MEMORY.md").read_text()) >= links(WORK_INDEX)
        )

    wait_until(served, 5.0, "the adopted files served after the old account was removed")
    # The kept body is checked on disk: project.py drops a literal .history file from the
    # view when a computed history entry of the same name goes away (reported separately).
    kept = box.source("personal").folder(slug) / ".history" / "style.md" / f"work@{stamp}.md"
    assert kept.read_bytes() == b"work style\n"
