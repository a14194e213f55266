"""Slugs: Claude Code's path encoding, canonical slugs, and cwd -> project (§2, §4).

A project is keyed by the slug Claude Code derives from its absolute path. This
module computes that slug exactly, canonicalises the folder names other tools
use for the same project, and maps a working directory to the project it
belongs to (the git work tree, a linked worktree mapped to its main checkout).

It imports neither pyfuse3 nor trio. Everything here is pure apart from the
few small reads ``project_root`` makes under the given directory; no function
keeps state, so all of them are safe to call from any thread.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# Claude Code cuts longer slugs and appends a hash, so that a very deep path
# still gives a folder name well under the 255-byte NAME_MAX.
SLUG_MAX = 200

# Claude Code names the worktrees it creates `<repo>/.claude/worktrees/<name>`;
# the `/` and `.` before `claude` are both encoded as '-'.
WORKTREE_MARKER = "--claude-worktrees-"

# A `.git` file or a `commondir` file is one short line; anything bigger is
# not one we understand, and a cap keeps a hostile file from being slurped.
_GIT_FILE_MAX = 4096

_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _utf16_units(text: str) -> list[int]:
    """The UTF-16 code units of text, as JavaScript sees the string."""
    # surrogatepass: names from os.fsdecode may hold lone surrogates
    # (surrogateescape); they are one unit each and must not raise.
    raw = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(raw[i : i + 2], "little") for i in range(0, len(raw), 2)]


def _encode_chars(text: str) -> str:
    """Replace every character outside [A-Za-z0-9] with '-' per UTF-16 unit."""
    # A non-BMP character is two UTF-16 units in JavaScript, so two dashes.
    return "".join(c if c in _KEEP else "-" * (2 if ord(c) > 0xFFFF else 1) for c in text)


def _java_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 units, as a signed 32-bit int."""
    h = 0
    for unit in _utf16_units(text):
        # `(h * 31 + unit) | 0` in JavaScript: wrap to 32 bits, then sign.
        h = (h * 31 + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def _base36(n: int) -> str:
    """n >= 0 in base 36 with lowercase digits, like JavaScript's toString(36)."""
    digits = []
    while True:
        n, d = divmod(n, 36)
        digits.append(_DIGITS36[d])
        if n == 0:
            return "".join(reversed(digits))


def claude_slug(path: str) -> str:
    """Claude Code's slug of an absolute path.

    Every character outside [A-Za-z0-9] becomes '-' per UTF-16 code unit. A
    result longer than SLUG_MAX is cut to SLUG_MAX and suffixed with '-' and
    the base-36 absolute value of the Java-style hash of the original path.
    """
    slug = _encode_chars(path)
    if len(slug) <= SLUG_MAX:
        return slug
    # abs() here is JavaScript's Math.abs: abs(-2**31) is 2**31, no overflow.
    return f"{slug[:SLUG_MAX]}-{_base36(abs(_java_hash(path)))}"


def canonical_slug(folder_name: str) -> str:
    """The canonical slug of a source's project folder name.

    Applies Claude Code's character rule (so pi's '-home-a-my_proj.v2' becomes
    '-home-a-my-proj-v2'), then folds a Claude Code worktree slug into the slug
    of the checkout that holds it.
    """
    # No length cut: the folder name is already a slug (or close to one) and
    # the original path the hash needs is unknown. A Claude Code slug is
    # unchanged by this rule, hash suffix included (it is [a-z0-9]).
    slug = _encode_chars(folder_name)
    head, marker, _ = slug.partition(WORKTREE_MARKER)
    if not marker:
        return slug
    # The marker's first '-' is the '/' ending the checkout's path, so the
    # checkout '/' itself leaves nothing before it; its slug is '-'.
    return head or "-"


def rehome(slug: str, their_home: str, our_home: str) -> str:
    """The slug another machine's folder ``slug`` has on this one (§12): a project is the
    same project on two machines when its path below the home folder is the same, so the
    other home's slug prefix is swapped for ours; a path outside their home keeps its slug
    (it maps only when equal).

    Slugs are lossy ('/' and '.' both become '-'), so a folder that merely begins like the
    other home's slug (``-home-al-x`` for ``/home/al.x``) is taken as inside it, as Claude
    Code itself would conflate the two paths.
    """
    theirs, ours = claude_slug(their_home.rstrip("/")), claude_slug(our_home.rstrip("/"))
    if theirs in ("", "-") or theirs == ours:
        return slug
    if slug == theirs:
        return ours
    if slug.startswith(theirs + "-"):
        return ours + slug[len(theirs) :]
    return slug


def rehome_path(path: str, their_home: str, our_home: str) -> str:
    """``path`` on another machine as this machine names it (§12): below their home, below
    ours; anything else as it is (a path outside the home maps only when equal)."""
    theirs, ours = their_home.rstrip("/") or "/", our_home.rstrip("/") or "/"
    if theirs == "/" or not (path == theirs or path.startswith(theirs + "/")):
        return path
    return ours + path[len(theirs) :]


def _read_small(path: Path) -> str | None:
    """The text of a small regular file, or None if it is anything else."""
    # O_NONBLOCK: a FIFO planted as `.git` must not hang the caller; fstat
    # after open checks the very file we read, with no race.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _GIT_FILE_MAX + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > _GIT_FILE_MAX:
        return None
    # fsdecode, as git writes paths as raw bytes that need not be UTF-8.
    return os.fsdecode(data)


def _main_checkout(worktree: Path, dot_git: Path) -> Path:
    """The main checkout of the work tree whose `.git` is a file.

    `git worktree add` writes `gitdir: <common>/worktrees/<name>` there, and
    that folder's `commondir` points back to the common git dir. Anything
    unexpected (a submodule, a bare common dir, a malformed file) keeps the
    work tree itself.
    """
    text = _read_small(dot_git)
    if text is None:
        return worktree
    first_line = text.split("\n", 1)[0].strip()
    key, sep, value = first_line.partition(":")
    if not sep or key.strip() != "gitdir" or not value.strip():
        return worktree
    # A relative gitdir is relative to the folder holding `.git`; an absolute
    # one makes the join return it unchanged.
    gitdir = worktree / value.strip()
    common = _read_small(gitdir / "commondir")
    if common is None or not common.strip():
        return worktree  # a submodule's gitdir has no commondir
    common_dir = (gitdir / common.strip()).resolve()
    if common_dir.name != ".git":
        return worktree  # a worktree of a bare repository has no main checkout
    if not common_dir.is_dir():
        return worktree  # a stale or hand-edited commondir names no checkout
    return common_dir.parent


def _dot_git_kind(folder: Path) -> str | None:
    """'dir' or 'file' for folder/.git, or None when it is absent or neither."""
    try:
        mode = os.stat(folder / ".git").st_mode
    except OSError:
        return None  # absent, or unreadable: keep walking up
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return None


def project_root(directory: str | Path) -> Path:
    """The project a directory belongs to.

    Walks up to the nearest folder holding `.git` (a folder or a file); a
    linked worktree maps to its main checkout. Without any `.git`, the
    directory itself (resolved). Reads only `.git` files and `commondir`;
    runs no git subprocess.
    """
    start = Path(directory).resolve()
    for folder in (start, *start.parents):
        kind = _dot_git_kind(folder)
        if kind == "dir":
            return folder
        if kind == "file":
            return _main_checkout(folder, folder / ".git")
    return start


def project_slug(directory: str | Path) -> str:
    """The canonical slug of the project a directory belongs to."""
    # canonical_slug also folds a directory under `.claude/worktrees/` that git
    # does not tie to a main checkout (no git at all, a bare common dir).
    return canonical_slug(claude_slug(str(project_root(directory))))
