"""The inotify binding's rule for memfs's own renames, as a plain function (tier 1).

`sift` reads events as the kernel queues them; the real queue is read in test_watch.py and
test_staging.py.
"""

from __future__ import annotations

from memfs.disk.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    Raw,
    sift,
    unheld,
)
from memfs.disk.sources import OWN_MARK_PREFIX

WD, OTHER_WD = 1, 2
FROM: Raw = (WD, IN_MOVED_FROM, 7, "a.tmp")
TO: Raw = (WD, IN_MOVED_TO, 7, "a.md")
MARK: Raw = (WD, IN_CREATE, 0, OWN_MARK_PREFIX + "x")
MARK_GONE: Raw = (WD, IN_DELETE, 0, OWN_MARK_PREFIX + "x")


def names(events: list[tuple[int, int, str]]) -> list[str]:
    return [name for _, _, name in events]


def test_a_rename_followed_by_the_mark_is_skipped_and_the_mark_read() -> None:
    sifted = sift([FROM, TO, MARK, MARK_GONE])
    assert names(sifted.events) == [MARK[3], MARK_GONE[3]]
    assert sifted.held == []
    assert sifted.own_renames == 1


def test_a_rename_with_anything_between_it_and_the_mark_is_read() -> None:
    touched: Raw = (WD, IN_MODIFY, 0, "b.md")
    sifted = sift([FROM, TO, touched, MARK])
    assert names(sifted.events) == ["a.tmp", "a.md", "b.md", MARK[3]]
    assert sifted.own_renames == 0


def test_a_mark_in_another_folder_is_not_the_rename_s() -> None:
    elsewhere: Raw = (OTHER_WD, IN_CREATE, 0, MARK[3])
    sifted = sift([FROM, TO, elsewhere])
    assert names(sifted.events) == ["a.tmp", "a.md", MARK[3]]
    assert sifted.own_renames == 0


def test_a_rename_at_the_end_of_a_run_is_held_for_the_next() -> None:
    first = sift([FROM])
    assert (first.events, first.held) == ([], [FROM])
    second = sift([TO], first.held)
    assert (second.events, second.held) == ([], [FROM, TO])
    third = sift([MARK], second.held)
    assert (names(third.events), third.held, third.own_renames) == ([MARK[3]], [], 1)
    assert unheld(second.held) == [(WD, IN_MOVED_FROM, "a.tmp"), (WD, IN_MOVED_TO, "a.md")]


def test_a_folder_s_rename_is_never_held() -> None:
    folder_from: Raw = (WD, IN_MOVED_FROM | IN_ISDIR, 9, "d")
    folder_to: Raw = (WD, IN_MOVED_TO | IN_ISDIR, 9, "e")
    sifted = sift([folder_from, folder_to, MARK])
    assert names(sifted.events) == ["d", "e", MARK[3]]
    assert sifted.own_renames == 0


def test_an_arrival_of_another_cookie_lets_the_held_departure_go() -> None:
    stranger: Raw = (WD, IN_MOVED_TO, 8, "c.md")
    sifted = sift([FROM, stranger, MARK])
    assert names(sifted.events) == ["a.tmp", "c.md", MARK[3]]
    assert sifted.own_renames == 0
