"""Tier 1: slugs, canonical slugs and cwd -> project root (§2, §4)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memfs.rules.slug import canonical_slug, claude_slug, project_root, project_slug

# Reference pairs computed with Claude Code's own rule, copied into the repository (from the
# project's shared reference data) so that a clone with nothing beside it tests on its own.
VECTORS = Path(__file__).resolve().parent / "data/slugs.json"


def _load_vectors() -> list[tuple[str, str]]:
    # A missing file must fail the run, never shrink it to nothing: read it at
    # collection time so a missing file is an error, not zero parameters.
    if not VECTORS.is_file():
        raise FileNotFoundError(f"slug vectors missing: {VECTORS}")
    pairs = json.loads(VECTORS.read_text(encoding="utf-8"))
    return [(pair["path"], pair["slug"]) for pair in pairs]


@pytest.mark.parametrize(("path", "slug"), _load_vectors())
def test_claude_slug_matches_vectors(path: str, slug: str) -> None:
    assert claude_slug(path) == slug


def test_vectors_cover_long_and_non_bmp_paths() -> None:
    # The vectors are only worth something if they exercise the hard rules.
    paths = [path for path, _ in _load_vectors()]
    assert any(len(claude_slug(p)) > 200 for p in paths)
    assert any(any(ord(c) > 0xFFFF for c in p) for p in paths)


# -- an independent reference: the rule as written, one UTF-16 unit at a time


def _reference_slug(path: str) -> str:
    raw = path.encode("utf-16-le", "surrogatepass")
    units = [raw[i] | raw[i + 1] << 8 for i in range(0, len(raw), 2)]
    slug = "".join(chr(u) if chr(u).isascii() and chr(u).isalnum() else "-" for u in units)
    if len(slug) <= 200:
        return slug
    # The closed form of the Java hash: sum of unit * 31**(n-1-i), mod 2**32.
    n = len(units)
    h = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    signed = h - 2**32 if h >= 2**31 else h
    return slug[:200] + "-" + _reference_base36(abs(signed))


def _reference_base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return digits[n] if n < 36 else _reference_base36(n // 36) + digits[n % 36]


def test_reference_agrees_with_vectors() -> None:
    # Guards the property test below: a wrong reference would prove nothing.
    for path, slug in _load_vectors():
        assert _reference_slug(path) == slug


# Any code point, lone surrogates included (os.fsdecode makes them).
_any_char = st.characters(codec=None, categories=None)
_paths = st.one_of(
    st.text(_any_char, max_size=60),
    st.text(_any_char, min_size=150, max_size=400),
    st.text(st.sampled_from("/a_Z9.😀-"), min_size=190, max_size=260),
)


@given(_paths)
def test_claude_slug_matches_reference(path: str) -> None:
    assert claude_slug(path) == _reference_slug(path)


def test_non_bmp_character_gives_two_dashes() -> None:
    assert claude_slug("/a😀b") == "-a--b"
    assert claude_slug("/a\U00010000b") == "-a--b"
    assert claude_slug("/a\uffffb") == "-a-b"


def test_lone_surrogate_is_one_dash() -> None:
    # A non-UTF-8 byte in a file name reaches us as a surrogate escape.
    assert claude_slug("/a\udcffb") == "-a-b"


def test_long_slug_is_cut_and_hashed() -> None:
    slug = claude_slug("/" + "x" * 300)
    assert len(slug) > 200
    assert slug[:200] == "-" + "x" * 199
    assert slug[200] == "-"
    assert slug[201:].isalnum()
    assert slug[201:] == slug[201:].lower()


def test_slug_of_exactly_200_characters_is_not_cut() -> None:
    path = "/" + "x" * 199
    assert claude_slug(path) == "-" + "x" * 199


def test_hash_of_int_min_is_positive() -> None:
    # JavaScript's Math.abs(-2**31) is 2**31; Java's would stay negative.
    slug = claude_slug(_path_hashing_to_int_min())
    assert slug.endswith("-" + _reference_base36(2**31))


def _path_hashing_to_int_min() -> str:
    """A long path whose Java hash is exactly -2**31."""
    prefix = "/" + "a" * 210
    h = 0
    for c in prefix:
        h = (h * 31 + ord(c)) % 2**32
    # Five more units u0..u4 add sum(u_i * 31**(4-i)); write what is missing in
    # base 31, with the top digit allowed up to 2**32 // 31**4 (still BMP).
    need = (2**31 - h * 31**5) % 2**32
    units = [need // 31**4] + [need // 31**k % 31 for k in (3, 2, 1, 0)]
    return prefix + "".join(chr(u) for u in units)


# -- canonical slugs


@pytest.mark.parametrize(
    ("folder", "slug"),
    [
        ("-home-a-my_proj.v2", "-home-a-my-proj-v2"),
        ("-home-a-my-proj-v2", "-home-a-my-proj-v2"),
        ("-home-bob-Проекты", "-home-bob-" + "-" * 7),
        ("-home-c-emoji😀dir", "-home-c-emoji--dir"),
        ("-home-d-a-b--claude-worktrees-feat-x", "-home-d-a-b"),
        ("-home-d-a b-.claude-worktrees-feat-x", "-home-d-a-b"),
        ("-home-d--claude-worktrees-a--claude-worktrees-b", "-home-d"),
        ("--claude-worktrees-x", "-"),
        ("-home-d-claude-worktrees-x", "-home-d-claude-worktrees-x"),
    ],
)
def test_canonical_slug(folder: str, slug: str) -> None:
    assert canonical_slug(folder) == slug


def test_canonical_slug_keeps_claude_slugs() -> None:
    for path, slug in _load_vectors():
        if "--claude-worktrees-" not in slug:
            assert canonical_slug(slug) == slug, path


def test_canonical_slug_does_not_cut_long_names() -> None:
    name = "-" + "x" * 300
    assert canonical_slug(name) == name


# -- project roots


def _git_repo(folder: Path) -> Path:
    (folder / ".git").mkdir(parents=True)
    return folder


def _linked_worktree(main: Path, worktree: Path, name: str = "feat") -> Path:
    """What `git worktree add` leaves behind, built by hand."""
    admin = main / ".git" / "worktrees" / name
    admin.mkdir(parents=True)
    (admin / "gitdir").write_text(f"{worktree / '.git'}\n")
    (admin / "commondir").write_text("../..\n")
    worktree.mkdir(parents=True)
    (worktree / ".git").write_text(f"gitdir: {admin}\n")
    return worktree


def test_project_root_of_plain_repo(tmp_path: Path) -> None:
    repo = _git_repo(tmp_path / "repo")
    assert project_root(repo) == repo.resolve()
    assert project_root(str(repo)) == repo.resolve()


def test_project_root_of_nested_subfolder(tmp_path: Path) -> None:
    repo = _git_repo(tmp_path / "repo")
    deep = repo / "src" / "pkg" / "sub"
    deep.mkdir(parents=True)
    assert project_root(deep) == repo.resolve()


def test_project_root_nearest_repo_wins(tmp_path: Path) -> None:
    outer = _git_repo(tmp_path / "outer")
    inner = _git_repo(outer / "vendor" / "inner")
    assert project_root(inner / ".") == inner.resolve()


def test_project_root_of_linked_worktree(tmp_path: Path) -> None:
    main = _git_repo(tmp_path / "main")
    worktree = _linked_worktree(main, main / ".claude" / "worktrees" / "feat")
    (worktree / "src").mkdir()
    assert project_root(worktree) == main.resolve()
    assert project_root(worktree / "src") == main.resolve()


def test_project_root_of_worktree_outside_checkout(tmp_path: Path) -> None:
    main = _git_repo(tmp_path / "main")
    worktree = _linked_worktree(main, tmp_path / "elsewhere" / "feat-x")
    assert project_root(worktree) == main.resolve()


def test_project_root_with_relative_gitdir(tmp_path: Path) -> None:
    main = _git_repo(tmp_path / "main")
    worktree = _linked_worktree(main, tmp_path / "wt")
    (worktree / ".git").write_text("gitdir: ../main/.git/worktrees/feat\n")
    assert project_root(worktree) == main.resolve()


def test_project_root_of_submodule_keeps_it(tmp_path: Path) -> None:
    # A submodule's gitdir has no commondir: it is its own project.
    main = _git_repo(tmp_path / "main")
    (main / ".git" / "modules" / "sub").mkdir(parents=True)
    sub = main / "sub"
    sub.mkdir()
    (sub / ".git").write_text("gitdir: ../.git/modules/sub\n")
    assert project_root(sub) == sub.resolve()


def test_project_root_of_bare_common_dir_keeps_worktree(tmp_path: Path) -> None:
    bare = tmp_path / "repo.git"
    admin = bare / "worktrees" / "feat"
    admin.mkdir(parents=True)
    (admin / "commondir").write_text("../..\n")
    worktree = tmp_path / "feat"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {admin}\n")
    assert project_root(worktree) == worktree.resolve()


def test_project_root_with_dangling_commondir(tmp_path: Path) -> None:
    main = _git_repo(tmp_path / "main")
    worktree = _linked_worktree(main, tmp_path / "wt")
    (main / ".git" / "worktrees" / "feat" / "commondir").write_text("../../gone/.git\n")
    assert project_root(worktree) == worktree.resolve()


def _nearest_git_above(folder: Path) -> Path | None:
    """The nearest folder above folder holding .git, outside the test's control."""
    return next((p for p in folder.resolve().parents if (p / ".git").exists()), None)


def test_project_root_without_git(tmp_path: Path) -> None:
    # tmp_path may lie inside a checkout on a developer's machine; then that
    # checkout is the right answer, so expect it rather than skip.
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    assert project_root(plain) == (_nearest_git_above(plain) or plain.resolve())


@pytest.mark.parametrize(
    "content",
    ["", "nonsense\n", "gitdir:\n", "gitdir: \n", "gitdir: does/not/exist\n", "\xff\xfe"],
)
def test_project_root_with_malformed_git_file(tmp_path: Path, content: str) -> None:
    holder = tmp_path / "holder"
    holder.mkdir()
    (holder / ".git").write_text(content, encoding="latin-1")
    (holder / "sub").mkdir()
    assert project_root(holder / "sub") == holder.resolve()


def test_project_root_with_huge_git_file(tmp_path: Path) -> None:
    holder = tmp_path / "holder"
    holder.mkdir()
    (holder / ".git").write_text("gitdir: " + "x" * 10_000 + "\n")
    assert project_root(holder) == holder.resolve()


def test_project_root_ignores_fifo_named_git(tmp_path: Path) -> None:
    # Opening a FIFO would block; it is no git marker either.
    repo = _git_repo(tmp_path / "repo")
    odd = repo / "odd"
    odd.mkdir()
    os.mkfifo(odd / ".git")
    assert project_root(odd) == repo.resolve()


def test_project_root_resolves_symlinks(tmp_path: Path) -> None:
    repo = _git_repo(tmp_path / "repo")
    link = tmp_path / "link"
    link.symlink_to(repo)
    assert project_root(link) == repo.resolve()


# -- project slugs


def test_project_slug_of_linked_worktree(tmp_path: Path) -> None:
    main = _git_repo(tmp_path / "my_proj.v2")
    worktree = _linked_worktree(main, main / ".claude" / "worktrees" / "feat")
    assert project_slug(worktree) == claude_slug(str(main.resolve()))
    assert project_slug(worktree).endswith("-my-proj-v2")


def test_project_slug_folds_worktree_folder_without_git(tmp_path: Path) -> None:
    # With no git at all, the slug rule alone folds `.claude/worktrees/<name>`.
    root = tmp_path / "proj"
    folder = root / ".claude" / "worktrees" / "feat"
    folder.mkdir(parents=True)
    expected = _nearest_git_above(folder) or root.resolve()
    assert project_slug(folder) == claude_slug(str(expected))
