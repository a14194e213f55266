"""Every write to a source folder: staged files, the atomic replace, recovery (the versions
a change replaces are kept by keeping.py).

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

from memfs.disk import sources
from memfs.disk.keeping import Keep, keep_version
from memfs.disk.places import DIR_MODE, Place, copy_fd, open_dir, read_all

__all__ = ["DIR_MODE", "Keep", "Place", "copy_fd", "keep_version", "open_dir", "read_all"]

log = logging.getLogger(__name__)

FILE_MODE = 0o644
RENAME_NOREPLACE = 1  # renameat2(2)'s flag, as the kernel passes it to rename
# utimensat's (atime, mtime) in ns; a None side keeps what the file has (UTIME_OMIT)
Times = tuple[int | None, int | None]


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
        self.dirty = True
        return os.pwrite(self.fd, data, offset)

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def truncate(self, size: int) -> None:
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

    def restage(self) -> None:
        """A new temp file, copied from what the last commit landed: after a commit the
        descriptor names the live target (or a kept version), and a later change on the
        same handle (a dup'd descriptor closed first) must not edit that in place. The
        write session asks for it (view/session.py, `Need.RESTAGE`), in a worker."""
        if self.temp or self.dead:
            return
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

    def keep_as_version(self, keep: Keep) -> list[str]:
        """Its name was replaced by another file while it was open (§7.2): what it staged
        becomes a kept version of its path (``keep``), not the file. fsync, then its temp
        file is linked into the history folder (pruned as any keep) and removed; returns
        the view paths kept or pruned. Empty bytes keep nothing, as an empty replaced
        version does not."""
        if not self.temp:
            return []
        os.fsync(self.fd)
        self._stop_writing()
        self.kept = keep_version(self.folder, self._dir_fd, self.temp, keep)
        os.unlink(self.temp, dir_fd=self._dir_fd)
        self.temp = ""
        self.dirty = False
        return self.kept

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
    times_ns: Times | None = None,
    size: int | None = None,
) -> None:
    """chmod, utimens, truncate on a file or folder of the own source (a side of
    ``times_ns`` that is None keeps its time: read here, with the rest of the change)."""
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
            atime, mtime = times_ns
            if atime is None or mtime is None:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                atime = st.st_atime_ns if atime is None else atime
                mtime = st.st_mtime_ns if mtime is None else mtime
            os.utime(name, ns=(atime, mtime), dir_fd=fd, follow_symlinks=False)
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
