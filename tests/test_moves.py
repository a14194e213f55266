"""Tier 1: memory follows a moved project (issue 38, §4.2): the pure decision (certain,
offered, never), the roots and moves memfs records (disk/moves.py, on tmp_path folders),
the catalog showing an old slug's folders under the new one, and PREAMBLE.md's frame."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import moves, store
from memfs.rules import moves as rules
from memfs.rules import preamble
from memfs.rules import slug as slugs
from memfs.rules.moves import Root, Verdict
from memfs.view.catalog import Catalog

OLD = Root("/home/a/shop", "-home-a-shop", dev=1, ino=42, birth_ns=1000, commit="c0ffee")


def _at(path: str, **changes: object) -> Root:
    found = Root(path, slugs.claude_slug(path), OLD.dev, OLD.ino, OLD.birth_ns, OLD.commit)
    return Root(**{**found.__dict__, **changes})  # type: ignore[arg-type]


# --- the decision -------------------------------------------------------------------------


def test_the_same_folder_at_a_new_path_with_the_old_one_gone_is_certain() -> None:
    assert rules.judge(OLD, False, _at("/home/a/shop2")) is Verdict.CERTAIN


def test_the_old_path_still_there_never_merges_whatever_they_share() -> None:
    # two live copies: the same inode is impossible, the same repository is common
    assert rules.judge(OLD, True, _at("/home/a/shop2")) is Verdict.NEVER
    assert rules.judge(OLD, True, _at("/home/a/copy", ino=7, birth_ns=5)) is Verdict.NEVER


def test_the_same_repository_in_another_folder_is_only_offered() -> None:
    copy = _at("/mnt/other/shop", dev=2, ino=7, birth_ns=5)  # copied across file systems
    assert rules.judge(OLD, False, copy) is Verdict.OFFERED


def test_an_inode_number_reused_by_a_younger_folder_is_no_move() -> None:
    reused = _at("/home/a/other", birth_ns=2000, commit="")
    assert rules.judge(OLD, False, reused) is None
    # the same repository, though: offered, not merged
    assert rules.judge(OLD, False, _at("/home/a/other", birth_ns=2000)) is Verdict.OFFERED


def test_without_a_birth_time_the_inode_needs_the_repository_too() -> None:
    old = Root(OLD.path, OLD.slug, 1, 42, 0, "c0ffee")
    assert rules.judge(old, False, _at("/home/a/b", birth_ns=0)) is Verdict.CERTAIN
    plain = Root(OLD.path, OLD.slug, 1, 42, 0, "")
    assert rules.judge(plain, False, _at("/home/a/b", birth_ns=0, commit="")) is None


def test_unrelated_folders_and_the_same_project_are_no_move() -> None:
    assert rules.judge(OLD, False, _at("/home/a/x", dev=3, ino=9, birth_ns=1, commit="")) is None
    assert rules.judge(OLD, False, OLD) is None


def test_verdicts_count_a_path_not_read_as_alive() -> None:
    new = _at("/home/a/shop2")
    assert rules.verdicts([OLD], {}, new) == [(OLD, Verdict.NEVER)]
    assert rules.verdicts([OLD], {OLD.path: False}, new) == [(OLD, Verdict.CERTAIN)]


def test_moves_chain_and_never_loop() -> None:
    moved = {"-a": "-b", "-b": "-c", "-x": "-c"}
    assert rules.moved_into(moved, "-c") == ["-b", "-x", "-a"]
    assert rules.final_slug(moved, "-a") == "-c"
    looped = {"-a": "-b", "-b": "-a"}
    assert rules.moved_into(looped, "-a") == ["-b"]
    assert rules.final_slug(looped, "-a") == "-b"


def test_the_frame_says_where_the_project_moved_from() -> None:
    inp = preamble.PreambleInput("-home-a-shop2", "/m/-home-a-shop2", None, None, [], [], 0)
    moved = preamble.PreambleInput(
        "-home-a-shop2", "/m/-home-a-shop2", None, None, [], [], 0, moved_from=["/home/a/shop"]
    )
    plain = preamble.render(inp, budget=8192, file_cap=4096)
    text = preamble.render(moved, budget=8192, file_cap=4096)
    assert b"moved from" not in plain
    assert b"The project was moved from /home/a/shop: its memory there is shown here.\n" in text


# --- what memfs records on disk ------------------------------------------------------------


def _git(folder: Path, *args: str) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, env=env)


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    (path / "README").write_text("shop\n")
    _git(path, "add", "README")
    _git(path, "commit", "-q", "-m", "first")
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    yield tmp_path / "state"
    store.close_all()


def _slug(path: Path) -> str:
    return slugs.canonical_slug(slugs.claude_slug(str(path)))


def _look(state_dir: Path, path: Path, has_memory: bool = False) -> list[moves.Move]:
    return moves.look(state_dir, str(path), _slug(path), has_memory)


def test_a_renamed_root_is_followed_once(tmp_path: Path, state_dir: Path) -> None:
    shop = _repo(tmp_path / "src" / "shop")
    assert _look(state_dir, shop, has_memory=True) == []  # recorded: it has memory
    shop2 = tmp_path / "src" / "shop2"
    shop.rename(shop2)
    found = _look(state_dir, shop2)
    assert [(m.old_slug, m.new_slug, m.old_path) for m in found] == [
        (_slug(shop), _slug(shop2), str(shop))
    ]
    assert moves.followed(state_dir) == {_slug(shop): _slug(shop2)}
    assert _look(state_dir, shop2) == []  # followed already: nothing new
    # moved again: the new path was recorded when the move was followed
    shop3 = tmp_path / "shop3"
    shop2.rename(shop3)
    assert [m.old_slug for m in _look(state_dir, shop3)] == [_slug(shop2)]
    assert rules.moved_into(moves.followed(state_dir), _slug(shop3)) == [
        _slug(shop2),
        _slug(shop),
    ]


def test_a_root_without_memory_is_not_recorded(tmp_path: Path, state_dir: Path) -> None:
    shop = _repo(tmp_path / "shop")
    _look(state_dir, shop, has_memory=False)
    shop.rename(tmp_path / "shop2")
    assert _look(state_dir, tmp_path / "shop2") == []


def test_a_second_clone_is_never_followed_and_offered_only_once_the_old_path_is_gone(
    tmp_path: Path, state_dir: Path
) -> None:
    shop = _repo(tmp_path / "shop")
    _look(state_dir, shop, has_memory=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(shop), str(clone)], check=True)
    assert _look(state_dir, clone) == []
    assert moves.offers(state_dir, str(clone), _slug(clone)) == []  # two live copies
    shutil.rmtree(shop)
    assert _look(state_dir, clone) == []  # another folder: never merged by itself
    offered = moves.offers(state_dir, str(clone), _slug(clone))
    assert [r.path for r in offered] == [str(shop)]


def test_a_copy_of_a_moved_project_is_a_live_copy_of_it(tmp_path: Path, state_dir: Path) -> None:
    shop = _repo(tmp_path / "shop")
    _look(state_dir, shop, has_memory=True)
    shop.rename(tmp_path / "shop2")
    assert len(_look(state_dir, tmp_path / "shop2")) == 1
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(tmp_path / "shop2"), str(clone)], check=True)
    # shop's memory lives on in shop2, which exists: the clone is a second copy of it
    assert _look(state_dir, clone) == []
    assert moves.offers(state_dir, str(clone), _slug(clone)) == []


def test_a_folder_back_at_the_old_path_is_no_move(tmp_path: Path, state_dir: Path) -> None:
    shop = _repo(tmp_path / "shop")
    _look(state_dir, shop, has_memory=True)
    shop.rename(tmp_path / "shop2")
    (tmp_path / "shop").mkdir()  # something at the old path again: a live project there
    assert _look(state_dir, tmp_path / "shop2") == []


# --- the catalog ---------------------------------------------------------------------------


def _catalog(tmp_path: Path) -> Catalog:
    own = tmp_path / "own" / "projects"
    work = tmp_path / "work" / "projects"
    for root in (own, work):
        root.mkdir(parents=True)
    path = tmp_path / "config.toml"
    path.write_text(
        f'[[source]]\nname = "own"\npath = "{own}/{{slug}}/memory"\nown = true\n'
        f'[[source]]\nname = "work"\npath = "{work}/{{slug}}/memory"\n'
    )
    env = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    return offline.listed(cfg.load(env, path))


def _memory(root: Path, slug: str, name: str, body: str) -> None:
    folder = root / slug / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(body)


def test_a_followed_move_shows_every_account_s_old_memory_read_only(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    own, work = (s.root for s in catalog.config.sources)
    _memory(own, "-h-shop", "MEMORY.md", "- [a](a.md)\n")
    _memory(own, "-h-shop", "a.md", "own a\n")
    _memory(work, "-h-shop", "b.md", "work b\n")
    _memory(own, "-h-shop2", "c.md", "new c\n")
    catalog = offline.listed(catalog.config)
    assert catalog.follow("-h-shop", "-h-shop2", "/h/shop") == ["-h-shop", "-h-shop2"]
    assert catalog.slugs() == ["-h-shop2"]  # the old slug's folders are the new one's
    project = offline.load(catalog, "-h-shop2")
    assert project is not None
    assert {p for p, _ in project.tree.leaves() if p.endswith(".md")} >= {
        "MEMORY.md",
        "a.md",
        "b.md",
        "c.md",
    }
    assert project.moved_from == ("/h/shop",)
    moved = [o for o in project.origins if o.moved]
    assert sorted(o.parts[0] for o in moved) == ["-h-shop", "-h-shop"]
    # the own account's old folder is no own folder here: writes land under the new slug
    own_origin = catalog.own_origin("-h-shop2")
    assert own_origin is not None
    assert own_origin.parts[0] == "-h-shop2"
    assert [i for i in range(len(project.origins)) if project.is_own(i)] == [
        project.origin_index(own_origin)
    ]
    catalog._check()


def test_offline_commands_follow_the_moves_recorded(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    own = catalog.config.sources[0].root
    _memory(own, "-h-shop", "a.md", "own a\n")
    old = Root("/h/shop", "-h-shop", 1, 2, 3)
    moves.follow(catalog.config.state_dir, old, Root("/h/shop2", "-h-shop2", 1, 2, 3))
    try:
        again = offline.listed(catalog.config)
        assert again.slugs() == ["-h-shop2"]
        assert again.moved_from("-h-shop2") == ("/h/shop",)
        moves.mark_taken(catalog.config.state_dir, "-h-shop")
        assert offline.listed(catalog.config).slugs() == ["-h-shop"]  # taken: not followed
    finally:
        store.close_all()


def test_an_offered_move_is_adopted_whole_and_then_offered_no_more(tmp_path: Path) -> None:
    from memfs.app import adopt, moved

    config = _catalog(tmp_path).config
    own, work = (s.root for s in config.sources)
    shop = _repo(tmp_path / "src" / "shop")
    old = _slug(shop)
    _memory(own, old, "MEMORY.md", "- [A](a.md)\n")
    _memory(own, old, "a.md", "own a\n")
    _memory(work, old, "a.md", "work's a\n")
    _memory(work, old, "b.md", "work b\n")
    try:
        assert moved.look(config, shop) == old  # recorded: it has memory
        clone = tmp_path / "src" / "clone"
        subprocess.run(["git", "clone", "-q", str(shop), str(clone)], check=True)
        shutil.rmtree(shop)
        new = moved.look(config, clone)
        assert moves.followed(config.state_dir) == {}  # another folder: not followed
        made = adopt.make_list(config, new, root=clone)
        assert [(c.label, c.files) for c in made.candidates] == [
            (f"same repository, was at {shop}", 4)
        ]
        digest = made.candidates[0].digest[: adopt.HASH_SHOWN]
        adopt.take(config, made.list_id, 1, digest)
        folder = own / new / "memory"
        assert (folder / "a.md").read_text() == "own a\n"  # the own account's stays the head
        assert (folder / "b.md").read_text() == "work b\n"
        assert (folder / "MEMORY.md").read_text() == "- [A](a.md)\n"
        kept = [p.read_text() for p in (folder / ".history" / "a.md").iterdir()]
        assert kept == ["work's a\n"]
        assert sorted(os.listdir(work / old / "memory")) == ["a.md", "b.md"]  # untouched
        assert adopt.make_list(config, new, root=clone).candidates == ()
    finally:
        store.close_all()


def test_roots_are_learnt_from_claude_code_s_transcripts(tmp_path: Path) -> None:
    config = _catalog(tmp_path).config
    own, work = (s.root for s in config.sources)
    shop = _repo(tmp_path / "src" / "shop")
    (shop / "sub").mkdir()
    old = _slug(shop)
    _memory(work, old, "a.md", "work a\n")
    lines = [b'{"type":"summary"}', json.dumps({"cwd": str(shop / "sub")}).encode(), b'{"cut']
    (work / old / "s1.jsonl").write_bytes(b"\n".join(lines))
    # a slug whose transcript names another project, and one without memory: left out
    _memory(own, "-elsewhere", "b.md", "b\n")
    (own / "-elsewhere" / "s.jsonl").write_text(json.dumps({"cwd": str(shop)}) + "\n")
    (own / _slug(tmp_path)).mkdir()
    (own / _slug(tmp_path) / "s.jsonl").write_text(json.dumps({"cwd": str(tmp_path)}) + "\n")
    try:
        assert moves.learn(config) == 1
        assert [r.path for r in moves.recorded(config.state_dir)] == [str(shop)]
        assert moves.learn(config) == 0  # known: no write, no git run
        shop.rename(tmp_path / "src" / "shop2")
        found = moves.look(config.state_dir, str(tmp_path / "src" / "shop2"), "-x-shop2", False)
        assert [m.old_slug for m in found] == [old]
    finally:
        store.close_all()


def test_a_slug_names_the_folders_it_may_be(tmp_path: Path) -> None:
    base = Path(os.path.realpath(tmp_path))
    for path in ("my-shop/web", "my_shop/web", "my/shop/web", "my-shop/webs", "other"):
        (base / path).mkdir(parents=True)
    (base / "link").symlink_to(base / "my-shop")
    slug = slugs.claude_slug(str(base / "my-shop" / "web"))
    assert sorted(moves.paths_of(slug)) == sorted(
        str(base / p) for p in ("my-shop/web", "my_shop/web", "my/shop/web")
    )
    assert moves.paths_of(slugs.claude_slug(str(base / "nothing"))) == []
    assert moves.paths_of("-" + "x" * 300) == []


def test_a_moved_project_asked_for_by_its_slug_is_followed(tmp_path: Path, state_dir: Path) -> None:
    shop = _repo(tmp_path / "src" / "shop")
    assert moves.look_slug(state_dir, _slug(shop)) == []  # nothing recorded: no walk
    _look(state_dir, shop, has_memory=True)
    shop2 = tmp_path / "src" / "shop2"
    shop.rename(shop2)
    found = moves.look_slug(state_dir, _slug(shop2))
    assert [(m.old_slug, m.new_path) for m in found] == [(_slug(shop), str(shop2))]


def test_a_project_moved_back_is_its_own_again(tmp_path: Path, state_dir: Path) -> None:
    shop = _repo(tmp_path / "shop")
    _look(state_dir, shop, has_memory=True)
    shop2 = tmp_path / "shop2"
    shop.rename(shop2)
    assert len(_look(state_dir, shop2)) == 1
    shop2.rename(shop)
    assert [(m.old_slug, m.new_slug) for m in _look(state_dir, shop)] == [
        (_slug(shop2), _slug(shop))
    ]
    assert moves.followed(state_dir) == {_slug(shop2): _slug(shop)}


def test_the_catalog_undoes_a_move_away_when_the_project_comes_back(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    own, work = (s.root for s in catalog.config.sources)
    _memory(own, "-h-shop", "a.md", "a\n")
    _memory(work, "-h-shop", "b.md", "b\n")
    catalog = offline.listed(catalog.config)
    catalog.follow("-h-shop", "-h-shop2", "/h/shop")
    _memory(own, "-h-shop2", "c.md", "written after the move\n")
    catalog.folder_added(0, "-h-shop2")
    assert catalog.slugs() == ["-h-shop2"]
    assert catalog.follow("-h-shop2", "-h-shop", "/h/shop2") == ["-h-shop", "-h-shop2"]
    assert catalog.slugs() == ["-h-shop"]
    assert catalog.moves() == {"-h-shop2": ("-h-shop", "/h/shop2")}
    project = offline.load(catalog, "-h-shop")
    assert project is not None
    assert project.moved_from == ("/h/shop2",)
    assert [o.parts[0] for o in project.origins if o.moved] == ["-h-shop2"]
    assert {p for p, _ in project.tree.leaves()} >= {"a.md", "b.md", "c.md"}
    catalog._check()
