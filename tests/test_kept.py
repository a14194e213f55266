"""Tier 1: which kept versions go when a project's bytes for history are spent (§7.2)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memfs.view.kept import KeptVersions

PATHS = ("a.md", "b.md", "sub/c.md")


def view(path: str, n: int) -> str:
    return f".history/{path}/claude@{n:04d}.md"


def test_nothing_goes_while_the_budget_holds() -> None:
    kept = KeptVersions()
    kept.put(view("a.md", 1), 100, 1)
    assert kept.over_budget("a.md", 100, 200) == []
    assert kept.bytes == 100


def test_the_oldest_go_first_but_never_the_newest_of_a_path() -> None:
    kept = KeptVersions()
    kept.put(view("a.md", 1), 100, 1)  # a's oldest
    kept.put(view("b.md", 2), 100, 2)  # b's only one: stays, though older than a's newest
    kept.put(view("a.md", 3), 100, 3)  # a's newest, until a.md keeps one more
    assert kept.over_budget("b.md", 100, 300) == [view("a.md", 1)]
    # Keeping another version of a.md: a's current newest is no longer its newest.
    assert kept.over_budget("a.md", 100, 200) == [view("a.md", 1), view("a.md", 3)]
    # Nothing else may go: the budget is exceeded rather than a path losing its last.
    assert kept.over_budget("sub/c.md", 1000, 100) == [view("a.md", 1)]


def test_a_file_right_under_history_is_no_version() -> None:
    kept = KeptVersions()
    kept.put(".history/stray.md", 10, 1)
    assert len(kept) == 0
    assert kept.bytes == 0


@given(
    st.lists(
        st.tuples(st.sampled_from(PATHS), st.integers(0, 500), st.integers(0, 50)),
        max_size=40,
    ),
    st.sampled_from(PATHS),
    st.integers(0, 500),
    st.integers(0, 3000),
)
def test_pruning_keeps_every_paths_newest_and_fits_when_it_can(
    versions: list[tuple[str, int, int]], path: str, adding: int, budget: int
) -> None:
    kept = KeptVersions()
    for n, (p, size, mtime) in enumerate(versions):
        kept.put(view(p, n), size, mtime)
    kept._check()
    gone = kept.over_budget(path, adding, budget)
    for v in gone:
        kept.discard(v)
    kept._check()
    # Versions of one time are ordered as they were put (kept), not by name.
    by_path: dict[str, list[tuple[int, int, str]]] = {}
    for n, (p, _, mtime) in enumerate(versions):
        by_path.setdefault(p, []).append((mtime, n, view(p, n)))
    newest = {p: max(vs)[2] for p, vs in by_path.items()}
    # Every other path keeps its newest; ``path`` gets a newer one now.
    assert all(newest[p] not in gone for p in newest if p != path)
    # It fits, or only versions that must stay are left.
    if kept.bytes + adding > budget:
        left = {view(p, n) for n, (p, _, _) in enumerate(versions)} - set(gone)
        assert left <= {v for p, v in newest.items() if p != path}
    # Oldest first: every version left that could have gone is newer than all that went.
    if gone:
        ages = {view(p, n): (mtime, n) for n, (p, _, mtime) in enumerate(versions)}
        newest_gone = max(ages[v] for v in gone)
        protected = {v for p, v in newest.items() if p != path}
        for v, age in ages.items():
            if v not in gone and v not in protected:
                assert age > newest_gone, (v, gone)
