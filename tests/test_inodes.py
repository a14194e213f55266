"""Tier 1: inode numbers for view paths (inodes.py), moved by a rename."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.adapter.inodes import HERE_INODE, PAGE, Inodes, Key


def numbered(*paths: str) -> tuple[Inodes, dict[str, int]]:
    inodes = Inodes()
    return inodes, {p: inodes.number(("p", p)) for p in paths}


def test_a_file_move_takes_its_number_and_detaches_the_replaced_one() -> None:
    inodes, n = numbered("a.md", "b.md", "a.md.d/x.md")
    inodes.looked_up(n["b.md"])  # the kernel holds the replaced file
    inodes.move(("p", "a.md"), ("p", "b.md"), folder=False)
    assert inodes.known(("p", "b.md")) == n["a.md"]
    assert inodes.known(("p", "a.md")) is None
    assert inodes.detached(n["b.md"])
    # A path that only starts with the file's name is not below it.
    assert inodes.known(("p", "a.md.d/x.md")) == n["a.md.d/x.md"]
    inodes._check()


def test_a_folder_move_takes_every_number_below_it() -> None:
    inodes, n = numbered("d", "d/x.md", "d/e/y.md", "dx/z.md", "t/old.md")
    inodes.move(("p", "d"), ("p", "t"), folder=True)
    assert inodes.known(("p", "t")) == n["d"]
    assert inodes.known(("p", "t/x.md")) == n["d/x.md"]
    assert inodes.known(("p", "t/e/y.md")) == n["d/e/y.md"]
    assert inodes.known(("p", "dx/z.md")) == n["dx/z.md"]  # a sibling, not below "d"
    assert inodes.known(("p", "d/x.md")) is None
    inodes._check()


def test_moving_a_path_with_no_number_numbers_nothing() -> None:
    inodes, _ = numbered("b.md")
    inodes.move(("p", "a.md"), ("p", "b.md"), folder=False)
    assert inodes.known(("p", "a.md")) is None
    assert inodes.known(("p", "b.md")) is None  # replaced: a new number when looked up
    inodes._check()


def test_a_page_goes_with_its_last_number_and_a_number_is_never_given_twice() -> None:
    inodes = Inodes()
    keys = [("p", f"{n}.md") for n in range(3 * PAGE)]
    numbers = [inodes.number(key) for key in keys]
    for ino in numbers:
        inodes.looked_up(ino)
    pages = len(inodes._pages)
    gone = never
    # Every number of the first full page freed but one: the page stays for that one.
    first = [ino for ino in numbers if ino // PAGE == numbers[-1] // PAGE - 1]
    for ino in first[1:]:
        inodes.forget(ino, 1, gone)
    assert len(inodes._pages) == pages
    assert inodes.key(first[0]) is not None
    assert inodes.lookups(first[0]) == 1
    inodes.forget(first[0], 1, gone)
    assert len(inodes._pages) == pages - 1
    assert all(inodes.key(ino) is None and inodes.lookups(ino) == 0 for ino in first)
    assert len(inodes) == 2 + len(numbers) - len(first)
    # A number freed before its lookup is told is not counted (and its page not remade).
    inodes.looked_up(first[0])
    assert inodes.lookups(first[0]) == 0
    assert len(inodes._pages) == pages - 1
    # A freed key numbered again takes a new number, never a freed one.
    again = inodes.number(keys[numbers.index(first[0])])
    assert again > max(numbers)
    inodes._check()


def always(key: Key) -> bool:
    return True


def never(key: Key) -> bool:
    return False


class Model:
    """What Inodes answers, kept in plain dicts (the layout before the pages)."""

    def __init__(self) -> None:
        self.by_key: dict[Key, int] = {("", ""): 1, ("", "here"): 2}
        self.by_ino: dict[int, Key] = {1: ("", ""), 2: ("", "here")}
        self.lookups: dict[int, int] = {}
        self.next = HERE_INODE + 1

    def number(self, key: Key) -> int:
        if key not in self.by_key:
            self.by_key[key] = self.next
            self.by_ino[self.next] = key
            self.next += 1
        return self.by_key[key]

    def forget(self, ino: int, n: int, exists: Callable[[Key], bool]) -> None:
        left = self.lookups.get(ino, 0) - n
        if left > 0:
            self.lookups[ino] = left
            return
        self.lookups.pop(ino, None)
        key = self.by_ino.get(ino)
        if key is None or ino <= HERE_INODE:
            return
        if self.by_key.get(key) != ino:
            del self.by_ino[ino]
        elif not exists(key):
            del self.by_ino[ino], self.by_key[key]

    def detach(self, key: Key) -> None:
        ino = self.by_key.pop(key, None)
        if ino is not None and not self.lookups.get(ino):
            del self.by_ino[ino]

    def move(self, src: Key, dst: Key) -> None:
        ino = self.by_key.pop(src, None)
        self.detach(dst)
        if ino is not None:
            self.by_key[dst] = ino
            self.by_ino[ino] = dst


NAMES = [(slug, f"{n}.md") for slug in ("p", "q") for n in range(4)]
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["number", "look", "forget", "detach", "move"]),
        st.sampled_from(NAMES),
        st.sampled_from(NAMES),
        st.integers(1, 3),
        st.booleans(),
    ),
    max_size=120,
)


@settings(max_examples=300)
@given(STEPS)
def test_the_pages_answer_as_plain_dicts_would(
    steps: list[tuple[str, Key, Key, int, bool]],
) -> None:
    """Any run of steps: every number names what the plain tables say, with the same
    lookup counts, and a number is freed exactly when they free it."""
    inodes, model = Inodes(), Model()
    for what, key, other, n, there in steps:
        exists = always if there else never
        if what == "number":
            assert inodes.number(key) == model.number(key)
        elif what == "look" and (ino := model.by_key.get(key)) is not None:
            inodes.looked_up(ino)
            model.lookups[ino] = model.lookups.get(ino, 0) + 1
        elif what == "forget":
            for ino in list(model.lookups)[:1]:
                inodes.forget(ino, n, exists)
                model.forget(ino, n, exists)
        elif what == "detach":
            inodes.detach(key)
            model.detach(key)
        elif what == "move" and key != (dst := (key[0], other[1])):
            inodes.move(key, dst, folder=False)  # within one project, as rename(2) is
            model.move(key, dst)
        inodes._check()
        assert len(inodes) == len(model.by_ino)
        for ino in range(1, model.next + 1):
            assert inodes.key(ino) == model.by_ino.get(ino), ino
            assert inodes.lookups(ino) == model.lookups.get(ino, 0), ino
        assert {k: inodes.known(k) for k in NAMES} == {k: model.by_key.get(k) for k in NAMES}
