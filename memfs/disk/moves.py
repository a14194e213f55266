"""The project roots memfs saw, and the moves it follows (issue 38, §4.2): in the store.

Layer disk: imports neither pyfuse3 nor trio; every call blocks (statx, SQLite, at most one
`git` run per new root), so while serving it runs in a worker thread (adapter/moves.py),
never per request: once per working folder `here` resolves, kept two seconds there.

Two tables of the store (disk/store.py), made here when first used:

* ``roots``: each project root memfs resolved while its project had memory: path, slug,
  and what identifies the folder (device, inode, statx birth time, the git repository's
  root commit). A path seen again with another folder there is recorded anew.
* ``moves``: each move followed (old slug -> new slug, both paths), until `memfs adopt
  take` makes it permanent (``taken``: its memory copied into the own source's folder of
  the new slug, so the view no longer needs to follow it).

The decision itself is rules/moves.py's; this module reads what it needs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from memfs.disk import sources, store
from memfs.disk.config import Config
from memfs.rules import moves as rules
from memfs.rules import slug as slugs
from memfs.rules.moves import Root, Verdict

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 5.0
TRANSCRIPT_HEAD = 65_536  # bytes of a session transcript read for its working folder
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS roots (
        path BLOB PRIMARY KEY,
        slug TEXT NOT NULL,
        dev INTEGER NOT NULL,
        ino INTEGER NOT NULL,
        birth_ns INTEGER NOT NULL,
        gcommit TEXT NOT NULL DEFAULT '',
        seen_ns INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS roots_by_ino ON roots (dev, ino)",
    "CREATE INDEX IF NOT EXISTS roots_by_commit ON roots (gcommit)",
    """CREATE TABLE IF NOT EXISTS moves (
        old_slug TEXT PRIMARY KEY,
        new_slug TEXT NOT NULL,
        old_path BLOB NOT NULL,
        new_path BLOB NOT NULL,
        at_ns INTEGER NOT NULL,
        taken INTEGER NOT NULL DEFAULT 0
    )""",
)


@dataclass(frozen=True)
class Move:
    """A move memfs follows (or followed, ``taken``)."""

    old_slug: str
    new_slug: str
    old_path: str
    new_path: str
    at_ns: int
    taken: bool = False


# --- the folder itself -------------------------------------------------------------------

_AT_FDCWD = -100
_STATX_INO = 0x100
_STATX_BTIME = 0x800


class _Timestamp(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32), ("_pad", ctypes.c_int32))


class _Statx(ctypes.Structure):
    # struct statx of linux/stat.h (stable ABI); the spare words at the end pad it to 256.
    _fields_ = (
        ("stx_mask", ctypes.c_uint32),
        ("stx_blksize", ctypes.c_uint32),
        ("stx_attributes", ctypes.c_uint64),
        ("stx_nlink", ctypes.c_uint32),
        ("stx_uid", ctypes.c_uint32),
        ("stx_gid", ctypes.c_uint32),
        ("stx_mode", ctypes.c_uint16),
        ("_spare0", ctypes.c_uint16),
        ("stx_ino", ctypes.c_uint64),
        ("stx_size", ctypes.c_uint64),
        ("stx_blocks", ctypes.c_uint64),
        ("stx_attributes_mask", ctypes.c_uint64),
        ("stx_atime", _Timestamp),
        ("stx_btime", _Timestamp),
        ("stx_ctime", _Timestamp),
        ("stx_mtime", _Timestamp),
        ("stx_rdev_major", ctypes.c_uint32),
        ("stx_rdev_minor", ctypes.c_uint32),
        ("stx_dev_major", ctypes.c_uint32),
        ("stx_dev_minor", ctypes.c_uint32),
        ("_spare", ctypes.c_uint64 * 14),
    )


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_statx = getattr(_libc, "statx", None)


def birth_ns(path: str) -> int:
    """The folder's birth time (statx's btime) in ns; 0 where it cannot be read: a file
    system that keeps none, a libc without statx."""
    if _statx is None:
        return 0
    buf = _Statx()
    if _statx(_AT_FDCWD, os.fsencode(path), 0, _STATX_INO | _STATX_BTIME, ctypes.byref(buf)):
        return 0
    if not buf.stx_mask & _STATX_BTIME:
        return 0
    return int(buf.stx_btime.tv_sec) * 1_000_000_000 + int(buf.stx_btime.tv_nsec)


def root_commit(path: str) -> str:
    """The root commit of the git repository at ``path`` (the first, sorted, of several),
    '' outside one or before its first commit. Runs `git` once: only for a root memfs
    records for the first time or asks `memfs adopt list` about."""
    if not os.path.lexists(os.path.join(path, ".git")):
        return ""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(
            ["git", "-C", path, "rev-list", "--max-parents=0", "HEAD"],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    found = sorted(done.stdout.decode("ascii", "replace").split())
    return found[0] if done.returncode == 0 and found else ""


def identify(path: str, slug: str, *, commit: bool = True) -> Root | None:
    """What ``path`` is now (None: no folder there). ``commit``: read the git root commit
    too (a `git` run), else left ''."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    found = root_commit(path) if commit else ""
    return Root(path, slug, st.st_dev, st.st_ino, birth_ns(path), found)


# --- the tables --------------------------------------------------------------------------


def _db(state_dir: Path) -> store.Store:
    found = store.of(state_dir)
    with found.transaction() as db:
        for statement in _SCHEMA:
            db.execute(statement)
    return found


def _root(row: tuple[bytes, str, int, int, int, str]) -> Root:
    return Root(os.fsdecode(row[0]), row[1], row[2], row[3], row[4], row[5])


def _move(row: tuple[str, str, bytes, bytes, int, int]) -> Move:
    return Move(row[0], row[1], os.fsdecode(row[2]), os.fsdecode(row[3]), row[4], bool(row[5]))


_ROOT_COLUMNS = "path, slug, dev, ino, birth_ns, gcommit"
_MOVE_COLUMNS = "old_slug, new_slug, old_path, new_path, at_ns, taken"


def recorded(state_dir: Path) -> list[Root]:
    with _db(state_dir).transaction() as db:
        return [_root(r) for r in db.execute(f"SELECT {_ROOT_COLUMNS} FROM roots ORDER BY path")]


def moves(state_dir: Path, *, taken: bool = False) -> list[Move]:
    """The moves followed (with ``taken``: those made permanent too), oldest first."""
    query = f"SELECT {_MOVE_COLUMNS} FROM moves"
    if not taken:
        query += " WHERE taken = 0"
    with _db(state_dir).transaction() as db:
        return [_move(r) for r in db.execute(query + " ORDER BY at_ns, old_slug")]


def followed_now(state_dir: Path) -> list[Move]:
    """The moves followed, for a command without a mount: none, and no store made, when
    memfs never kept one."""
    if not (state_dir / store.NAME).exists():
        return []
    return moves(state_dir)


def followed(state_dir: Path) -> dict[str, str]:
    """old slug -> new slug of every move followed now (what the catalog takes in)."""
    return {m.old_slug: m.new_slug for m in moves(state_dir)}


def record(state_dir: Path, root: Root) -> None:
    with _db(state_dir).transaction() as db:
        db.execute(
            f"INSERT OR REPLACE INTO roots ({_ROOT_COLUMNS}, seen_ns) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (os.fsencode(root.path), root.slug, root.dev, root.ino, root.birth_ns, root.commit,
             time.time_ns()),
        )  # fmt: skip


def follow(state_dir: Path, old: Root, new: Root, *, taken: bool = False) -> Move:
    """Record that ``old``'s project moved to ``new`` (``taken``: made permanent at once).
    A project moved back where it was no longer follows its move away."""
    move = Move(old.slug, new.slug, old.path, new.path, time.time_ns(), taken)
    with _db(state_dir).transaction() as db:
        db.execute("DELETE FROM moves WHERE old_slug = ? AND taken = 0", (new.slug,))
        db.execute(
            f"INSERT OR REPLACE INTO moves ({_MOVE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (move.old_slug, move.new_slug, os.fsencode(move.old_path), os.fsencode(move.new_path),
             move.at_ns, int(taken)),
        )  # fmt: skip
    return move


def mark_taken(state_dir: Path, old_slug: str) -> None:
    with _db(state_dir).transaction() as db:
        db.execute("UPDATE moves SET taken = 1 WHERE old_slug = ?", (old_slug,))


def _alive(root: Root, all_moves: dict[str, Move]) -> bool:
    """Whether ``root`` is a live project still: its path exists, or its project moved on
    to a path that exists (then a folder elsewhere is a second copy of that one)."""
    if os.path.lexists(root.path):
        return True
    move = all_moves.get(root.slug)
    return move is not None and os.path.lexists(move.new_path)


def _related(state_dir: Path, new: Root) -> list[Root]:
    """The recorded roots that may be ``new``'s folder or repository, but ``new`` itself."""
    with _db(state_dir).transaction() as db:
        rows = db.execute(
            f"SELECT {_ROOT_COLUMNS} FROM roots WHERE (dev = ? AND ino = ?) "
            "OR (gcommit != '' AND gcommit = ?)",
            (new.dev, new.ino, new.commit),
        ).fetchall()
    return [r for r in map(_root, rows) if r.path != new.path]


def judged(state_dir: Path, new: Root) -> list[tuple[Root, Verdict]]:
    """Every recorded root related to ``new`` with its verdict (rules.verdicts)."""
    known = _related(state_dir, new)
    all_moves = {m.old_slug: m for m in moves(state_dir, taken=True)}
    alive = {r.path: _alive(r, all_moves) for r in known}
    return rules.verdicts(known, alive, new)


def look(state_dir: Path, path: str, slug: str, has_memory: bool) -> list[Move]:
    """The project root ``path`` (slug ``slug``) was just resolved: follow every move into
    it that is certain, and record it if its project has memory (or gets some so).
    Returns the moves it now follows, new ones only. Cheap when nothing is new: a stat,
    a statx and two indexed queries; `git` runs once for a root seen for the first time.

    A move is certain only when the old path is gone and the very folder (inode and birth
    time) is here now; a root only the repository ties to this one is left to `offers`.
    """
    found = identify(path, slug, commit=False)
    if found is None:
        return []
    if not (state_dir / store.NAME).exists():
        # No store yet: nothing recorded to compare with, and none made for nothing.
        if has_memory:
            _record_once(state_dir, found)
        return []
    known = {m.old_slug: m for m in moves(state_dir, taken=True)}
    added = []
    for old, verdict in judged(state_dir, found):
        if verdict is Verdict.CERTAIN and old.slug not in known:
            added.append(follow(state_dir, old, found))
            log.info("following a moved project: %s -> %s", old.path, path)
    if has_memory or added:
        _record_once(state_dir, found)
    return added


def _record_once(state_dir: Path, found: Root) -> bool:
    """Record ``found`` unless the same folder is recorded at its path already (then no
    write and no `git` run); returns whether it recorded it."""
    with _db(state_dir).transaction() as db:
        row = db.execute(
            f"SELECT {_ROOT_COLUMNS} FROM roots WHERE path = ?", (os.fsencode(found.path),)
        ).fetchone()
    if row is not None:
        known = _root(row)
        if (known.slug, known.dev, known.ino, known.birth_ns) == (
            found.slug, found.dev, found.ino, found.birth_ns,
        ):  # fmt: skip
            return False
    record(state_dir, Root(**{**found.__dict__, "commit": root_commit(found.path)}))
    return True


def offers(state_dir: Path, path: str, slug: str) -> list[Root]:
    """The recorded roots `memfs adopt list` offers to the project at ``path``: the same
    repository (its root commit), another folder, whose old path is gone and whose memory
    no other live project follows. Not those followed already."""
    found = identify(path, slug)
    if found is None or not found.commit:
        return []
    followed_now = {m.old_slug for m in moves(state_dir, taken=True)}
    return [
        old
        for old, verdict in judged(state_dir, found)
        if verdict is Verdict.OFFERED and old.slug not in followed_now
    ]


# --- a slug asked for by name ---------------------------------------------------------------

PATHS_AT_MOST = 8  # folders a slug may name (`a-b` is `a/b`, `a-b`, `a.b`, ...) looked at
LISTINGS_AT_MOST = 64  # folders listed on the way down, whatever the slug


def paths_of(slug: str) -> list[str]:
    """The existing folders whose Claude Code slug is ``slug``, found by walking down from
    ``/`` along it: a folder's entry is followed only while its slug begins the one asked
    for (links are not followed). Slugs are lossy (`-` stands for any character outside
    ``[A-Za-z0-9]``), so several folders may match; a slug cut at its length limit (its
    hash suffix) names none this way. Bounded: at most `LISTINGS_AT_MOST` folders listed."""
    if len(slug) > slugs.SLUG_MAX or not slug.startswith("-"):
        return []
    found: list[str] = []
    todo = ["/"]
    listed = 0
    while todo and len(found) < PATHS_AT_MOST and listed < LISTINGS_AT_MOST:
        folder = todo.pop()
        listed += 1
        try:
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            below = slugs.claude_slug(path)
            if below == slug:
                found.append(path)
            elif slug.startswith(below + "-"):
                todo.append(path)
    return found


def look_slug(state_dir: Path, slug: str) -> list[Move]:
    """A project folder was asked for by its slug (an orchestrator reading
    ``<mount>/<slug>/PREAMBLE-1200.md``), and no source holds it: follow a certain move into
    each project root that slug names (`look`). Nothing is walked while no root is
    recorded."""
    if not (state_dir / store.NAME).exists() or not recorded(state_dir):
        return []
    added = []
    for path in paths_of(slug):
        root = str(slugs.project_root(path))
        if root == path:
            added += look(state_dir, root, slug, False)
    return added


# --- roots learnt from Claude Code's transcripts ------------------------------------------


def learn(config: Config) -> int:
    """Record the root of every project whose memory a Claude Code account holds, as its
    session transcripts name it, while that root exists: so a project moved later is
    followed even if `here` was never asked from its old folder. Returns how many roots
    it recorded anew. Claude Code keeps ``<config>/projects/<slug>/<session>.jsonl``, each
    line a JSON record with the session's ``cwd``; the newest transcript of a slug is read,
    its first `TRANSCRIPT_HEAD` bytes. A working folder whose project is not that slug (a
    subfolder's session maps to its git root; one that moved since maps elsewhere) is left
    out. Blocking: a worker, once per mount; `git` runs once per root new to the store.
    """
    found = 0
    for source in config.sources:
        if source.claude_config is None:
            continue
        for name in sources.list_slug_folders(source.root):
            if not os.path.isdir(source.folder(name)):
                continue  # no memory there: nothing to follow
            cwd = _transcript_cwd(source.root / name)
            if cwd is None:
                continue
            root = str(slugs.project_root(cwd))
            slug = slugs.canonical_slug(slugs.claude_slug(root))
            if slug != slugs.canonical_slug(name):
                continue
            here = identify(root, slug, commit=False)
            if here is not None and _record_once(config.state_dir, here):
                found += 1
    return found


def _transcript_cwd(folder: Path) -> str | None:
    """The working folder the newest transcript in ``folder`` names, if it names one that
    exists now."""
    try:
        with os.scandir(folder) as entries:
            transcripts = [
                (e.stat(follow_symlinks=False).st_mtime_ns, e.path)
                for e in entries
                if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)
            ]
    except OSError:
        return None
    for _, path in sorted(transcripts, reverse=True)[:1]:
        try:
            with open(path, "rb") as f:
                head = f.read(TRANSCRIPT_HEAD)
        except OSError:
            return None
        for line in head.splitlines():
            cwd = _cwd_of(line)
            if cwd is not None:
                return cwd if os.path.isdir(cwd) else None
    return None


def _cwd_of(line: bytes) -> str | None:
    if b'"cwd"' not in line:
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None  # a line cut at TRANSCRIPT_HEAD, or not JSON
    cwd = record.get("cwd") if isinstance(record, dict) else None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None
