"""Tier 1: inode numbers for view paths (inodes.py), moved by a rename."""

from __future__ import annotations

from memfs.adapter.inodes import Inodes


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
