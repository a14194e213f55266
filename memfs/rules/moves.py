"""When a project folder moved: the decision, from what memfs recorded of project roots
(issue 38, §4.2).

Layer rules: pure, no I/O, any thread. What a root is on disk (its inode, its birth time,
its git repository's root commit) and whether a path still exists is read by disk/moves.py
and given here as values.

Why this evidence: `mv ~/src/shop ~/src/shop2` on one file system renames the folder, so
it keeps its inode and its birth time (statx), and the old path is gone. A copy (`cp -r`,
a second `git clone`, a move across file systems) is a new folder: new inode. Two live
folders are two projects whatever they share, so a root whose old path still exists never
merges. A git repository's root commit alone says "the same repository", not "the same
folder": a second clone shares it, so it is only ever offered (`memfs adopt list`), never
merged by itself.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Root:
    """A project root as memfs saw it: its path, its slug, and what identifies the folder."""

    path: str
    slug: str
    dev: int
    ino: int
    birth_ns: int  # statx's btime; 0 where the file system keeps none
    commit: str = ""  # the git repository's root commit, '' outside one


class Verdict(enum.Enum):
    CERTAIN = "certain"  # the same folder, renamed: followed at once
    OFFERED = "offered"  # the same repository, another folder: `memfs adopt list` offers it
    NEVER = "never"  # the old path is still there: two live copies never merge


def same_folder(old: Root, new: Root) -> bool:
    """Whether ``new`` is the very folder ``old`` was: same file system and inode, and the
    same birth time. Without a birth time (a file system that keeps none), an inode number
    reused by a later folder would pass, so the root commit must agree as well."""
    if (old.dev, old.ino) != (new.dev, new.ino):
        return False
    if old.birth_ns and new.birth_ns:
        return old.birth_ns == new.birth_ns
    return bool(old.commit) and old.commit == new.commit


def judge(old: Root, old_alive: bool, new: Root) -> Verdict | None:
    """What ``old`` (recorded earlier) is to ``new`` (seen now); None: unrelated.

    Args:
        old: a root memfs recorded.
        old_alive: whether ``old``'s path still exists (or the project moved on from it to
            a path that exists: still a live copy).
        new: the root asked for now.
    """
    if old.slug == new.slug:
        return None  # the same project: nothing moved
    related = same_folder(old, new) or (bool(old.commit) and old.commit == new.commit)
    if not related:
        return None
    if old_alive:
        return Verdict.NEVER
    return Verdict.CERTAIN if same_folder(old, new) else Verdict.OFFERED


def moved_into(moves: Mapping[str, str], slug: str) -> list[str]:
    """Every old slug whose memory ``slug`` shows: the moves into it, and the moves into
    those (a project moved twice), oldest last; each once, whatever loops ``moves`` holds.

    Args:
        moves: old slug -> the slug it moved to, for the moves followed.
    """
    into: dict[str, list[str]] = {}
    for old, new in sorted(moves.items()):
        into.setdefault(new, []).append(old)
    found: list[str] = []
    seen = {slug}
    todo = [slug]
    while todo:
        for old in into.get(todo.pop(0), ()):
            if old not in seen:
                seen.add(old)
                found.append(old)
                todo.append(old)
    return found


def final_slug(moves: Mapping[str, str], slug: str) -> str:
    """Where ``slug``'s memory shows now: the end of its chain of moves (itself if none)."""
    seen = {slug}
    while slug in moves and moves[slug] not in seen:
        slug = moves[slug]
        seen.add(slug)
    return slug


def verdicts(
    known: Iterable[Root], alive: Mapping[str, bool], new: Root
) -> list[tuple[Root, Verdict]]:
    """``judge`` of every recorded root against ``new``, the related ones only.

    Args:
        known: the roots recorded.
        alive: path -> whether that root is still live (`judge`'s ``old_alive``); a path
            missing here counts as alive, so nothing unread ever merges.
    """
    found = []
    for old in known:
        verdict = judge(old, alive.get(old.path, True), new)
        if verdict is not None:
            found.append((old, verdict))
    return found
