"""PREAMBLE.md under a hard byte budget (§6).

The pure renderer of the synthetic preamble, plus the small rules it rests on:
which file is the latest handoff, what a drift header is, where a file's
frontmatter `description` lies, what is text (and so may be inlined), how much
of a MEMORY.md Claude Code loads. `render_empty` gives the preamble of a project
no source holds memory for yet. How the byte budget is shared among the sections
and where a body is cut is budget.py's: this module says what each section holds.

This module imports neither pyfuse3 nor trio and does no I/O: `project.py`
reads the files, picks the inputs and calls `render`. Everything here is a
plain function of its arguments, safe from any thread, and deterministic: the
same input gives byte-identical output.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from memfs.rules import index
from memfs.rules.budget import SHORT, WHOLE, cut_utf8, plan

__all__ = [
    "CLAUDE_MEMORY_BYTES",
    "CLAUDE_MEMORY_LINES",
    "SIZED_MAX",
    "SIZED_MIN",
    "Doc",
    "IndexEntry",
    "MemoryOverLimit",
    "PreambleInput",
    "description",
    "handoff_date",
    "handoff_rank",
    "is_handoff",
    "is_text",
    "memory_over_limit",
    "render",
    "render_empty",
    "sized_budget",
    "strip_drift_header",
    "utc_date",
    "utc_minute",
]


@dataclass(frozen=True)
class Doc:
    """A file whose body is inlined in the preamble.

    Attributes:
        path: where to read the full text; shown in cut markers.
        title: the relative name shown in the section heading.
        body: the full body, as stored. One that is not text (`is_text`) is never
            inlined: `render` lists it in the index instead.
        source: the source it comes from; the handoff's heading names it.
        mtime_ns: its mtime; the handoff's heading and an index line show it.
        newer: set when this is the own source's version and another source holds a
            newer one: where to read that one (its ``.history/`` path in the view).
        conflicts: how many unresolved conflict copies a sync tool left of it (§5.1);
            they are versions under ``.history/<title>/``.
    """

    path: str
    title: str
    body: bytes
    source: str | None = None
    mtime_ns: int | None = None
    newer: str | None = None
    conflicts: int = 0


@dataclass(frozen=True)
class IndexEntry:
    """One line of the index of the remaining files.

    Attributes:
        name: the relative name.
        size: its size in bytes.
        description: the frontmatter ``description``, if any.
        mtime_ns: its mtime, shown as a UTC date; None shows none.
        superseded: a handoff that is not the latest (§6.2).
        newer: as `Doc.newer`.
        not_text: known not to be text, so not inlined though it might have been.
        conflicts: as `Doc.conflicts`.
    """

    name: str
    size: int
    description: str | None
    mtime_ns: int | None = None
    superseded: bool = False
    newer: str | None = None
    not_text: bool = False
    conflicts: int = 0


@dataclass(frozen=True)
class PreambleInput:
    """Everything `render` needs, already selected and ordered by the caller.

    Attributes:
        project: project path or slug, named in the frame.
        files_at: where the project's files are (its folder in the mount).
        handoff: the latest handoff, or None.
        index: the merged MEMORY.md, or None.
        newest: the newest other files, newest first.
        rest: the remaining files to index, in the caller's order.
        more: how many further files exist beyond `rest`.
        heading: what the frame's heading calls it: a project's memory, or (in global/)
            a tool's user-level memory.
        moved_from: the paths the project was moved from, whose memory it shows (§4.2).
        lead: files a tool puts before everything else (Codex's memory_summary.md, which
            it injects into every prompt), shown first, before the handoff.
    """

    project: str
    files_at: str
    handoff: Doc | None
    index: Doc | None
    newest: Sequence[Doc]
    rest: Sequence[IndexEntry]
    more: int
    heading: str = "Project memory"
    moved_from: Sequence[str] = ()
    lead: Sequence[Doc] = ()


# --- PREAMBLE-<N>.md (§6) ------------------------------------------------------

# The budgets a name `PREAMBLE-<N>.md` may ask for: below 256 bytes not even the frame
# fits (a cut frame tells an agent nothing), above 1 MiB no file a source holds is kept.
SIZED_MIN = 256
SIZED_MAX = 1 << 20
# N in decimal, spelled one way only (no sign, no leading zero): one rendering has one
# name, so no two names share a page cache for the same bytes. [0-9], not \d: \d takes
# other scripts' digits, which int() would read.
_SIZED_RE = re.compile(r"PREAMBLE-([1-9][0-9]*)\.md")


def sized_budget(name: str) -> int | None:
    """N of a name ``PREAMBLE-<N>.md`` memfs serves (SIZED_MIN <= N <= SIZED_MAX), else
    None: any other name, a path with a folder, N out of range or spelled otherwise."""
    if not name.startswith("PREAMBLE-"):
        return None  # most names: asked of every path a project's view takes in
    found = _SIZED_RE.fullmatch(name)
    if found is None or len(found[1]) > len(str(SIZED_MAX)):
        return None
    n = int(found[1])
    return n if SIZED_MIN <= n <= SIZED_MAX else None


# --- handoffs (§6.2) ---------------------------------------------------

HANDOFF_GLOB = "handoff*.md"

# Exactly eight digits, not part of a longer run: "20261101120000" is a
# timestamp whose windows would read as several bogus dates, so it counts as
# undated rather than as whichever window happens to parse.
_DATE_RE = re.compile(r"(?<![0-9])([0-9]{8})(?![0-9])")


def is_handoff(name: str) -> bool:
    """Whether the basename of `name` matches ``handoff*.md`` (case-sensitive).

    The glob, spelled out: asked per file of every rendering, where fnmatch costs more
    than the rest of the check ("handoff" and ".md" cannot overlap, so no length test)."""
    base = name.rsplit("/", 1)[-1]
    return base.startswith("handoff") and base.endswith(".md")


def handoff_date(name: str) -> int | None:
    """The last valid ``YYYYMMDD`` in the basename of `name`, as an int.

    A candidate is a run of exactly eight digits; it is valid when it names a
    real calendar date (``20261131`` and ``20261399`` are not). Returns None
    when the name holds no valid date.
    """
    for match in reversed(_DATE_RE.findall(name.rsplit("/", 1)[-1])):
        if _is_real_date(match):
            return int(match)
    return None


def _is_real_date(digits: str) -> bool:
    try:
        datetime.date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
    except ValueError:
        return False
    return True


def handoff_rank(name: str, mtime_ns: int) -> tuple[int, int, int]:
    """Sort key for handoffs: ascending is older, so ``max`` is the latest.

    The date in the name beats mtime, because an rsync or a touch can make a
    stale handoff the newest by mtime; mtime only breaks a same-date tie, and
    an undated file ranks below every dated one. Callers wanting a total order
    append the name as a last key.
    """
    date = handoff_date(name)
    if date is None:
        return (0, 0, mtime_ns)
    return (1, date, mtime_ns)


# --- bodies ------------------------------------------------------------------

# Markers an importer puts in the comment it prepends (pi's armory-memory
# writes "<!-- pi copy ...", §6). Matched case-insensitively, right after
# "<!--" and optional blanks.
DRIFT_MARKERS = (b"pi copy", b"pi import", b"memfs", b"imported", b"copied", b"copy of")

_BOM = b"\xef\xbb\xbf"
_DRIFT_RE = re.compile(
    rb"(?:"
    + re.escape(_BOM)
    + rb")?<!--[ \t]*(?:"
    + b"|".join(re.escape(m) for m in DRIFT_MARKERS)
    + rb")",
    re.IGNORECASE,
)
# The longest drift header, in lines: a comment still open after these is not one.
DRIFT_MAX_LINES = 5


def strip_drift_header(body: bytes) -> bytes:
    """Drop an import's drift header from the start of `body`.

    The rule: when the body begins (after an optional UTF-8 BOM) with ``<!--``,
    optional spaces or tabs, and one of `DRIFT_MARKERS` (case-insensitive),
    the header is that first line, newline included; when the comment does
    not close on it, the header runs on to the end of the line that closes it
    (``-->``), provided that is within the first `DRIFT_MAX_LINES` lines.
    One blank line right after the header goes too, since importers set it
    off with one. Any other body is returned unchanged.
    """
    if _DRIFT_RE.match(body) is None:
        return body
    end = _drift_end(body)
    if end == -1:
        return b""
    rest = body[end + 1 :]
    for blank in (b"\n", b"\r\n"):
        if rest.startswith(blank):
            return rest[len(blank) :]
    return rest


def _drift_end(body: bytes) -> int:
    """Index of the newline ending the drift header, or -1 if it is all."""
    first_eol = body.find(b"\n")
    close = body.find(b"-->")
    if close == -1 or first_eol == -1 or close < first_eol:
        return first_eol
    # A comment left open must not swallow the file: only a close within the
    # first few lines makes a multi-line header.
    eol = first_eol
    for _ in range(DRIFT_MAX_LINES - 1):
        next_eol = body.find(b"\n", eol + 1)
        if close < next_eol or next_eol == -1:
            return next_eol
        eol = next_eol
    return first_eol


_FENCE = b"---"
_FENCE_END = (b"---", b"...")
_BLOCK_SCALAR_RE = re.compile(r"[|>][+-]?[0-9]?[+-]?")


def description(head: bytes) -> str | None:
    """The frontmatter ``description:`` of a file, from its first bytes.

    Frontmatter is a first line ``---`` and the lines up to the next ``---``
    (or ``...``); when `head` ends before the closing fence, the lines present
    are read. The value is the top-level ``description:`` key: quotes around
    it are removed, a block scalar (``>`` or ``|``) joins its indented lines,
    and every run of whitespace becomes one space, so the result is one line.
    None when there is no frontmatter, no such key, or the value is empty.
    """
    lines = head.removeprefix(_BOM).splitlines()
    if not lines or lines[0].rstrip() != _FENCE:
        return None
    body = []
    for raw in lines[1:]:
        if raw.rstrip() in _FENCE_END:
            break
        body.append(raw.decode("utf-8", "replace"))
    for i, line in enumerate(body):
        key, sep, value = line.partition(":")
        if sep and key.rstrip() == "description":
            return _one_line(_yaml_value(value.strip(), body[i + 1 :]))
    return None


def _yaml_value(value: str, following: list[str]) -> str:
    if value == "" or _BLOCK_SCALAR_RE.fullmatch(value):
        # Block scalar or a plain value continued on indented lines.
        block = []
        for line in following:
            if line and not line[0].isspace():
                break
            block.append(line)
        return " ".join(block)
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    # A plain scalar ends at " #", YAML's comment.
    return value.split(" #", 1)[0]


def _one_line(text: str) -> str | None:
    text = " ".join(text.split())
    return text or None


def is_text(body: bytes) -> bool:
    """Whether `body` may be inlined: valid UTF-8 holding no NUL byte.

    A NUL byte marks a binary or a sparse file a sync tool is still filling. Invalid
    UTF-8 counts as not text too (rather than being inlined with replacement
    characters): every tool memfs serves writes its memory as UTF-8, so such a file is
    a binary, a partial transfer or another encoding that the agent must open itself;
    and so the preamble is always valid UTF-8, which a strict reader
    (``Path.read_text()``) needs, and its cut markers count the file's own bytes.
    """
    if b"\x00" in body:
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# What Claude Code loads of MEMORY.md at session start (constants in its own binary);
# the rest, the newest entries when it appends, it silently drops (its issue #92998).
CLAUDE_MEMORY_LINES = 200
CLAUDE_MEMORY_BYTES = 25_000


@dataclass(frozen=True)
class MemoryOverLimit:
    """A MEMORY.md longer than Claude Code loads.

    Attributes:
        lines: its lines.
        size: its bytes.
        topics_beyond: its linked lines (``[title](target)``) past what Claude Code loads.
        cut_by: the limit Claude Code hits first: ``"lines"`` or ``"bytes"``.
    """

    lines: int
    size: int
    topics_beyond: int
    cut_by: str


def memory_over_limit(body: bytes) -> MemoryOverLimit | None:
    """How `body`, a MEMORY.md, passes Claude Code's limits; None when it loads whole.

    Claude Code keeps the first `CLAUDE_MEMORY_LINES` lines and of those the ones that
    end within the first `CLAUDE_MEMORY_BYTES` bytes (a line cut by the byte limit is
    lost whole, as a cut at the last line end before it leaves it out). Lines are split
    on ``\\n`` only, like `index`. O(len(body)).
    """
    lines = body.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    loaded = 0
    end = 0  # bytes up to the end of the line being looked at, newlines included
    for line in lines[:CLAUDE_MEMORY_LINES]:
        end += len(line)
        if end > CLAUDE_MEMORY_BYTES:
            break
        loaded += 1
        end += 1
    if loaded == len(lines):
        return None
    cut_by = "lines" if loaded == CLAUDE_MEMORY_LINES else "bytes"
    beyond = sum(1 for line in lines[loaded:] if index.link_target(line.decode("utf-8", "replace")))
    return MemoryOverLimit(len(lines), len(body), beyond, cut_by)


# --- rendering -----------------------------------------------------------------

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _text(s: str) -> bytes:
    # Names go on one line each; a newline in a file name must not start a
    # fake section, and a lone surrogate (an undecodable name) must not raise.
    return _CONTROL_RE.sub("?", s).encode("utf-8", "replace")


def _marker(omitted: int, path: str) -> bytes:
    return b"[\xe2\x80\xa6 %d more bytes: %s]\n" % (omitted, _text(path))


def _left_out(title: str, size: int, path: str) -> bytes:
    return b"\n[left out: %s, %d bytes: %s]\n" % (_text(title), size, _text(path))


@dataclass(frozen=True)
class _Piece:
    """One content section: a heading, a body to cut, where to read it all."""

    heading: bytes
    body: bytes
    path: str
    title: str

    def full(self) -> bytes:
        return self.heading + self.body + _line_end(self.body)

    def need(self) -> int:
        # Asked once per planning round: measured, not built.
        return len(self.heading) + len(self.body) + len(_line_end(self.body))

    def smallest_cut(self) -> int:
        # Heading, a newline ending a partial line, and the widest marker: the
        # count of left-out bytes is at most the whole body.
        return len(self.heading) + 1 + len(_marker(len(self.body), self.path))

    def short(self) -> bytes:
        return _left_out(self.title, len(self.body), self.path)

    def fit(self, share: int) -> bytes:
        """This piece in at most `share` bytes: whole, or cut with its marker."""
        if self.need() <= share:
            return self.full()
        room = share - self.smallest_cut()
        prefix = cut_utf8(self.body, max(room, 0))
        if self.body[len(prefix) : len(prefix) + 1] == b"\n":
            # Cut just before a line end: the newline reserved for ending a
            # partial line is the body's own, so it is shown, not counted out.
            prefix = self.body[: len(prefix) + 1]
        omitted = len(self.body) - len(prefix)
        return self.heading + prefix + _line_end(prefix) + _marker(omitted, self.path)


def _line_end(text: bytes) -> bytes:
    """The newline that `text` lacks to end on a line end (none if empty)."""
    return b"" if text.endswith(b"\n") or not text else b"\n"


def _utc(mtime_ns: int, fmt: str) -> str:
    try:
        return time.strftime(fmt, time.gmtime(mtime_ns // 1_000_000_000))
    except (OverflowError, OSError, ValueError):  # no calendar time: say so, never raise
        return "unknown time"


def utc_minute(mtime_ns: int) -> str:
    """``YYYY-MM-DD HH:MM UTC``: the handoff heading's time."""
    return _utc(mtime_ns, "%Y-%m-%d %H:%M UTC")


def utc_date(mtime_ns: int) -> str:
    """``YYYY-MM-DD``, in UTC: an index line's date."""
    return _utc(mtime_ns, "%Y-%m-%d")


# The mark of an own head that another source has since outdone (§6): the own
# version wins the merge, so the agent must be told where the newer one is.
STALE = "own copy older than "
SUPERSEDED = "superseded handoff"
NOT_TEXT = "not text, not inlined"


def conflict_note(title: str, count: int) -> str:
    """The mark of a file a sync tool could not reconcile: its copies are versions."""
    copies = "1 unresolved conflict copy" if count == 1 else f"{count} unresolved conflict copies"
    return f"{copies} under .history/{title}/"


def _doc_piece(label: str, doc: Doc, notes: Sequence[str] = (), extra: bytes = b"") -> _Piece:
    notes = [*notes, *([STALE + doc.newer] if doc.newer is not None else [])]
    if doc.conflicts:
        notes.append(conflict_note(doc.title, doc.conflicts))
    about = b" (%s)" % _text("; ".join(notes)) if notes else b""
    heading = b"\n## %s: %s%s\n\n%s" % (label.encode(), _text(doc.title), about, extra)
    return _Piece(heading, strip_drift_header(doc.body), doc.path, doc.title)


def _handoff_piece(doc: Doc) -> _Piece:
    where = [f"from {doc.source}"] if doc.source is not None else []
    if doc.mtime_ns is not None:
        where.append(utc_minute(doc.mtime_ns))
    return _doc_piece("Handoff", doc, [", ".join(where)] if where else [])


def _has_lines(index: bytes) -> bool:
    """Whether an index (MEMORY.md) holds a line worth a section: one not blank, past an
    importer's drift header. An empty one (a 0-byte own MEMORY.md) gets no section, not
    an empty ``## Index`` heading; it is never an index line either (§6.5)."""
    return bool(strip_drift_header(index).strip())


def _memory_piece(doc: Doc) -> _Piece:
    over = memory_over_limit(doc.body)
    return _doc_piece("Index", doc, extra=_over_limit_note(over) if over else b"")


def _over_limit_note(over: MemoryOverLimit) -> bytes:
    """The MEMORY.md section's first line when Claude Code would not load it all."""
    first = (
        f"first {CLAUDE_MEMORY_LINES} lines"
        if over.cut_by == "lines"
        else f"first {CLAUDE_MEMORY_BYTES:,} bytes"
    )
    if over.topics_beyond == 0:
        topics = f"no topic lies beyond Claude Code's {first}"
    elif over.topics_beyond == 1:
        topics = f"1 topic lies beyond Claude Code's {first}, so it never sees its link"
    else:
        topics = (
            f"{over.topics_beyond} topics lie beyond Claude Code's {first}, "
            "so it never sees their links"
        )
    return (
        f"[MEMORY.md is longer than Claude Code loads (its first {CLAUDE_MEMORY_LINES} lines "
        f"or {CLAUDE_MEMORY_BYTES:,} bytes): {over.lines:,} lines, {over.size:,} bytes; "
        f"{topics}]\n\n"
    ).encode()


def _index_line(entry: IndexEntry) -> bytes:
    facts = [f"{entry.size} bytes"]
    if entry.mtime_ns is not None:
        facts.append(utc_date(entry.mtime_ns))
    notes = [", ".join(facts)]
    if entry.superseded:
        notes.append(SUPERSEDED)
    if entry.not_text:
        notes.append(NOT_TEXT)
    if entry.newer is not None:
        notes.append(STALE + entry.newer)
    if entry.conflicts:
        notes.append(conflict_note(entry.name, entry.conflicts))
    line = b"- %s (%s)" % (_text(entry.name), _text("; ".join(notes)))
    if entry.description:
        line += b": " + _text(entry.description)
    return line + b"\n"


def _index_piece(rest: Sequence[IndexEntry], more: int, files_at: str) -> _Piece | None:
    if not rest and more <= 0:
        return None
    lines = [_index_line(entry) for entry in rest]
    if more > 0:
        lines.append(b"\xe2\x80\xa6 +%d more\n" % more)
    return _Piece(b"\n## Other files\n\n", b"".join(lines), files_at, "index of other files")


def _not_text_entry(doc: Doc) -> IndexEntry:
    return IndexEntry(
        doc.title,
        len(doc.body),
        None,
        doc.mtime_ns,
        newer=doc.newer,
        not_text=True,
        conflicts=doc.conflicts,
    )


def _frame(inp: PreambleInput) -> bytes:
    # An agent in a moved folder must know the memory below was written at another path:
    # paths it names may be the old ones.
    moved = b"".join(
        b"The project was moved from %s: its memory there is shown here.\n" % _text(p)
        for p in inp.moved_from
    )
    return (
        b"# %s: %s\n\n"
        b"Background from earlier sessions, not a live conversation.\n"
        b"%s"
        b"Files: %s (read them there for anything cut or left out below)\n"
    ) % (_text(inp.heading), _text(inp.project), moved, _text(inp.files_at))


def _pieces(inp: PreambleInput) -> list[_Piece]:
    """The content sections; a document that is not text goes to the index instead."""
    pieces = []
    listed: list[IndexEntry] = []
    for doc in inp.lead:
        if is_text(doc.body):
            pieces.append(_doc_piece("Summary", doc))
        else:
            listed.append(_not_text_entry(doc))
    if inp.handoff is not None:
        if is_text(inp.handoff.body):
            pieces.append(_handoff_piece(inp.handoff))
        else:
            listed.append(_not_text_entry(inp.handoff))
    if inp.index is not None and _has_lines(inp.index.body):
        if is_text(inp.index.body):
            pieces.append(_memory_piece(inp.index))
        else:
            listed.append(_not_text_entry(inp.index))
    for doc in inp.newest:
        if is_text(doc.body):
            pieces.append(_doc_piece("Recent", doc))
        else:
            listed.append(_not_text_entry(doc))
    index_piece = _index_piece([*listed, *inp.rest], inp.more, inp.files_at)
    if index_piece is not None:
        pieces.append(index_piece)
    return pieces


def render(inp: PreambleInput, *, budget: int, file_cap: int) -> bytes:
    """PREAMBLE.md for `inp`, at most `budget` bytes (§6).

    The frame comes first; when the budget cannot hold it, it is cut (with no
    room for a marker) and is all there is. The rest of the budget is
    water-filled among the handoff, MEMORY.md, each newest file and the
    index of the others, each capped at `file_cap`. A
    piece over its share is cut at a character boundary, near a line end,
    with a marker naming the bytes left out and where to read them; one whose
    share cannot hold its heading and marker is reduced to a one-line note,
    or left out when even that does not fit. Drift headers are stripped
    before anything is measured. A document that is not text (`is_text`) is
    never inlined: it becomes an index line, ahead of `inp.rest`. So the
    output is always valid UTF-8 and holds no NUL byte.

    Raises:
        ValueError: a negative budget or file_cap.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if file_cap < 0:
        raise ValueError(f"file_cap must be >= 0, got {file_cap}")
    frame = _frame(inp)
    if len(frame) > budget:
        # Nothing after a cut frame: a section shown without the frame's "background,
        # not a live conversation" would read as current.
        return cut_utf8(frame, budget)
    pieces = _pieces(inp)
    shares, levels = plan(pieces, budget - len(frame), file_cap)
    out = [frame]
    for piece, share, level in zip(pieces, shares, levels, strict=True):
        if level == WHOLE:
            out.append(piece.fit(share))
        elif level == SHORT:
            out.append(piece.short())
    return b"".join(out)


def render_empty(project: str, files_at: str, own_folder: str | None, *, budget: int) -> bytes:
    """PREAMBLE.md of a project no source holds memory for yet, at most `budget` bytes.

    Args:
        project: project path or slug, named in the frame.
        files_at: the project's folder in the mount.
        own_folder: the own source's folder for this project, where the first write
            lands (created then); None when there is no own source, so the mount is
            read-only.
        budget: the hard cap on the output's length.

    Raises:
        ValueError: a negative budget.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if own_folder is None:
        lands = b"This mount is read-only (no own source): a write there fails (EROFS).\n"
    else:
        lands = b"A file written there lands in %s (created on the first write).\n" % _text(
            own_folder
        )
    text = (
        b"# Project memory: %s\n\n"
        b"No memory for this project yet: no source holds a file for it.\n"
        b"Files: %s\n"
    ) % (_text(project), _text(files_at))
    return cut_utf8(text + lands, budget)
