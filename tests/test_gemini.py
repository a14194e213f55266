"""Tier 1: Gemini CLI's per-project memory, mapped to projects and merged (§1, §3).

The layout is made as Gemini CLI makes it (gemini_layout.py): ``~/.gemini/tmp/<id>/``
named by a short id, its ``.project_root`` marker, ``projects.json``. Every root lies in
tmp_path; the environment is an explicit dict.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gemini_layout import GeminiCli, gemini_id
from helpers import FakeHome, at, fake_home, write

from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import gemini
from memfs.disk.gemini import Mapping
from memfs.rules.slug import claude_slug
from memfs.view.project import HISTORY, Kind, history_stamp


def real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def folder(base: Path, *parts: str, git: bool = False) -> Path:
    made = base.joinpath(*parts)
    made.mkdir(parents=True, exist_ok=True)
    if git:
        (made / ".git").mkdir()
    return real(made)


def linked_worktree(main: Path, worktree: Path) -> Path:
    """What `git worktree add` leaves behind (as tests/test_slug.py builds it)."""
    admin = main / ".git" / "worktrees" / "feat"
    admin.mkdir(parents=True)
    (admin / "gitdir").write_text(f"{worktree / '.git'}\n")
    (admin / "commondir").write_text("../..\n")
    worktree.mkdir(parents=True)
    (worktree / ".git").write_text(f"gitdir: {admin}\n")
    return real(worktree)


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        ("/home/u/src/shop", "shop"),
        ("/home/u/src/My_Proj.v2", "my-proj-v2"),
        ("/home/u/src/--Weird  Name--", "weird-name"),
        ("/home/u/src/日本", "project"),
        ("/", "project"),
    ],
)
def test_gemini_ids_as_gemini_makes_them(root: str, expected: str) -> None:
    assert gemini_id(root) == expected


def test_each_id_maps_to_the_project_here_would_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli = GeminiCli(home)
    shop = folder(tmp_path, "src", "shop")
    shop_elsewhere = folder(tmp_path, "other", "shop")
    shop_third = folder(tmp_path, "third", "shop", git=True)
    odd = folder(tmp_path, "src", "My_Proj.v2")  # characters the slug rule changes
    repo = folder(tmp_path, "repo", git=True)
    sub = folder(repo, "services", "api")  # Gemini's root is its cwd, not the git top
    tree = linked_worktree(repo, tmp_path / "wt" / "feature")
    ids = {root: cli.register(root, leave_temp=True) for root in (shop, shop_elsewhere)}
    ids |= {root: cli.register(root) for root in (shop_third, odd, sub, tree)}
    # Collisions take -1, -2; an id is folded from the basename.
    assert [ids[r] for r in (shop, shop_elsewhere, shop_third)] == ["shop", "shop-1", "shop-2"]
    assert ids[odd] == "my-proj-v2"
    assert cli.register(shop) == "shop"  # asked again: the same id
    # What else Gemini leaves in its folder is no project folder: a temp file of a save.
    assert [n for n in os.listdir(cli.dir) if n.endswith(".tmp")]
    found = {m.folder: m for m in gemini.read_map(cli.dir)}
    expected = {
        "shop": (shop, claude_slug(str(shop))),
        "shop-1": (shop_elsewhere, claude_slug(str(shop_elsewhere))),
        "shop-2": (shop_third, claude_slug(str(shop_third))),
        "my-proj-v2": (odd, claude_slug(str(odd))),  # -...-src-My-Proj-v2
        "api": (sub, claude_slug(str(repo))),  # the git work tree's top
        "feature": (tree, claude_slug(str(repo))),  # a linked worktree: its main checkout
    }
    assert {k: (Path(m.root or ""), m.slug) for k, m in found.items()} == expected
    assert all(m.why == "from .project_root" for m in found.values())
    assert found["my-proj-v2"].slug is not None
    assert found["my-proj-v2"].slug.endswith("-src-My-Proj-v2")


def test_folders_that_map_to_no_project_say_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli = GeminiCli(home)
    kept = folder(tmp_path, "src", "kept")
    gone = folder(tmp_path, "src", "gone")
    for root in (kept, gone):
        cli.memory(root)
    gone.rmdir()  # the checkout was deleted: its parents may lie in another repository
    (cli.tmp / "kept" / ".project_root").unlink()  # an older Gemini, or a deleted marker
    (cli.tmp / "orphan" / "memory").mkdir(parents=True)  # no marker, not registered
    (cli.tmp / "empty").mkdir()
    (cli.tmp / "empty" / ".project_root").write_text("  \n")
    (cli.tmp / "relative").mkdir()
    (cli.tmp / "relative" / ".project_root").write_text("src/kept")
    (cli.tmp / "linked").mkdir()
    (cli.tmp / "linked" / ".project_root").symlink_to(tmp_path / "elsewhere")
    (cli.tmp / "folder").mkdir()
    (cli.tmp / "folder" / ".project_root").mkdir()
    (cli.tmp / "binary").mkdir()
    (cli.tmp / "binary" / ".project_root").write_bytes(b"/\xff\xfe")
    (cli.tmp / ".hidden").mkdir()  # no project, not even listed
    (cli.tmp / "a-file").write_text("not a folder")
    # A linked id folder is followed (issue 38): this one leads to kept's, whose marker went.
    (cli.tmp / "a-link").symlink_to(cli.tmp / "kept")
    found = {m.folder: m for m in gemini.read_map(cli.dir)}
    assert found["kept"] == Mapping("kept", str(kept), claude_slug(str(kept)), "from projects.json")
    assert found["gone"] == Mapping(
        "gone", str(gone), None, f"its root {gone} (.project_root) does not exist"
    )
    whys = {k: m.why for k, m in found.items() if m.slug is None}
    assert whys == {
        "gone": f"its root {gone} (.project_root) does not exist",
        "orphan": "no .project_root, and not in projects.json",
        "empty": "empty .project_root",
        "relative": ".project_root names no absolute path: 'src/kept'",
        "linked": whys["linked"],
        "folder": "unreadable .project_root: not a regular file",
        "binary": whys["binary"],
        "a-link": "no .project_root, and not in projects.json",
    }
    assert whys["linked"].startswith("unreadable .project_root: ")
    assert whys["binary"].startswith("unreadable .project_root: ")
    lines = gemini.describe(cli.dir)
    assert f"kept -> {kept} -> {claude_slug(str(kept))} (from projects.json)" in lines
    assert "orphan: not mapped: no .project_root, and not in projects.json" in lines
    # A broken projects.json is said so; markers still map.
    cli.registry_path.write_text("{ not json")
    assert gemini.read_registry(cli.dir)[1] is not None
    assert gemini.describe(cli.dir)[0].startswith("projects.json: unreadable (")
    assert {m.folder for m in gemini.read_map(cli.dir) if m.slug} == set()  # kept's came from it
    cli.registry_path.write_text(json.dumps({"projects": {str(kept): "kept", "x": 3}}))
    assert gemini.read_registry(cli.dir) == ({str(kept): "kept"}, None)
    assert gemini.describe(tmp_path / "nowhere") == [
        f"no project folders in {tmp_path}/nowhere/tmp yet"
    ]


# --- discovered, listed and merged --------------------------------------------------


def test_discovery_finds_gemini_read_only(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    waiting = {s.name: s for s in cfg.discover(fh.env)}["gemini"]
    assert waiting.why == f"{fh.home / '.gemini'} is not there yet: shown once made"
    (fh.home / ".gemini").mkdir()  # Gemini CLI in use, no project yet: tmp/ comes later
    found = cfg.discover(fh.env)
    assert [s.name for s in found] == ["claude", "work", "pi", "gemini", "codex", "kilo", "goose"]
    source = found[3]
    assert source.mapped
    assert not source.own
    assert source.root == fh.home / ".gemini" / "tmp"
    assert source.tail == ("memory",)
    assert source.gemini_dir == fh.home / ".gemini"
    assert source.why == f"{fh.home / '.gemini'} exists"
    assert [s.name for s in found if s.mapped] == ["gemini", "kilo", "goose"]


def both_tools(fh: FakeHome, tmp_path: Path) -> tuple[str, Path, Path]:
    """The brief's case: Claude Code's memory of /home/u/src/shop (a sandbox path here) and
    Gemini CLI's, whose id is `shop`."""
    root = folder(tmp_path, "home", "u", "src", "shop")
    slug = claude_slug(str(root))
    claude = fh.memory(".claude", slug)
    write(claude / "MEMORY.md", "- [Architecture](architecture.md)\n- [Shared](shared.md)\n", at(1))
    write(claude / "architecture.md", "claude architecture\n", at(2))
    write(claude / "shared.md", "claude's shared\n", at(3))
    memory = GeminiCli(fh.home).memory(root)
    assert memory == fh.home / ".gemini" / "tmp" / "shop" / "memory"
    write(memory / "MEMORY.md", "- [Deploys](deploys.md)\n- [Shared](shared.md)\n", at(4))
    write(memory / "deploys.md", "gemini deploys\n", at(5))
    write(memory / "shared.md", "gemini's shared, newer\n", at(6))
    return slug, claude, memory


def test_gemini_memory_joins_the_claude_code_project(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    slug, _, memory = both_tools(fh, tmp_path)
    catalog = offline.listed(cfg.load(fh.env))
    assert [s.name for s in catalog.config.sources] == [
        "claude",
        "pi",
        "gemini",
        "codex",
        "kilo",
        "goose",
    ]
    assert catalog.slugs() == [slug]  # one project, not two
    project = offline.load(catalog, slug)
    assert project is not None
    catalog._check()
    # Both tools' topics; MEMORY.md the union of both indexes; the own head wins.
    assert project.memory_index() == (
        b"- [Architecture](architecture.md)\n- [Shared](shared.md)\n- [Deploys](deploys.md)\n"
    )
    heads = {p: project.source_name(v) for p, v in project.heads.items()}
    assert heads == {
        "MEMORY.md": "claude",
        "architecture.md": "claude",
        "deploys.md": "gemini",
        "shared.md": "claude",
    }
    kept = f"{HISTORY}/shared.md/gemini@{history_stamp(at(6))}.md"
    leaf = project.tree.leaf(kept)
    assert leaf is not None
    assert leaf.kind is Kind.HISTORY
    assert project.real_path(leaf.version) == memory / "shared.md"  # type: ignore[arg-type]
    text = project.preamble("/mnt/memfs/" + slug)
    assert b"deploys.md" in text
    assert b"own copy older than .history/shared.md/gemini@" in text


def test_two_gemini_folders_of_one_project_and_folders_of_none(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    repo = folder(tmp_path, "repo", git=True)
    cli = GeminiCli(fh.home)
    write(cli.memory(repo) / "top.md", "from the top\n", at(1))
    write(cli.memory(folder(repo, "web")) / "web.md", "from web/\n", at(2))
    write(cli.memory(folder(tmp_path, "gone")) / "lost.md", "lost\n", at(3))
    (tmp_path / "gone").rmdir()
    catalog = offline.listed(cfg.load(fh.env))
    slug = claude_slug(str(repo))
    assert catalog.slugs() == [slug]
    assert [o.parts for o in catalog.origins(slug) if not o.kept] == [
        ("repo", "memory"),
        ("web", "memory"),
    ]
    project = offline.load(catalog, slug)
    assert project is not None
    assert {"top.md", "web.md"} <= set(project.heads)


def test_remap_moves_a_folder_between_projects(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    slug, _, memory = both_tools(fh, tmp_path)
    other = folder(tmp_path, "elsewhere")
    catalog = offline.listed(cfg.load(fh.env))
    project = offline.load(catalog, slug)
    assert project is not None
    assert "deploys.md" in project.heads
    gemini_index = [s.name for s in catalog.config.sources].index("gemini")
    moved = catalog.remap(gemini_index, {"shop": claude_slug(str(other))})
    assert moved == sorted([slug, claude_slug(str(other))])
    catalog._check()
    assert "deploys.md" not in project.heads  # it left with its folder
    assert catalog.has(claude_slug(str(other)))
    assert not catalog.holds(slug, project.origins[1])
    assert catalog.remap(gemini_index, {"shop": claude_slug(str(other))}) == []
    assert catalog.remap(gemini_index, {}) == [claude_slug(str(other))]
    assert not catalog.has(claude_slug(str(other)))
    catalog._check()
    assert memory.is_dir()  # a read-only source: nothing moved on disk


# --- Gemini CLI's bookkeeping in its memory folder (issue 38) --------------------------

UUID = "0b5c3a1e-1f2d-4c3b-9a8e-7d6c5b4a3f21"
# What Gemini CLI (source at 0.56; 0.61 the same) keeps in tmp/<id>/memory beside memory,
# the newest files there: each would take a Recent section or an index line.
GEMINI_INTERNALS = {
    ".inbox/private/x.patch": "--- a/deploys.md\n+++ b/deploys.md\n+PROPOSED\n",
    ".inbox/global/extraction.patch": "--- a/GEMINI.md\n+PROPOSED\n",
    ".extraction.lock": '{"pid": 4242, "startedAt": "2026-01-01T00:00:00Z"}',
    ".extraction-state.json": '{"runs": [{"INTERNAL": true}]}',
    ".extraction-state.json.tmp": '{"runs": [{"INTERNAL": true}]}',
    f".deploys.md.{UUID}.patch-tmp": "INTERNAL patch in flight\n",
    f".deploys.md.{UUID}.rollback": "INTERNAL rollback\n",
    "skills/release/SKILL.md": "---\ndescription: DRAFT skill\n---\nINTERNAL draft\n",
    "skills/release.patch": "INTERNAL skill patch\n",
}


def test_gemini_bookkeeping_never_feeds_the_preamble(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    slug, _, memory = both_tools(fh, tmp_path)
    for n, (name, body) in enumerate(GEMINI_INTERNALS.items()):
        write(memory / name, body, at(100 + n))
    catalog = offline.listed(cfg.load(fh.env))
    project = offline.load(catalog, slug)
    assert project is not None
    catalog._check()
    text = project.preamble("/mnt/memfs/" + slug, at(1000))
    # Neither inlined nor indexed: the real topics keep the Recent sections.
    assert b"INTERNAL" not in text
    assert b"PROPOSED" not in text
    assert b"DRAFT" not in text
    for name in GEMINI_INTERNALS:
        assert name.rsplit("/", 1)[-1].encode() not in text, name
    assert b"inbox" not in text
    recent = [s.split(b"\n")[0] for s in text.split(b"\n## ")[1:] if s.startswith(b"Recent: ")]
    assert [r.split(b" (")[0] for r in recent] == [
        b"Recent: deploys.md",
        b"Recent: shared.md",
        b"Recent: architecture.md",
    ]
    # The view: Gemini's lock, inbox and temp names are left out (status counts them); its
    # state file and draft skills are shown, to be read.
    shown = {p for p in project.heads if p.split("/", 1)[0] != HISTORY}
    assert shown == {
        "MEMORY.md",
        "architecture.md",
        "deploys.md",
        "shared.md",
        ".extraction-state.json",
        "skills/release/SKILL.md",
        "skills/release.patch",
    }
    left_out = {path for _, path, _ in project.counts.left_out}
    assert {".inbox", ".extraction.lock", ".extraction-state.json.tmp"} <= left_out
    assert {f".deploys.md.{UUID}.patch-tmp", f".deploys.md.{UUID}.rollback"} <= left_out


def test_an_own_copy_of_a_gemini_draft_is_memory(tmp_path: Path) -> None:
    # Only Gemini CLI's own skills/ holds drafts: the same path in the own account (an edit
    # through the mount copies it there) is the user's memory, inlined like any topic.
    fh = fake_home(tmp_path, (".claude",), pi=False)
    slug, claude, memory = both_tools(fh, tmp_path)
    write(memory / "skills/release/SKILL.md", "gemini's DRAFT\n", at(100))
    catalog = offline.listed(cfg.load(fh.env))
    project = offline.load(catalog, slug)
    assert project is not None
    assert b"DRAFT" not in project.preamble("/mnt/memfs/" + slug, at(1000))
    write(claude / "skills/release/SKILL.md", "REVIEWED skill\n", at(101))
    offline.rescan(project, 0)
    catalog._check()
    text = project.preamble("/mnt/memfs/" + slug, at(1000))
    assert b"## Recent: skills/release/SKILL.md" in text
    assert b"REVIEWED skill" in text
