"""What memfs read of every source's files, and the versions a change on disk replaced
(§7.2, issue 37: nothing lost, whoever writes).

Layer disk: imports neither pyfuse3 nor trio; every call blocks on the disk (worker threads
only while serving; adapter/keeper.py decides when, from inotify's events).

memfs keeps the version a change *through the mount* replaces by linking it before the
change (keeping.py). A change made on disk by another process (Claude Code writing its own
folder, Gemini CLI rewriting a file in place, a consolidation deleting files) is seen only
after it happened: the bytes it replaced are gone by then. So memfs keeps, for every memory
file of every source, the bytes it last read of it (its *baseline*, in the store:
store.py's ``files``), and when the file is replaced, rewritten or removed, that baseline is
the version kept. What this promises, exactly:

* A file is read (`read`) once it stood unchanged for `STILL_NS` (a second): a file being
  written in place is a mix until its writer is done, and memfs cannot tell the bytes of
  a version it never saw stand still. A file renamed into place is whole at once.
* The last version of a removed file and the version a rename replaced are kept
  whenever memfs had read them: every file there at the mount's start is read then (or
  was read at an earlier mount and has not changed since), every new one a second after
  it stood still, or at once when it was renamed in.
* A version rewritten in place is kept when it stood still for a second before the
  rewrite began (it was read then); one rewritten again within that second is never seen.
  It is kept once the rewrite stood still in turn, and only if the bytes differ then (a
  truncate followed by the same text is no version); a write through the mount that is
  about to replace the file keeps it at once.
* Identical bytes are one version (keeping.py), so the commits through the mount, which
  keep their version themselves, add none here.

Where a kept version lands: the own source's in its own ``.history/`` (as the mount's
writes keep theirs); a read-only source's in the state folder, ``versions/<source>/`` and
the folder's path in the source below it, then ``.history/<path>/`` (never in the source:
read-only stays byte-identical), each file 0600; the view shows them under the project's
``.history/`` as that source's versions. Bounded per file (``versions``), per source folder
(``history_bytes``) and, for all the read-only sources' versions together, by
``state_bytes``: the ones kept first go first, never a file's last.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from memfs.disk import journal, keeping, sources, store
from memfs.disk.config import Limits
from memfs.disk.places import Place, open_dir, read_all
from memfs.disk.store import Baseline
from memfs.rules import history
from memfs.rules.history import HISTORY

STILL_NS = 1_000_000_000  # how long a file stands unchanged before memfs reads it
VERSIONS = "versions"  # the state folder's tree of read-only sources' kept versions
REPLACE, REWRITE, REMOVE = "replace", "rewrite", "remove"  # what a change on disk did


@dataclass(frozen=True)
class Folder:
    """One source folder whose files memfs keeps versions of: a project's folder in a
    source (``root``, ``parts``), the source's name, whether it is the own source."""

    source: str
    root: Path
    parts: tuple[str, ...]
    own: bool
    only: frozenset[str] | None = None  # the top-level names it holds memory under

    @property
    def path(self) -> Path:
        return self.root.joinpath(*self.parts)

    @property
    def key(self) -> bytes:
        """What the store keys its files by."""
        return os.fsencode(self.path)

    def kept(self, state_dir: Path) -> Place:
        """The folder whose ``.history/`` holds its kept versions: the own source's own
        folder, a read-only one's mirror in the state folder."""
        if self.own:
            return Place(self.root, self.parts)
        return Place(kept_root(state_dir, self.source), self.parts)


def kept_root(state_dir: Path, source: str) -> Path:
    """The state folder's tree of read-only source ``source``'s kept versions."""
    return state_dir / VERSIONS / source


# Held by each look at a file, and by every plan through the mount from its first step
# until it told the store what it left (`rebase`): a look sees the disk before a change
# memfs made or after the store knows it, never between, so memfs never takes its own
# change for one made on disk (and journals it once, as made through the mount).
GUARD = threading.Lock()


@dataclass
class Seen:
    """What a look at one file found changed on disk, and the version it kept."""

    what: str  # REPLACE, REWRITE, REMOVE
    path: str
    before: int | None
    after: int | None
    kept: list[str] = field(default_factory=list)  # view paths that came or went
    version: str = ""  # the view path of the version holding what it replaced


@dataclass
class Looked:
    """A look's outcome: what changed (None: nothing to tell), and whether the file must
    be looked at again later (it has not stood still long enough to be read)."""

    seen: Seen | None = None
    again: bool = False


def look(
    db: store.Store,
    folder: Folder,
    path: str,
    limits: Limits,
    state_dir: Path,
    *,
    now_ns: int | None = None,
) -> Looked:
    """Compare ``path`` of ``folder`` on disk with what memfs last read of it; keep that as
    a version if the file was replaced, rewritten or removed; read the file if it stood
    still long enough (else ask to be looked at again)."""
    with GUARD:
        return _look(db, folder, path, limits, state_dir, now_ns)


def _look(
    db: store.Store,
    folder: Folder,
    path: str,
    limits: Limits,
    state_dir: Path,
    now_ns: int | None,
    *,
    final: bool = False,
) -> Looked:
    now = time.time_ns() if now_ns is None else now_ns
    name = os.fsencode(path)
    base = db.baseline(folder.key, name)
    st = _stat(folder, path)
    if st is None or not stat.S_ISREG(st.st_mode):
        if base is None:
            return Looked()
        kept, version = keep(db, folder, path, base, limits, state_dir)
        db.forget_baseline(folder.key, name)
        return Looked(Seen(REMOVE, path, base.size, None, kept, version))
    if base is not None and (st.st_ino, st.st_size, st.st_mtime_ns) == (
        base.ino,
        base.size,
        base.mtime_ns,
    ):
        return Looked()
    renamed_in = base is None or st.st_ino != base.ino
    # Read as it stands, to compare: a touch, or the same bytes written again, is no
    # change, even while its writer is not done (the same bytes are the same version).
    current = read(folder, path, limits.max_file_bytes, now_ns=now, whole=True)
    if base is not None and current is not None and current.data == base.data:
        db.set_baseline(folder.key, name, current)
        return Looked()
    # A file renamed into place is whole; one written in place, a version once still.
    settled = current is not None and (renamed_in or not _settling(current.mtime_ns, now))
    if base is not None and not settled and not final and _unsettled(folder, path, limits, now):
        # Still being written in place: what it becomes may be the bytes memfs holds
        # again (a truncate, then the same text), which is no version. The store keeps
        # those bytes meanwhile, so waiting loses nothing; a plan through the mount
        # that is about to replace the file does not wait (`final`).
        return Looked(again=True)
    seen = None
    if base is not None:
        what = REPLACE if renamed_in else REWRITE
        kept, version = keep(db, folder, path, base, limits, state_dir)
        seen = Seen(what, path, base.size, st.st_size, kept, version)
        db.forget_baseline(folder.key, name)
    if current is not None and settled:
        db.set_baseline(folder.key, name, current)
    return Looked(seen, again=not settled and _unsettled(folder, path, limits, now))


def sweep(
    db: store.Store, folder: Folder, limits: Limits, state_dir: Path, *, now_ns: int | None = None
) -> tuple[list[Seen], list[str]]:
    """Every file of ``folder`` against what memfs read of it at an earlier look (a mount
    before this one, or its folder's first look now): one changed or removed meanwhile
    keeps the version memfs read; one never read is read, if it stands still. Returns the
    changes seen and the paths to look at again (not standing still yet)."""
    scan = sources.scan(folder.root, folder.parts, limits.max_file_bytes, folder.only)
    if not scan.exists and not folder.root.is_dir():
        return [], []  # the source itself is away (not mounted yet, moved): nothing to say
    # A folder gone from a source that stands (`rm -rf memory/`): each file it held is
    # removed, and keeps its last version.
    on_disk = {f.path: f for f in scan.files if history.keeps_versions(f.path)}
    seen: list[Seen] = []
    again: list[str] = []
    known = {os.fsdecode(p): was for p, was in db.baselines(folder.key).items()}
    for path in sorted(known.keys() | on_disk.keys()):
        f = on_disk.get(path)
        if f is not None and known.get(path) == (f.ino, f.size, f.mtime_ns):
            continue  # as memfs read it: most files at most starts
        if path in known and f is None and _exists(folder, path):
            continue  # left out since (a name rule, its size): not removed
        found = look(db, folder, path, limits, state_dir, now_ns=now_ns)
        if found.seen is not None:
            seen.append(found.seen)
        if found.again:
            again.append(path)
    return seen, again


@dataclass(frozen=True)
class OwnFolder:
    """The own folder a plan through the mount changes, with what `catch_up` and `rebase`
    need: the project's slug (for the journal), the limits, the state folder."""

    folder: Folder
    slug: str
    limits: Limits
    state_dir: Path


def catch_up(own: OwnFolder, paths: Iterable[str] | None, *, now_ns: int | None = None) -> None:
    """Before a plan changes ``paths`` of the own folder (None: it renames a folder, any
    path may change): whatever changed there on disk since memfs last read it keeps its
    version and is journaled now (the keeper's look may not have come yet), so the plan's
    own change, which the store then learns (`rebase`), never hides it. Call with `GUARD`
    held until `rebase` is done."""
    db = store.of(own.state_dir)
    for path in _every_path(db, own) if paths is None else paths:
        if history.keeps_versions(path):
            found = _look(db, own.folder, path, own.limits, own.state_dir, now_ns, final=True)
            if found.seen is not None:
                record(own.state_dir, own.slug, own.folder.source, found.seen)


def rebase(own: OwnFolder, paths: Iterable[str] | None) -> None:
    """What a plan through the mount left at ``paths`` of the own folder (None: every
    path) is what memfs read of them now (read at once: each is a whole file renamed
    into place, or gone). The plan kept the versions it replaced itself (keeping.py)."""
    db = store.of(own.state_dir)
    key = own.folder.key
    for path in _every_path(db, own) if paths is None else paths:
        if not history.keeps_versions(path):
            continue
        found = read(own.folder, path, own.limits.max_file_bytes, whole=True)
        if found is None:
            db.forget_baseline(key, os.fsencode(path))
        else:
            db.set_baseline(key, os.fsencode(path), found)


def _every_path(db: store.Store, own: OwnFolder) -> list[str]:
    """Every path of the own folder memfs read or that is there now: what a folder renamed
    whole may have changed."""
    folder = own.folder
    scan = sources.scan(folder.root, folder.parts, own.limits.max_file_bytes, folder.only)
    known = {os.fsdecode(p) for p in db.baselines(folder.key)}
    return sorted(known | {f.path for f in scan.files})


def record(state_dir: Path, slug: str, source: str, seen: Seen) -> None:
    """Journal ``seen``, a change of ``source``'s file of project ``slug`` made on disk by
    a process the kernel does not name (§7.2)."""
    change = journal.Change(
        slug,
        seen.path,
        seen.what,
        before=seen.before,
        after=seen.after,
        kept=seen.version,
        way=journal.DISK,
        source=source,
    )
    journal.record(state_dir, change)


def read(
    folder: Folder, path: str, max_bytes: int, *, now_ns: int | None = None, whole: bool = False
) -> Baseline | None:
    """``path`` of ``folder`` as it stands, if it stood still for `STILL_NS` (or
    ``whole``: a file just renamed into place is a whole version already) and did not
    change while it was read; None when it did not (or is no file memfs serves)."""
    now = time.time_ns() if now_ns is None else now_ns
    try:
        fd = _open(folder, path)
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode) or before.st_size > max_bytes:
            return None
        if not whole and _settling(before.st_mtime_ns, now):
            return None
        data = read_all(fd)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        return None
    if len(data) != after.st_size:
        return None
    return Baseline(after.st_ino, after.st_size, after.st_mtime_ns, after.st_mode, data)


def keep(
    db: store.Store, folder: Folder, path: str, base: Baseline, limits: Limits, state_dir: Path
) -> tuple[list[str], str]:
    """Keep ``base`` as a version of ``path``: in the own source's ``.history/``, or a
    read-only source's mirror in the state folder (bounded there, see the module).
    Returns the view paths of versions kept or pruned, and that of the version holding
    ``base`` (added now or kept already: identical bytes are one version)."""
    place = folder.kept(state_dir)
    history = place.below(HISTORY, *sources.split(path))
    mode = base.mode if folder.own else 0o600  # the state folder's files are private
    spec = keeping.Keep(history, folder.source, limits.versions, path, place)
    try:
        kept, version = keeping.keep_bytes(spec, base.data, mode, base.mtime_ns)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return [], ""  # the folder went, or is no folder now: nothing to keep it in
        raise
    if folder.own:
        return kept, version
    # The state folder's kept versions, counted in the store by their folder below
    # `versions/` (``<source>/<parts>/.history/<path>``), in the order kept.
    row = _row(folder, f"{HISTORY}/{path}")
    prefix = f"{HISTORY}/{path}/"
    for view in kept:
        name = view[len(prefix) :]
        if _exists_in(history, name):
            db.kept_added(row, name, len(base.data))
        else:
            db.kept_gone(row, name)
    pruned = _bound(db, folder, limits, state_dir)
    return kept + pruned, "" if version in pruned else version


def drop(folder: Folder, views: Iterable[str]) -> None:
    """Remove the own ``folder``'s kept versions at ``views`` (``.history/<path>/<name>``),
    to keep it within its bytes for history (the keeper decides which)."""
    for view in views:
        *dirs, name = sources.split(view)
        with (
            contextlib.suppress(OSError),
            sources.open_folder(folder.root, [*folder.parts, *dirs]) as fd,
        ):
            os.unlink(name, dir_fd=fd)


def _row(folder: Folder, inside: str) -> bytes:
    """The store's name of folder ``inside`` of ``folder``'s mirror in the state folder."""
    return os.fsencode(str(Path(folder.source, *folder.parts, *sources.split(inside))))


def _bound(db: store.Store, folder: Folder, limits: Limits, state_dir: Path) -> list[str]:
    """Prune the read-only sources' kept versions past ``history_bytes`` for this folder
    and ``state_bytes`` for all of them, kept first first, never a file's last; returns
    the view paths pruned of this folder."""
    mine = _row(folder, "") + b"/"
    gone = db.kept_over(limits.history_bytes, mine) + db.kept_over(limits.state_bytes)
    pruned = []
    for kept_folder, name in dict.fromkeys(gone):
        with contextlib.suppress(OSError):
            os.unlink(state_dir / VERSIONS / os.fsdecode(kept_folder) / name)
        db.kept_gone(kept_folder, name)
        if kept_folder.startswith(mine):
            pruned.append(f"{os.fsdecode(kept_folder[len(mine) :])}/{name}")
    return pruned


def _stat(folder: Folder, path: str) -> os.stat_result | None:
    *dirs, name = sources.split(path)
    try:
        with sources.open_folder(folder.root, [*folder.parts, *dirs]) as fd:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None


def _settling(mtime_ns: int, now_ns: int) -> bool:
    """Whether a file was changed too lately to be read as a version: within `STILL_NS`
    (an mtime ahead of the clock, as `touch -d` or another machine's leaves, is read
    at once: waiting for it would never end)."""
    return 0 <= now_ns - mtime_ns < STILL_NS


def _unsettled(folder: Folder, path: str, limits: Limits, now_ns: int) -> bool:
    """Whether ``path`` is a file memfs would read once it stands still (a file it cannot
    read, or too big to serve, is not looked at again until it changes)."""
    st = _stat(folder, path)
    return (
        st is not None
        and stat.S_ISREG(st.st_mode)
        and st.st_size <= limits.max_file_bytes
        and _settling(st.st_mtime_ns, now_ns)
    )


def _exists(folder: Folder, path: str) -> bool:
    found = _stat(folder, path)
    return found is not None and stat.S_ISREG(found.st_mode)


def _exists_in(place: Place, name: str) -> bool:
    try:
        fd = open_dir(place, create=False)
    except OSError:
        return False
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _open(folder: Folder, path: str) -> int:
    *dirs, name = sources.split(path)
    with sources.open_folder(folder.root, [*folder.parts, *dirs]) as fd:
        try:
            return os.open(name, sources.FILE_FLAGS | os.O_NOATIME, dir_fd=fd)
        except PermissionError:
            return os.open(name, sources.FILE_FLAGS, dir_fd=fd)
