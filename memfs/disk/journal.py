"""The journal of every change: who did what to which file (§7.2).

Layer disk: imports neither pyfuse3 nor trio. One row per change in the state folder's
store (store.py: SQLite, private to the user), appended by the worker call that applied the
change (steps.apply), so it costs the request thread nothing. A change through the mount
names its process (the thread group FUSE's caller belongs to, and its command name); a
change memfs saw on disk (issue 37) is marked so, its process unknown. `memfs log` reads
it newest first, every name escaped: a name may hold any byte but '/' and NUL.

A row names memory paths and process names, never memory content.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from memfs.disk import procs, store

log = logging.getLogger(__name__)

LEGACY = "journal.jsonl"  # the journal of memfs before its store: read in once, then gone
MOUNT = "mount"
DISK = "disk"


@dataclass
class Change:
    """One change; ``before``/``after`` are sizes (None: no file)."""

    project: str
    path: str
    # write, create, rename, unlink, truncate, chmod, times, mkdir, rmdir, keep, restore;
    # on disk: replace, rewrite, remove
    what: str
    pid: int = 0  # the process (thread group); 0: unknown (a change on disk)
    comm: str = ""  # the process's command name, read when the change is applied
    to: str = ""  # a rename's new path
    before: int | None = None
    after: int | None = None
    kept: str = ""  # the view path of the version kept (.history/...), if one was
    at_ns: int = 0  # wall clock, when it was applied
    way: str = MOUNT  # through the mount, or seen on disk
    source: str = ""  # on disk: the source whose file changed
    version: str = ""  # a restore: the view path of the version it put back

    @property
    def target(self) -> str:
        """The path whose file the change leaves (a rename's new one)."""
        return self.to or self.path


def record(state_dir: Path, change: Change) -> None:
    """Append ``change``, naming its process; never raises (a journal that cannot be
    written is logged, and the change itself stands). FUSE names the calling thread: the
    journal names its process, the thread group."""
    change.at_ns = change.at_ns or time.time_ns()
    if change.pid:
        change.pid = procs.tgid(change.pid)
        change.comm = change.comm or procs.command_name(change.pid)
    try:
        _import_legacy(state_dir)
        store.of(state_dir).record(_row(change))
    except (OSError, sqlite3.Error) as exc:
        log.warning("cannot write the change journal: %s", exc)
    except Exception:  # a journal that cannot take a change never fails the change
        log.exception("cannot write the change journal")


def _row(change: Change) -> dict[str, object]:
    """``change`` as a row: names as bytes, since a name may hold bytes that are no UTF-8
    (kept in str by surrogateescape), which SQLite's text cannot hold."""
    row: dict[str, object] = {}
    for name, value in asdict(change).items():
        if isinstance(value, str) and name not in ("what", "way"):
            value = value.encode("utf-8", "surrogateescape")
        row["to_path" if name == "to" else name] = value
    return row


def read(state_dir: Path, project: str = "", limit: int = 0) -> list[Change]:
    """The changes journaled, newest first (of ``project`` only, at most ``limit``: 0 all)."""
    if not (state_dir / store.NAME).exists() and not (state_dir / LEGACY).exists():
        return []  # nothing journaled yet: no database made for a question
    _import_legacy(state_dir)
    names = {f.name for f in fields(Change)}
    found = []
    key = project.encode("utf-8", "surrogateescape") if project else b""
    for row in store.of(state_dir).journal(key, limit):
        row["to"] = row.pop("to_path")
        for name, value in row.items():
            if isinstance(value, bytes):
                row[name] = value.decode("utf-8", "surrogateescape")
        found.append(Change(**{k: v for k, v in row.items() if k in names}))
    return found


def _import_legacy(state_dir: Path) -> None:
    """An older memfs's JSON lines journal, moved into the store once."""
    path = state_dir / LEGACY
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    target = store.of(state_dir)
    for change in _parse(text):
        target.record(_row(change))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _parse(text: str) -> Iterator[Change]:
    names = {f.name for f in fields(Change)}
    for line in text.splitlines():
        with contextlib.suppress(ValueError, TypeError):
            raw = json.loads(line)
            if isinstance(raw, dict) and {"project", "path", "what"} <= raw.keys():
                yield Change(**{k: v for k, v in raw.items() if k in names})


def render(c: Change) -> str:
    """One line for a person: when (UTC), what, where, sizes, the version kept, by whom.
    Every name is escaped: a newline in a file name must not forge a line of the log."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.at_ns / 1e9))
    where = f"{escape(c.project)}/{escape(c.path)}" + (f" -> {escape(c.to)}" if c.to else "")
    sizes = f"{_size(c.before)} -> {_size(c.after)}"
    kept = f"  kept {escape(c.kept)}" if c.kept else ""
    restored = f"  from {escape(c.version)}" if c.version else ""
    if c.way == DISK:
        who = f"on disk ({escape(c.source)}), process unknown"
    else:
        who = f"{escape(c.comm or '?')}[{c.pid}]" if c.pid else "?"
    return f"{when}Z  {c.what:<8} {where}  {sizes}{kept}{restored}  by {who}"


def escape(text: str) -> str:
    """``text`` with control characters (a newline, an escape sequence) and undecodable
    bytes spelled out as Python would (``\\n``, ``\\x1b``, ``\\udcff``)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _size(size: int | None) -> str:
    return "-" if size is None else f"{size} B"
