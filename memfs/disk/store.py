"""memfs's store in its state folder: one SQLite database for what grows with use.

§3, §7.2. Layer disk: imports neither pyfuse3 nor trio; every call blocks on the disk
(worker threads only while serving). ``$XDG_STATE_HOME/memfs/memfs.db`` (0600 in the
0700 state folder, its WAL and shared-memory files the same), in WAL mode, one transaction
per change, so a crash keeps every change that returned and a reader (`memfs log`, a
restore with the mount down) never waits for a writer. It holds:

* ``journal``: every change through the mount, and (issue 37) every change made on disk
  that memfs saw, one row each (journal.py says what a row is);
* ``hidden``: each index's hidden lines over time (§5.3): the set after each change of
  it, with the own version that change replaced, so a restore puts back the view as it
  was (view/restore.py), lines hidden since showing again.

Why SQLite and not JSON rewritten on every change: a journal of years is hundreds of
thousands of rows; SQLite appends one in a few tens of µs, reads the newest first without
reading the rest, bounds itself with one DELETE, and survives a crash whole (the JSON
lines journal before it was trimmed by rewriting half of itself). It is the standard
library's, so memfs needs nothing more to install. Its cost: about 0.5 MiB of memory for
its page cache, and a file the user cannot grep (`memfs log --json` prints it).

A process opens one connection per database (`of`), shared by its threads under a lock:
the workers that apply plans write, the CLI reads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfs.disk import state

log = logging.getLogger(__name__)

NAME = "memfs.db"
VERSION = 2
JOURNAL_ROWS = 200_000  # about 40 MiB of rows: then the oldest go, every TRIM_EVERY rows
TRIM_EVERY = 1000
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS journal (
        id INTEGER PRIMARY KEY,
        at_ns INTEGER NOT NULL,
        project BLOB NOT NULL,
        path BLOB NOT NULL,
        to_path BLOB NOT NULL DEFAULT '',
        what TEXT NOT NULL,
        pid INTEGER NOT NULL DEFAULT 0,
        comm BLOB NOT NULL DEFAULT '',
        before INTEGER,
        after INTEGER,
        kept BLOB NOT NULL DEFAULT '',
        way TEXT NOT NULL DEFAULT 'mount',
        source BLOB NOT NULL DEFAULT '',
        version BLOB NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX IF NOT EXISTS journal_by_path ON journal (project, path)",
    """CREATE TABLE IF NOT EXISTS hidden (
        id INTEGER PRIMARY KEY,
        at_ns INTEGER NOT NULL,
        project TEXT NOT NULL,
        idx TEXT NOT NULL,
        lines TEXT NOT NULL,
        replaced TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX IF NOT EXISTS hidden_by_index ON hidden (project, idx, at_ns)",
    # Issue 37: the bytes of every memory file of every source as memfs last read it, stood
    # still (baseline.py), so the version a change on disk replaces can be kept.
    """CREATE TABLE IF NOT EXISTS files (
        folder BLOB NOT NULL,
        path BLOB NOT NULL,
        ino INTEGER NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        mode INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (folder, path)
    )""",
    # The read-only sources' versions kept in the state folder, in the order kept.
    """CREATE TABLE IF NOT EXISTS kept (
        id INTEGER PRIMARY KEY,
        folder BLOB NOT NULL,
        name TEXT NOT NULL,
        size INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS kept_by_folder ON kept (folder)",
)

_open: dict[Path, Store] = {}
_opening = threading.Lock()


def of(state_dir: Path) -> Store:
    """This process's store in ``state_dir`` (opened once; made private when new)."""
    with _opening:
        found = _open.get(state_dir)
        if found is None:
            found = _open[state_dir] = Store(state_dir)
        return found


def close_all() -> None:
    """Close every store this process opened (at unmount, and between tests)."""
    with _opening:
        for store in _open.values():
            store.close()
        _open.clear()


class Store:
    """One state folder's database (see the module); safe to share between threads."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / NAME
        self._state_dir = state_dir
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._opened: tuple[int, int] | None = None  # the database file it opened

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @contextlib.contextmanager
    def _connected(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock; one transaction per block. A database removed
        since it was opened (the state folder wiped while mounted) is made anew, private,
        rather than written on unseen."""
        with self._lock:
            if self._db is not None and self._identity() != self._opened:
                self._db.close()
                self._db = None
            if self._db is None:
                self._db = self._connect()
                self._opened = self._identity()
            with self._db:  # commits the block's transaction, or rolls it back
                yield self._db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction on the connection, for a module that keeps its own tables here
        (disk/moves.py: the project roots memfs saw, the moves it follows)."""
        with self._connected() as db:
            yield db

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino)

    def _connect(self) -> sqlite3.Connection:
        folder = state.private_folder(self._state_dir)
        # Made 0600 before SQLite opens it: SQLite gives its WAL and shared-memory files
        # the database file's mode.
        fd = os.open(folder / NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, state.FILE_MODE)
        os.close(fd)
        db = sqlite3.connect(folder / NAME, timeout=10, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; never torn
        if db.execute("PRAGMA user_version").fetchone()[0] < VERSION:
            with db:
                for statement in _SCHEMA:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={VERSION}")
        return db

    # --- the journal ------------------------------------------------------------------

    def record(self, row: dict[str, object]) -> None:
        """Append one journal row (journal.Change's fields); the oldest rows go past
        `JOURNAL_ROWS`."""
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._connected() as db:
            found = db.execute(
                f"INSERT INTO journal ({names}) VALUES ({marks})", list(row.values())
            )
            last = found.lastrowid or 0
            if last % TRIM_EVERY == 0 and last > JOURNAL_ROWS:
                db.execute("DELETE FROM journal WHERE id <= ?", (last - JOURNAL_ROWS,))

    def journal(self, project: bytes = b"", limit: int = 0) -> list[dict[str, Any]]:
        """Journal rows, newest first; of ``project`` only when given; ``limit`` 0: all.
        Names are stored as bytes (journal.py), read back as bytes."""
        query = "SELECT * FROM journal"
        args: list[object] = []
        if project:
            query += " WHERE project = ?"
            args.append(project)
        query += " ORDER BY id DESC"
        if limit:
            query += " LIMIT ?"
            args.append(limit)
        with self._connected() as db:
            cursor = db.execute(query, args)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, found, strict=True)) for found in cursor]

    # --- hidden lines over time -------------------------------------------------------

    def hidden_changed(
        self,
        slug: str,
        index: str,
        before: Iterable[str],
        after: Iterable[str],
        replaced: str = "",
        at_ns: int | None = None,
    ) -> None:
        """Index ``index`` of ``slug`` hides ``after`` from now on; the change replaced the
        own version ``replaced`` (its view path, '' for none), under which ``before``
        was hidden. The first record of an index records ``before`` too, a moment
        earlier: what was hidden before memfs kept this history."""
        now = at_ns if at_ns is not None else time.time_ns()
        with self._connected() as db:
            known = db.execute(
                "SELECT 1 FROM hidden WHERE project = ? AND idx = ? LIMIT 1", (slug, index)
            ).fetchone()
            if known is None:
                db.execute(
                    "INSERT INTO hidden (at_ns, project, idx, lines) VALUES (?, ?, ?, ?)",
                    (now - 1, slug, index, _lines(before)),
                )
            db.execute(
                "INSERT INTO hidden (at_ns, project, idx, lines, replaced) VALUES (?, ?, ?, ?, ?)",
                (now, slug, index, _lines(after), replaced),
            )

    def hidden_at(self, slug: str, index: str, at_ns: int) -> frozenset[str] | None:
        """What index ``index`` of ``slug`` hid at ``at_ns``: the set its last change at or
        before then left; None when memfs kept no history of it then."""
        with self._connected() as db:
            found = db.execute(
                "SELECT lines FROM hidden WHERE project = ? AND idx = ? AND at_ns <= ? "
                "ORDER BY at_ns DESC, id DESC LIMIT 1",
                (slug, index, at_ns),
            ).fetchone()
        return None if found is None else _parse(found[0])

    def hidden_under(self, slug: str, index: str, version: str) -> frozenset[str] | None:
        """What index ``index`` of ``slug`` hid while the own version now kept at
        ``version`` (a view path) was its own index: the set before the change that
        replaced it; None when no recorded change replaced it."""
        with self._connected() as db:
            change = db.execute(
                "SELECT id FROM hidden WHERE project = ? AND idx = ? AND replaced = ? "
                "ORDER BY id DESC LIMIT 1",
                (slug, index, version),
            ).fetchone()
            if change is None:
                return None
            found = db.execute(
                "SELECT lines FROM hidden WHERE project = ? AND idx = ? AND id < ? "
                "ORDER BY id DESC LIMIT 1",
                (slug, index, change[0]),
            ).fetchone()
        return None if found is None else _parse(found[0])

    # --- what memfs read of each source's files (issue 37) ----------------------------

    def baseline(self, folder: bytes, path: bytes) -> Baseline | None:
        """What memfs last read of ``path`` in source folder ``folder``, if it did."""
        with self._connected() as db:
            found = db.execute(
                "SELECT ino, size, mtime_ns, mode, data FROM files WHERE folder = ? AND path = ?",
                (folder, path),
            ).fetchone()
        return None if found is None else Baseline(*found)

    def baselines(self, folder: bytes) -> dict[bytes, tuple[int, int, int]]:
        """path -> (ino, size, mtime_ns) of every file memfs read in ``folder``."""
        with self._connected() as db:
            found = db.execute(
                "SELECT path, ino, size, mtime_ns FROM files WHERE folder = ?", (folder,)
            )
            return {row[0]: (row[1], row[2], row[3]) for row in found}

    def set_baseline(self, folder: bytes, path: bytes, b: Baseline) -> None:
        with self._connected() as db:
            db.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                (folder, path, b.ino, b.size, b.mtime_ns, b.mode, b.data),
            )

    def forget_baseline(self, folder: bytes, path: bytes) -> None:
        with self._connected() as db:
            db.execute("DELETE FROM files WHERE folder = ? AND path = ?", (folder, path))

    # --- the read-only sources' kept versions (issue 37) ------------------------------

    def kept_added(self, folder: bytes, name: str, size: int) -> None:
        with self._connected() as db:
            db.execute(
                "INSERT INTO kept (folder, name, size) VALUES (?, ?, ?)", (folder, name, size)
            )

    def kept_gone(self, folder: bytes, name: str) -> None:
        with self._connected() as db:
            db.execute("DELETE FROM kept WHERE folder = ? AND name = ?", (folder, name))

    def kept_over(self, budget: int, under: bytes = b"") -> list[tuple[bytes, str]]:
        """The kept versions to remove, kept first first, so that those below ``under``
        (every one when empty) take no more than ``budget`` bytes: never the newest kept
        version of a path (a folder's last row)."""
        with self._connected() as db:
            rows = db.execute(
                "SELECT id, folder, name, size FROM kept WHERE substr(folder, 1, ?) = ? "
                "ORDER BY id",
                (len(under), under),
            ).fetchall()
        newest = {}
        for row_id, folder, _, _ in rows:
            newest[folder] = row_id
        excess = sum(row[3] for row in rows) - budget
        gone = []
        for row_id, folder, name, size in rows:
            if excess <= 0:
                break
            if newest[folder] == row_id:
                continue
            gone.append((folder, name))
            excess -= size
        return gone


@dataclass(frozen=True)
class Baseline:
    """One file as memfs last read it: its inode, size, mtime, mode and bytes."""

    ino: int
    size: int
    mtime_ns: int
    mode: int
    data: bytes


def _lines(lines: Iterable[str]) -> str:
    # Lines are the user's text: surrogateescape keeps bytes that are not UTF-8 as they were.
    return json.dumps(sorted(lines), ensure_ascii=True)


def _parse(text: str) -> frozenset[str]:
    try:
        found = json.loads(text)
    except ValueError:
        return frozenset()
    return frozenset(line for line in found if isinstance(line, str))
