"""The journal of every change through the mount (§7.2): who did what to which file.

Layer disk: imports neither pyfuse3 nor trio. One line of JSON per change in
``$XDG_STATE_HOME/memfs/journal.jsonl`` (private to the user like all state: 0600 in a
0700 folder), appended by the worker call that applied the change (steps.apply), so it
costs the request thread nothing. Bounded: past `MAX_BYTES` the older half goes, in one
atomic replace. `memfs log` reads it newest first.

A line names memory paths and process names, never memory content.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from memfs.disk import procs, staging, state

log = logging.getLogger(__name__)

NAME = "journal.jsonl"
MAX_BYTES = 4 << 20  # about 20,000 changes; then the older half goes
# Workers apply plans at once: an append between a trim's read and its replace would be
# lost, so appends and trims take turns (a few µs each; a trim every 20,000 changes).
_turns = threading.Lock()


@dataclass
class Change:
    """One change through the mount; ``before``/``after`` are sizes (None: no file)."""

    project: str
    path: str
    what: str  # write, create, rename, unlink, truncate, chmod, times, mkdir, rmdir
    pid: int = 0
    comm: str = ""  # the process's command name, read when the change is applied
    to: str = ""  # a rename's new path
    before: int | None = None
    after: int | None = None
    kept: str = ""  # the view path of the version kept (.history/...), if one was
    at_ns: int = 0  # wall clock, when it was applied

    @property
    def target(self) -> str:
        """The path whose file the change leaves (a rename's new one)."""
        return self.to or self.path


def record(state_dir: Path, change: Change) -> None:
    """Append ``change``, naming its process; never raises (a journal that cannot be
    written is logged, and the change itself stands)."""
    change.at_ns = change.at_ns or time.time_ns()
    if change.pid and not change.comm:
        change.comm = procs.command_name(procs.tgid(change.pid))
    line = (json.dumps(asdict(change), separators=(",", ":")) + "\n").encode()
    try:
        with _turns:
            fd = _open(state_dir)
            try:
                os.write(fd, line)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size > MAX_BYTES:
                _trim(state_dir)
    except OSError as exc:
        log.warning("cannot write the change journal: %s", exc)


def _open(state_dir: Path) -> int:
    """The journal, for appending. The state folder was made private at mount start
    (`state.make_private`): only when it is gone since is it made again, not checked at
    every change (two mkdir attempts and two stats, each a raised exception)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(state_dir / NAME, flags, state.FILE_MODE)
    except FileNotFoundError:
        return os.open(state.private_folder(state_dir) / NAME, flags, state.FILE_MODE)


def _trim(folder: Path) -> None:
    """Keep the newer half of the journal (an atomic replace: a crash keeps one whole).

    Only that half is read: the whole file and a copy of its half made memfs's RSS step
    up by their size for good (freed, the heap keeps them)."""
    fd = os.open(folder / NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        half = os.pread(fd, size - size // 2, size // 2)
    finally:
        os.close(fd)
    start = half.find(b"\n") + 1  # from the first whole line
    place = staging.Place(folder, ())
    staging.replace(place, NAME, half[start:], mode=state.FILE_MODE)


def read(state_dir: Path) -> list[Change]:
    """Every change journaled, newest first; lines that do not parse are skipped."""
    try:
        text = (state_dir / NAME).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return list(reversed(list(_parse(text))))


def _parse(text: str) -> Iterator[Change]:
    names = {f.name for f in fields(Change)}
    for line in text.splitlines():
        with contextlib.suppress(ValueError, TypeError):
            raw = json.loads(line)
            if isinstance(raw, dict) and {"project", "path", "what"} <= raw.keys():
                yield Change(**{k: v for k, v in raw.items() if k in names})


def render(c: Change) -> str:
    """One line for a person: when (UTC), what, where, sizes, the version kept, by whom."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.at_ns / 1e9))
    where = f"{c.project}/{c.path}" + (f" -> {c.to}" if c.to else "")
    sizes = f"{_size(c.before)} -> {_size(c.after)}"
    kept = f"  kept {c.kept}" if c.kept else ""
    who = f"{c.comm or '?'}[{c.pid}]" if c.pid else "?"
    return f"{when}Z  {c.what:<8} {where}  {sizes}{kept}  by {who}"


def _size(size: int | None) -> str:
    return "-" if size is None else f"{size} B"
