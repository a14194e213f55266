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
from memfs.disk.sources import OWN_MARK_PREFIX, kept_mark

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
    assert sifted.own == 1


def test_a_rename_with_anything_between_it_and_the_mark_is_read() -> None:
    touched: Raw = (WD, IN_MODIFY, 0, "b.md")
    sifted = sift([FROM, TO, touched, MARK])
    assert names(sifted.events) == ["a.tmp", "a.md", "b.md", MARK[3]]
    assert sifted.own == 0


def test_a_mark_in_another_folder_is_not_the_rename_s() -> None:
    elsewhere: Raw = (OTHER_WD, IN_CREATE, 0, MARK[3])
    sifted = sift([FROM, TO, elsewhere])
    assert names(sifted.events) == ["a.tmp", "a.md", MARK[3]]
    assert sifted.own == 0


def test_a_rename_at_the_end_of_a_run_is_held_for_the_next() -> None:
    first = sift([FROM])
    assert (first.events, first.held) == ([], [FROM])
    second = sift([TO], first.held)
    assert (second.events, second.held) == ([], [FROM, TO])
    third = sift([MARK], second.held)
    assert (names(third.events), third.held, third.own) == ([MARK[3]], [], 1)
    assert unheld(second.held) == [(WD, IN_MOVED_FROM, "a.tmp"), (WD, IN_MOVED_TO, "a.md")]


def test_a_folder_s_rename_is_never_held() -> None:
    folder_from: Raw = (WD, IN_MOVED_FROM | IN_ISDIR, 9, "d")
    folder_to: Raw = (WD, IN_MOVED_TO | IN_ISDIR, 9, "e")
    sifted = sift([folder_from, folder_to, MARK])
    assert names(sifted.events) == ["d", "e", MARK[3]]
    assert sifted.own == 0


def test_an_arrival_of_another_cookie_lets_the_held_departure_go() -> None:
    stranger: Raw = (WD, IN_MOVED_TO, 8, "c.md")
    sifted = sift([FROM, stranger, MARK])
    assert names(sifted.events) == ["a.tmp", "c.md", MARK[3]]
    assert sifted.own == 0


KEPT: Raw = (WD, IN_CREATE, 0, "work@20260101T000000Z~2.md")
KEPT_MARK: Raw = (WD, IN_CREATE, 0, kept_mark(KEPT[3]))
KEPT_MARK_GONE: Raw = (WD, IN_DELETE, 0, kept_mark(KEPT[3]))


def test_a_version_kept_followed_by_its_own_mark_is_skipped() -> None:
    sifted = sift([KEPT, KEPT_MARK, KEPT_MARK_GONE])
    assert names(sifted.events) == [KEPT_MARK[3], KEPT_MARK_GONE[3]]
    assert sifted.own == 1


def test_a_version_followed_by_any_other_mark_is_read() -> None:
    """Another version's mark, a rename's mark, or the right mark in another folder: the
    create is someone else's (a second memfs on the same source, say), and is read."""
    other = (WD, IN_CREATE, 0, kept_mark("work@20260101T000000Z~3.md"))
    elsewhere = (OTHER_WD, IN_CREATE, 0, KEPT_MARK[3])
    for after in (other, MARK, elsewhere):
        sifted = sift([KEPT, after])
        assert names(sifted.events) == [KEPT[3], after[3]], after
        assert sifted.own == 0


def test_a_rename_followed_by_a_version_s_mark_is_read() -> None:
    sifted = sift([FROM, TO, KEPT_MARK])
    assert names(sifted.events) == ["a.tmp", "a.md", KEPT_MARK[3]]
    assert sifted.own == 0


def test_only_a_file_that_could_be_a_version_is_held_at_a_create() -> None:
    for create in ((WD, IN_CREATE, 0, "notes.md"), (WD, IN_CREATE | IN_ISDIR, 0, "a@b.md")):
        assert sift([create]).held == []
    first = sift([KEPT])
    assert (first.events, first.held) == ([], [KEPT])
    second = sift([KEPT_MARK], first.held)
    assert (names(second.events), second.held, second.own) == ([KEPT_MARK[3]], [], 1)
    assert unheld(first.held) == [(WD, IN_CREATE, KEPT[3])]
