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
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from memfs.disk import procs, staging, state

log = logging.getLogger(__name__)

NAME = "journal.jsonl"
MAX_BYTES = 4 << 20  # about 20,000 changes; then the older half goes


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


class Journal:
    """The journal of one mount's state folder, kept open for appending.

    A change is journaled by the worker call that applied it, before its request is
    answered: opening the file, making sure of its folder and closing it again at each
    change cost a write about a tenth of a millisecond, so the descriptor stays open. It is
    opened again when its name no longer names that file (trimmed here; removed or moved
    by the user).
    Thread-safe; closed when the journal is dropped.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._lock = threading.Lock()
        self._fd = -1
        self._closing: weakref.finalize[[int], Journal] | None = None

    def record(self, change: Change) -> None:
        """Append ``change``, naming its process; never raises (a journal that cannot be
        written is logged, and the change itself stands)."""
        change.at_ns = change.at_ns or time.time_ns()
        if change.pid and not change.comm:
            change.comm = procs.command_name(procs.tgid(change.pid))
        line = (json.dumps(asdict(change), separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                fd = self._open()
                os.write(fd, line)
                if os.fstat(fd).st_size > MAX_BYTES:
                    _trim(self.state_dir)
                    self._close()  # the trim replaced the file: the next change opens it
            except OSError as exc:
                self._close()
                log.warning("cannot write the change journal: %s", exc)

    def _open(self) -> int:
        """The descriptor of the journal file as it is named now."""
        if self._fd >= 0 and _same_file(self._fd, self.state_dir / NAME):
            return self._fd
        self._close()
        folder = state.private_folder(self.state_dir)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(folder / NAME, flags, state.FILE_MODE)
        self._closing = weakref.finalize(self, os.close, self._fd)
        return self._fd

    def _close(self) -> None:
        if self._closing is not None:
            self._closing()  # closes the descriptor once
        self._fd, self._closing = -1, None

    def close(self) -> None:
        with self._lock:
            self._close()


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not removed, renamed or
    replaced since)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def _trim(folder: Path) -> None:
    """Keep the newer half of the journal (an atomic replace: a crash keeps one whole)."""
    data = (folder / NAME).read_bytes()
    half = data[len(data) // 2 :]
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
