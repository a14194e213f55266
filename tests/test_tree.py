"""Tier 1: the view tree of sorted, reference-counted folders.

``_check()`` runs after every change; a seeded random stress test drives the tree against
a naive model that recomputes everything from the set of leaves and marks.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from memfs.rules.tree import ROOT, Tree, ancestors, parent_of


def names(tree: Tree[int] | Tree[str], path: str) -> list[str] | None:
    """A folder's sorted child names; None when ``path`` is no folder."""
    children = tree.children(path)
    return None if children is None else list(children)


def test_parent_of_and_ancestors() -> None:
    assert parent_of("a/b/c") == ("a/b", "c")
    assert parent_of("a") == ("", "a")
    assert list(ancestors("a/b/c")) == ["a/b", "a"]
    assert list(ancestors("a")) == []


def test_add_makes_folders_and_remove_drops_them() -> None:
    tree: Tree[int] = Tree()
    assert tree.add("a/b/c.md", 1)
    tree._check()
    assert tree.is_dir(ROOT)
    assert tree.is_dir("a")
    assert tree.is_dir("a/b")
    assert not tree.is_dir("a/b/c.md")
    assert tree.leaf("a/b/c.md") == 1
    assert names(tree, "a") == ["b"]
    assert tree.add("a/b/a.md", 2)
    tree._check()
    assert names(tree, "a/b") == ["a.md", "c.md"]
    assert len(tree) == 2
    assert tree.remove("a/b/c.md") == 1
    tree._check()
    assert tree.is_dir("a/b")
    assert tree.remove("a/b/a.md") == 2
    tree._check()
    assert not tree.is_dir("a")
    assert not tree.is_dir("a/b")
    assert names(tree, ROOT) == []
    assert tree.remove("a/b/a.md") is None
    tree._check()
    assert len(tree) == 0


def test_add_replaces_a_payload() -> None:
    tree: Tree[int] = Tree()
    assert tree.add("x", 1)
    assert tree.add("x", 2)
    tree._check()
    assert tree.leaf("x") == 2
    assert len(tree) == 1
    assert tree.remove("x") == 2
    tree._check()
    assert names(tree, ROOT) == []


def test_conflicts_return_false_and_change_nothing() -> None:
    tree: Tree[str] = Tree()
    assert tree.add("a/b", "leaf")
    tree._check()
    assert not tree.add("a", "folder in the way")
    tree._check()
    assert not tree.add("a/b/c", "leaf in the way")
    tree._check()
    assert not tree.mark_dir("a/b")
    tree._check()
    assert not tree.mark_dir("a/b/c")
    tree._check()
    assert not tree.add("", "the root")
    tree._check()
    assert sorted(tree.leaves()) == [("a/b", "leaf")]
    assert tree.leaf("a") is None


def test_marked_folders_stay_while_empty() -> None:
    tree: Tree[int] = Tree()
    assert tree.mark_dir("a/b")
    tree._check()
    assert tree.is_dir("a")
    assert tree.is_dir("a/b")
    assert names(tree, "a/b") == []
    assert not tree.add("a/b", 1)
    assert not tree.add("a", 1)
    assert tree.add("a/b/x", 1)
    tree._check()
    assert tree.remove("a/b/x") == 1
    tree._check()
    assert tree.is_dir("a/b")  # still marked
    assert tree.mark_dir("a/b")  # two holders
    tree._check()
    tree.unmark_dir("a/b")
    tree._check()
    assert tree.is_dir("a/b")
    tree.unmark_dir("a/b")
    tree._check()
    assert not tree.is_dir("a/b")
    assert not tree.is_dir("a")
    tree.unmark_dir("a/b")  # not marked: nothing happens
    tree._check()
    assert names(tree, ROOT) == []


def test_unmark_keeps_a_folder_with_leaves() -> None:
    tree: Tree[int] = Tree()
    assert tree.mark_dir("a")
    assert tree.add("a/x", 1)
    tree.unmark_dir("a")
    tree._check()
    assert tree.is_dir("a")
    assert tree.remove("a/x") == 1
    tree._check()
    assert not tree.is_dir("a")


def test_mark_below_a_marked_folder() -> None:
    tree: Tree[int] = Tree()
    assert tree.mark_dir("a")
    assert tree.mark_dir("a/b")
    tree._check()
    tree.unmark_dir("a")
    tree._check()
    assert tree.is_dir("a")
    tree.unmark_dir("a/b")
    tree._check()
    assert not tree.is_dir("a")


def test_changes_name_what_appeared_vanished_or_changed() -> None:
    tree: Tree[int] = Tree()
    tree.add("a/b", 1)
    assert {"a", "a/b"} <= tree.changes
    tree.changes.clear()
    tree.add("a/b", 1)
    assert tree.changes == set()
    tree.add("a/b", 2)
    assert tree.changes == {"a/b"}
    tree.changes.clear()
    tree.remove("a/b")
    assert {"a", "a/b"} <= tree.changes


# --- the stress test -------------------------------------------------------------------

NAMES = ("a", "b", "c")
PATHS = ["/".join(p) for n in (1, 2, 3) for p in itertools.product(NAMES, repeat=n)]


class Model:
    """The tree recomputed from scratch: leaves and marks are all the state there is."""

    def __init__(self) -> None:
        self.leaves: dict[str, int] = {}
        self.marks: Counter[str] = Counter()

    def dirs(self) -> set[str]:
        out = {ROOT}
        for path in self.leaves:
            out.update(ancestors(path))
        for path in +self.marks:
            out.add(path)
            out.update(ancestors(path))
        return out

    def blocked(self, path: str) -> bool:
        return path in self.leaves or any(a in self.leaves for a in ancestors(path))

    def add(self, path: str, payload: int) -> bool:
        if path in self.leaves:
            self.leaves[path] = payload
            return True
        if path == ROOT or path in self.dirs() or self.blocked(path):
            return False
        self.leaves[path] = payload
        return True

    def remove(self, path: str) -> int | None:
        return self.leaves.pop(path, None)

    def mark_dir(self, path: str) -> bool:
        if self.blocked(path):
            return False
        self.marks[path] += 1
        return True

    def unmark_dir(self, path: str) -> None:
        if self.marks[path] > 0:
            self.marks[path] -= 1

    def entries(self) -> dict[str, object]:
        """Every path the view shows, and what it is."""
        out: dict[str, object] = {p: ("dir",) for p in self.dirs() if p != ROOT}
        out.update({p: ("leaf", v) for p, v in self.leaves.items()})
        return out

    def children(self) -> dict[str, list[str]]:
        """Every folder's sorted child names."""
        dirs = self.dirs()
        out: dict[str, set[str]] = {d: set() for d in dirs}
        for path in [*dirs, *self.leaves]:
            if path != ROOT:
                head, name = parent_of(path)
                out[head].add(name)
        return {d: sorted(names) for d, names in out.items()}


def compare(tree: Tree[int], model: Model) -> None:
    tree._check()
    dirs = model.children()
    assert sorted(tree.leaves()) == sorted(model.leaves.items())
    assert len(tree) == len(model.leaves)
    for path in [ROOT, *PATHS]:
        assert tree.is_dir(path) == (path in dirs), path
        assert tree.leaf(path) == model.leaves.get(path), path
        children = tree.children(path)
        if path in dirs:
            assert children is not None, path
            assert list(children) == dirs[path], path
        else:
            assert children is None, path


@pytest.mark.parametrize("seed", range(8))
def test_random_operations_match_a_naive_model(seed: int) -> None:
    rng = random.Random(seed)
    tree: Tree[int] = Tree()
    model = Model()
    for step in range(1500):
        op = rng.choice(("add", "add", "remove", "mark", "unmark"))
        path = rng.choice(PATHS)
        before = model.entries()
        tree.changes.clear()
        if op == "add":
            payload = rng.randrange(3)
            assert tree.add(path, payload) == model.add(path, payload), (step, op, path)
        elif op == "remove":
            assert tree.remove(path) == model.remove(path), (step, op, path)
        elif op == "mark":
            assert tree.mark_dir(path) == model.mark_dir(path), (step, op, path)
        else:
            tree.unmark_dir(path)
            model.unmark_dir(path)
        compare(tree, model)
        after = model.entries()
        # Whatever appeared, vanished or changed must be told to the kernel.
        moved = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
        assert moved <= tree.changes, (step, op, path, moved - tree.changes)
    # Drain everything: the tree returns to the empty root.
    for path in list(model.leaves):
        tree.remove(path)
        model.remove(path)
    for path, count in list(model.marks.items()):
        for _ in range(count):
            tree.unmark_dir(path)
            model.unmark_dir(path)
    compare(tree, model)
    assert names(tree, ROOT) == []
