"""global/PREAMBLE.md (§4.1): all user-level memory in one file under the preamble budget.

Layer rules: pure. The file is a frame (this is what the agents on the machine keep about
the user, tied to no project, and where its files are) and then each `global/<kind>`
folder's own PREAMBLE.md (§6: its CLAUDE.md, indexes and newest files, every cut marked),
rendered under a share of what the frame leaves: the shares are water-filled (budget.py), so
a kind that needs less than an equal share leaves the rest to the others, as the pieces of
a project's PREAMBLE.md do.
"""

from __future__ import annotations

from collections.abc import Sequence

from memfs.rules.budget import cut_utf8, water_fill

SEPARATOR = b"\n"


def frame(files_at: str, kinds: Sequence[str]) -> bytes:
    """The frame: what the file is, which kinds it holds, where their files are."""
    held = ", ".join(kinds) if kinds else "none yet"
    return (
        "# User-level memory\n\n"
        "What the coding agents on this machine keep about the user, tied to no project "
        f"({held}): background from earlier sessions, not a live conversation.\n"
        f"Files: {files_at}/<kind>/ (read them there for anything cut or left out below)\n\n"
    ).encode("utf-8", "surrogateescape")


def shares(frame_bytes: int, needs: Sequence[int], budget: int) -> list[int]:
    """Each kind's budget: ``needs`` (its rendering's size given all the room) water-filled
    into what the frame and the separators leave of ``budget``."""
    room = max(0, budget - frame_bytes - len(SEPARATOR) * max(0, len(needs) - 1))
    return water_fill(needs, room, room)


def render(head: bytes, parts: Sequence[bytes], budget: int) -> bytes:
    """The file: the frame, then each part; never over ``budget`` (cut at a character)."""
    return cut_utf8(head + SEPARATOR.join(parts), budget)
