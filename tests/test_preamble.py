"""Tier 1: the PREAMBLE.md renderer and its rules (§6), as plain functions."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from pathlib import Path
from unittest import mock

import pytest
from helpers import DISCOVERED, FakeHome, at, fake_home, load_project, write
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.app import offline
from memfs.disk.config import Config, PreambleSettings
from memfs.rules import names
from memfs.rules import preamble as preamble_mod
from memfs.rules.budget import cut_utf8, water_fill
from memfs.rules.preamble import (
    Doc,
    IndexEntry,
    MemoryOverLimit,
    PreambleInput,
    description,
    handoff_date,
    handoff_rank,
    is_handoff,
    is_text,
    memory_over_limit,
    render,
    render_empty,
    strip_drift_header,
    utc_date,
    utc_minute,
)
from memfs.view import documents as project_documents
from memfs.view.documents import empty_preamble
from memfs.view.project import HISTORY, Kind, history_stamp

PROPS = settings(deadline=None, max_examples=300, database=None)

FILES_AT = "/home/u/memfs/-home-u-proj"

MARKER_RE = re.compile(rb"\[\xe2\x80\xa6 (\d+) more bytes: ([^\]\n]*)\]\n")
LEFT_OUT_RE = re.compile(rb"\n\[left out: ([^,\n]*), (\d+) bytes: ([^\]\n]*)\]\n")


def doc(title: str, body: bytes | str) -> Doc:
    data = body.encode() if isinstance(body, str) else body
    return Doc(path=f"{FILES_AT}/{title}", title=title, body=data)


def preamble_input(
    *,
    handoff: Doc | None = None,
    index: Doc | None = None,
    newest: tuple[Doc, ...] = (),
    rest: tuple[IndexEntry, ...] = (),
    more: int = 0,
) -> PreambleInput:
    return PreambleInput(
        project="/home/u/proj",
        files_at=FILES_AT,
        handoff=handoff,
        index=index,
        newest=newest,
        rest=rest,
        more=more,
    )


# --- handoff_date, handoff_rank, is_handoff ------------------------------------


@pytest.mark.parametrize(
    ("name", "date"),
    [
        ("handoff-cyb_20261101.md", 20261101),
        ("handoff_20250101_to_20261101.md", 20261101),
        ("handoff_20261101_then_20250101.md", 20250101),  # last, not largest
        ("handoff_20261101_20261399.md", 20261101),  # the last *valid* one
        ("handoff_20261131.md", None),  # November has 30 days
        ("handoff_20230229.md", None),
        ("handoff_20240229.md", 20240229),
        ("handoff_00000101.md", None),
        ("handoff.md", None),
        ("handoff-cyb_proj.md", None),
        ("handoff_20261101120000.md", None),  # a timestamp, not a date
        ("handoff_2026110.md", None),
        ("20250101/handoff.md", None),  # only the basename counts
        ("sub/handoff_20250102.md", 20250102),
    ],
)
def test_handoff_date(name: str, date: int | None) -> None:
    assert handoff_date(name) == date


def test_handoff_rank_dated_beats_undated_then_date_then_mtime() -> None:
    names = {
        "handoff-new-undated.md": 9_000,
        "handoff-old-undated.md": 1_000,
        "handoff_20250101.md": 8_000,
        "handoff-a_20261101.md": 2_000,
        "handoff-b_20261101.md": 3_000,
    }
    ranked = sorted(names, key=lambda n: handoff_rank(n, names[n]))
    assert ranked == [
        "handoff-old-undated.md",
        "handoff-new-undated.md",
        "handoff_20250101.md",
        "handoff-a_20261101.md",
        "handoff-b_20261101.md",
    ]


def test_handoff_rank_touch_does_not_win() -> None:
    # An rsync or a touch makes a stale handoff newest by mtime; its date still loses.
    assert handoff_rank("handoff_20250101.md", 10**19) < handoff_rank("handoff_20261101.md", 1)
    assert handoff_rank("handoff.md", 10**19) < handoff_rank("handoff_20000101.md", 0)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("handoff.md", True),
        ("handoff-cyberine_proj.md", True),
        ("sub/handoff_20261101.md", True),
        ("Handoff.md", False),
        ("my-handoff.md", False),
        ("handoff.txt", False),
        ("handoff.md.tmp.123.456", False),
        ("handoff/notes.md", False),
    ],
)
def test_is_handoff(name: str, expected: bool) -> None:
    assert is_handoff(name) is expected


@given(st.text(alphabet="handof.m/-_x*?[]", max_size=14))
def test_is_handoff_is_the_glob(name: str) -> None:
    # is_handoff spells the glob out for speed; it must answer what fnmatch answers.
    expected = fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], preamble_mod.HANDOFF_GLOB)
    assert is_handoff(name) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("notes.md", True),
        ("MEMORY.md", True),
        ("sub/deeper/notes.md", True),
        ("handoff-claude_x_20261201.md", True),
        ("README.MD", True),
        ("design.markdown", True),
        ("deploys.txt", True),  # goose's <category>.txt
        ("Notes.TxT", True),
        ("skills/x/SKILL.md", True),  # Codex's skills are memory: only Gemini's are drafts
        # Under a dot folder, or a hidden file: a tool's or nobody's memory.
        (".inbox/private/x.patch", False),
        (".inbox/private/notes.md", False),
        ("sub/.cache/notes.md", False),
        (".notes.md", False),
        (".extraction.lock", False),
        (".extraction-state.json", False),
        (".MEMORY.md.0b5c3a1e-1f2d-4c3b-9a8e-7d6c5b4a3f21.patch-tmp", False),
        # Not Markdown or plain text by name, or no extension at all.
        ("skills/x.patch", False),
        ("state.json", False),
        ("diagram.png", False),
        ("notes.md.tmp.12345.0123456789ab", False),  # Claude Code's temp, in flight
        ("notes.md~", False),
        ("#notes.md#", False),
        ("notes.md.partial", False),
        ("TODO", False),
        ("notes.", False),
        ("md", False),
    ],
)
def test_feeds_preamble_by_name(path: str, expected: bool) -> None:
    assert names.feeds_preamble(path) is expected


@given(st.text(alphabet="ab.MDdmtxT/~#-", max_size=16))
def test_feeds_preamble_needs_a_memory_extension_and_no_dot_component(path: str) -> None:
    fed = names.feeds_preamble(path)
    if fed:
        parts = path.split("/")
        assert not any(p.startswith(".") for p in parts)
        assert parts[-1].lower().endswith((".md", ".markdown", ".txt"))
    # The rule leaves out every name a name rule matches (a writer's file in flight among
    # them) by itself: no such name is ever fed to the preamble.
    if fed:
        assert names.path_rule(path) is None, path


# --- strip_drift_header ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<!-- pi copy of ~/.claude/x.md -->\nbody\n", b"body\n"),
        (b"<!-- pi copy: CC is canonical -->\n\nbody\n", b"body\n"),
        (b"<!-- pi copy -->\r\n\r\nbody\r\n", b"body\r\n"),
        (b"<!--PI COPY-->\nbody\n", b"body\n"),
        (b"<!-- memfs import -->\nbody\n", b"body\n"),
        (b"<!-- Imported from work -->\nbody\n", b"body\n"),
        (b"<!-- copied from x -->\nbody\n", b"body\n"),
        (b"\xef\xbb\xbf<!-- pi copy -->\nbody\n", b"body\n"),
        (b"<!-- pi copy\n   CC is canonical until edited in pi\n-->\nbody\n", b"body\n"),
        (b"<!-- pi copy -->", b""),
        # Only one blank line goes; the body's own spacing stays.
        (b"<!-- pi copy -->\n\n\nbody\n", b"\nbody\n"),
        # Never closed: only the first line is a header.
        (b"<!-- pi copy\nbody\nmore\n", b"body\nmore\n"),
        # Closed too far down to be a header: only the first line goes.
        (b"<!-- copied\n1\n2\n3\n4\n5\n-->\nbody\n", b"1\n2\n3\n4\n5\n-->\nbody\n"),
    ],
)
def test_strip_drift_header(body: bytes, expected: bytes) -> None:
    assert strip_drift_header(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"<!-- a note of my own -->\nbody\n",
        b"# Title\n<!-- pi copy -->\n",
        b" <!-- pi copy -->\nbody\n",
        b"",
        b"body only",
    ],
)
def test_strip_drift_header_leaves_other_bodies(body: bytes) -> None:
    assert strip_drift_header(body) == body


# --- description -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"---\nname: x\ndescription: Build notes\ntype: project\n---\nbody\n", "Build notes"),
        (b"---\ndescription: 'It''s quoted'\n---\n", "It's quoted"),
        (b'---\ndescription: "say \\"hi\\""\n---\n', 'say "hi"'),
        (b"---\r\ndescription:  spaced   out  \r\n---\r\n", "spaced out"),
        (b"---\ndescription: plain # a comment\n---\n", "plain"),
        (b"---\ndescription: >\n  folded\n  over lines\nname: x\n---\n", "folded over lines"),
        (b"---\ndescription: caf\xc3\xa9 \xf0\x9f\x93\x9d\n---\n", "caf\u00e9 \U0001f4dd"),
        # The caller reads only the first bytes: an unclosed block still counts.
        (b"---\nname: x\ndescription: cut short", "cut short"),
        (b"\xef\xbb\xbf---\ndescription: bom\n---\n", "bom"),
    ],
)
def test_description(head: bytes, expected: str) -> None:
    assert description(head) == expected


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"no frontmatter\ndescription: x\n",
        b"---\nname: x\n---\ndescription: after the fence\n",
        b"---\ndescription:\n---\n",
        b"---\ndescription: ''\n---\n",
        b"---\nmeta:\n  description: nested\n---\n",
        b"# ---\ndescription: x\n",
    ],
)
def test_description_none(head: bytes) -> None:
    assert description(head) is None


@given(st.binary(max_size=300))
@PROPS
def test_description_never_raises_and_is_one_line(head: bytes) -> None:
    text = description(b"---\ndescription: " + head)
    assert text is None or ("\n" not in text and text == text.strip() and text)


# --- cut_utf8 --------------------------------------------------------------------


def test_cut_utf8_whole_when_it_fits() -> None:
    data = "h\u00e9llo\n".encode()
    assert cut_utf8(data, len(data)) == data
    assert cut_utf8(b"", 0) == b""


def test_cut_utf8_never_splits_a_character() -> None:
    data = ("\u00e9" * 10).encode()  # two bytes each
    assert cut_utf8(data, 7) == ("\u00e9" * 3).encode()
    emoji = ("\U0001f4dd" * 5).encode()  # four bytes each
    for limit in range(len(emoji)):
        assert cut_utf8(emoji, limit) == ("\U0001f4dd" * (limit // 4)).encode()
    assert cut_utf8("\u20ac".encode(), 2) == b""


def test_cut_utf8_prefers_a_near_line_end() -> None:
    data = b"x" * 30 + b"\n" + b"y" * 100
    assert cut_utf8(data, 40) == data[:31]  # the line end is 10 back: window 40 // 4
    assert cut_utf8(data, 60) == data[:60]  # 30 back is too far: window 60 // 4


def test_cut_utf8_line_end_window_is_capped() -> None:
    data = b"a" * 1000 + b"\n" + b"b" * 5000
    assert cut_utf8(data, 1100) == data[:1001]  # 99 back: within 200
    assert cut_utf8(data, 1300) == data[:1300]  # 299 back: beyond 200


def test_cut_utf8_just_before_a_newline_is_a_line_end() -> None:
    assert cut_utf8(b"abc\ndef\nghi", 7) == b"abc\ndef"


def test_cut_utf8_invalid_utf8_is_cut_as_bytes() -> None:
    data = b"\x80" * 20
    assert len(cut_utf8(data, 9)) <= 9
    with pytest.raises(ValueError, match="limit"):
        cut_utf8(b"abc", -1)


@given(st.text(max_size=400), st.integers(0, 1200))
@PROPS
def test_cut_utf8_properties(text: str, limit: int) -> None:
    data = text.encode()
    cut = cut_utf8(data, limit)
    assert len(cut) <= limit
    assert data.startswith(cut)
    cut.decode()  # a whole number of characters
    # Never more than the line-end window (plus one character) short of the limit.
    if len(data) > limit:
        assert len(cut) >= limit - min(limit // 4, 200) - 4


@given(st.binary(max_size=400), st.integers(0, 500))
@PROPS
def test_cut_utf8_any_bytes(data: bytes, limit: int) -> None:
    cut = cut_utf8(data, limit)
    assert len(cut) <= limit
    assert data.startswith(cut)


# --- water_fill ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("needs", "total", "cap", "shares"),
    [
        ([], 100, 10, []),
        ([10, 20], 100, 100, [10, 20]),
        ([10, 1000, 1000, 50], 700, 400, [10, 320, 320, 50]),
        ([1000, 1000], 700, 300, [300, 300]),
        ([1000, 1000, 1000], 100, 4096, [34, 33, 33]),  # leftovers go to the earliest
        ([5, 0, 5], 0, 10, [0, 0, 0]),
    ],
)
def test_water_fill(needs: list[int], total: int, cap: int, shares: list[int]) -> None:
    assert water_fill(needs, total, cap) == shares


def test_water_fill_refuses_negatives() -> None:
    with pytest.raises(ValueError, match="total"):
        water_fill([1], -1, 1)
    with pytest.raises(ValueError, match="cap"):
        water_fill([1], 1, -1)
    with pytest.raises(ValueError, match="needs"):
        water_fill([-1], 1, 1)


@given(st.lists(st.integers(0, 5000), max_size=12), st.integers(0, 20000), st.integers(0, 5000))
@PROPS
def test_water_fill_properties(needs: list[int], total: int, cap: int) -> None:
    shares = water_fill(needs, total, cap)
    wants = [min(n, cap) for n in needs]
    assert water_fill(needs, total, cap) == shares
    assert all(0 <= s <= w for s, w in zip(shares, wants, strict=True))
    # Nothing wasted: either every want is met or the total is used up.
    assert sum(shares) == min(total, sum(wants))
    # Fair: a piece left short got at least as much as any other piece, less one byte.
    for s, w in zip(shares, wants, strict=True):
        if s < w:
            assert all(other <= s + 1 for other in shares)


# --- render: layout --------------------------------------------------------------


# 2026-11-01T07:50:59Z and 2026-10-30T23:59:59Z
NOV1_NS = 1_793_519_459 * 10**9 + 999_999_999
OCT30_NS = 1_793_404_799 * 10**9
STALE_AT = ".history/build.md/work@20261101T075100Z.md"


def full_input() -> PreambleInput:
    handoff = dataclasses.replace(
        doc("handoff-cyb_20261101.md", "<!-- pi copy -->\n\nDid X.\nNext: Y.\n"),
        source="work",
        mtime_ns=NOV1_NS,
    )
    build = dataclasses.replace(doc("build.md", "make all\n"), newer=STALE_AT)
    return preamble_input(
        handoff=handoff,
        index=doc("MEMORY.md", "- [Build](build.md) how to build\n"),
        newest=(build, doc("caf\u00e9.md", "na\u00efve \U0001f4dd")),
        rest=(
            IndexEntry("old.md", 120, "an old note", OCT30_NS),
            IndexEntry("handoff_20261030.md", 9, None, OCT30_NS, superseded=True),
            IndexEntry("notes.md", 7, "mine", OCT30_NS, newer=".history/notes.md/pi@x.md"),
            IndexEntry("older.md", 5, None),
        ),
        more=7,
    )


def test_render_sections_in_order() -> None:
    out = render(full_input(), budget=8192, file_cap=4096).decode()
    assert out == (
        "# Project memory: /home/u/proj\n"
        "\n"
        "Background from earlier sessions, not a live conversation.\n"
        f"Files: {FILES_AT} (read them there for anything cut or left out below)\n"
        "\n"
        "## Handoff: handoff-cyb_20261101.md (from work, 2026-11-01 07:50 UTC)\n"
        "\n"
        "Did X.\n"
        "Next: Y.\n"
        "\n"
        "## Index: MEMORY.md\n"
        "\n"
        "- [Build](build.md) how to build\n"
        "\n"
        f"## Recent: build.md (own copy older than {STALE_AT})\n"
        "\n"
        "make all\n"
        "\n"
        "## Recent: caf\u00e9.md\n"
        "\n"
        "na\u00efve \U0001f4dd\n"
        "\n"
        "## Other files\n"
        "\n"
        "- old.md (120 bytes, 2026-10-30): an old note\n"
        "- handoff_20261030.md (9 bytes, 2026-10-30; superseded handoff)\n"
        "- notes.md (7 bytes, 2026-10-30; own copy older than .history/notes.md/pi@x.md): mine\n"
        "- older.md (5 bytes)\n"
        "\u2026 +7 more\n"
    )


def test_render_leaves_out_absent_sections() -> None:
    out = render(preamble_input(), budget=8192, file_cap=4096)
    assert b"##" not in out
    assert b"not a live conversation" in out
    only_more = render(preamble_input(more=3), budget=8192, file_cap=4096)
    assert only_more.endswith("## Other files\n\n\u2026 +3 more\n".encode())


@pytest.mark.parametrize(
    "body",
    [b"", b"\n", b"\n \n\t\n", b"<!-- pi copy of MEMORY.md -->\n\n"],
    ids=["0 bytes", "a newline", "blank lines", "a drift header only"],
)
def test_an_index_without_a_line_gets_no_section(body: bytes) -> None:
    # Issue 36: a 0-byte own MEMORY.md gave an empty "## Index: MEMORY.md" section.
    inp = dataclasses.replace(full_input(), index=doc("MEMORY.md", body))
    out = render(inp, budget=8192, file_cap=4096)
    assert b"MEMORY.md" not in out
    whole = render(full_input(), budget=8192, file_cap=4096)
    index = b"\n## Index: MEMORY.md\n\n- [Build](build.md) how to build\n"
    assert out == whole.replace(index, b"")


def test_render_names_in_one_line() -> None:
    # A newline in a name must not open a section of its own.
    inp = preamble_input(newest=(doc("evil\n## Handoff: x.md", "body\n"),))
    out = render(inp, budget=8192, file_cap=4096)
    assert b"## Recent: evil?## Handoff: x.md\n" in out
    assert out.count(b"\n## ") == 1


def test_render_budget_zero_and_tiny() -> None:
    full = render(full_input(), budget=8192, file_cap=4096)
    assert render(full_input(), budget=0, file_cap=4096) == b""
    for budget in (1, 10, 50, 100):
        assert full.startswith(render(full_input(), budget=budget, file_cap=4096))
        assert len(render(full_input(), budget=budget, file_cap=4096)) <= budget


def test_render_refuses_negatives() -> None:
    with pytest.raises(ValueError, match="budget"):
        render(full_input(), budget=-1, file_cap=10)
    with pytest.raises(ValueError, match="file_cap"):
        render(full_input(), budget=10, file_cap=-1)


def test_long_memory_does_not_crowd_out_handoff_or_newest() -> None:
    memory = "".join(f"- [Topic {i}](topic-{i}.md) about {i}\n" for i in range(2000))
    inp = preamble_input(
        handoff=doc("handoff_20261101.md", "Stopped at step 3; step 4 next.\n"),
        index=doc("MEMORY.md", memory),
        newest=(doc("newest.md", "The newest fact.\n"),),
    )
    out = render(inp, budget=1200, file_cap=4096)
    assert len(out) <= 1200
    assert b"Stopped at step 3; step 4 next.\n" in out
    assert b"The newest fact.\n" in out
    assert b"- [Topic 0](topic-0.md) about 0\n" in out
    (omitted, path) = MARKER_RE.findall(out)[0]
    note, shown = (
        out.split(b"## Index: MEMORY.md\n\n")[1].split(b"[\xe2\x80\xa6")[0].split(b"]\n\n")
    )
    # Claude Code would load only the first 200 of its 2000 linked lines.
    assert note.startswith(b"[MEMORY.md is longer than Claude Code loads")
    assert note.endswith(
        b"1800 topics lie beyond Claude Code's first 200 lines, so it never sees their links"
    )
    assert int(omitted) == len(memory.encode()) - len(shown)
    assert path == f"{FILES_AT}/MEMORY.md".encode()
    # MEMORY.md took what the others left over, cut at a line end.
    assert shown.endswith(b"\n")
    assert len(out) > 1200 - 200


def test_file_cap_bounds_each_piece() -> None:
    inp = preamble_input(index=doc("MEMORY.md", "m" * 10000), newest=(doc("a.md", "a" * 10000),))
    out = render(inp, budget=8192, file_cap=1000)
    sections = out.split(b"\n## ")[1:]
    assert len(sections) == 2
    assert all(len(b"\n## " + s) <= 1000 for s in sections)


def test_render_drops_a_piece_that_cannot_hold_its_marker() -> None:
    inp = preamble_input(
        handoff=doc("handoff_20261101.md", "h" * 5000),
        index=doc("MEMORY.md", "m" * 5000),
    )
    frame = render(preamble_input(), budget=8192, file_cap=4096)
    out = render(inp, budget=len(frame) + 120, file_cap=4096)
    assert len(out) <= len(frame) + 120
    # The handoff keeps its room; MEMORY.md is named in one line or not at all.
    assert b"## Handoff: handoff_20261101.md" in out
    assert b"## Index" not in out


@pytest.mark.parametrize(
    "body",
    [
        b"a\x00b\n",  # a NUL byte: binary, or a sparse file a sync tool is filling
        b"\x00" * 2346,
        b"\xff\xfe o\x00k\x00",  # UTF-16
        b"caf\xe9\n",  # Latin-1: not UTF-8
        b"ok \xe2\x82",  # a character cut short
        b"\xed\xa0\x80",  # an encoded surrogate is not UTF-8 either
    ],
)
def test_only_text_is_inlined(body: bytes) -> None:
    # Not text wherever it would be inlined: listed in the index, never inlined.
    handoff = dataclasses.replace(doc("handoff_20261101.md", body), mtime_ns=NOV1_NS)
    inp = preamble_input(
        handoff=handoff,
        index=doc("MEMORY.md", body),
        newest=(doc("bin.md", body), doc("text.md", "fine\n")),
        rest=(IndexEntry("old.md", 1, None),),
    )
    out = render(inp, budget=8192, file_cap=4096)
    out.decode()
    assert b"\x00" not in out
    assert out.count(b"\n## ") == 2  # Recent: text.md, Other files
    assert b"## Recent: text.md\n\nfine\n" in out
    assert out.endswith(
        b"## Other files\n\n"
        b"- handoff_20261101.md (%d bytes, 2026-11-01; not text, not inlined)\n"
        b"- MEMORY.md (%d bytes; not text, not inlined)\n"
        b"- bin.md (%d bytes; not text, not inlined)\n"
        b"- old.md (1 bytes)\n" % (len(body), len(body), len(body))
    )


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"", True),
        (b"plain\n", True),
        ("caf\u00e9 \U0001f4dd".encode(), True),
        (b"\xef\xbb\xbfwith a BOM", True),
        (b"tab\tand\r\nCRLF\x1b[0m", True),  # other control characters are text
        (b"\x00", False),
        (b"caf\xe9", False),
        (b"\xc3", False),
    ],
)
def test_is_text(body: bytes, text: bool) -> None:
    assert is_text(body) is text


def test_render_surrogates_in_names_do_not_crash() -> None:
    inp = preamble_input(newest=(doc("bad\udcff.md", "x"),), rest=(IndexEntry("\ud800", 1, None),))
    out = render(inp, budget=8192, file_cap=4096)
    out.decode()


# --- render: the handoff's heading, index lines, marks ------------------------------------


def test_utc_times() -> None:
    assert utc_minute(NOV1_NS) == "2026-11-01 07:50 UTC"  # to the minute, never rounded up
    assert utc_date(NOV1_NS) == "2026-11-01"
    assert utc_date(OCT30_NS) == "2026-10-30"
    assert utc_date(-1) == "1969-12-31"
    assert utc_minute(10**30) == "unknown time"  # past any calendar: said, never raised


@pytest.mark.parametrize(
    ("source", "mtime_ns", "newer", "heading"),
    [
        ("work", NOV1_NS, None, "handoff_20261101.md (from work, 2026-11-01 07:50 UTC)"),
        ("pi", None, None, "handoff_20261101.md (from pi)"),
        (None, NOV1_NS, None, "handoff_20261101.md (2026-11-01 07:50 UTC)"),
        (None, None, None, "handoff_20261101.md"),
        (
            "claude",
            NOV1_NS,
            ".history/handoff_20261101.md/work@20261102T000000Z.md",
            "handoff_20261101.md (from claude, 2026-11-01 07:50 UTC; own copy older than "
            ".history/handoff_20261101.md/work@20261102T000000Z.md)",
        ),
    ],
)
def test_handoff_heading(
    source: str | None, mtime_ns: int | None, newer: str | None, heading: str
) -> None:
    handoff = Doc(
        f"{FILES_AT}/handoff_20261101.md", "handoff_20261101.md", b"x\n", source, mtime_ns, newer
    )
    out = render(preamble_input(handoff=handoff), budget=8192, file_cap=4096).decode()
    assert f"\n## Handoff: {heading}\n\nx\n" in out


@pytest.mark.parametrize(
    ("entry", "line"),
    [
        (IndexEntry("a.md", 3, None), "- a.md (3 bytes)"),
        (IndexEntry("a.md", 3, "about a", OCT30_NS), "- a.md (3 bytes, 2026-10-30): about a"),
        (
            IndexEntry("handoff.md", 3, None, OCT30_NS, superseded=True),
            "- handoff.md (3 bytes, 2026-10-30; superseded handoff)",
        ),
        (
            IndexEntry("b.md", 3, None, OCT30_NS, not_text=True),
            "- b.md (3 bytes, 2026-10-30; not text, not inlined)",
        ),
        (
            IndexEntry("handoff.md", 3, "d", OCT30_NS, True, ".history/handoff.md/w@t.md", True),
            "- handoff.md (3 bytes, 2026-10-30; superseded handoff; not text, not inlined; "
            "own copy older than .history/handoff.md/w@t.md): d",
        ),
        # A name or mark cannot open a line or a section of its own.
        (
            IndexEntry("x\n## y", 1, None, newer="p\nq"),
            "- x?## y (1 bytes; own copy older than p?q)",
        ),
    ],
)
def test_index_line(entry: IndexEntry, line: str) -> None:
    out = render(preamble_input(rest=(entry,)), budget=8192, file_cap=4096).decode()
    assert out.endswith(f"\n## Other files\n\n{line}\n")


def test_stale_mark_on_a_recent_heading_and_a_not_text_line() -> None:
    stale = ".history/a.md/work@20261102T000000Z.md"
    a = Doc(f"{FILES_AT}/a.md", "a.md", b"a\n", newer=stale)
    b = Doc(f"{FILES_AT}/b.md", "b.md", b"\x00", mtime_ns=OCT30_NS, newer=stale)
    out = render(preamble_input(newest=(a, b)), budget=8192, file_cap=4096).decode()
    assert f"\n## Recent: a.md (own copy older than {stale})\n\na\n" in out
    assert (
        f"- b.md (1 bytes, 2026-10-30; not text, not inlined; own copy older than {stale})\n" in out
    )


# --- MEMORY.md against Claude Code's limits --------------------------------------------


def linked(n: int, pad: int = 0) -> bytes:
    # Numbers of one width: every line is as long.
    return "".join(f"- [Topic {i:03}](topic-{i:03}.md) {'x' * pad}\n" for i in range(n)).encode()


def test_memory_over_limit_by_lines() -> None:
    body = linked(210)
    assert memory_over_limit(body) == MemoryOverLimit(210, len(body), 10, "lines")
    # Unlinked lines past the limit are no topics; a missing final newline is one line less.
    body = linked(200) + b"plain\n" * 5 + b"- [x](x.md)"
    assert memory_over_limit(body) == MemoryOverLimit(206, len(body), 1, "lines")


@pytest.mark.parametrize("body", [b"", linked(1), linked(200), linked(200).rstrip(b"\n")])
def test_memory_within_limit(body: bytes) -> None:
    assert memory_over_limit(body) is None


def test_memory_over_limit_by_bytes() -> None:
    body = linked(100, pad=270)
    width = len(body) // 100  # every line as long, its newline included
    assert width * 100 == len(body) > 25_000
    # A line is loaded when it ends within the first 25,000 bytes, newline not counted.
    loaded = max(k for k in range(101) if k * width - 1 <= 25_000)
    assert memory_over_limit(body) == MemoryOverLimit(100, len(body), 100 - loaded, "bytes")


def test_memory_over_limit_at_the_byte_edge() -> None:
    assert memory_over_limit(b"x" * 25_000 + b"\n") is None  # its newline may pass the limit
    assert memory_over_limit(b"- [a](a.md)" + b"x" * 24_990) == MemoryOverLimit(
        1, 25_001, 1, "bytes"
    )
    assert memory_over_limit(b"\r\n" * 201) == MemoryOverLimit(201, 402, 0, "lines")


def reference_loaded(body: bytes, max_lines: int, max_bytes: int) -> int:
    """Lines Claude Code loads, the other way round: keep lines, then cut at a line end."""
    lines = body.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    text = b"\n".join(lines[:max_lines])
    if len(text) <= max_bytes:
        return len(lines[:max_lines])
    cut = text.rfind(b"\n", 0, max_bytes + 1)
    return 0 if cut == -1 else text[:cut].count(b"\n") + 1


memory_lines = st.lists(
    st.one_of(
        st.text(st.sampled_from("ab \u00e9"), max_size=12),
        st.builds(
            lambda t: f"- [{t}]({t}.md)", st.text(st.sampled_from("xyz"), min_size=1, max_size=8)
        ),
    ),
    max_size=30,
)


@given(memory_lines, st.booleans(), st.integers(1, 12), st.integers(0, 120))
@PROPS
def test_memory_over_limit_property(
    lines: list[str], final_newline: bool, max_lines: int, max_bytes: int
) -> None:
    body = "\n".join(lines).encode() + (b"\n" if final_newline and lines else b"")
    all_lines = body.split(b"\n")
    if all_lines[-1] == b"":
        all_lines.pop()
    with (
        mock.patch.object(preamble_mod, "CLAUDE_MEMORY_LINES", max_lines),
        mock.patch.object(preamble_mod, "CLAUDE_MEMORY_BYTES", max_bytes),
    ):
        over = memory_over_limit(body)
    loaded = reference_loaded(body, max_lines, max_bytes)
    if loaded == len(all_lines):
        assert over is None
        return
    assert over is not None
    beyond = [ln for ln in all_lines[loaded:] if b"](" in ln]  # every linked line here has "]("
    assert over == MemoryOverLimit(
        len(all_lines), len(body), len(beyond), "lines" if loaded == max_lines else "bytes"
    )


def test_render_says_memory_passes_claude_codes_limit() -> None:
    out = render(preamble_input(index=doc("MEMORY.md", linked(210))), budget=8192, file_cap=4096)
    note = (
        b"\n## Index: MEMORY.md\n\n[MEMORY.md is longer than Claude Code loads (its first 200 "
        b"lines or 25,000 bytes): 210 lines, %s bytes; 10 topics lie beyond Claude Code's first "
        b"200 lines, so it never sees their links]\n\n- [Topic 000](topic-000.md)"
        % f"{len(linked(210)):,}".encode()
    )
    assert note in out
    one = b"x" * 24_990 + b"\n- [a](a.md) more\n"  # its second line ends past 25,000
    out = render(preamble_input(index=doc("MEMORY.md", one)), budget=8192, file_cap=4096)
    assert (
        b" bytes; 1 topic lies beyond Claude Code's first 25,000 bytes, "
        b"so it never sees its link]\n\n" in out
    )
    unlinked = b"x" * 24_990 + b"\n" + b"y" * 20 + b"\n"  # no link past the limit
    out = render(preamble_input(index=doc("MEMORY.md", unlinked)), budget=8192, file_cap=4096)
    assert b"; no topic lies beyond Claude Code's first 25,000 bytes]\n\n" in out
    short = render(preamble_input(index=doc("MEMORY.md", linked(200))), budget=8192, file_cap=4096)
    assert b"longer than Claude Code loads" not in short


# --- render_empty: a project with no memory yet ---------------------------------------------


def test_render_empty_says_where_a_write_lands() -> None:
    own = "/home/u/.claude/projects/-home-u-new/memory"
    out = render_empty("-home-u-new", "/home/u/memfs/-home-u-new", own, budget=8192)
    assert out == (
        b"# Project memory: -home-u-new\n\n"
        b"No memory for this project yet: no source holds a file for it.\n"
        b"Files: /home/u/memfs/-home-u-new\n"
        b"A file written there lands in /home/u/.claude/projects/-home-u-new/memory "
        b"(created on the first write).\n"
    )
    read_only = render_empty("-home-u-new", "/home/u/memfs/-home-u-new", None, budget=8192)
    assert read_only.endswith(
        b"This mount is read-only (no own source): a write there fails (EROFS).\n"
    )
    with pytest.raises(ValueError, match="budget"):
        render_empty("-x", "/m/-x", None, budget=-1)


any_text = st.text(max_size=60)


@given(any_text, any_text, st.none() | any_text, st.integers(0, 400))
@PROPS
def test_render_empty_properties(slug: str, files_at: str, own: str | None, budget: int) -> None:
    out = render_empty(slug, files_at, own, budget=budget)
    assert len(out) <= budget
    assert render_empty(slug, files_at, own, budget=10**6).startswith(out)
    assert out == render_empty(slug, files_at, own, budget=budget)
    out.decode()
    assert b"\x00" not in out


# --- render: properties ----------------------------------------------------------

# Bodies free of "#", "[" and "<" so that the checks below can parse the
# output; multibyte and non-BMP characters are in the default alphabet.
body_text = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="#[<"), max_size=1500),
    st.text(st.sampled_from("ab \n\u00e9\U0001f4dd"), max_size=3000),
)
# A MEMORY.md around Claude Code's limits: linked lines, some long (for its byte limit).
memory_text = st.builds(
    lambda n, pad: linked(n, pad).decode(), st.integers(150, 260), st.sampled_from((0, 0, 130))
)
# mtimes of any int64, and some a calendar cannot show
times = st.none() | st.integers(-(2**63), 2**63 - 1) | st.just(10**30)


@st.composite
def inputs(draw: st.DrawFn, bodies: st.SearchStrategy[bytes]) -> PreambleInput:
    def maybe_doc(title: str, body: st.SearchStrategy[bytes]) -> Doc | None:
        if draw(st.booleans()):
            return None
        return Doc(
            f"{FILES_AT}/{title}",
            title,
            draw(body),
            draw(st.none() | any_text),
            draw(times),
            draw(st.none() | any_text),
        )

    newest = tuple(maybe_doc(f"new{i}.md", bodies) for i in range(draw(st.integers(0, 10))))
    entries = st.builds(
        IndexEntry,
        any_text,
        st.integers(0, 10**7),
        st.none() | any_text,
        times,
        st.booleans(),
        st.none() | any_text,
        st.booleans(),
    )
    return PreambleInput(
        project=draw(any_text),
        files_at=draw(any_text),
        handoff=maybe_doc("handoff.md", bodies),
        index=maybe_doc("MEMORY.md", st.one_of(bodies, memory_text.map(str.encode))),
        newest=tuple(d for d in newest if d is not None),
        rest=tuple(draw(st.lists(entries, max_size=12))),
        more=draw(st.integers(0, 1000)),
    )


utf8_bodies = body_text.map(str.encode)
any_bodies = st.one_of(st.binary(max_size=2000), utf8_bodies)
budgets = st.integers(0, 12000)
caps = st.integers(0, 5000)


@given(inputs(any_bodies), budgets, caps)
@PROPS
def test_render_never_exceeds_budget(inp: PreambleInput, budget: int, cap: int) -> None:
    out = render(inp, budget=budget, file_cap=cap)
    assert len(out) <= budget
    assert render(inp, budget=budget, file_cap=cap) == out


@given(inputs(any_bodies), budgets, caps)
@PROPS
def test_render_is_always_utf8_without_nul(inp: PreambleInput, budget: int, cap: int) -> None:
    # Only text is inlined, and every name and mark is made text: whatever the files hold,
    # a strict reader can read the preamble.
    out = render(inp, budget=budget, file_cap=cap)
    out.decode()
    assert b"\x00" not in out


@given(inputs(any_bodies), budgets, caps)
@PROPS
def test_render_cut_is_a_prefix_of_the_whole(inp: PreambleInput, budget: int, cap: int) -> None:
    # The frame and every section are the same whatever the budget: a bigger budget only
    # shows more, so no part depends on anything but the input.
    whole = render(inp, budget=10**9, file_cap=10**9)
    out = render(inp, budget=budget, file_cap=cap)
    assert whole.startswith(out[: len(whole.split(b"\n## ")[0])])
    headings = [s.split(b"\n")[0] for s in whole.split(b"\n## ")[1:]]
    for section in out.split(b"\n## ")[1:]:
        assert section.split(b"\n")[0] in headings


@given(inputs(utf8_bodies), budgets, caps)
@PROPS
def test_every_cut_has_its_marker(inp: PreambleInput, budget: int, cap: int) -> None:
    # Known names, so that the parsing below cannot be fooled by them.
    inp = dataclasses.replace(inp, project="/home/u/proj", files_at=FILES_AT)
    out = render(inp, budget=budget, file_cap=cap)
    docs = {d.title: d for d in (inp.handoff, inp.index, *inp.newest) if d is not None}
    left_out = {m[0].decode() for m in LEFT_OUT_RE.findall(out)}
    seen = set()
    for section in LEFT_OUT_RE.sub(b"", out).split(b"\n## ")[1:]:
        heading, _, shown = section.partition(b"\n\n")
        label, _, named = heading.decode().partition(": ")
        if label == "Other files":
            check_cut(shown, index_text(inp), FILES_AT)
            continue
        title = next(t for t in docs if named == t or named.startswith(t + " ("))
        seen.add(title)
        d = docs[title]
        assert is_text(d.body)
        check_heading(label, named, d)
        if label == "Index":
            shown = check_over_limit_note(shown, d.body)
        check_cut(shown, d.body, d.path)
    assert not seen & left_out
    assert seen | left_out <= set(docs)


# Indexes that hold no line: nothing, or blank lines after an importer's drift header.
no_lines = st.tuples(
    st.sampled_from([b"", b"<!-- pi copy -->\n", b"<!-- memfs import\nof MEMORY.md -->\n"]),
    st.text(alphabet=" \t\r\n\x0b\x0c", max_size=30).map(str.encode),
).map(b"".join)


@given(inputs(any_bodies), no_lines, budgets, caps)
@PROPS
def test_no_section_of_an_index_without_a_line(
    inp: PreambleInput, body: bytes, budget: int, cap: int
) -> None:
    # Neither a section nor, as MEMORY.md never is, an index line: nothing of such an index
    # shows, whatever the budget, and the rest is as if there were no index at all.
    out = render(
        dataclasses.replace(inp, index=doc("MEMORY.md", body)), budget=budget, file_cap=cap
    )
    assert b"## Index:" not in out
    assert b"[left out: MEMORY.md" not in out
    assert out == render(dataclasses.replace(inp, index=None), budget=budget, file_cap=cap)


def check_heading(label: str, named: str, d: Doc) -> None:
    """The heading names the file, and the handoff its source and time; marks are shown."""
    safe = dataclasses.replace(
        d,
        source=d.source and re.sub(r"[\x00-\x1f\x7f]", "?", d.source),
        newer=d.newer and re.sub(r"[\x00-\x1f\x7f]", "?", d.newer),
    )
    notes = named[len(d.title) :]
    if label == "Handoff":
        if safe.source is not None:
            assert f"from {safe.source}" in notes
        if d.mtime_ns is not None:
            assert utc_minute(d.mtime_ns) in notes
    if safe.newer is not None and label != "Index":
        assert notes.endswith(f"own copy older than {safe.newer})")


def check_over_limit_note(shown: bytes, body: bytes) -> bytes:
    """A MEMORY.md past Claude Code's limits says so first, with the topics beyond."""
    over = memory_over_limit(body)
    if over is None:
        assert not shown.startswith(b"[MEMORY.md is longer")
        return shown
    note, sep, rest = shown.partition(b"]\n\n")
    assert sep, shown
    topics = {0: b"no topic lies", 1: b"1 topic lies"}.get(
        over.topics_beyond, b"%d topics lie" % over.topics_beyond
    )
    first = b"200 lines" if over.cut_by == "lines" else b"25,000 bytes"
    assert note.startswith(b"[MEMORY.md is longer than Claude Code loads (its first 200 lines")
    assert (
        b"): %s lines, %s bytes; " % (f"{over.lines:,}".encode(), f"{over.size:,}".encode()) in note
    )
    assert topics + b" beyond Claude Code's first " + first in note
    return rest


def index_text(inp: PreambleInput) -> bytes:
    render_all = render(inp, budget=10**9, file_cap=10**9)
    return render_all.split(b"\n## Other files\n\n")[1]


def check_cut(shown: bytes, body: bytes, path: str) -> None:
    """`shown` is `body` whole, or a prefix of it and a marker that adds up."""
    whole = body if body.endswith(b"\n") or not body else body + b"\n"
    if shown == whole:
        return
    marker = MARKER_RE.search(shown)
    assert marker is not None, shown
    assert marker.end() == len(shown)
    assert marker[2] == path.encode()
    prefix = shown[: marker.start()]
    if prefix.endswith(b"\n") and not body.startswith(prefix):
        prefix = prefix[:-1]  # the newline that ends a partial line
    assert body.startswith(prefix)
    assert int(marker[1]) == len(body) - len(prefix) > 0


# --- through a loaded project (§6 as amended) ------------------------------------------
#
# The renderer's inputs are picked by project.py: which handoff is the latest, which heads
# are superseded, stale or not text. These tests load projects from a fake home.

MOUNT_AT = "/mnt/memfs/-home-a-my-proj-v2"
NOW = at(1000)


@pytest.fixture
def fh(tmp_path: Path) -> FakeHome:
    """Sources claude (own), work and pi, in that config order."""
    fh = fake_home(tmp_path)
    assert [s.name for s in fh.config().sources] == list(DISCOVERED)
    return fh


def settings_of(fh: FakeHome, **kw: int) -> Config:
    return dataclasses.replace(fh.config(), preamble=PreambleSettings(**kw))


def index_line(text: bytes, name: str) -> bytes:
    """The index line of `name` (the whole line, without its newline)."""
    found = [ln for ln in text.split(b"\n") if ln.startswith(f"- {name} (".encode())]
    assert len(found) == 1, (name, text)
    return found[0]


def sections(text: bytes) -> list[bytes]:
    return [s.split(b"\n")[0] for s in text.split(b"\n## ")[1:]]


def test_only_the_latest_handoff_is_inlined(fh: FakeHome) -> None:
    # The case: one dated handoff, two older ones (one undated, newer by mtime).
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(work / "handoff-a_20260101.md", "current plan\n", at(59.9))  # 00:00, not 00:01
    write(own / "handoff-b_20251230.md", "stale plan\n", at(20))
    write(own / "handoff-orchestrator.md", "older, undated\n", at(500))
    write(own / "topic.md", "---\ndescription: a topic\n---\ntopic body\n", at(5))
    text = load_project(fh.config()).preamble(MOUNT_AT, NOW)
    assert sections(text) == [
        b"Handoff: handoff-a_20260101.md (from work, 2026-01-01 00:00 UTC)",
        b"Recent: topic.md",
        b"Other files",
    ]
    assert b"current plan" in text
    assert b"stale plan" not in text
    assert b"older, undated" not in text
    assert index_line(text, "handoff-orchestrator.md") == (
        b"- handoff-orchestrator.md (15 bytes, 2026-01-01; superseded handoff)"
    )
    assert index_line(text, "handoff-b_20251230.md") == (
        b"- handoff-b_20251230.md (11 bytes, 2026-01-01; superseded handoff)"
    )


def test_index_lines_carry_utc_dates(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    day = 86_400
    write(own / "a.md", "---\ndescription: first\n---\n", at(-1))  # 2025-12-31 23:59:59
    write(own / "b.md", "b\n", at(3 * day))
    write(own / "new.md", "n\n", at(10 * day))
    project = load_project(settings_of(fh, newest=1))
    text = project.preamble(MOUNT_AT, at(20 * day))
    assert index_line(text, "b.md") == b"- b.md (2 bytes, 2026-01-04)"
    assert index_line(text, "a.md") == b"- a.md (27 bytes, 2025-12-31): first"


def test_stale_own_head_is_marked_everywhere(fh: FakeHome) -> None:
    own, work, pi = fh.memory(".claude"), fh.memory(".claude-work"), fh.pi()
    for name in ("handoff_20260101.md", "recent.md", "indexed.md"):
        write(own / name, f"own {name}\n", at(10))
        write(work / name, f"work {name}\n", at(20))
        write(pi / name, f"pi {name}\n", at(30))  # the newest: its path is the one named
    write(own / "fresh.md", "own and newest\n", at(40))
    write(work / "fresh.md", "older elsewhere\n", at(5))
    write(own / "newer.md", "n\n", at(50))
    project = load_project(settings_of(fh, newest=3))
    text = project.preamble(MOUNT_AT, NOW)
    stale = {
        name: f"{HISTORY}/{name}/pi@{history_stamp(at(30))}.md"
        for name in ("handoff_20260101.md", "recent.md", "indexed.md")
    }
    for path in stale.values():  # the path named is the one the view shows
        leaf = project.tree.leaf(path)
        assert leaf is not None
        assert leaf.kind is Kind.HISTORY
        assert leaf.version is not None
        assert project.source_name(leaf.version) == "pi"
    assert (
        f"## Handoff: handoff_20260101.md (from claude, 2026-01-01 00:00 UTC; "
        f"own copy older than {stale['handoff_20260101.md']})\n".encode()
    ) in text
    assert sections(text)[1:3] == [
        b"Recent: newer.md",
        b"Recent: fresh.md",
    ] or b"Recent: recent.md" in b"\n".join(sections(text))
    assert index_line(text, "indexed.md").endswith(
        f"; own copy older than {stale['indexed.md']})".encode()
    )
    assert b"fresh.md (own copy" not in text  # the own version is the newest: no mark
    assert project.documents.stale_own_heads() == sorted(stale.items())


def test_stale_mark_on_a_recent_heading(fh: FakeHome) -> None:
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "notes.md", "own notes\n", at(10))
    write(work / "notes.md", "newer notes\n", at(20))
    project = load_project(fh.config())
    text = project.preamble(MOUNT_AT, NOW)
    where = f"{HISTORY}/notes.md/work@{history_stamp(at(20))}.md"
    assert f"## Recent: notes.md (own copy older than {where})\n\nown notes\n".encode() in text
    # Without a mount the real file is named: a .history/ path exists only in the view.
    real = project.preamble(None, NOW)
    assert f"(own copy older than {work / 'notes.md'})".encode() in real


def test_no_stale_mark_without_a_newer_version_elsewhere(fh: FakeHome) -> None:
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "same-time.md", "own\n", at(10))
    write(work / "same-time.md", "work\n", at(10))  # not newer: as new
    write(work / "only-work.md", "work\n", at(20))  # not an own head
    write(fh.pi() / "only-work.md", "pi\n", at(30))
    project = load_project(fh.config())
    assert b"own copy older" not in project.preamble(MOUNT_AT, NOW)
    assert project.documents.stale_own_heads() == []


def test_a_whited_out_newer_version_is_no_mark(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "notes.md", "own\n", at(10))
    write(fh.memory(".claude-work") / "notes.md", "dismissed\n", at(20))
    project = load_project(fh.config())
    assert len(project.documents.stale_own_heads()) == 1
    project.whiteout("notes.md")
    project._check()
    assert project.documents.stale_own_heads() == []
    assert b"own copy older" not in project.preamble(MOUNT_AT, NOW)


def test_a_future_newer_version_marks_once_it_is_due(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "notes.md", "own\n", at(10))
    write(fh.memory(".claude-work") / "notes.md", "from the future\n", at(2000))
    project = load_project(fh.config())
    assert b"own copy older" not in project.preamble(MOUNT_AT, NOW)
    assert project.documents.preamble_valid_until() == at(2000)
    assert b"own copy older than .history/notes.md/work@" in project.preamble(MOUNT_AT, at(2000))
    # Status counts versions of any date.
    assert [p for p, _ in project.documents.stale_own_heads()] == ["notes.md"]


def test_stale_own_heads_follow_changes(fh: FakeHome) -> None:
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(own / "a.md", "own\n", at(10))
    project = load_project(fh.config())
    assert project.documents.stale_own_heads() == []
    write(work / "a.md", "newer\n", at(20))
    offline.rescan(project, 1)
    project._check()
    assert project.documents.stale_own_heads() == [
        ("a.md", f"{HISTORY}/a.md/work@{history_stamp(at(20))}.md")
    ]
    write(own / "a.md", "own, newest again\n", at(30))
    offline.rescan(project, 0)
    assert project.documents.stale_own_heads() == []


def test_memory_over_claude_codes_limit(fh: FakeHome) -> None:
    # The case: a merged MEMORY.md of 210 linked lines, 150 own and 60 from work.
    lines = [f"- [Topic {i}](topic-{i}.md) about {i}\n" for i in range(210)]
    write(fh.memory(".claude") / "MEMORY.md", "".join(lines[:150]), at(1))
    write(fh.memory(".claude-work") / "MEMORY.md", "".join(lines[140:]), at(2))
    project = load_project(fh.config())
    merged = project.memory_index()
    assert merged == "".join(lines).encode()
    assert project.documents.memory_over_limit() == MemoryOverLimit(210, len(merged), 10, "lines")
    text = project.preamble(MOUNT_AT, NOW)
    assert (
        b"## Index: MEMORY.md\n\n[MEMORY.md is longer than Claude Code loads (its first 200 "
        b"lines or 25,000 bytes): 210 lines, %s bytes; 10 topics lie beyond Claude Code's first "
        b"200 lines, so it never sees their links]\n\n- [Topic 0]" % f"{len(merged):,}".encode()
    ) in text


def test_memory_within_claude_codes_limit(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "MEMORY.md", "- [a](a.md)\n" * 200, at(1))
    project = load_project(fh.config())
    assert project.documents.memory_over_limit() is None
    assert b"longer than Claude Code loads" not in project.preamble(MOUNT_AT, NOW)
    assert load_project(fh.config(), "-no-such-project").documents.memory_over_limit() is None


def test_an_empty_own_memory_md_gets_no_section(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "MEMORY.md", b"", at(3))
    write(fh.memory(".claude") / "notes.md", "notes\n", at(2))
    text = load_project(fh.config()).preamble(MOUNT_AT, NOW)
    assert sections(text) == [b"Recent: notes.md"]


def test_files_that_are_not_text_are_indexed_not_inlined(fh: FakeHome) -> None:
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    write(work / "sparse.md", b"\x00" * 2346, at(50))  # a sync tool's sparse file
    write(own / "latin1.md", b"caf\xe9\n", at(40))
    write(own / "text.md", "text\n", at(30))
    write(own / "older.md", "older\n", at(20))
    project = load_project(settings_of(fh, newest=2))
    text = project.preamble(MOUNT_AT, NOW)
    text.decode()
    assert b"\x00" not in text
    # The newest section takes the next text files instead.
    assert sections(text) == [b"Recent: text.md", b"Recent: older.md", b"Other files"]
    assert (
        index_line(text, "sparse.md")
        == b"- sparse.md (2346 bytes, 2026-01-01; not text, not inlined)"
    )
    assert (
        index_line(text, "latin1.md") == b"- latin1.md (5 bytes, 2026-01-01; not text, not inlined)"
    )


def test_only_markdown_and_text_outside_dot_folders_feed_the_preamble(fh: FakeHome) -> None:
    # The newest files are no memory: a picture, a file with no extension, hidden files,
    # a file in a dot folder, Claude Code's temp in flight. They take no Recent section
    # and no index line; the topics, older, take them (issue 38).
    own, work = fh.memory(".claude"), fh.memory(".claude-work")
    for n, name in enumerate(
        ["diagram.png", "TODO", ".notes.md", ".cache/notes.md", "notes.md.tmp.1.abcdefabcdef"]
    ):
        write(own / name, "not memory\n", at(100 + n))
    write(work / "state.json", '{"runs": []}\n', at(99))
    write(own / "handoff-a_20260101.md", "the plan\n", at(1))
    write(own / "deploys.txt", "# deploy\nuse the blue button\n", at(30))
    write(own / "design.MD", "---\ndescription: the design\n---\n", at(20))
    write(work / "older.md", "older\n", at(10))
    project = load_project(settings_of(fh, newest=2))
    text = project.preamble(MOUNT_AT, NOW)
    assert sections(text) == [
        b"Handoff: handoff-a_20260101.md (from claude, 2026-01-01 00:00 UTC)",
        b"Recent: deploys.txt",
        b"Recent: design.MD",
        b"Other files",
    ]
    assert index_line(text, "older.md") == b"- older.md (6 bytes, 2026-01-01)"
    assert b"not memory" not in text
    for name in ("diagram.png", "TODO", "notes.md", "state.json", ".tmp."):
        assert f"- {name}".encode() not in text
        assert f"{name} (".encode() not in text
    assert not text.endswith(b"more\n")  # nor counted as more files
    # The view shows them all the same.
    shown = set(project.heads)
    assert {"diagram.png", "TODO", ".notes.md", ".cache/notes.md", "state.json"} <= shown


def test_a_latest_handoff_that_is_not_text_supersedes_still(fh: FakeHome) -> None:
    own = fh.memory(".claude")
    write(own / "handoff_20260102.md", b"\x00\x01", at(10))
    write(own / "handoff_20260101.md", "yesterday's plan\n", at(20))
    text = load_project(fh.config()).preamble(MOUNT_AT, NOW)
    # No older handoff is inlined in its place: it would be read as current.
    assert b"yesterday's plan" not in text
    assert b"## Handoff" not in text
    assert index_line(text, "handoff_20260102.md").endswith(b"; not text, not inlined)")
    assert index_line(text, "handoff_20260101.md").endswith(b"; superseded handoff)")


def test_superseded_handoffs_do_not_starve_the_newest_files(fh: FakeHome) -> None:
    # Orchestrators leave one dated handoff per run: dozens, all newer than any topic.
    own = fh.memory(".claude")
    write(own / "topic.md", "the topic\n", at(1))
    for day in range(1, 29):
        write(own / f"handoff_202602{day:02}.md", f"run {day}\n", at(100 + day))
    project = load_project(settings_of(fh, newest=1, index_max=5))
    text = project.preamble(MOUNT_AT, NOW)
    assert sections(text) == [
        b"Handoff: handoff_20260228.md (from claude, 2026-01-01 00:02 UTC)",
        b"Recent: topic.md",
        b"Other files",
    ]
    assert text.count(b"; superseded handoff)") == 5
    assert text.endswith(b"\xe2\x80\xa6 +22 more\n")


def test_identical_sources_give_identical_bytes(fh: FakeHome, tmp_path: Path) -> None:
    own, work, pi = fh.memory(".claude"), fh.memory(".claude-work"), fh.pi()
    write(own / "MEMORY.md", "".join(f"- [t{i}](t{i}.md)\n" for i in range(150)), at(1))
    write(work / "MEMORY.md", "".join(f"- [u{i}](u{i}.md)\n" for i in range(100)), at(2))
    write(work / "handoff-x_20260101.md", "plan\n", at(3))
    write(own / "handoff.md", "undated\n", at(4))
    write(own / "notes.md", "own\n", at(5))
    write(pi / "notes.md", "pi\n", at(6))
    write(pi / "bin.md", b"\x00", at(7))
    text = load_project(fh.config()).preamble(MOUNT_AT, NOW)
    assert load_project(fh.config()).preamble(MOUNT_AT, NOW) == text
    # A copy of the same folders elsewhere, same mtimes: the same bytes.
    copy = fake_home(tmp_path / "copy")
    for src, dst in (
        (own, copy.memory(".claude")),
        (work, copy.memory(".claude-work")),
        (pi, copy.pi()),
    ):
        for f in src.iterdir():
            write(dst / f.name, f.read_bytes(), f.stat().st_mtime_ns)
    assert load_project(copy.config()).preamble(MOUNT_AT, NOW) == text
    for part in (b"superseded handoff", b"own copy older than", b"not text", b"topics lie beyond"):
        assert part in text


def test_preamble_stays_cached_per_change(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "notes.md", "own\n", at(10))
    fh.memory(".claude-work")  # its folder, empty: origin 1
    project = load_project(fh.config())
    text = project.preamble(MOUNT_AT, NOW)
    assert project.preamble(MOUNT_AT, NOW + 1) is text
    write(fh.memory(".claude-work") / "notes.md", "newer\n", at(20))
    offline.rescan(project, 1)
    assert b"own copy older than" in project.preamble(MOUNT_AT, NOW + 2)


NAMES = (
    "a.md",
    "b.md",
    "sub/c.md",
    "handoff.md",
    "handoff-x_20260101.md",
    "handoff-y_20260102.md",
    "sub/handoff_20251231.md",
    "MEMORY.md",
)
ACCOUNTS = (".claude", ".claude-work", None)  # None: pi
project_bodies = st.one_of(
    st.text(st.sampled_from("ab \n\u00e9\U0001f4dd"), max_size=300).map(str.encode),
    st.binary(max_size=60),
    st.integers(0, 260).map(linked),
)


@given(
    files=st.dictionaries(
        st.tuples(st.sampled_from(ACCOUNTS), st.sampled_from(NAMES)),
        st.tuples(project_bodies, st.integers(0, 2000)),
        max_size=14,
    ),
    budget=st.integers(0, 9000),
    now=st.integers(0, 2000),
)
@settings(deadline=None, max_examples=60, database=None)
def test_project_preamble_properties(
    tmp_path_factory: pytest.TempPathFactory,
    files: dict[tuple[str | None, str], tuple[bytes, int]],
    budget: int,
    now: int,
) -> None:
    fh = fake_home(tmp_path_factory.mktemp("props"))
    for (account, name), (data, seconds) in files.items():
        folder = fh.pi() if account is None else fh.memory(account)
        write(folder / name, data, at(seconds))
    config = settings_of(fh, budget=budget, newest=2, file_cap=3000, index_max=5)
    project = load_project(config)
    text = project.preamble(MOUNT_AT, at(now))
    assert len(text) <= budget
    text.decode()
    assert b"\x00" not in text
    # Identical sources, identical bytes.
    assert load_project(config).preamble(MOUNT_AT, at(now)) == text
    # One handoff at most is inlined, and it is the latest; no other is.
    headings = sections(text)
    assert not [h for h in headings if h.startswith(b"Recent: ") and b"handoff" in h]
    handoffs = [h for h in headings if h.startswith(b"Handoff: ")]
    present = [
        (preamble_mod.handoff_rank(v.path.rsplit("/", 1)[-1], v.mtime_ns), v.path)
        for v in project._handoffs
        if v.mtime_ns <= at(now)
    ]
    if handoffs:
        assert handoffs[0].startswith(f"Handoff: {max(present)[1]} (from ".encode())
    # Every own head with a newer version elsewhere, as status sees it, is a real view path.
    for view_path, newer in project.documents.stale_own_heads():
        leaf = project.tree.leaf(newer)
        assert leaf is not None
        assert leaf.kind is Kind.HISTORY
        assert project.head(view_path) is not None


def test_empty_preamble_for_a_project_with_no_memory(fh: FakeHome) -> None:
    config = fh.config()
    slug = "-home-a-brand-new"
    text = empty_preamble(config, slug, f"/mnt/memfs/{slug}")
    own = fh.account(".claude") / "projects" / slug / "memory"
    assert not own.exists()  # rendering it creates nothing
    assert text == render_empty(slug, f"/mnt/memfs/{slug}", str(own), budget=8192)
    assert f"lands in {own} (created on the first write)".encode() in text
    assert b"No memory for this project yet" in text
    # Without a mount the own folder is named as where the files are.
    assert f"Files: {own}\n".encode() in empty_preamble(config, slug, None)
    # No own source: the mount is read-only, and the frame says so.
    read_only = dataclasses.replace(
        config, sources=tuple(dataclasses.replace(s, own=False) for s in config.sources)
    )
    assert read_only.own is None
    text = empty_preamble(read_only, slug, f"/mnt/memfs/{slug}")
    assert b"read-only (no own source)" in text
    assert b"lands in" not in text
    # The budget holds here too.
    small = dataclasses.replace(config, preamble=PreambleSettings(budget=40))
    assert len(empty_preamble(small, slug, f"/mnt/memfs/{slug}")) <= 40


def test_a_cut_frame_is_all_there_is() -> None:
    # A section after a cut frame would lack "not a live conversation": none is shown.
    frame = render(preamble_input(), budget=8192, file_cap=4096)
    for budget in range(len(frame)):
        out = render(full_input(), budget=budget, file_cap=4096)
        assert out == cut_utf8(frame, budget)
        assert b"##" not in out


# --- PREAMBLE-<N>.md: the same rendering under a budget of N (§6) ----------------------


@pytest.mark.parametrize(
    ("name", "budget"),
    [
        ("PREAMBLE-256.md", 256),
        ("PREAMBLE-1200.md", 1200),
        ("PREAMBLE-8192.md", 8192),
        ("PREAMBLE-1048576.md", 1 << 20),
        ("PREAMBLE-255.md", None),  # below the least budget
        ("PREAMBLE-1048577.md", None),  # above the greatest
        ("PREAMBLE-0256.md", None),  # a leading zero: one spelling per N
        ("PREAMBLE-00000000000000000000000000256.md", None),
        ("PREAMBLE-+300.md", None),
        ("PREAMBLE--300.md", None),
        ("PREAMBLE-abc.md", None),
        ("PREAMBLE-.md", None),
        ("PREAMBLE-1200.MD", None),
        ("preamble-1200.md", None),
        ("PREAMBLE-1200.md.tmp", None),
        (" PREAMBLE-1200.md", None),
        ("PREAMBLE-1 200.md", None),
        ("PREAMBLE-\uff11\uff12\uff10\uff10.md", None),  # fullwidth digits, which int() reads
        ("PREAMBLE-\u0661\u0662\u0660\u0660.md", None),  # Arabic-Indic digits, likewise
        ("sub/PREAMBLE-1200.md", None),  # only at a project's top
        ("PREAMBLE.md", None),
        ("PREAMBLE-12" + "0" * 300 + ".md", None),
    ],
)
def test_sized_budget_reads_n_from_a_name(name: str, budget: int | None) -> None:
    assert preamble_mod.sized_budget(name) == budget


def rich_project(fh: FakeHome) -> Config:
    """A project with every section, its bodies full of multibyte characters, so that every
    budget from the least to the greatest cuts somewhere, or nowhere once it all fits."""
    own, work, pi = fh.memory(".claude"), fh.memory(".claude-work"), fh.pi()
    wide = "é\U0001f4dd ab\n"
    write(own / "MEMORY.md", "".join(f"- [Topic {i} é](t{i}.md)\n" for i in range(300)), at(1))
    write(work / "MEMORY.md", "".join(f"- [Work {i}](w{i}.md)\n" for i in range(40)), at(2))
    write(work / "handoff-a_20260101.md", "plan ✓ " * 900, at(3))
    write(own / "handoff-b_20251230.md", "stale\n", at(4))
    for i in range(8):
        body = f"---\ndescription: topic {i} 📝\n---\n" + wide * (200 * i + 1)
        write((own, work, pi)[i % 3] / f"t{i}.md", body, at(10 + i))
    write(own / "notes.md", "own\n", at(30))
    write(work / "notes.md", "newer elsewhere\n", at(40))  # a stale mark
    write(pi / "bin.md", b"\x00\xff", at(50))
    return fh.config()


def test_preamble_n_is_the_preamble_under_a_budget_of_n(fh: FakeHome) -> None:
    config = rich_project(fh)
    project = load_project(config)
    whole = project.preamble(MOUNT_AT, NOW, budget=preamble_mod.SIZED_MAX)
    assert len(whole) > 16_000  # so the budgets below cut a lot, a little, or nothing
    # Six sections (handoff, MEMORY.md, three newest, the index) of file_cap each, and
    # the frame: past that, a budget cuts nothing.
    room_for_all = 6 * config.preamble.file_cap + 1000
    assert project.preamble(MOUNT_AT, NOW) == project.preamble(MOUNT_AT, NOW, budget=8192)

    @given(
        st.one_of(
            st.integers(preamble_mod.SIZED_MIN, len(whole) + 10),
            st.integers(preamble_mod.SIZED_MIN, preamble_mod.SIZED_MAX),
            st.sampled_from([256, 257, 1200, len(whole) - 1, len(whole), 1 << 20]),
            st.integers(room_for_all, room_for_all + 100),
        )
    )
    @settings(deadline=None, max_examples=150, database=None)
    def check(n: int) -> None:
        out = project.preamble(MOUNT_AT, NOW, budget=n)
        assert len(out) <= n
        out.decode("utf-8")  # cut only between characters: valid UTF-8 throughout
        assert b"\x00" not in out
        if n >= room_for_all:
            assert out == whole  # nothing is cut but by file_cap
        elif n < len(whole):
            assert out != whole
        # Exactly what the same sources render with `budget = n` configured (so what
        # `memfs preamble --budget n` prints): nothing else differs.
        assert out == render_with(config, n)
        for marker in MARKER_RE.finditer(out):
            assert marker[2].startswith(MOUNT_AT.encode())  # the mount's, never a real path

    rendered: dict[int, bytes] = {}

    def render_with(config: Config, n: int) -> bytes:
        if n not in rendered:
            budget = dataclasses.replace(config.preamble, budget=n)
            rendered[n] = load_project(dataclasses.replace(config, preamble=budget)).preamble(
                MOUNT_AT, NOW
            )
        return rendered[n]

    check()
    project._check()  # the renderings kept per budget stay few


def test_preamble_n_of_a_project_with_no_memory(fh: FakeHome) -> None:
    config = fh.config()
    slug = "-home-a-brand-new"

    @given(st.integers(preamble_mod.SIZED_MIN, 2000))
    @settings(deadline=None, max_examples=80, database=None)
    def check(n: int) -> None:
        out = empty_preamble(config, slug, f"/mnt/memfs/{slug}", n)
        assert len(out) <= n
        out.decode("utf-8")
        own = str(fh.account(".claude") / "projects" / slug / "memory")
        assert out == render_empty(slug, f"/mnt/memfs/{slug}", own, budget=n)

    check()


def test_preamble_n_renderings_are_cached_per_change(fh: FakeHome) -> None:
    write(fh.memory(".claude") / "notes.md", "own\n" * 500, at(10))
    fh.memory(".claude-work")  # its folder, empty: origin 1
    project = load_project(fh.config())
    small = project.preamble(MOUNT_AT, NOW, budget=600)
    assert project.preamble(MOUNT_AT, NOW + 1, budget=600) is small
    assert project.preamble(MOUNT_AT, NOW + 1, budget=700) != small
    assert b"[\xe2\x80\xa6 " in small  # cut, with its marker
    write(fh.memory(".claude-work") / "notes.md", "newer\n", at(20))
    offline.rescan(project, 1)
    assert b"own copy older than" in project.preamble(MOUNT_AT, NOW + 2, budget=600)
    for n in range(300, 300 + 3 * project_documents.SIZED_KEPT):
        project.preamble(MOUNT_AT, NOW, budget=n)
    project._check()
