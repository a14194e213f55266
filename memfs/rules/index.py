"""The MEMORY.md union (§5.3).

A project's MEMORY.md is the head version's lines, then every line the other
versions add: a linked line when its target is not linked yet, any other line
when no line equals it. So no topic file linked from any source's index
becomes invisible to an agent that reads only the merged index.

It imports neither pyfuse3 nor trio. The functions are pure (text in, text
out) and safe to call from any thread.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# `[title](target)`, allowing one level of nested brackets in the title and of
# parentheses in the target (`[a [b]](notes(1).md)`); deeper nesting is rare
# enough in an index line that the simple form is worth more.
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(((?:[^()]|\([^()]*\))*)\)")


def link_target(line: str) -> str | None:
    """The stripped target of the first markdown link in line, or None."""
    match = _LINK.search(line)
    if match is None:
        return None
    # An empty target names no topic; treating it as one would make every
    # `[x]()` line a duplicate of the first.
    return match.group(1).strip() or None


def _lines(text: str) -> list[str]:
    """text split on '\\n' only, without the empty piece after a final newline."""
    # Not str.splitlines(): it also splits on \\x0b, \\x1c, \\u2028 and such,
    # which inside a line are content, not line ends.
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def union_index(head: str, others: Sequence[str]) -> str:
    """head, then each line of others it lacks, in the order of others.

    Callers pass others newest source first. A line with a link is added when
    its target is not linked yet (in head or an added line); a blank line never
    is; any other line when no line so far equals it, trailing whitespace
    ignored. head is kept byte for byte as the result's prefix.
    """
    linked: set[str] = set()  # link targets in head and in added lines
    seen: set[str] = set()  # every line so far, trailing whitespace stripped
    for line in _lines(head):
        _note(line, linked, seen)
    added: list[str] = []
    for other in others:
        for line in _lines(other):
            if _is_new(line, linked, seen):
                # A CRLF source's '\r' would be a stray character in the '\n'
                # joined result.
                added.append(line.removesuffix("\r"))
                _note(line, linked, seen)
    if not added:
        return head
    separator = "\n" if head and not head.endswith("\n") else ""
    return head + separator + "\n".join(added) + "\n"


def _note(line: str, linked: set[str], seen: set[str]) -> None:
    """Record line as present in the union."""
    target = link_target(line)
    if target is not None:
        linked.add(target)
    seen.add(line.rstrip())


def _is_new(line: str, linked: set[str], seen: set[str]) -> bool:
    """Whether a line from another version belongs in the union."""
    if not line.strip():
        return False
    target = link_target(line)
    if target is not None:
        return target not in linked
    return line.rstrip() not in seen
