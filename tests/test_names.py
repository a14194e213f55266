"""Tier 1: names that are not memory, and conflict copies (§2, §5.1, §5.2).

Every rule of `names.RULES` has cases here, named by its key: names it must leave out and
look-alikes it must keep. A rule added without a case fails `test_every_rule_has_a_case`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CLAUDE_SLUG, fake_home

from memfs.app import offline
from memfs.rules import names

# key -> (names the rule leaves out, look-alikes no rule may touch). Folder-only rules are
# checked as folders, the others as files.
CASES: dict[str, tuple[list[str], list[str]]] = {
    "memfs-stage": ([".memfs-stage.0123456789abcdef", ".memfs-stage.adopt-00ff"], ["memfs.md"]),
    "syncthing-tmp": (
        [".syncthing.notes.md.tmp", ".syncthing.x.md.tmp", ".syncthing.a.b.c.tmp"],
        ["syncthing.md", ".syncthing.md", "notes.tmp.md"],
    ),
    "syncthing-tmp-win": (["~syncthing~notes.md.tmp"], ["syncthing~notes.md.txt"]),
    "syncthing-marker": ([".stfolder"], ["stfolder", ".stfolder.md"]),
    "syncthing-versions": ([".stversions"], ["stversions.md"]),
    "syncthing-ignore": ([".stignore"], ["stignore.md", ".stignored"]),
    "memfs-machine": ([".memfs-machine.json"], ["memfs-machine.json", ".memfs-machine.json.md"]),
    "rsync-tmp": (
        [".notes.md.AbC123", ".handoff-x_y.md.zZ09zz", ".a.b.000000"],
        ["notes.md.AbC123", ".notes.md.AbC12", ".notes.md.AbC1234", ".gitignore", ".md.x"],
    ),
    "rsync-delay": ([".~tmp~"], ["~tmp~"]),
    "rclone-partial": (["notes.md.3f2a1b0c.partial", "notes.md.partial"], ["partial.md"]),
    "unison-tmp": ([".unison.notes.md.1a2b.unison.tmp"], ["unison.tmp.md"]),
    "nextcloud-tmp": ([".notes.md.~1a2b3c4d"], ["notes.md.~1a2b", ".notes.md~x"]),
    "nextcloud-db": (
        [".sync_0123abcd.db", ".sync_0123abcd.db-wal", "._sync_89ef.db-shm"],
        ["sync_0123.db", ".sync_xyz.db"],
    ),
    "nextcloud-log": ([".owncloudsync.log", ".nextcloudsync.log"], ["owncloudsync.log"]),
    "dropbox": ([".dropbox", ".dropbox.attr", ".dropbox.cache"], ["dropbox.md"]),
    "git": ([".git"], ["git.md", ".gitignore", ".github"]),
    "vim-swap": (
        [".notes.md.swp", ".notes.md.swo", ".notes.md.swa", ".MEMORY.md.swn"],
        ["notes.swp.md", "notes.md.swp", ".notes.md.swq", ".notes.md.swx"],
    ),
    "kate-swap": ([".notes.md.kate-swp"], ["notes.md.kate-swp"]),
    "emacs-autosave": (["#notes.md#"], ["#notes.md", "notes#.md"]),
    "emacs-lock": ([".#notes.md"], ["#.notes.md"]),
    "backup": (["notes.md~", "MEMORY.md~"], ["~notes.md", "notes~.md", "~"]),
    "jetbrains": (["notes.md___jb_tmp___", "notes.md___jb_old___"], ["notes___jb.md"]),
    "gio-tmp": ([".goutputstream-AB12cd"], ["goutputstream-AB12cd"]),
    "claude-backfill": (
        [".MEMORY.md.backfill-4242-1a2b3c.tmp"],
        ["MEMORY.md.backfill-4242-1a2b3c.tmp", ".MEMORY.md.backfill-x-1a.tmp"],
    ),
    # Gemini CLI's bookkeeping in tmp/<id>/memory (issue 38's notes, its source at 0.56).
    "gemini-inbox": ([".inbox"], ["inbox", ".inbox.md", ".inboxes"]),
    "gemini-lock": ([".extraction.lock"], ["extraction.lock", ".extraction.lock.md"]),
    "gemini-state-tmp": (
        [".extraction-state.json.tmp"],
        [".extraction-state.json", "extraction-state.json.tmp"],
    ),
    "gemini-patch-tmp": (
        [
            ".MEMORY.md.0b5c3a1e-1f2d-4c3b-9a8e-7d6c5b4a3f21.patch-tmp",
            ".deploys.md.0b5c3a1e-1f2d-4c3b-9a8e-7d6c5b4a3f21.rollback",
            ".GEMINI.md.ffffffff-0000-4000-8000-000000000000.patch-tmp",
        ],
        [
            "deploys.md.0b5c3a1e-1f2d-4c3b-9a8e-7d6c5b4a3f21.patch-tmp",
            ".deploys.md.0b5c3a1e.patch-tmp",
            ".deploys.md.0B5C3A1E-1F2D-4C3B-9A8E-7D6C5B4A3F21.rollback",
            ".rollback",
            "x.patch",
        ],
    ),
    # Kilo Code's memory folder (issue 38's notes, its 7.7.9 binary read).
    "kilo-tmp": (
        [".project.md.4242.1765000000000.k3j4h5.tmp", ".state.json.1.1765000000000.0.tmp"],
        ["project.md.4242.1765000000000.k3j4h5.tmp", ".project.md.tmp", ".a.b.tmp"],
    ),
    "kilo-bad": (
        ["state.json.bad-1765000000000", "project.md.bad-1765000000000"],
        ["state.json.bad", "notes.bad-12.md", "bad-1765000000000"],
    ),
    "macos-ds-store": ([".DS_Store"], ["DS_Store"]),
    "macos-appledouble": (["._notes.md"], ["_notes.md", "._"]),
}

# Names writers create through the mount that must stay ordinary files.
ORDINARY = [
    "notes.md",
    "MEMORY.md",
    "handoff-claude_-home-a-proj.md",
    "feedback_testing.md",
    "sub/deeper.md",
    # Claude Code's temp file: created through the mount, closed, then renamed (§7.3).
    "notes.md.tmp.12345.0123456789ab",
    "MEMORY.md.tmp.1.ffffffffffff",
    ".env.tmp.4242.abcdefabcdef",
    # sed -i and Python's tempfile use no dot prefix.
    "sedAbC123",
    "tmpk3j4h5g6",
    ".gitignore",
    "notes (draft).md",
]


def _is_folder_rule(key: str) -> bool:
    rule = next(r for r in names.RULES if r.key == key)
    return rule.applies is names.Applies.FOLDER


def test_every_rule_has_a_case() -> None:
    keys = [r.key for r in names.RULES]
    assert len(keys) == len(set(keys)), "rule keys must be unique"
    assert set(keys) == set(CASES)


@pytest.mark.parametrize("key", sorted(CASES))
def test_each_rule_leaves_out_its_names_and_only_those(key: str) -> None:
    left_out, kept = CASES[key]
    folder = _is_folder_rule(key)
    for name in left_out:
        rule = names.matching_rule(name, folder=folder)
        assert rule is not None, (key, name)
        assert rule.key == key, (key, name, rule.key)
        assert names.left_out_reason(name, folder=folder) == rule.why
    for name in kept:
        rule = names.matching_rule(name, folder=folder)
        assert rule is None or rule.key != key, (key, name)


# key -> which way its names go through the mount: refused (a tool's own file, shown from
# no source) or a writer's (accepted, shown from the own source). Every rule says.
WAYS: dict[str, names.Way] = {
    "memfs-stage": names.Way.REFUSED,
    "syncthing-tmp": names.Way.REFUSED,
    "syncthing-tmp-win": names.Way.REFUSED,
    "syncthing-marker": names.Way.REFUSED,
    "syncthing-versions": names.Way.REFUSED,
    "syncthing-ignore": names.Way.REFUSED,
    "memfs-machine": names.Way.REFUSED,
    "rsync-tmp": names.Way.WRITERS,  # rsync through the mount
    "rsync-delay": names.Way.REFUSED,
    "rclone-partial": names.Way.WRITERS,  # rclone copy onto the mount
    "unison-tmp": names.Way.REFUSED,
    "nextcloud-tmp": names.Way.REFUSED,
    "nextcloud-db": names.Way.REFUSED,
    "nextcloud-log": names.Way.REFUSED,
    "dropbox": names.Way.REFUSED,
    "git": names.Way.REFUSED,
    "vim-swap": names.Way.WRITERS,
    "kate-swap": names.Way.WRITERS,
    "emacs-autosave": names.Way.WRITERS,
    "emacs-lock": names.Way.WRITERS,
    "backup": names.Way.WRITERS,
    "jetbrains": names.Way.WRITERS,
    "claude-backfill": names.Way.WRITERS,
    "gio-tmp": names.Way.WRITERS,
    # Gemini CLI makes these in its own folder only; no agent writes one as memory.
    "gemini-inbox": names.Way.REFUSED,
    "gemini-lock": names.Way.REFUSED,
    "gemini-state-tmp": names.Way.REFUSED,
    "gemini-patch-tmp": names.Way.REFUSED,
    # Kilo Code makes these in its own folder only.
    "kilo-tmp": names.Way.REFUSED,
    "kilo-bad": names.Way.REFUSED,
    "macos-ds-store": names.Way.REFUSED,
    "macos-appledouble": names.Way.REFUSED,
}


def test_every_rule_says_which_way_it_goes() -> None:
    assert {r.key: r.way for r in names.RULES} == WAYS


@pytest.mark.parametrize("key", sorted(CASES))
def test_a_refused_rules_names_are_refused_and_a_writers_are_not(key: str) -> None:
    folder = _is_folder_rule(key)
    for name in CASES[key][0]:
        rule = names.refused(name, folder=folder)
        if WAYS[key] is names.Way.REFUSED:
            assert rule is not None, (key, name)
            assert rule.key == key, (key, name, rule.key)
        else:
            assert rule is None, (key, name)


@pytest.mark.parametrize("key", sorted(CASES))
def test_no_name_a_rule_matches_feeds_the_preamble(key: str) -> None:
    # PREAMBLE.md draws on Markdown and text outside dot folders (§6): none of these.
    for name in CASES[key][0]:
        path = f"{name}/x.md" if _is_folder_rule(key) else name
        assert not names.feeds_preamble(path), (key, path)


def test_every_folder_rule_is_refused() -> None:
    # A scan does not walk a folder a rule matches, in any source: so no folder name may be
    # accepted through the mount and then lose what it holds at the next scan.
    for rule in names.RULES:
        if rule.applies is not names.Applies.FILE:
            assert rule.way is names.Way.REFUSED, rule.key


def test_a_name_both_ways_match_is_refused() -> None:
    # AppleDouble's `._*` also looks like an rsync temp name: a tool's file wins.
    assert names.matching_rule("._notes.AbC123") is not None
    rule = names.refused("._notes.AbC123")
    assert rule is not None
    assert rule.key == "macos-appledouble"


def test_the_seven_names_of_issue_24_each_go_one_way() -> None:
    refused = {name for name in SEVEN if names.refused(name) is not None}
    assert refused == {"._notes.md", ".git"}
    assert {names.path_rule(n).key for n in SEVEN - refused} == {  # type: ignore[union-attr]
        "backup",
        "vim-swap",
        "emacs-autosave",
        "rclone-partial",
        "rsync-tmp",
    }


# Names once accepted through the mount and lost at the next mount (issue 24).
SEVEN = frozenset(
    [
        "notes.md~",
        ".plan.md.swp",
        "#scratch#",
        "draft.partial",
        ".todo.backup",
        "._notes.md",
        ".git",
    ]
)


@pytest.mark.parametrize("path", ORDINARY)
def test_ordinary_names_are_memory(path: str) -> None:
    assert names.path_reason(path) == ""
    assert names.conflict_original(path.rsplit("/", 1)[-1]) is None


def test_reasons_say_in_flight_or_tool_file() -> None:
    for rule in names.RULES:
        assert rule.why.startswith((names.IN_FLIGHT + ": ", names.TOOL_FILE + ": ")), rule.key


def test_folder_rules_and_file_rules_apply_to_their_kind() -> None:
    # `.stversions` and `.git` are left out as folders and as files (a worktree's .git file).
    assert names.left_out_reason(".git", folder=True)
    assert names.left_out_reason(".git", folder=False)
    # A folder named like a temp file is an ordinary folder: only folder rules apply.
    assert names.left_out_reason(".notes.md.AbC123", folder=True) == ""
    assert names.left_out_reason("old~", folder=True) == ""
    as_file = names.matching_rule(".~tmp~", folder=False)
    assert as_file is not None
    assert as_file.key == "backup"  # a file ending in '~' is a backup, not rsync's folder


def test_path_reason_checks_every_folder_on_the_way() -> None:
    assert names.path_reason(".git/HEAD") == names.left_out_reason(".git", folder=True)
    assert names.path_reason(".stversions/notes~20261201-075022.md")
    assert names.path_reason("sub/.stfolder")
    assert names.path_reason("sub/.syncthing.a.md.tmp")
    assert names.path_reason("sub/notes.md") == ""
    # A folder named like a temp file holds ordinary files.
    assert names.path_reason("old~/notes.md") == ""


@pytest.mark.parametrize(
    ("name", "original"),
    [
        # Syncthing, with and without the device id (before v0.14.4x), any extension.
        ("notes.sync-conflict-20261201-075022-C7DWIIF.md", "notes.md"),
        ("MEMORY.sync-conflict-20261201-075022-ABCDEF2.md", "MEMORY.md"),
        ("notes.sync-conflict-20261201-075022.md", "notes.md"),
        ("README.sync-conflict-20261201-075022-C7DWIIF", "README"),
        ("a.tar.sync-conflict-20261201-075022-C7DWIIF.gz", "a.tar.gz"),
        (
            "handoff-x_y-20261201.sync-conflict-20261201-075022-C7DWIIF.md",
            "handoff-x_y-20261201.md",
        ),
        # A conflict of a conflict copy belongs to the first original.
        (
            "notes.sync-conflict-20261201-075022-AAAAAAA.sync-conflict-20261202-010203-BBBBBBB.md",
            "notes.md",
        ),
        # Dropbox, with and without the owner, a second copy on the same day.
        ("notes (Alice's conflicted copy 2026-12-01).md", "notes.md"),
        ("notes (conflicted copy 2026-12-01).md", "notes.md"),
        ("notes (Alice's conflicted copy 2026-12-01 (1)).md", "notes.md"),
        ("my (draft) notes (Bob's conflicted copy 2026-12-01).md", "my (draft) notes.md"),
        # Nextcloud and ownCloud 2.5+, then ownCloud before 2.5.
        ("notes (conflicted copy 2026-12-01 075022).md", "notes.md"),
        ("notes_conflict-20261201-075022.md", "notes.md"),
    ],
)
def test_conflict_copies_map_to_their_original(name: str, original: str) -> None:
    assert names.conflict_original(name) == original
    assert names.path_reason(name) == ""  # a version, not a tool file


@pytest.mark.parametrize(
    "name",
    [
        "notes.md",
        "sync-conflict.md",
        "notes.sync-conflict-2026-075022-C7DWIIF.md",  # not a date
        "notes.sync-conflict-20261201-0750-C7DWIIF.md",  # not a time
        "notes (conflicted copy).md",  # Dropbox always writes a date
        "notes (conflicted copy 2026-12).md",
        "my_conflict-notes.md",
        ".sync-conflict-20261201-075022-C7DWIIF",  # nothing would be left of the name
    ],
)
def test_look_alikes_are_not_conflict_copies(name: str) -> None:
    assert names.conflict_original(name) is None


# --- project folders at a source's slug level (§2) ---------------------------------------


@pytest.mark.parametrize("name", [".stfolder", ".stversions", ".git", ".DS_Store", ".-home-a"])
def test_dot_names_are_never_project_folders(name: str) -> None:
    assert not names.project_folder(name)


def test_the_catalog_lists_no_dot_folder_on_first_listing_or_when_added(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    root = fh.account(".claude") / "projects"
    fh.memory(".claude")  # a real project
    for marker in (".stfolder", ".stversions", ".git"):
        (root / marker / "memory").mkdir(parents=True)
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    catalog = offline.listed(fh.config())
    assert catalog.slugs() == [CLAUDE_SLUG]
    # Later, the watcher reports new folders at the root: dot names are still refused.
    for marker in (".stversions", ".git", ".new-marker"):
        (root / marker).mkdir(exist_ok=True)
        assert catalog.folder_added(0, marker) is None
    assert catalog.folder_added(0, "-home-b") == "-home-b"
    assert catalog.slugs() == [CLAUDE_SLUG, "-home-b"]
    assert offline.load(catalog, "-stfolder") is None
    assert offline.load(catalog, "-git") is None
    catalog._check()
