"""Kept versions in the own source's ``.history/``: the version a change replaces or
removes, linked (or copied) there before it goes, numbered in the order kept, pruned in
that order, identical bytes kept once (§7.2).

Layer disk: imports neither pyfuse3 nor trio; every call blocks on the disk (worker
threads only while serving). staging.py calls it from every step that replaces or
removes a file; it knows nothing of stages.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memfs.disk.places import Place, copy_fd, open_dir, read_all
from memfs.rules import history


@dataclass(frozen=True)
class Keep:
    """Where a replaced version is kept: ``<folder>/<prefix>@<UTC>.md``, the last ``last``.

    ``path`` is the project path whose versions these are (they show at
    ``.history/<path>/``). ``drop`` are other kept versions (view paths, below
    ``project``, the own source's project folder) that go to keep the project within its
    bytes for history (view/kept.py decides which).
    """

    folder: Place
    prefix: str
    last: int
    path: str = ""
    project: Place | None = None
    drop: tuple[str, ...] = ()

    def view_paths(self, names: Sequence[str]) -> list[str]:
        return [f"{history.HISTORY}/{self.path}/{name}" for name in names]


def keep_version(folder: Place, dir_fd: int, name: str, keep: Keep | None) -> list[str]:
    """Hard-link the current ``name`` (if any; in ``folder``, open as ``dir_fd``) into
    ``keep`` before it is replaced or removed, fsync that folder, then drop what
    ``keep.drop`` names. Returns the view paths that came or went there, versions pruned
    past ``keep.last`` among them (the caller updates its view of exactly those); with no
    ``keep`` (or no non-empty file at ``name``) it keeps nothing.

    A hard link costs no copy and makes the kept version exactly the replaced bytes: every
    change through the mount replaces a file by a rename (or removes its name), so nothing
    writes into the kept inode afterwards. Where no hard link can be made (a file system
    without them), the bytes are copied. The folder's fsync comes before the caller
    replaces the name: the kept version is durable first.
    """
    if keep is None:
        return []
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return []
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        # An empty version holds no memory: keeping it would only make a folder under
        # .history/ for every scratch file a tool makes and removes.
        return []
    kfd = open_dir(keep.folder, create=True, near=(folder, dir_fd))
    try:
        names, holder = _keep_one(dir_fd, name, st, kfd, keep)
        added = holder in names
        touched = keep.view_paths(names)
        os.fsync(kfd)
    finally:
        os.close(kfd)
    if keep.project is not None and added:
        # Only a version kept takes bytes: one kept already (identical bytes) drops nothing.
        for view in keep.drop:
            if _drop_kept(keep.project, view):
                touched.append(view)
    return touched


def _drop_kept(project: Place, view: str) -> bool:
    """Remove the kept version at ``view`` (``.history/<path>/<name>``) of the own project
    folder ``project``; False if it was gone already."""
    *folder, name = view.split("/")
    try:
        fd = open_dir(project.below(*folder), create=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        os.unlink(name, dir_fd=fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)


def _keep_one(
    dir_fd: int, name: str, st: os.stat_result, kfd: int, keep: Keep
) -> tuple[list[str], str]:
    """The link (or copy) of ``name`` into the history folder ``kfd``, and the pruning of
    its versions past ``keep.last``: the names that came or went there (`_keep_into`)."""
    return _keep_into(
        kfd,
        keep,
        st.st_size,
        st.st_mtime_ns,
        lambda: _read_at(dir_fd, name),
        lambda target: _link_or_copy(dir_fd, name, kfd, target, st),
    )


def keep_bytes(keep: Keep, data: bytes, mode: int, mtime_ns: int) -> tuple[list[str], str]:
    """Keep ``data`` (a version memfs read before it changed on disk, issue 37: the file
    is gone or rewritten, so there is nothing to link) in ``keep``, with its mode and
    mtime, as `keep_version` keeps a file. Returns the view paths that came or went, and
    the view path of the version that holds ``data`` (added now, or kept already with
    these very bytes; '' for empty bytes, which keep nothing)."""
    if not data:
        return [], ""
    kfd = open_dir(keep.folder, create=True)
    try:
        names, holder = _keep_into(
            kfd,
            keep,
            len(data),
            mtime_ns,
            lambda: data,
            lambda target: _write_copy(kfd, target, data, mode, mtime_ns),
        )
        touched = keep.view_paths(names)
        os.fsync(kfd)
    finally:
        os.close(kfd)
    return touched, keep.view_paths([holder])[0] if holder else ""


def _keep_into(
    kfd: int,
    keep: Keep,
    size: int,
    mtime_ns: int,
    read: Callable[[], bytes | None],
    put: Callable[[str], None],
) -> tuple[list[str], str]:
    """Keep a version of ``size`` bytes written at ``mtime_ns`` in the history folder
    ``kfd`` (``put`` makes the file of a name, ``read`` reads its bytes), and prune the
    versions past ``keep.last``: the names that came or went there, and the name of the
    version holding these bytes ('' when none is kept: ``versions = 0``).

    Versions go in the order they were kept, never by their mtime (§7.2): a version
    older by mtime than every kept one (`cp -p`, `rsync -a`, `touch -d`) is the newest
    kept all the same. That order is in the name: its number (``~N``, none for 1) is one
    more than any kept version's of the path, so it survives a copy or a sync of the
    folder, where ctimes do not. A version with the very bytes of one kept already is that
    version: nothing is added.
    """
    mine = _kept_in_order(kfd, keep.prefix)
    if keep.last <= 0:  # `versions = 0`: none is kept, and none stays
        for old, _ in mine:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old, dir_fd=kfd)
        return [old for old, _ in mine], ""
    n = max((history.order(v)[1] for v, _ in mine), default=0) + 1
    target = history.version_name(keep.prefix, mtime_ns, n)
    same = _same_bytes_kept(size, read, kfd, mine)
    if same is not None:
        return [], same  # kept already: identical bytes are one version
    # The last ``last`` with this one: pruned first, then linked, so memfs killed between
    # the two leaves no more than ``last``.
    touched = [old for old, _ in mine[: max(0, len(mine) + 1 - keep.last)]]
    for old in touched:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(old, dir_fd=kfd)
    while True:
        try:
            put(target)
            touched.append(target)
            return touched, target
        except FileExistsError:  # made since the listing: the next number
            n += 1
            target = history.version_name(keep.prefix, mtime_ns, n)


def _kept_in_order(kfd: int, prefix: str) -> list[tuple[str, os.stat_result]]:
    """The versions of ``prefix`` in the history folder ``kfd``, kept first first: by their
    number, then (versions an older memfs numbered per second) by ctime and name."""
    found = []
    for name in os.listdir(kfd):
        if not name.startswith(prefix + "@"):
            continue
        with contextlib.suppress(FileNotFoundError):
            found.append((name, os.stat(name, dir_fd=kfd, follow_symlinks=False)))
    return sorted(found, key=lambda f: (history.order(f[0])[1], f[1].st_ctime_ns, f[0]))


def _same_bytes_kept(
    size: int,
    read: Callable[[], bytes | None],
    kfd: int,
    kept: list[tuple[str, os.stat_result]],
) -> str | None:
    """The kept version holding the very bytes of the version, if one does (identical
    bytes are one version, §7.2). Only versions of the same size are read."""
    same_size = [v for v, vst in kept if vst.st_size == size]
    if not same_size:
        return None
    mine = read()
    return next((v for v in reversed(same_size) if _read_at(kfd, v) == mine), None)


def _read_at(dir_fd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def _link_or_copy(dir_fd: int, name: str, kfd: int, target: str, st: os.stat_result) -> None:
    """``target`` in ``kfd`` becomes the file ``name`` in ``dir_fd``: a hard link, or where
    the file system has none (EPERM, EMLINK, EXDEV, ENOTSUP), a copy with its times."""
    try:
        os.link(name, target, src_dir_fd=dir_fd, dst_dir_fd=kfd, follow_symlinks=False)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EMLINK, errno.EXDEV, errno.ENOTSUP):
            raise
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    src = os.open(name, flags, dir_fd=dir_fd)
    try:
        made = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        new = os.open(target, made, 0o600, dir_fd=kfd)
        try:
            copy_fd(src, new)
            os.fchmod(new, stat.S_IMODE(st.st_mode))
            os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.fsync(new)
        finally:
            os.close(new)
    finally:
        os.close(src)


def _write_copy(kfd: int, target: str, data: bytes, mode: int, mtime_ns: int) -> None:
    """``target`` in ``kfd``, a new file holding ``data`` with ``mode`` and ``mtime_ns``."""
    new = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=kfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(new, view) :]
        os.fchmod(new, stat.S_IMODE(mode))
        os.utime(new, ns=(mtime_ns, mtime_ns))
        os.fsync(new)
    finally:
        os.close(new)
