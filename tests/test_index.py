"""Tier 1: the MEMORY.md union (§5.3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memfs.rules.index import link_target, union_index


@pytest.mark.parametrize(
    ("line", "target"),
    [
        ("- [Build notes](build.md) — how to build", "build.md"),
        ("[a](  spaced.md  )", "spaced.md"),
        ("[first](one.md) and [second](two.md)", "one.md"),
        ("* [a [nested] title](sub/topic.md)", "sub/topic.md"),
        ("[paren](notes(1).md)", "notes(1).md"),
        ("plain text", None),
        ("[not a link] (x.md)", None),
        ("[empty]()", None),
        ("[blank](   )", None),
        ("", None),
    ],
)
def test_link_target(line: str, target: str | None) -> None:
    assert link_target(line) == target


def test_link_target_is_not_quadratic_on_hostile_lines() -> None:
    # An index line is untrusted text; a backtracking blow-up would hang a read.
    assert link_target("[" * 20_000 + "(" * 20_000) is None
    assert link_target("[a](" * 10_000) is None


def test_head_alone_is_kept_exactly() -> None:
    for head in ["", "a", "a\n", "a\n\n\n", "x  \r\n"]:
        assert union_index(head, []) == head
        assert union_index(head, [head]) == head


def test_dedupe_by_link_target() -> None:
    head = "- [Build](build.md) — old wording\n"
    other = "- [How to build](build.md) — new wording\n- [Deploy](deploy.md)\n"
    assert union_index(head, [other]) == head + "- [Deploy](deploy.md)\n"


def test_link_target_compared_stripped() -> None:
    head = "- [Build](build.md)\n"
    assert union_index(head, ["- [B]( build.md )\n"]) == head


def test_non_link_lines_dedupe_ignoring_trailing_blanks() -> None:
    head = "# Memory\nremember the cache  \n"
    other = "# Memory   \nremember the cache\n\tremember the cache\nnew fact\n"
    # A leading tab is content, only trailing whitespace is ignored.
    assert union_index(head, [other]) == head + "\tremember the cache\nnew fact\n"


def test_blank_lines_from_others_are_not_added() -> None:
    assert union_index("a\n", ["\n   \n\t\nb\n\n"]) == "a\nb\n"


def test_order_head_then_others_in_given_order() -> None:
    head = "- [A](a.md)\n"
    newest = "- [C](c.md)\n- [B](b.md)\n"
    older = "- [B2](b.md)\n- [D](d.md)\nnote\n"
    assert union_index(head, [newest, older]) == (
        "- [A](a.md)\n- [C](c.md)\n- [B](b.md)\n- [D](d.md)\nnote\n"
    )


def test_first_version_of_a_target_wins() -> None:
    # Callers pass the newest source first, so its wording of a topic wins.
    result = union_index("", ["- [New](t.md)\n", "- [Old](t.md)\n"])
    assert result == "- [New](t.md)\n"


def test_duplicates_within_one_other_are_added_once() -> None:
    assert union_index("", ["x\nx\n- [A](a.md)\n- [A again](a.md)\n"]) == "x\n- [A](a.md)\n"


def test_head_without_final_newline_gets_a_separator() -> None:
    assert union_index("a", ["b"]) == "a\nb\n"
    assert union_index("", ["b"]) == "b\n"


def test_crlf_other_lines_join_cleanly() -> None:
    assert union_index("a\n", ["a\r\nb\r\n"]) == "a\nb\n"


# -- properties

_words = st.text(st.sampled_from("ab [](). \t\r-"), max_size=12)
_targets = st.sampled_from(["a.md", "b.md", "sub/c.md", " d.md", "e(1).md"])
_link_lines = st.builds(
    lambda title, target, tail: f"- [{title}]({target}){tail}",
    st.sampled_from(["A", "B", "x y"]),
    _targets,
    _words,
)
_lines = st.one_of(_words, _link_lines, st.just(""))
_docs = st.builds(
    lambda lines, final: "\n".join(lines) + ("\n" if final else ""),
    st.lists(_lines, max_size=8),
    st.booleans(),
)


def _targets_of(text: str) -> set[str]:
    return {t for line in text.split("\n") if (t := link_target(line)) is not None}


@given(_docs, st.lists(_docs, max_size=4))
def test_union_loses_no_link_target(head: str, others: list[str]) -> None:
    result = union_index(head, others)
    for doc in [head, *others]:
        assert _targets_of(doc) <= _targets_of(result)


@given(_docs, st.lists(_docs, max_size=4))
def test_head_is_a_prefix(head: str, others: list[str]) -> None:
    result = union_index(head, others)
    assert result.startswith(head)
    assert result == head or result.endswith("\n")


@given(_docs, st.lists(_docs, max_size=4))
def test_union_loses_no_line_and_is_idempotent(head: str, others: list[str]) -> None:
    result = union_index(head, others)
    kept = {line.rstrip() for line in result.split("\n")}
    for doc in others:
        for line in doc.split("\n"):
            if not line.strip():
                continue  # blank lines from others are never added, by design
            assert link_target(line) is not None or line.rstrip() in kept
    assert union_index(result, others) == result
