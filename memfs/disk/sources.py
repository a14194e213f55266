"""Every read of the source folders: slug listings, project scans, file bodies.

§5.1 and §10. Layer disk: imports neither pyfuse3 nor trio; every function is
synchronous and may block on the disk, so the adapter calls the slow ones from a thread.

Containment: a source's root comes from the user's configuration and is trusted; below it,
every component is opened with ``O_NOFOLLOW`` relative to its parent's descriptor
(`open_below`), so no symlink, ``..`` or rename race reaches outside the source. Symlinks
are never followed or served.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from memfs.rules import names

log = logging.getLogger(__name__)

K = TypeVar("K")
BodyRead = tuple[Path, tuple[str, ...], str, int]  # (root, parts, path, limit) of a body

# Names memfs itself creates in the own source while staging a write (see staging.py). They
# are never part of the merged view (names.RULES), and recovery removes leftovers.
STAGE_PREFIX = names.STAGE_PREFIX
# This process's stage names, and the mark it makes right after each of its renames
# (staging.mark_commit): the watcher skips a rename the mark follows, since the plan that
# made it reads the names back. Another memfs on the same source has another prefix, so
# its renames are read as anyone's.
OWN_STAGE_PREFIX = STAGE_PREFIX + secrets.token_hex(4)
OWN_MARK_PREFIX = OWN_STAGE_PREFIX + "mark."
NAME_MAX = 255
# Deeper folders are left out: a scan must never exhaust the stack on a hostile tree.
MAX_DEPTH = 64
NOT_READ = "not read: "  # the left-out reason of a folder a scan did not look into

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True, slots=True)
class FileStat:
    """One regular file as found in one source: its path relative to the project folder."""

    path: str
    size: int
    mtime_ns: int
    mode: int = 0o644  # permission bits
    # Whether memfs may open it for reading. An own file that is not stays shown with its
    # mode (a writer made it so, and chmod brings it back); a read-only source's is left
    # out by the project, which alone knows which source is whose.
    readable: bool = True
    # Shown as the view's atime; not part of equality: reading a file moves it, and that is
    # no change of the file.
    atime_ns: int = field(default=0, compare=False)
    # The inode: a file replaced on disk by one of the same size and mtime (a sync tool
    # keeps the sender's mtime) is still another file, whose bytes must be read again. Not
    # part of equality, like the atime: the project's Version compares it (holdings.py).
    ino: int = field(default=0, compare=False)
    # When the inode last changed (its link count, its mode): for a kept version under
    # .history/, when it was kept (§7.2 prunes in that order). Not part of equality.
    ctime_ns: int = field(default=0, compare=False)


@dataclass
class Scan:
    """What one source's folder of one project holds."""

    files: list[FileStat] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)  # every sub-folder, relative, '' excluded
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    # Regular files a name rule matches (names.RULES), with the rule's reason: the project
    # shows the own source's writers' files (names.Way.WRITERS) and counts the rest.
    by_name: list[tuple[FileStat, str]] = field(default_factory=list)
    exists: bool = True


def valid_name(name: str) -> bool:
    """A single path component memfs will serve or create."""
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and "\0" not in name
        and len(os.fsencode(name)) <= NAME_MAX
    )


def list_slug_folders(root: Path) -> list[str]:
    """The project entries directly in a source's root: real folders only, never links."""
    try:
        with os.scandir(root) as entries:
            return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("cannot list source root %s: %s", root, exc)
        return []


def folder_fd(
    root: Path, parts: Sequence[str], near: tuple[Sequence[str], int] | None = None
) -> int:
    """A descriptor for ``root/parts...`` the caller closes, refusing a symlink at any
    component below root.

    ``near`` is a folder of the same root already open (its parts and descriptor, which
    stays the caller's): when it holds the folder asked for, the walk starts there.

    Raises:
        OSError: ``ELOOP``/``ENOTDIR`` for a symlink or file in the way, ``ENOENT`` if absent.
    """
    if near is not None and tuple(parts[: len(near[0])]) == tuple(near[0]):
        return open_below(near[1], parts[len(near[0]) :])
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_below(fd, parts)
    finally:
        os.close(fd)


def open_below(dir_fd: int, parts: Sequence[str], flags: int = DIR_FLAGS) -> int:
    """A descriptor for ``parts`` below the folder ``dir_fd`` (which stays open): a folder,
    or with ``flags`` a file; each component opened with ``O_NOFOLLOW`` relative to its
    parent's descriptor, so none may be a symlink, the last one included.

    Raises:
        OSError: ``ELOOP``/``ENOTDIR`` for a symlink or file in the way, ``ENOENT`` if absent,
            ``EINVAL`` for a component that is no name (``..``, ``a/b``).
    """
    for part in parts:
        if not valid_name(part):
            raise OSError(errno.EINVAL, f"invalid path component {part!r}")
    if not parts:
        return os.dup(dir_fd)  # O_CLOEXEC like every descriptor os makes
    fd = dir_fd
    try:
        for i, part in enumerate(parts):
            child = os.open(part, flags if i == len(parts) - 1 else DIR_FLAGS, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = child
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise
    return fd


@contextmanager
def open_folder(root: Path, parts: Sequence[str]) -> Iterator[int]:
    """`folder_fd`, closed when the block ends."""
    fd = folder_fd(root, parts)
    try:
        yield fd
    finally:
        os.close(fd)


def split(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def scan(
    root: Path,
    parts: Sequence[str],
    max_bytes: int,
    only: frozenset[str] | None = None,
    under: str = "",
) -> Scan:
    """All regular files and folders below ``root/parts``, recursively, never following links.
    With ``only``, just those top-level names (a Claude Code config folder's user memory,
    §4.1: its ``projects/`` and the tool's own files are not walked). With ``under``, only
    what lies below that folder of it (relative; paths stay relative to ``root/parts``, and
    `exists` says whether that folder does).

    Special files, symlinks and files over ``max_bytes`` are left out and reported; a file
    memfs cannot read is listed with ``readable`` False (never left out for its mode here);
    a folder that vanishes mid-scan is simply missing from the result.
    """
    result = Scan()
    below = split(under)
    try:
        with open_folder(root, [*parts, *below]) as fd:
            if len(below) > MAX_DEPTH:  # as a whole scan leaves it: there, never looked into
                result.left_out.append((under, f"{NOT_READ}deeper than {MAX_DEPTH} folders"))
                return result
            top_only = only if not below else None  # only names the origin's top level
            _scan_dir(fd, f"{under}/" if below else "", max_bytes, result, len(below), top_only)
    except FileNotFoundError:
        result.exists = False
    except OSError as exc:
        result.exists = False
        where = root.joinpath(*parts, *below)
        if below and exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return result  # no folder there now; what is (a file, a link) has its own look
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            result.left_out.append((under, "symlink or not a folder"))
            log.warning("source folder %s is a symlink or not a folder; left out", where)
        else:
            result.left_out.append((under, f"cannot open: {exc.strerror}"))
            log.warning("cannot open source folder %s: %s", where, exc)
    return result


def scan_each(
    folders: Iterable[tuple[K, Path, Sequence[str], frozenset[str] | None]], max_bytes: int
) -> dict[K, tuple[Scan, int]]:
    """`scan` of each (key, root, parts, only) folder, with when its scan began
    (time.monotonic_ns), by key: what a project is built from (view/catalog.py's
    `Catalog.build`)."""
    found = {}
    for key, root, parts, only in folders:
        at = time.monotonic_ns()
        found[key] = (scan(root, parts, max_bytes, only), at)
    return found


def _scan_dir(
    fd: int, prefix: str, max_bytes: int, out: Scan, depth: int, only: frozenset[str] | None = None
) -> None:
    try:
        entries = list(os.scandir(fd))
        if only is not None:
            entries = [e for e in entries if e.name in only]
    except OSError as exc:
        out.left_out.append((prefix.rstrip("/"), f"{NOT_READ}cannot list: {exc.strerror}"))
        return
    for entry in entries:
        name = entry.name
        if name.startswith(OWN_STAGE_PREFIX):
            # This process's own stage (or commit mark): the watcher skips its events, so
            # a record of it here would outlive it; its writer's handle knows it instead.
            continue
        path = prefix + name
        try:
            st = entry.stat(follow_symlinks=False)
            reason = _leave_out_reason(name, st, max_bytes)
            readable = reason != "" or _readable(fd, name, st)
        except OSError:
            continue  # vanished since the listing (a new file at the name has its event)
        if reason == "":
            is_dir = stat.S_ISDIR(st.st_mode)
            by_name = names.left_out_reason(name, folder=is_dir)
            if by_name and is_dir:
                # A tool's folder (.git, .stversions): not memory, and not walked either.
                out.left_out.append((path, by_name))
            elif by_name:
                out.by_name.append((_file_stat(path, st, readable), by_name))
            elif is_dir:
                if depth >= MAX_DEPTH:
                    out.dirs.append(path)  # it is there; what it holds is not read
                    out.left_out.append((path, f"{NOT_READ}deeper than {MAX_DEPTH} folders"))
                else:
                    _scan_subdir(fd, name, path, max_bytes, out, depth + 1)
            else:
                out.files.append(_file_stat(path, st, readable))
        else:
            out.left_out.append((path, reason))


# Permission bits as one int object per value: S_IMODE's result is a new int (above the
# small-int cache) per file, 28 bytes each kept by every Version.
_MODES: dict[int, int] = {}


def _file_stat(path: str, st: os.stat_result, readable: bool = True) -> FileStat:
    mode = stat.S_IMODE(st.st_mode)
    mode = _MODES.setdefault(mode, mode)  # atomic under the GIL: workers call this too
    mtime, atime = st.st_mtime_ns, st.st_atime_ns
    if atime == mtime:
        atime = mtime  # one int object for both (every file kept holds these for its life)
    return FileStat(path, st.st_size, mtime, mode, readable, atime, st.st_ino, st.st_ctime_ns)


def _scan_subdir(fd: int, name: str, path: str, max_bytes: int, out: Scan, depth: int) -> None:
    try:
        child = os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        out.left_out.append((path, f"{NOT_READ}cannot open folder: {exc.strerror}"))
        return
    try:
        out.dirs.append(path)
        _scan_dir(child, path + "/", max_bytes, out, depth)
    finally:
        os.close(child)


def _leave_out_reason(name: str, st: os.stat_result, max_bytes: int) -> str:
    """Why an entry is not served, or '' when it is. Never its mode: see `_readable`."""
    if not valid_name(name):
        return "name too long"
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return ""
    if not stat.S_ISREG(mode):
        return "special file"
    if st.st_size > max_bytes:
        return f"over {max_bytes} bytes"
    return ""


def _readable(fd: int, name: str, st: os.stat_result) -> bool:
    """Whether memfs may open ``name`` (in folder ``fd``, found as ``st``) for reading.

    Raises:
        FileNotFoundError: it was renamed away or removed since its stat (a writer's temp
            file, a moment later): gone, not unreadable.
    """
    if stat.S_ISDIR(st.st_mode) or os.access(name, os.R_OK, dir_fd=fd, follow_symlinks=False):
        return True
    # access() only says no: look again, to tell gone from unreadable.
    again = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
        raise FileNotFoundError(errno.ENOENT, "replaced since its stat", name)
    return False


def stat_file(root: Path, parts: Sequence[str], path: str, max_bytes: int) -> FileStat | None:
    """One file's current state, or None when it is gone or would be left out."""
    found = look(root, parts, path, max_bytes)
    return found if isinstance(found, FileStat) else None


def look(root: Path, parts: Sequence[str], path: str, max_bytes: int) -> FileStat | str | None:
    """One file's current state; why it is left out (§5.1) when it would be; None when
    nothing is there (or a folder is)."""
    *dirs, name = split(path)
    try:
        with open_folder(root, [*parts, *dirs]) as fd:
            return _look_in(fd, name, path, max_bytes)
    except OSError:
        return None


def look_each(
    wanted: Sequence[tuple[Path, Sequence[str], str]], max_bytes: int
) -> list[FileStat | str | None]:
    """`look` at each (root, parts, path), opening each folder once, and from the nearest
    folder above it already open: a write's plan reads back two or three names of one
    folder (a rename's two sides) and the versions it kept, below that folder."""
    folders: dict[tuple[Path, tuple[str, ...]], int] = {}
    out: list[FileStat | str | None] = []
    try:
        for root, parts, path in wanted:
            *dirs, name = split(path)
            where = (root, (*parts, *dirs))
            try:
                fd = folders.get(where)
                if fd is None:
                    fd = folders[where] = folder_fd(*where, _nearest(folders, *where))
                out.append(_look_in(fd, name, path, max_bytes))
            except OSError:
                out.append(None)
    finally:
        for fd in folders.values():
            os.close(fd)
    return out


def _nearest(
    folders: dict[tuple[Path, tuple[str, ...]], int], root: Path, parts: tuple[str, ...]
) -> tuple[tuple[str, ...], int] | None:
    """Of the open ``folders``, the deepest one above ``root/parts``."""
    above = [p for (r, p) in folders if r == root and parts[: len(p)] == p]
    if not above:
        return None
    deepest = max(above, key=len)
    return deepest, folders[root, deepest]


def _look_in(dir_fd: int, name: str, path: str, max_bytes: int) -> FileStat | str | None:
    """`look` at ``name`` in the folder ``dir_fd``; OSError when it cannot."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        return None
    return _leave_out_reason(name, st, max_bytes) or _file_stat(
        path, st, _readable(dir_fd, name, st)
    )


def stat_folder(root: Path, parts: Sequence[str], path: str) -> FileStat | None:
    """A sub-folder's mode and mtime, or None when it is gone or not a real folder."""
    *dirs, name = split(path)
    try:
        with open_folder(root, [*parts, *dirs]) as fd:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return _file_stat(path, st)


def stat_first_folder(places: Iterable[tuple[Path, Sequence[str]]], path: str) -> FileStat | None:
    """`stat_folder` of ``path`` below each of ``places`` (root, parts) in turn: the first
    real folder found, or None."""
    for root, parts in places:
        found = stat_folder(root, parts, path)
        if found is not None:
            return found
    return None


def read_file(root: Path, parts: Sequence[str], path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of a source file, opened without following any link.

    Raises:
        OSError: the file is gone, unreadable, or a link.
    """
    *dirs, name = split(path)
    with open_folder(root, [*parts, *dirs]) as dir_fd:
        fd = _open_unseen(name, dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"not a regular file: {path}")
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bodies(reads: Sequence[tuple[K, BodyRead]]) -> dict[K, tuple[int, bytes]]:
    """Every read that succeeds, by key, with the limit it was read with (the renderings'
    bodies read ahead in a worker, view/documents.py's `bodies_wanted`; a file gone since
    is left to the rendering, which reports it)."""
    out: dict[K, tuple[int, bytes]] = {}
    for key, (root, parts, path, limit) in reads:
        try:
            out[key] = (limit, read_file(root, parts, path, limit))
        except OSError:
            continue
    return out


def _open_unseen(name: str, dir_fd: int) -> int:
    """memfs's own reads (renderings, read-ahead, adoption) leave the file's atime as it
    was: a user's atime, or one set with utimensat, is theirs. O_NOATIME is refused
    (EPERM) for a file memfs does not own; such a read may then move the atime."""
    try:
        return os.open(name, FILE_FLAGS | os.O_NOATIME, dir_fd=dir_fd)
    except PermissionError:
        return os.open(name, FILE_FLAGS, dir_fd=dir_fd)


def open_file(root: Path, parts: Sequence[str], path: str) -> int:
    """A read-only descriptor for a source file, for serving reads with ``os.pread``."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_below(root_fd, [*parts, *split(path)], FILE_FLAGS)
    finally:
        os.close(root_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"not a regular file: {path}")
    return fd
