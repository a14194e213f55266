"""Tier 1: the MEMORY.md union, and a save of it taken as a change of the own index (§5.3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memfs.rules import index
from memfs.rules.index import (
    hidden_after,
    link_target,
    links_synthetic,
    save_change,
    union_index,
    without_lines,
)


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


# --- a save of the view, taken as a change of the own index (§5.3) ---------------------

OWN = "# Memory\n- [Notes](notes.md)\n- [Style](style.md)\n"
WORK = "# Memory\n- [Deploys](deploys.md)\nwork fact\n"


def union_of(own: str, others: list[str], hidden: frozenset[str] = frozenset()) -> str:
    """The view as documents.py makes it: hidden lines out of every other version."""
    return union_index(own, [without_lines(text, hidden) for text in others])


def test_a_save_with_one_line_added_adds_that_line_alone() -> None:
    read = union_of(OWN, [WORK])
    saved = save_change(read, read + "- [Ops](ops.md)\n", OWN)
    assert saved.own == OWN + "- [Ops](ops.md)\n"
    assert saved.added == {"- [Ops](ops.md)"}
    assert saved.removed == frozenset()


def test_one_source_one_writer_lands_byte_for_byte() -> None:
    for written in ["", "x", "a\n\n\nb  \r\n", "\n\nz\n", OWN + "\n\n"]:
        assert save_change(OWN, written, OWN).own == written


def test_removing_another_sources_line_hides_it_and_leaves_the_own_index() -> None:
    read = union_of(OWN, [WORK])
    written = read.replace("work fact\n", "")
    saved = save_change(read, written, OWN)
    assert saved.own == OWN
    assert saved.removed == {"work fact"}
    hidden = hidden_after(frozenset(), saved, [WORK])
    assert hidden == {"work fact"}
    assert union_of(saved.own, [WORK], hidden) == written
    # The other source changes the line: a new text, shown again.
    assert "work fact, revised" in union_of(saved.own, ["work fact, revised\n"], hidden)


def test_removing_an_own_line_removes_it_from_the_own_index() -> None:
    read = union_of(OWN, [WORK])
    saved = save_change(read, read.replace("- [Style](style.md)\n", ""), OWN)
    assert saved.own == "# Memory\n- [Notes](notes.md)\n"
    assert hidden_after(frozenset(), saved, [WORK]) == frozenset()  # no other holds it


def test_an_edited_link_line_lands_as_added() -> None:
    read = union_of(OWN, [WORK])
    written = read.replace("- [Deploys](deploys.md)", "- [Deploys](deploys.md) on Fridays")
    saved = save_change(read, written, OWN)
    assert saved.own == OWN + "- [Deploys](deploys.md) on Fridays\n"
    hidden = hidden_after(frozenset(), saved, [WORK])
    view = union_of(saved.own, [WORK], hidden)
    assert "on Fridays" in view
    assert view.count("](deploys.md)") == 1


def test_adding_a_hidden_line_back_shows_it_again() -> None:
    hidden = frozenset({"work fact"})
    read = union_of(OWN, [WORK], hidden)
    assert "work fact" not in read
    saved = save_change(read, read + "work fact\n", OWN)
    assert saved.own == OWN + "work fact\n"
    assert hidden_after(hidden, saved, [WORK]) == frozenset()


def test_a_hidden_line_no_other_source_holds_is_forgotten() -> None:
    saved = save_change(OWN, OWN, OWN)
    assert hidden_after({"gone", "work fact"}, saved, [WORK]) == {"work fact"}


def test_lines_another_writer_added_since_the_read_are_kept() -> None:
    read = union_of(OWN, [WORK])
    first = save_change(read, read + "- [A](a.md)\n", OWN)  # one session saves
    second = save_change(read, read + "- [B](b.md)\n", first.own)  # the other, after it
    assert second.own == OWN + "- [B](b.md)\n- [A](a.md)\n"


def test_a_removed_topic_link_hides_another_versions_line_for_it() -> None:
    # Issue 36: own and work both link style.md, in other words; the union shows own's.
    # Removing it must not bring work's back: the topic link was removed.
    own = "# Memory\n- [Style](style.md)\n"
    work = "- [Style guide](style.md) from work\n- [B](b.md)\n"
    read = union_of(own, [work])
    assert "from work" not in read
    saved = save_change(read, read.replace("- [Style](style.md)\n", ""), own)
    hidden = hidden_after(frozenset(), saved, [work])
    assert hidden == {"- [Style guide](style.md) from work"}
    assert "style.md" not in union_of(saved.own, [without_lines(work, hidden)])
    # A writer that links the topic again in other words keeps work's line shown.
    again = save_change(read, read.replace("[Style]", "[Style, reworded]"), own)
    assert hidden_after(frozenset(), again, [work]) == frozenset()


def test_a_line_removed_meanwhile_by_another_writer_stays_removed() -> None:
    read = union_of(OWN, [WORK])
    first = save_change(read, read.replace("- [Style](style.md)\n", ""), OWN)
    second = save_change(read, read + "- [B](b.md)\n", first.own)
    assert "style.md" not in second.own
    assert second.own == "# Memory\n- [Notes](notes.md)\n- [B](b.md)\n"


@pytest.mark.parametrize(
    "line",
    [
        "- [PREAMBLE](PREAMBLE.md)",
        "- [Preamble](./PREAMBLE.md) — what memfs computed",
        "* [p](<PREAMBLE-4096.md>)",
        '- [p](PREAMBLE.md#index "title")',
        # Issue 36: not the line's first link, doubled slashes, a reference definition,
        # through the mount.
        "- [Notes](notes.md), see also [p](PREAMBLE.md)",
        "- [p](.//PREAMBLE.md)",
        "[p]: PREAMBLE.md",
        '- [p]: <PREAMBLE-1200.md> "the short one"',
        "- [p](here/PREAMBLE.md)",
        "- [p](~/memfs/here/PREAMBLE-4096.md)",
        "- [p](/home/u/memfs/-home-u-src-shop/PREAMBLE.md)",
    ],
)
def test_an_added_link_to_a_synthetic_file_is_dropped(line: str) -> None:
    saved = save_change("", f"# Memory\n{line}\n- [Notes](notes.md)\n", "")
    assert saved.own == "# Memory\n- [Notes](notes.md)\n"
    assert links_synthetic(line)


@pytest.mark.parametrize(
    "line",
    [
        "- [p](PREAMBLE.md.bak)",
        "- [p](sub/PREAMBLE.md)",
        "- [p](sub/./PREAMBLE-4096.md)",
        "[p]: sub/PREAMBLE.md",
        "- [p](PREAMBLE-x.md)",
        "- [p](PREAMBLE-12.md)",  # below the smallest budget: a file of its own
        "- [p](PREAMBLE-04096.md)",
        "plain",
    ],
)
def test_other_links_are_no_synthetic_files(line: str) -> None:
    assert not links_synthetic(line)


def test_blank_lines_at_the_seams_are_not_copied() -> None:
    own = "# Memory\n- [A](a.md)\n"
    other = "- [B](b.md)\n- [C](c.md)\n"
    read = union_of(own, [other])
    # The writer set the other source's lines apart and added a section after them.
    written = "# Memory\n- [A](a.md)\n\n- [B](b.md)\n\n- [C](c.md)\n\n## New\n- [D](d.md)\n"
    assert read != written
    saved = save_change(read, written, own)
    assert saved.own == "# Memory\n- [A](a.md)\n\n## New\n- [D](d.md)\n"
    # Nothing left at the start, nor at the end, where only dropped lines stood.
    assert save_change(read, "- [B](b.md)\n\n- [A](a.md)\n", own).own == "- [A](a.md)\n"
    assert save_change(read, "- [A](a.md)\n\n- [B](b.md)\n", own).own == "- [A](a.md)\n"
    # A writer's own run of blank lines between its lines stays.
    assert save_change(read, "- [A](a.md)\n\n\n- [E](e.md)\n", own).own == (
        "- [A](a.md)\n\n\n- [E](e.md)\n"
    )


def test_without_lines_keeps_the_rest_byte_for_byte() -> None:
    assert without_lines("a\r\nb \nc", {"b"}) == "a\r\nc"
    assert without_lines("a\nc", {"c"}) == "a\n"
    assert without_lines("a\n\n", {"x"}) == "a\n\n"


# -- properties of saves: writers reading and saving in any order

_own_lines = st.lists(
    st.sampled_from(["# Memory", "- [A](a.md)", "- [B](b.md)", "own fact", "shared", ""]),
    max_size=6,
)
_other_lines = st.lists(
    st.sampled_from(["# Memory", "- [B2](b.md)", "- [C](c.md)", "work fact", "shared", ""]),
    max_size=6,
)


@st.composite
def _sessions(draw: st.DrawFn) -> tuple[str, list[str], list[tuple[str, int, int, int]]]:
    """An own index, other sources' indexes, and writers' events in any order, each writer
    reading before it saves: ("read", w, 0, 0), or ("save", w, mask, where) where the bits
    of ``mask`` pick lines it read to remove and ``where`` is where its new line goes."""
    own = "".join(f"{line}\n" for line in draw(_own_lines))
    count = draw(st.integers(0, 2))
    others = ["".join(f"{line}\n" for line in draw(_other_lines)) for _ in range(count)]
    events = []
    for w in range(draw(st.integers(1, 3))):
        events += [
            ("read", w, 0, 0),
            ("save", w, draw(st.integers(0, 63)), draw(st.integers(0, 8))),
        ]
    ordered, have_read = [], set()
    for kind, w, mask, where in draw(st.permutations(events)):
        if w not in have_read:  # its first event: the read, whichever was drawn first
            ordered.append(("read", w, 0, 0))
            have_read.add(w)
            if kind == "read":
                continue
        if kind == "save":
            ordered.append((kind, w, mask, where))
    return own, others, ordered


@given(_sessions())
def test_saves_lose_no_added_line_bring_back_no_removed_one_and_copy_nothing(
    session: tuple[str, list[str], list[tuple[str, int, int, int]]],
) -> None:
    own, others, events = session
    first_own = {line.rstrip() for line in own.split("\n") if line.strip()}
    hidden: frozenset[str] = frozenset()
    reads: dict[int, str] = {}
    added: set[str] = set()
    removed: set[str] = set()
    for kind, w, mask, where in events:
        if kind == "read":
            reads[w] = union_of(own, others, hidden)
            continue
        read = reads[w]
        lines = read.split("\n")[:-1] if read else []
        # Remove only lines every writer found in the first versions, never another
        # writer's new line: so every new line must be in the end result.
        kept = [
            line
            for n, line in enumerate(lines)
            if not (mask >> (n % 6) & 1 and line.strip() and line.rstrip() not in added)
        ]
        new = f"- [new {w}](new-{w}.md)"
        kept.insert(min(where, len(kept)), new)
        written = "".join(f"{line}\n" for line in kept)
        saved = save_change(read, written, own)
        gone = {line.rstrip() for line in lines if line.strip()} - {k.rstrip() for k in kept}
        own = saved.own
        hidden = hidden_after(hidden, saved, others)
        texts = {line.rstrip() for line in own.split("\n") if line.strip()}
        # No line a writer removed comes back from the own index.
        assert not gone & texts
        removed |= gone
        added.add(new)
        # Other sources' lines are never copied into the own index.
        assert texts <= first_own | added
    texts = {line.rstrip() for line in own.split("\n") if line.strip()}
    view = {line.rstrip() for line in union_of(own, others, hidden).split("\n")}
    # No line added by any writer is lost, from the own index nor from the view.
    assert added <= texts
    assert added <= view
    # A line removed from the view stays out of it.
    assert not removed & view


@given(_docs, _docs)
def test_one_writer_alone_on_its_own_index_writes_what_it_wrote(own: str, written: str) -> None:
    assert save_change(own, written, own).own == written


@given(_docs, st.lists(_docs, max_size=2))
def test_two_writers_who_read_the_same_view_keep_both_lines(own: str, others: list[str]) -> None:
    read = union_index(own, others)
    base = read if read.endswith("\n") or not read else read + "\n"  # a whole last line
    first = save_change(read, base + "- [one](one.md)\n", own)
    second = save_change(read, "- [two](two.md)\n" + read, first.own)
    lines = second.own.split("\n")
    assert "- [one](one.md)" in lines
    assert "- [two](two.md)" in lines


@pytest.mark.parametrize(
    ("path", "agents", "expected"),
    [
        ("MEMORY.md", False, True),
        ("MEMORY.md", True, True),
        ("agent-memory/rev/MEMORY.md", True, True),
        ("agent-memory/rev/MEMORY.md", False, False),  # a project's folder of that name
        ("agent-memory/rev/sub/MEMORY.md", True, False),
        ("agent-memory/MEMORY.md", True, False),
        ("agent-memory//MEMORY.md", True, False),
        ("sub/MEMORY.md", True, False),
        ("agent-memory/rev/notes.md", True, False),
    ],
)
def test_which_paths_are_indexes(path: str, agents: bool, expected: bool) -> None:
    assert index.is_index(path, agents) is expected


def test_each_index_has_a_key_of_its_own() -> None:
    assert index.index_key("-home-a-p", "MEMORY.md") == "-home-a-p"
    assert index.index_key("global/claude", "MEMORY.md") == "global/claude"
    assert index.index_key("global/claude", "agent-memory/rev/MEMORY.md") == (
        "global/claude/agent-memory/rev"
    )
