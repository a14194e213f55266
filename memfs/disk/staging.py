"""Every write to a source folder: staged files, the atomic replace, kept history, recovery.

§7. Layer disk: imports neither pyfuse3 nor trio. Calls here block on the disk (fsync,
copies, mkdir): the adapter runs them from a worker thread. A plan's steps (steps.py) call
these helpers, all of one plan in a single such call; this module knows nothing of plans
and never imports steps.

The contract, written once: a write is staged in a temporary file in the target's own
folder (same filesystem, so the rename is atomic), and committed by fsync(file), rename over
the target, fsync(folder). Readers see the old or the new whole file, never a part. Only the
own source is ever written; every function takes the own folder explicitly.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memfs.disk import sources
from memfs.disk.sources import DIR_FLAGS
from memfs.rules import history

log = logging.getLogger(__name__)

FILE_MODE = 0o644
DIR_MODE = 0o755
RENAME_NOREPLACE = 1  # renameat2(2)'s flag, as the kernel passes it to rename


@dataclass(frozen=True)
class Place:
    """A folder in the own source: the project folder's root and its components below it."""

    root: Path
    parts: tuple[str, ...]

    def below(self, *names: str) -> Place:
        return Place(self.root, (*self.parts, *names))

    def __str__(self) -> str:
        return str(self.root.joinpath(*self.parts))


def open_dir(place: Place, *, create: bool, near: tuple[Place, int] | None = None) -> int:
    """A descriptor for ``place``; with ``create``, missing folders are made (mkdir -p).

    The source root is the user's (a fresh account may not have its ``projects/`` yet: with
    ``create`` it is made); below it no component may be a symlink (`sources.open_below`).
    ``near`` is a folder already open (its place and descriptor, which stays the
    caller's): when it holds ``place``, the walk starts there instead of at the root (a
    kept version's folder, below the project folder its writer's stage has open).
    """
    if near is not None and _holds(near[0], place):
        base, parts, mine = near[1], place.parts[len(near[0].parts) :], False
    else:
        base, parts, mine = _open_root(place, create=create), place.parts, True
    try:
        try:
            return sources.open_below(base, parts)
        except FileNotFoundError:
            if not create:
                raise
        return _make_below(base, parts)
    finally:
        if mine:
            os.close(base)


def _make_below(dir_fd: int, parts: Sequence[str]) -> int:
    """`open_dir`'s mkdir -p below ``dir_fd`` (which stays open), one component at a time."""
    fd = dir_fd
    try:
        for part in parts:
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # a concurrent writer made it
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = child
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise
    return fd


def _holds(folder: Place, place: Place) -> bool:
    return folder.root == place.root and place.parts[: len(folder.parts)] == folder.parts


def _open_root(place: Place, *, create: bool) -> int:
    try:
        return os.open(place.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise
    # Only now: a mkdir that finds the folder costs two syscalls at every stage made.
    place.root.mkdir(parents=True, exist_ok=True)
    return os.open(place.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


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


class Stage:
    """One open-for-write file: a temporary sibling of the target, renamed over it on commit.

    Not thread-safe: the adapter serialises calls per stage.
    """

    def __init__(self, folder: Place, name: str, *, initial_fd: int | None, mode: int) -> None:
        self.folder = folder
        self.name = name
        self.mode = mode
        self.dirty = False
        self.dead = False  # its name was unlinked: it never commits (forget_temp)
        self.kept: list[str] = []  # view paths the last commit kept or pruned (`keep_version`)
        self._dir_fd = open_dir(folder, create=True)
        self.temp = ""
        self.fd = -1
        try:
            self._new_temp(initial_fd)
        except BaseException:
            os.close(self._dir_fd)
            raise

    @classmethod
    def copy_of(
        cls, folder: Place, name: str, mode: int, head_fd: int, data: bytes | None
    ) -> Stage:
        """A stage starting as the head a writer opened: ``data`` (the MEMORY.md union), or
        the bytes behind ``head_fd``; not dirty until the writer changes it."""
        stage = cls(folder, name, initial_fd=None if data is not None else head_fd, mode=mode)
        try:
            if data is not None:
                os.pwrite(stage.fd, data, 0)
        except BaseException:
            stage.abort()
            raise
        return stage

    def retarget(self, folder: Place, name: str) -> None:
        """Its target was renamed while it was open: it commits under the new name, as an
        open file follows rename(2). The temp file moves along (a rename in the own source)."""
        if folder != self.folder:
            new_fd = open_dir(folder, create=True)
            try:
                if self.temp:
                    os.rename(self.temp, self.temp, src_dir_fd=self._dir_fd, dst_dir_fd=new_fd)
                # In place, as in _stop_writing: the trio thread may use the number meanwhile.
                os.dup2(new_fd, self._dir_fd, inheritable=False)
            finally:
                os.close(new_fd)
            self.folder = folder
        self.name = name

    def _new_temp(self, initial_fd: int | None) -> None:
        while True:
            temp = sources.OWN_STAGE_PREFIX + secrets.token_hex(4)
            try:
                fd = os.open(
                    temp,
                    os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    self.mode,
                    dir_fd=self._dir_fd,
                )
                break
            except FileExistsError:
                continue
        try:
            os.fchmod(fd, self.mode)  # the umask must not narrow what the writer asked for
            if initial_fd is not None:
                copy_fd(initial_fd, fd)
        except BaseException:
            # A copy-up that cannot fit (ENOSPC) leaves no temp file behind.
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self._dir_fd)
            os.close(fd)
            raise
        self.temp, self.fd = temp, fd

    def write(self, offset: int, data: bytes) -> int:
        self._restage_if_committed()
        self.dirty = True
        return os.pwrite(self.fd, data, offset)

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def truncate(self, size: int) -> None:
        self._restage_if_committed()
        self.dirty = True
        os.ftruncate(self.fd, size)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def on_disk(self) -> bool:
        """Whether its temp file is still there, not committed and not removed (by hand in
        the source, say): one fstat of the descriptor it holds (a link count), no path
        looked up, so the request thread may ask (`memfs status`)."""
        if not self.temp or self.fd < 0:
            return False
        try:
            return os.fstat(self.fd).st_nlink > 0
        except OSError:
            return False

    def forget_temp(self) -> None:
        """Its name was unlinked while open: the temp file goes now, its descriptor keeps
        the bytes for the writer, and it never commits."""
        if self.temp:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temp, dir_fd=self._dir_fd)
            self.temp = ""
        self.dead = True

    def _restage_if_committed(self) -> None:
        # After a commit the descriptor names the live target; a later write on the same
        # handle (a dup'd descriptor closed first) must not edit it in place.
        if not self.temp and not self.dead:
            old = self.fd
            self.mode = stat.S_IMODE(os.fstat(old).st_mode)  # keep a chmod made since
            self._new_temp(old)
            os.close(old)

    def set_times(self, atime_ns: int | None, mtime_ns: int | None) -> None:
        """futimens: None keeps what the stage has (UTIME_OMIT)."""
        st = os.fstat(self.fd)
        atime = st.st_atime_ns if atime_ns is None else atime_ns
        os.utime(self.fd, ns=(atime, st.st_mtime_ns if mtime_ns is None else mtime_ns))
        self.dirty = True

    def chmod(self, mode: int) -> None:
        self.mode = stat.S_IMODE(mode)
        os.fchmod(self.fd, self.mode)
        self.dirty = True

    def commit(
        self, keep: Keep | None = None, *, sync_folder: bool = True
    ) -> os.stat_result | None:
        """fsync, rename over the target, fsync the folder; None when there was nothing to do.

        Args:
            keep: where the replaced version is kept (handoffs); None keeps nothing.
            sync_folder: False for a writer's temporary name created by this stage: its
                bytes are made durable here, its name when it is renamed to its final one
                (`rename` fsyncs the folder), as the writer itself would on a local disk.

        Raises:
            OSError: from fsync or rename: the caller returns it to ``close()``.
        """
        if not self.dirty or not self.temp:
            return None
        os.fsync(self.fd)
        self._stop_writing()
        self.kept = keep_version(self.folder, self._dir_fd, self.name, keep)
        os.rename(self.temp, self.name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        mark_commit(self._dir_fd, self.fd)
        if sync_folder:
            os.fsync(self._dir_fd)
        self.temp = ""
        self.dirty = False
        return os.fstat(self.fd)

    def _stop_writing(self) -> None:
        """Before the rename, swap the writable descriptor for a read-only one on the same
        file: its close reports IN_CLOSE_WRITE under the stage's name, which the watcher
        skips, not under the target's, which it would read again after the commit read it.
        If no second descriptor can be had, the writable one stays (one more look).

        The swap keeps the descriptor's number (dup2): the trio thread may fstat it while
        this runs in a worker (a getattr asking its size), and a number closed under that
        call fails it (EBADF), or worse, names whatever file was opened next."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            ro = os.open(self.temp, flags, dir_fd=self._dir_fd)
        except OSError:
            return
        try:
            mine, found = os.fstat(self.fd), os.fstat(ro)
            if (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino):
                os.dup2(ro, self.fd, inheritable=False)  # closes the writable one
        finally:
            os.close(ro)

    def abort(self) -> None:
        """Drop an uncommitted temp file and close everything; safe to call twice."""
        if self.temp:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temp, dir_fd=self._dir_fd)
            self.temp = ""
        for fd in (self.fd, self._dir_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self._dir_fd = -1


def mark_commit(dir_fd: int, renamed: int | str) -> None:
    """Right after a commit's or a rename's rename(2), in the folder it renamed into, and
    before the plan reads the names back: an event under a name no one else uses (an
    ``OWN_MARK_PREFIX...`` name made and removed again).

    The watcher skips a rename's two events when this mark comes right after them in its
    queue (`inotify.sift`): only this process makes it, right after its own rename,
    so a rename it directly follows is that one (with another event between, the rename
    is read as usual). inotify merges an event into the one before it when the two are
    alike but for the cookie, so another writer's rename onto the same name could vanish
    into memfs's; one that comes before the mark also comes before the plan reads the
    names back, and one after it has its own event. Without the mark (it could not be
    made), the rename's events are read like any others.

    The mark is a second hard link to what was just renamed (``renamed``: its descriptor,
    or its name in ``dir_fd``), which makes the same IN_CREATE and IN_DELETE as a new file
    at a fifth of the price: on ext4 a link and unlink took 24 µs, a create and unlink
    114 µs (no inode is allocated and freed), and a write pays two marks. Where no link
    can be made (a folder, a file system without hard links, a file owned by someone else
    under ``fs.protected_hardlinks``, no /proc), an empty file is the mark.
    """
    name = sources.OWN_MARK_PREFIX + secrets.token_hex(4)
    try:
        if isinstance(renamed, int):
            # The descriptor's own file, whatever name it has now (unprivileged, unlike
            # linkat's AT_EMPTY_PATH).
            os.link(f"/proc/self/fd/{renamed}", name, dst_dir_fd=dir_fd, follow_symlinks=True)
        else:
            os.link(renamed, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        flags = os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.close(os.open(name, flags, 0o600, dir_fd=dir_fd))
        except OSError:
            return
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)  # else swept at the next mount, as any stage name


def copy_fd(src: int, dst: int) -> None:
    offset = 0
    while True:
        chunk = os.pread(src, 1 << 20, offset)
        if not chunk:
            return
        os.pwrite(dst, chunk, offset)
        offset += len(chunk)


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
        touched = keep.view_paths(_keep_one(dir_fd, name, st, kfd, keep))
        os.fsync(kfd)
    finally:
        os.close(kfd)
    if keep.project is not None:
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


def _keep_one(dir_fd: int, name: str, st: os.stat_result, kfd: int, keep: Keep) -> list[str]:
    """The link (or copy) of ``name`` into the history folder ``kfd``, and the pruning of
    its versions past ``keep.last``: the names that came or went there."""
    names = os.listdir(kfd)
    base = history.order(history.version_name(keep.prefix, st.st_mtime_ns))[0]
    # One more than the highest number of this second, never a freed lower one: the
    # newest kept version must sort last, or pruning would take it first.
    taken = [history.order(n)[1] for n in names if history.order(n)[0] == base]
    n = max(taken, default=0) + 1
    target = history.version_name(keep.prefix, st.st_mtime_ns, n)
    # The last ``last`` of the versions with this one among them. Pruned first, then
    # linked: memfs killed between the two leaves no more than ``last``.
    mine = sorted(
        [v for v in names if v.startswith(keep.prefix + "@")] + [target], key=history.order
    )
    dropped = mine[: max(0, len(mine) - keep.last)]
    touched = [old for old in dropped if old != target]
    for old in touched:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(old, dir_fd=kfd)
    while target not in dropped:  # the replaced version is not older than all it keeps
        try:
            _link_or_copy(dir_fd, name, kfd, target, st)
            touched.append(target)
            break
        except FileExistsError:  # made since the listing: the next number
            n += 1
            target = history.version_name(keep.prefix, st.st_mtime_ns, n)
    return touched


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


def replace(
    folder: Place, name: str, data: bytes, mtime_ns: int | None = None, *, mode: int = FILE_MODE
) -> None:
    """Write ``data`` to ``folder/name`` as one atomic replace, with exactly ``mode`` (the
    umask does not narrow it); used outside the mount and for memfs's own state."""
    stage = Stage(folder, name, initial_fd=None, mode=mode)
    try:
        stage.write(0, data)
        if mtime_ns is not None:
            os.utime(stage.fd, ns=(mtime_ns, mtime_ns))
        stage.commit()
    finally:
        stage.abort()


def remove_stale(folder: Place, names: Sequence[str]) -> int:
    """Remove temporary files a crashed memfs left in ``folder``; returns how many."""
    try:
        fd = open_dir(folder, create=False)
    except OSError:
        return 0
    removed = 0
    try:
        for name in names:
            if name.startswith(sources.STAGE_PREFIX):
                try:
                    os.unlink(name, dir_fd=fd)
                    removed += 1
                except OSError as exc:  # gone already, or a folder: not ours to remove
                    log.warning("cannot remove stale temp file %s/%s: %s", folder, name, exc)
    finally:
        os.close(fd)
    return removed


def unlink(folder: Place, name: str, keep: Keep | None = None) -> list[str]:
    """Remove ``folder/name``; with ``keep``, keep it as history first (§7.2). Returns the
    view paths of kept versions that came or went (`keep_version`)."""
    fd = open_dir(folder, create=False)
    try:
        kept = keep_version(folder, fd, name, keep)
        os.unlink(name, dir_fd=fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    return kept


def mkdir(folder: Place, name: str, mode: int) -> None:
    """A new folder with exactly ``mode``: memfs's own umask must not narrow what the
    caller asked for (§7.6)."""
    fd = open_dir(folder, create=True)
    try:
        os.mkdir(name, mode, dir_fd=fd)
        _chmod_nofollow(fd, name, mode)
    finally:
        os.close(fd)


def rmdir(folder: Place, name: str) -> None:
    fd = open_dir(folder, create=False)
    try:
        os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def rename(
    src: Place,
    src_name: str,
    dst: Place,
    dst_name: str,
    *,
    noreplace: bool = False,
    keep: Keep | None = None,
) -> list[str]:
    """Rename within the own source, atomically; with ``noreplace``, EEXIST if taken.

    ``keep`` keeps the replaced target as history, as `Stage.commit` does; returns the
    view paths of kept versions that came or went (`keep_version`).
    """
    sfd = open_dir(src, create=False)
    try:
        # Within one folder (an agent's temp file renamed over its target) one descriptor
        # serves both sides: a second walk from the root would open the same folder.
        dfd = sfd if src == dst else open_dir(dst, create=True)
        try:
            kept = keep_version(dst, dfd, dst_name, keep)
            if noreplace:
                _rename_noreplace(sfd, src_name, dfd, dst_name)
            else:
                os.rename(src_name, dst_name, src_dir_fd=sfd, dst_dir_fd=dfd)
            mark_commit(dfd, dst_name)
            os.fsync(dfd)
            if dfd != sfd:  # one folder: its one fsync made the rename durable
                os.fsync(sfd)
        finally:
            if dfd != sfd:
                os.close(dfd)
    finally:
        os.close(sfd)
    return kept


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _rename_noreplace(src_fd: int, src_name: str, dst_fd: int, dst_name: str) -> None:
    """renameat2(RENAME_NOREPLACE): atomic, for files and folders; EEXIST if taken.

    The os module has no renameat2; glibc has had it since 2.28.
    """
    done = _libc.renameat2(
        src_fd, os.fsencode(src_name), dst_fd, os.fsencode(dst_name), RENAME_NOREPLACE
    )
    if done != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst_name)


def set_attrs(
    folder: Place,
    name: str,
    *,
    mode: int | None = None,
    times_ns: tuple[int, int] | None = None,
    size: int | None = None,
) -> None:
    """chmod, utimens, truncate on a file or folder of the own source."""
    fd = open_dir(folder, create=False)
    try:
        # Size first: a truncate sets the mtime, which the times asked for must overwrite.
        if size is not None:
            tfd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                os.ftruncate(tfd, size)
            finally:
                os.close(tfd)
        if mode is not None:
            _chmod_nofollow(fd, name, mode)
        if times_ns is not None:
            os.utime(name, ns=times_ns, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def _chmod_nofollow(dir_fd: int, name: str, mode: int) -> None:
    """chmod that never reaches through a symlink (Linux has no lchmod).

    An O_PATH descriptor pins the inode found without following; chmod through its
    /proc/self/fd entry then changes exactly that inode.
    """
    pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if stat.S_ISLNK(os.fstat(pfd).st_mode):
            raise OSError(errno.ELOOP, f"refusing to chmod a symlink: {name}")
        os.chmod(f"/proc/self/fd/{pfd}", stat.S_IMODE(mode))
    finally:
        os.close(pfd)
