"""How versions are named under ``.history/``: the one place these names are spelled.

§4, §7.2. Pure: no I/O, imports nothing of memfs but rules. A version of ``<path>`` from source
``<source>`` is ``.history/<path>/<source>@<UTC>.md``, the UTC of its mtime (when that
version was written); ``~N`` tells versions apart: in the own source's kept versions, the
order they were kept (each one more than any kept before it: ``~2``, ``~3``, ...), in the
names memfs gives other sources' versions, two of one second.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable

from memfs.rules import names

HISTORY = ".history"


def stamp(mtime_ns: int) -> str:
    """UTC, ISO 8601 basic format: sortable and free of ':' (which breaks some sync tools)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(mtime_ns // 1_000_000_000))


def version_name(source: str, mtime_ns: int, n: int = 1) -> str:
    """The file name of version number ``n`` (1: no number shown) from ``source``."""
    base = f"{source}@{stamp(mtime_ns)}"
    return f"{base}.md" if n == 1 else f"{base}~{n}.md"


def order(name: str) -> tuple[str, int]:
    """(``<source>@<UTC>``, n) of a version's file name."""
    base, _, n = name.removesuffix(".md").partition("~")
    return (base, int(n) if n.isdigit() else 1)


def in_history(path: str) -> bool:
    return path == HISTORY or path.startswith(HISTORY + "/")


_NAME = re.compile(r"(?P<source>.+)@(?P<stamp>[0-9]{8}T[0-9]{6}Z)(?:~(?P<n>[0-9]+))?\.md")


def parse(name: str) -> tuple[str, int, int] | None:
    """(source, the UTC second its name shows as seconds since the epoch, its number) of a
    version's file name; None for any other name."""
    found = _NAME.fullmatch(name)
    if found is None:
        return None
    try:
        when = calendar.timegm(time.strptime(found["stamp"], "%Y%m%dT%H%M%SZ"))
    except ValueError:
        return None
    return found["source"], when, int(found["n"] or 1)


def keeps_versions(path: str, rule: Callable[[str], names.Rule | None] = names.path_rule) -> bool:
    """Whether the versions of ``path`` that a change replaces or removes are kept (§7.2):
    every memory file's; not a writer's own temporary, swap or backup file (a name
    ``rule`` matches, or Claude Code's temp name), whose versions are not memory and would
    crowd out the project's bytes for history; not a version under ``.history/`` itself."""
    if in_history(path) or names.is_temp_name(path.rpartition("/")[2]):
        return False
    return rule(path) is None
