"""A byte budget, shared among pieces and spent without splitting a character (§6).

PREAMBLE.md's hard byte budget, as arithmetic: how the bytes are shared fairly among its
pieces (water-filling), which pieces are demoted when their share cannot hold even a cut
of them (to a one-line note, then to nothing), and where a body is cut (never inside a
UTF-8 character, near a line end). What a piece says, and how a cut one is marked, is
preamble.py's: a piece here is anything that can tell its sizes (`Piece`).

Layer rules: imports nothing of memfs, and neither pyfuse3 nor trio; does no I/O. Plain
functions of their arguments, safe from any thread, deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["GONE", "LINE_END_WINDOW", "SHORT", "WHOLE", "Piece", "cut_utf8", "plan", "water_fill"]

# How far back from the limit a cut looks for a line end: a quarter of the
# limit, but never more than this, so a big limit does not drop a long line.
LINE_END_WINDOW = 200


def cut_utf8(data: bytes, limit: int) -> bytes:
    """The longest prefix of `data` of at most `limit` bytes, ending cleanly.

    The cut never splits a UTF-8 character. It prefers a line end: when one
    lies within the last ``min(limit // 4, LINE_END_WINDOW)`` bytes before the
    cut, the prefix ends there (with its ``\\n``, or just before a ``\\n`` that
    would not fit). Invalid UTF-8 is cut as bytes: at most three continuation
    bytes are stepped back over, as a valid character has no more.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if len(data) <= limit:
        return data
    cut = limit
    for _ in range(3):
        if cut == 0 or not _is_continuation(data[cut]):
            break
        cut -= 1
    else:
        if _is_continuation(data[cut]):
            cut = limit  # not UTF-8 here anyway: any cut will do
    if data[cut : cut + 1] == b"\n":
        return data[:cut]
    window = min(limit // 4, LINE_END_WINDOW)
    eol = data.rfind(b"\n", max(0, cut - window), cut)
    if eol != -1:
        return data[: eol + 1]
    return data[:cut]


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def water_fill(needs: Sequence[int], total: int, cap: int) -> list[int]:
    """Share `total` fairly among pieces that need `needs` bytes, each <= `cap`.

    Max-min fairness: every piece is offered an equal share; one that needs
    less (or is capped lower) keeps only what it needs and the rest is shared
    among the others, again equally. The bytes integer division leaves over
    go to the earliest of the pieces left short (the handoff before the rest).
    The result is in the order of `needs`, sums to ``min(total, sum of the
    capped needs)``, and depends only on the input.

    Raises:
        ValueError: a negative need, total or cap.
    """
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if cap < 0:
        raise ValueError(f"cap must be >= 0, got {cap}")
    if any(n < 0 for n in needs):
        raise ValueError(f"needs must be >= 0, got {list(needs)}")
    wants = [min(n, cap) for n in needs]
    shares = [0] * len(wants)
    left = total
    # Smallest wants first: each takes at most an equal share of what is left,
    # so what one does not need raises the share of all after it. Among equal
    # wants the latest piece goes first: the rounding remainder, which grows
    # along the order, then lands on the earliest. The last piece takes all
    # that is left when short, so nothing is left over unless all are met.
    order = sorted(range(len(wants)), key=lambda i: (wants[i], -i))
    for pos, i in enumerate(order):
        shares[i] = min(wants[i], left // (len(order) - pos))
        left -= shares[i]
    return shares


class Piece(Protocol):
    """One content section of the preamble, as the budget sees it: its sizes only."""

    def need(self) -> int:
        """Its bytes, whole."""
        ...

    def smallest_cut(self) -> int:
        """Its fewest bytes when cut: heading, a line end and the widest marker."""
        ...

    def short(self) -> bytes:
        """Its one-line "left out" note."""
        ...


# How far a piece has been demoted for lack of room.
WHOLE, SHORT, GONE = 0, 1, 2


def plan(pieces: Sequence[Piece], room: int, cap: int) -> tuple[list[int], list[int]]:
    """Shares and demotion levels such that every piece fits its share.

    A piece whose share cannot hold its heading and marker is demoted to its
    one-line "left out" note, and from that to nothing; its bytes then go to
    the others. One piece is demoted per round, the last in section order, so
    the handoff keeps its room longest; a piece is demoted at most twice, so
    this ends.
    """
    levels = [WHOLE] * len(pieces)
    while True:
        needs = [_level_need(p, lv) for p, lv in zip(pieces, levels, strict=True)]
        shares = water_fill(needs, room, cap)
        short = [i for i, p in enumerate(pieces) if not _fits(p, levels[i], shares[i])]
        if not short:
            return shares, levels
        levels[short[-1]] += 1


def _level_need(piece: Piece, level: int) -> int:
    if level == WHOLE:
        return piece.need()
    if level == SHORT:
        return len(piece.short())
    return 0


def _fits(piece: Piece, level: int, share: int) -> bool:
    if level == WHOLE:
        return share >= min(piece.need(), piece.smallest_cut())
    if level == SHORT:
        return share >= len(piece.short())
    return True
