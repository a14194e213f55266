"""The MEMORY.md union (§5.3), and a save of it through the mount taken as a change.

A project's MEMORY.md is the head version's lines, then every line the other
versions add: a linked line when its target is not linked yet, any other line
when no line equals it. So no topic file linked from any source's index
becomes invisible to an agent that reads only the merged index. Lines hidden
by a save (below) are taken out of every version but the own index first
(`without_lines`).

A writer that saves MEMORY.md saves the whole union it read, but what it meant
is a change of it: `save_change` compares the text it read, the text it wrote
and the own index as it is now, and gives the own index that change alone:

* Lines are compared by their text, trailing whitespace ignored; blank lines
  are never added or removed by themselves.
* A line of the written text that the read text lacks was *added*: it lands in
  the own index where the writer put it. An edited line (a link line with new
  words, say) is such a line; the union shows the own index's lines first, so
  the edit shows.
* A line the writer kept from the read text lands only if the own index holds
  it now: the other sources' lines are never copied into the own index just
  because the writer saved the view they are in.
* A line of the read text the writer left out was *removed*: it leaves the own
  index, and if another source holds it, the caller hides it from the union
  (`hidden_after`) until that source changes it (a new text is a new line) or a
  writer adds it again. Another source's line linking a topic the writer unlinked is
  hidden with it: the union showed one line per topic, and the other would come back.
* A line the own index holds now and the read text lacked was added by someone
  else since the writer read (a second session saving meanwhile): it is kept,
  after the writer's lines, so two writers that read the same version lose
  neither's line.
* An added line linking a file memfs makes up (`PREAMBLE.md`,
  ``PREAMBLE-<N>.md``: §6), in any link of the line, is dropped: a synthetic file is
  never a topic (`links_synthetic`).
* Blank lines go with the text around them: a blank line of the written text
  is kept unless dropping the other sources' lines would leave it where the
  writer put none, at the index's start, right after another kept blank line,
  or at its end. With nothing dropped and nothing appended the written text
  lands byte for byte (the own index alone, saved by one writer, is a plain
  file).

It imports neither pyfuse3 nor trio. The functions are pure (text in, text
out) and safe to call from any thread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass

MEMORY = "MEMORY.md"
AGENT_MEMORY = "agent-memory"  # a Claude Code config folder's subagents' memory (§4.1)


def is_index(path: str, agents: bool = False) -> bool:
    """Whether a project's view ``path`` is an index shown as the union above (§5.3): the
    ``MEMORY.md`` at the project's top, or, where ``agents`` (global/claude, §4.1), a
    subagent's ``agent-memory/<agent>/MEMORY.md``. The one rule every layer asks."""
    if path == MEMORY:
        return True
    if not agents:
        return False
    top, _, rest = path.partition("/")
    agent, _, name = rest.partition("/")
    return top == AGENT_MEMORY and agent != "" and name == MEMORY


def index_key(slug: str, path: str) -> str:
    """What the state folder keeps index ``path`` of project ``slug``'s hidden lines under:
    the slug for the top MEMORY.md, else the slug and the index's folder
    (``global/claude/agent-memory/<agent>``), so no two indexes share one."""
    folder = path.rpartition("/")[0]
    return f"{slug}/{folder}" if folder else slug


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


# --- a save of the view, as a change of the own index ---------------------------------


def text_of(line: str) -> str:
    """What two lines are compared by: the line without its trailing whitespace (a
    CRLF file's carriage return included)."""
    return line.rstrip()


# A reference definition, `[label]: target "title"`: a link too, spelled apart from its text.
_DEFINITION = re.compile(r"^\s*(?:[-*+]\s+)?\[[^\]]+\]:\s*(\S+)")


def link_targets(line: str) -> list[str]:
    """Every link target of ``line``: each inline link's and a reference definition's,
    stripped, in order (empty targets name nothing)."""
    found = [m.group(1).strip() for m in _LINK.finditer(line)]
    definition = _DEFINITION.match(line)
    if definition is not None:
        found.append(definition.group(1))
    return [target for target in found if target]


def links_synthetic(line: str) -> bool:
    """Whether ``line`` links a file memfs makes up at a project's top (`PREAMBLE.md`, a
    ``PREAMBLE-<N>.md`` it serves, §6), in any Markdown link form and position, spelled
    as an index might: ``./PREAMBLE.md``, ``.//PREAMBLE.md``, ``<PREAMBLE.md>``, with a
    ``#part`` or a title, as a reference definition, or through the mount
    (``here/PREAMBLE.md``, ``~/memfs/<slug>/PREAMBLE.md``). A ``PREAMBLE.md`` in a folder
    of the project (``sub/PREAMBLE.md``) is an ordinary file, and no synthetic one."""
    return any(_synthetic_target(target) for target in link_targets(line))


def _synthetic_target(target: str) -> bool:
    words = target.split()
    path = words[0] if words else ""  # `[x](PREAMBLE.md "a title")`
    path = path.removeprefix("<").removesuffix(">").split("#", 1)[0].split("?", 1)[0]
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts:
        return False
    *folders, name = parts
    # Imported here: preamble.py imports this module (its index section is the union).
    from memfs.rules import preamble

    if name != "PREAMBLE.md" and preamble.sized_budget(name) is None:
        return False
    # The project's own top: no folder, or the folder a mount shows it at (`here`, or the
    # project's slug: a canonical slug begins with '-'); any other folder is the project's.
    return not folders or folders[-1] == "here" or folders[-1].startswith("-")


@dataclass(frozen=True)
class Saved:
    """The own index after a save (`save_change`), and what the save changed of the view."""

    own: str
    added: frozenset[str]  # texts the writer added (`text_of`), synthetic links left out
    removed: frozenset[str]  # texts of the version it read that it left out
    # Topics the writer unlinked: targets a removed line linked that no line it wrote does
    unlinked: frozenset[str] = frozenset()


def save_change(read: str, written: str, own_now: str) -> Saved:
    """The own index once a writer that read ``read`` saved ``written``, the own index
    holding ``own_now`` at that moment (see the module: the rule, blank lines included).

    ``own_now`` equal to the own part of ``read`` and no other source: the result is
    ``written`` itself.
    """
    was = _texts(read)
    now = _texts(own_now)
    lines = _lines(written)
    kept: list[str] = []
    added: set[str] = set()
    dropped = False  # a line of `written` was left out since the last line kept
    for line in lines:
        key = text_of(line)
        if not key:
            # A blank line: not where dropping lines would put it (see the module).
            if dropped and (not kept or not text_of(kept[-1])):
                continue
            kept.append(line)
            dropped = False
            continue
        if key not in was:
            if links_synthetic(line):
                dropped = True
                continue
            added.add(key)
        elif key not in now:
            dropped = True  # another source's line, or one removed meanwhile
            continue
        kept.append(line)
        dropped = False
    if dropped:
        while kept and not text_of(kept[-1]):
            kept.pop()  # only dropped lines came after these blank ones
    mine = _texts(written)
    # Lines another writer added to the own index after this one read it.
    kept += [
        line
        for line in _lines(own_now)
        if (key := text_of(line)) and key not in was and key not in mine
    ]
    # Nothing dropped, nothing appended: byte for byte (a final line without its newline).
    own = written if kept == lines else "".join(f"{line}\n" for line in kept)
    removed = frozenset(key for key in was if key not in mine)
    still = {target for line in lines if (target := link_target(line)) is not None}
    unlinked = (
        frozenset(target for key in removed if (target := link_target(key)) is not None) - still
    )
    return Saved(own, frozenset(added), removed, unlinked)


def hidden_after(hidden: Set[str], saved: Saved, others: Iterable[str]) -> frozenset[str]:
    """The lines hidden from the union once ``saved`` landed, ``hidden`` hidden before
    and ``others`` the other versions' texts: a line the writer removed is hidden, one it
    added is shown again, and a hidden line no other version holds any more is forgotten
    (its text back in another source later is a new line)."""
    held = set().union(*(_texts(text) for text in others))
    # A line of another version linking a topic the writer unlinked was not shown (the
    # union shows one line a topic): hidden with it, or the removed link would come back.
    shadowed = {t for t in held if saved.unlinked and link_target(t) in saved.unlinked}
    hiding = (set(hidden) - saved.added) | saved.removed | shadowed
    return frozenset(t for t in hiding if t in held)


def without_lines(text: str, hidden: Set[str]) -> str:
    """``text`` without its lines whose text (`text_of`) is ``hidden``; the rest byte for
    byte."""
    if not hidden:
        return text
    pieces = text.split("\n")
    kept = [line for line in pieces[:-1] if text_of(line) not in hidden]
    last = pieces[-1]  # after the final newline: '' (none), else a line without one
    if last and text_of(last) in hidden:
        last = ""
    return "".join(line + "\n" for line in kept) + last


def _texts(text: str) -> set[str]:
    """The texts of ``text``'s lines that are not blank."""
    return {key for line in _lines(text) if (key := text_of(line))}
