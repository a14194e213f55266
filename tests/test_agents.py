"""Tier 1: the layouts of Kilo Code's, goose's and Codex's memory, and linked source folders
(issue 38; /work/shared/AGENTS-NOTES.md).

Pure rules (rules/layouts.py) against the layouts as the tools make them
(agent_layouts.py), the disk readers (disk/kilo.py, goose.py, mapped.py) on tmp_path trees,
and what the catalog and a project make of them, loaded without a mount (app/offline.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agent_layouts import KiloCode, codex_memories, goose_remember, kilo_name
from helpers import fake_home, write

from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import goose, kilo, mapped, roots
from memfs.rules import layouts
from memfs.rules.slug import claude_slug, project_slug
from memfs.view import userlevel


def real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def folder(base: Path, *parts: str, git: bool = False) -> Path:
    made = base.joinpath(*parts)
    made.mkdir(parents=True, exist_ok=True)
    if git:
        (made / ".git").mkdir(exist_ok=True)
    return real(made)


# --- Kilo Code -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "root",
    [
        "/home/u/src/shop",
        "/home/u/src/My Proj (v2)!",
        "/home/u/src/__init__",
        "/home/u/src/日本語",
        "/home/u/src/\uff46\uff55\uff4c\uff4c",  # NFKC: full-width letters become ASCII
        "/home/u/src/!!!",
        "/home/u/" + "x" * 150,
        "/",
    ],
)
def test_kilo_folder_names_are_the_ones_kilo_gives(root: str) -> None:
    name = layouts.kilo_folder(root)
    assert name == kilo_name(root)
    display, _, digest = name.rpartition("-")
    assert len(digest) == 12
    assert 0 < len(display) <= layouts.KILO_DISPLAY_MAX


def test_kilo_folder_examples() -> None:
    assert layouts.kilo_folder("/home/u/src/\uff46\uff55\uff4c\uff4c").startswith("full-")
    assert layouts.kilo_folder("/home/u/src/!!!").startswith("project-")
    assert layouts.kilo_folder("/home/u/src/My Proj (v2)!").startswith("My_Proj_v2-")


def test_kilo_manifest_names_the_root_or_says_why_not() -> None:
    good = {"kind": "kilo-memory", "version": 1, "canonical": "/home/u/src/shop"}
    assert layouts.kilo_manifest(json.dumps(good).encode()) == "/home/u/src/shop"
    for bad, why in [
        (b"{", "not JSON"),
        (b"[]", "not a kilo-memory manifest"),
        (json.dumps({**good, "kind": "other"}).encode(), "not a kilo-memory manifest"),
        (json.dumps({**good, "canonical": "src/shop"}).encode(), "names no absolute path"),
        (json.dumps({**good, "canonical": 3}).encode(), "names no absolute path"),
    ]:
        with pytest.raises(ValueError, match=why):
            layouts.kilo_manifest(bad)


def test_each_kilo_folder_maps_to_the_project_here_would_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cli = KiloCode(data)
    repo = folder(tmp_path, "src", "shop", git=True)
    shop = cli.folder(repo)
    gone_root = folder(tmp_path, "src", "gone")
    gone = cli.folder(gone_root)
    gone_root.rmdir()
    (cli.dir / "no-manifest").mkdir()
    broken = cli.dir / "broken-0123456789ab"
    broken.mkdir()
    (broken / "manifest.json").write_text("{")
    renamed = cli.dir / "renamed"  # a manifest Kilo would file under another name
    renamed.mkdir()
    (renamed / "manifest.json").write_bytes((shop / "manifest.json").read_bytes())
    (cli.dir / ".hidden").mkdir()
    elsewhere = folder(tmp_path, "synced", "tool-kilo")
    tool = folder(tmp_path, "src", "tool", git=True)
    (elsewhere / "manifest.json").write_text(
        json.dumps({"kind": "kilo-memory", "canonical": str(tool)})
    )
    (cli.dir / "tool-link").symlink_to(elsewhere)
    found = {m.folder: m for m in kilo.read_map(cli.dir)}
    assert set(found) == {shop.name, gone.name, "no-manifest", broken.name, "renamed", "tool-link"}
    assert found[shop.name] == mapped.Mapping(
        shop.name, str(repo), claude_slug(str(repo)), "from manifest.json"
    )
    assert found[gone.name].slug is None
    assert found[gone.name].why == f"its root {gone_root} (manifest.json) does not exist"
    assert found["no-manifest"].why == "no manifest.json"
    assert found[broken.name].why.startswith("manifest.json: not JSON")
    assert found["renamed"].slug == claude_slug(str(repo))
    assert found["renamed"].why == f"from manifest.json; Kilo would name it {shop.name}"
    assert found["tool-link"].slug == claude_slug(str(tool))
    assert found["tool-link"].real == elsewhere  # read where the link leads


def test_kilo_memory_joins_the_claude_code_project_memory_only(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    repo = folder(tmp_path, "src", "shop", git=True)
    slug = claude_slug(str(repo))
    write(fh.memory(".claude", slug) / "notes.md", "claude notes\n")
    cli = KiloCode(Path(fh.env["XDG_DATA_HOME"]))
    memory = cli.folder(folder(repo, "web"))  # a subfolder: Kilo keys the work tree, here too
    cli.save(memory, "project.md", "## Facts\n- kilo fact\n")
    cli.save(memory, "sessions/20261201T100000_s1_id_ab.md", "a session\n")
    (memory / "sessions" / ".x.md.1.1765000000000.ab.tmp").write_text("in flight")
    (memory / "decisions.jsonl").write_text("{}\n")
    catalog = offline.listed(cfg.load(fh.env))
    assert catalog.slugs() == [slug]
    project = offline.load(catalog, slug)
    assert project is not None
    catalog._check()
    assert sorted(project.heads) == [
        "notes.md",
        "project.md",
        "sessions/20261201T100000_s1_id_ab.md",
    ]
    assert {project.source_name(v) for p, v in project.heads.items() if p != "notes.md"} == {"kilo"}


# --- goose -----------------------------------------------------------------------------


def test_goose_entries_as_remember_writes_them(tmp_path: Path) -> None:
    path = goose_remember(tmp_path, "prefs", "use uv\nnot pip", tags="python tooling")
    goose_remember(tmp_path, "prefs", "run the tests with -x")
    goose_remember(tmp_path, "prefs", "# just a tag line? no: text", tags="")
    entries = layouts.goose_entries(path.read_text())
    assert entries == [
        layouts.GooseEntry(("python", "tooling"), "use uv\nnot pip"),
        layouts.GooseEntry((), "run the tests with -x"),
        layouts.GooseEntry(("just", "a", "tag", "line?", "no:", "text"), ""),
    ]
    assert layouts.goose_entries("") == []


def test_a_slug_names_the_folders_whose_path_it_encodes(tmp_path: Path) -> None:
    shop = folder(tmp_path, "u", "src", "my_shop.v2")
    twin = folder(tmp_path, "u", "src", "my", "shop-v2")  # the same slug, another folder
    folder(tmp_path, "u", "src", "my-shop")  # a prefix only
    assert goose.roots_of_slug(claude_slug(str(shop))) == sorted([str(shop), str(twin)])
    assert goose.roots_of_slug(claude_slug(str(tmp_path / "u" / "nothing"))) == []
    assert goose.roots_of_slug("-" + "a" * 250) == []  # cut and hashed: not invertible
    assert goose.roots_of_slug("no-dash") == []


def test_goose_maps_the_roots_memfs_knows(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    repo = folder(tmp_path, "src", "shop", git=True)
    sub = folder(repo, "api")
    plain = folder(tmp_path, "src", "plain")
    write(fh.memory(".claude", claude_slug(str(repo))) / "n.md", "n\n")
    write(fh.memory(".claude", claude_slug(str(sub))) / "n.md", "n\n")
    write(fh.memory(".claude", claude_slug(str(plain))) / "n.md", "n\n")
    goose_remember(repo / ".goose" / "memory", "prefs", "repo prefs")
    goose_remember(sub / ".goose" / "memory", "api", "api prefs")  # a subfolder's: the repo's
    user = Path(fh.env["XDG_CONFIG_HOME"]) / "goose" / "memory"
    goose_remember(user, "style", "be brief")
    config = cfg.load(fh.env)
    known = dict(roots.goose_roots(config))
    assert set(known) == {str(repo), str(sub), str(plain)}
    assert known[str(repo)] == f"claude's folder {claude_slug(str(repo))}"
    found = goose.read_map(roots.goose_roots(config))
    assert [(m.root, m.slug, m.real) for m in found] == sorted(
        [
            (str(repo), project_slug(repo), repo / ".goose" / "memory"),
            (str(sub), project_slug(repo), sub / ".goose" / "memory"),
        ],
        key=lambda t: claude_slug(t[0]),
    )
    catalog = offline.listed(config)
    project = offline.load(catalog, claude_slug(str(repo)))
    assert project is not None
    assert sorted(project.heads) == ["api.txt", "n.md", "prefs.txt"]
    g = offline.load(catalog, userlevel.slug_of(userlevel.GOOSE_KIND))
    assert g is not None
    assert sorted(g.heads) == ["style.txt"]
    assert userlevel.own_origin(config, userlevel.slug_of(userlevel.GOOSE_KIND)) is None


# --- Codex -----------------------------------------------------------------------------


def test_codex_summary_first_and_its_own_files_left_out(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    codex_memories(fh.home / ".codex")
    catalog = offline.listed(cfg.load(fh.env))
    project = offline.load(catalog, userlevel.slug_of(userlevel.CODEX_KIND))
    assert project is not None
    assert sorted(project.heads) == [
        "MEMORY.md",
        "extensions/ad_hoc/instructions.md",
        "extensions/ad_hoc/notes/n1.md",
        "memory_summary.md",
        "raw_memories.md",
        "rollout_summaries/2026-12-01-shop.md",
        "skills/release/SKILL.md",
    ]
    assert [v.path for v in project.leads()] == ["memory_summary.md"]
    text = project.preamble("/mnt/global/codex").decode()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Summary: memory_summary.md"
    assert sections[1] == "## Index: MEMORY.md"
    assert text.count("CODEX SUMMARY") == 1  # not again among the recent files
    assert "ROLLOUT SUMMARY" not in text
    assert "rollout_summaries" not in text
    assert "RAW MEMORIES" not in text


def test_a_summary_elsewhere_leads_nothing(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    slug = claude_slug(str(folder(tmp_path, "src", "shop")))
    write(fh.memory(".claude", slug) / "memory_summary.md", "just a topic\n")
    project = offline.load(offline.listed(cfg.load(fh.env)), slug)
    assert project is not None
    assert project.leads() == []


# --- links ---------------------------------------------------------------------------


def test_a_link_is_followed_only_to_a_folder_of_the_users(tmp_path: Path) -> None:
    mine = folder(tmp_path, "mine")
    (tmp_path / "to-mine").symlink_to(mine)
    (tmp_path / "to-nothing").symlink_to(tmp_path / "nothing")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "to-file").symlink_to(tmp_path / "a-file")
    assert mapped.followed(tmp_path / "to-mine") == (mine, "")
    assert mapped.followed(mine) == (None, "")  # no link: read as it is
    assert mapped.followed(tmp_path / "to-nothing")[1].startswith("a link to nothing")
    assert mapped.followed(tmp_path / "to-file")[1].endswith("not a folder")
    if os.geteuid() == 0:  # a folder of another user, made as root
        theirs = folder(tmp_path, "theirs")
        os.chown(theirs, 4242, 4242)
        (tmp_path / "to-theirs").symlink_to(theirs)
        assert mapped.followed(tmp_path / "to-theirs")[1].endswith("owned by another user")
        assert "to-theirs" not in mapped.list_folders(tmp_path)
    assert sorted(mapped.list_folders(tmp_path)) == sorted(
        ["mine", "to-mine"] + (["theirs"] if os.geteuid() == 0 else [])
    )


def test_linked_project_folders_are_read_where_they_lead(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude", ".claude-work"), pi=False)
    synced = folder(tmp_path, "synced")
    slug = claude_slug(str(folder(tmp_path, "src", "shop")))
    # The own account's memory/ is a link; the other account's whole slug folder is one.
    own_real = folder(synced, "own")
    write(own_real / "notes.md", "own\n")
    (fh.account(".claude") / "projects" / slug).mkdir(parents=True)
    (fh.account(".claude") / "projects" / slug / "memory").symlink_to(own_real)
    work_real = folder(synced, "work-slug")
    write(work_real / "memory" / "work.md", "work\n")
    (fh.account(".claude-work") / "projects" / slug).symlink_to(work_real)
    config = cfg.load(fh.env)
    listing, reals = roots.list_folders(config)
    assert sorted(listing) == [(0, slug, None), (1, slug, None)]
    assert reals == {(0, slug): own_real, (1, slug): work_real / "memory"}
    catalog = offline.listed(config)
    origins = [o for o in catalog.origins(slug) if not o.kept]
    assert [(o.root, o.parts, o.via) for o in origins] == [
        (own_real, (), (slug, "memory")),
        (work_real / "memory", (), (slug, "memory")),
    ]
    # The mirror of a read-only one is named as its source's root names it.
    kept = catalog.kept_origin(origins[1])
    assert kept is not None
    assert kept.parts == (slug, "memory")
    # Writes land where the own link leads.
    place = catalog.own_place(slug)
    assert place is not None
    assert (place.root, place.parts) == (own_real, ())
    assert catalog.own_origin(slug) == origins[0]
    project = offline.load(catalog, slug)
    assert project is not None
    assert sorted(project.heads) == ["notes.md", "work.md"]


def test_a_linked_account_folder_is_resolved_at_discovery(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    account = folder(tmp_path, "synced", "claude-work")
    (account / "projects").mkdir()
    (fh.home / ".claude-work").symlink_to(account)
    work = {s.name: s for s in cfg.discover(fh.env)}["work"]
    assert work.root == account / "projects"
    assert work.why.endswith(f"{fh.home / '.claude-work'} links to {account}")


def test_kilo_and_goose_sources_listed_in_a_config(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    path = tmp_path / "config.toml"
    path.write_text(
        '[[source]]\nname = "k"\nkind = "kilo"\n'
        '[[source]]\nname = "g"\nkind = "goose"\npath = "~/goose-config"\n'
    )
    k, g = cfg.load(fh.env, path).sources
    assert (k.kind, k.root, k.tail, k.mapped, k.own) == (
        cfg.KILO, fh.home / ".local/share/kilo/memory", (), True, False
    )  # fmt: skip
    assert (g.kind, g.root, g.tail, g.mapped) == (
        cfg.GOOSE,
        fh.home / "goose-config",
        ("memory",),
        True,
    )
    path.write_text('[[source]]\nname = "k"\nkind = "kilo"\nown = true\n')
    with pytest.raises(cfg.ConfigError, match="'own' must be false for a kilo source"):
        cfg.load(fh.env, path)
    path.write_text('[[source]]\nname = "k"\nkind = "kiloo"\n')
    with pytest.raises(cfg.ConfigError, match='"kilo"'):
        cfg.load(fh.env, path)


def test_the_slug_walk_never_enters_a_fuse_mount(tmp_path: Path) -> None:
    """memfs's own mount would wait for itself (its listing runs before it serves), and
    another FUSE mount may be remote: the walk that inverts slugs looks into neither."""
    shop = folder(tmp_path, "mnt", "u", "shop")
    slug = claude_slug(str(shop))
    assert goose.roots_of_slug(slug) == [str(shop)]
    assert goose.roots_of_slug(slug, avoid=frozenset({str(tmp_path / "mnt")})) == []
    info = tmp_path / "mountinfo"
    info.write_text(
        "36 35 98:0 / /mnt/my\\040memfs rw,nosuid - fuse memfs rw,user_id=1000\n"
        "37 35 98:1 / /home rw - ext4 /dev/sda2 rw\n"
        "38 35 98:2 / /mnt/remote rw - fuse.sshfs host:/ rw\n"
    )
    assert goose.fuse_mounts(str(info)) == frozenset({"/mnt/my memfs", "/mnt/remote"})
    assert goose.fuse_mounts(str(tmp_path / "none")) == frozenset()
