"""The write floor: the cheapest pyfuse3 filesystem that makes a write as durable as memfs.

``python -m tests.bench.passfs MOUNTPOINT FOLDER`` passes one flat folder through. It does
a write's disk work and nothing else, with memfs's durability (§7.1, §7.3):

- an ``O_TRUNC`` open stages a temporary file in FOLDER; the first flush (``close()``)
  fsyncs it, renames it over the target and fsyncs the folder;
- ``create``, ``write`` and ``fsync`` go straight to the file of that name;
- ``rename`` renames and then fsyncs the folder (the name is durable when it returns).

Everything runs on the one trio thread, blocking it on the disk, which memfs must never
do (§7a): so no write through pyfuse3 can be cheaper than here, and the benchmark
prints memfs's writes against it beside the ratios to the bare folder. It keeps memfs's
caching choices (one hour entry and attribute timeouts, noatime). The xattr
``user.null.requests`` on the root returns the request counters as JSON.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import pyfuse3

from tests.bench.nullfs import serve

TIMEOUT = 3600.0
REQUESTS_XATTR = b"user.null.requests"
STAGE_SUFFIX = b".passfs-stage"

T = TypeVar("T")


def _call(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except OSError as exc:
        raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None


class PassFS(pyfuse3.Operations):
    def __init__(self, folder: str) -> None:
        super().__init__()
        self.requests: Counter[str] = Counter()
        self.dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.ino_of: dict[bytes, int] = {}
        self.name_of: dict[int, bytes] = {}
        self.next_ino = pyfuse3.ROOT_INODE + 1
        # fh -> (descriptor, name, the stage's name while an O_TRUNC open is not committed)
        self.open_files: dict[int, tuple[int, bytes, bytes | None]] = {}
        self.next_fh = 1

    def _ino(self, name: bytes) -> int:
        ino = self.ino_of.get(name)
        if ino is None:
            ino = self.ino_of[name] = self.next_ino
            self.name_of[ino] = name
            self.next_ino += 1
        return ino

    @staticmethod
    def _attrs(ino: int, st: os.stat_result) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        e.entry_timeout = e.attr_timeout = TIMEOUT
        e.st_mode, e.st_nlink, e.st_size = st.st_mode, st.st_nlink, st.st_size
        e.st_uid, e.st_gid = st.st_uid, st.st_gid
        e.st_atime_ns, e.st_mtime_ns, e.st_ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
        e.st_blksize, e.st_blocks = 4096, st.st_blocks
        return e

    def _stat(self, name: bytes) -> os.stat_result:
        return _call(lambda: os.stat(name, dir_fd=self.dir_fd, follow_symlinks=False))

    def _fh(self, fd: int, name: bytes, stage: bytes | None) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.open_files[fh] = (fd, name, stage)
        return fh

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self.requests["lookup"] += 1
        if parent_inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(self._ino(name), self._stat(name))

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        self.requests["getattr"] += 1
        if inode == pyfuse3.ROOT_INODE:
            return self._attrs(inode, os.fstat(self.dir_fd))
        return self._attrs(inode, self._stat(self.name_of[inode]))

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self.requests["setattr"] += 1
        if fields.update_size:
            if fh is None:
                raise pyfuse3.FUSEError(errno.ENOSYS)  # the benchmark truncates only at open
            fd = self.open_files[fh][0]
            _call(lambda: os.ftruncate(fd, attr.st_size))
        return await self.getattr(inode, ctx)

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        self.requests["open"] += 1
        name = self.name_of[inode]
        if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
            stage = name + STAGE_SUFFIX
            mode = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            fd = _call(lambda: os.open(stage, mode, 0o644, dir_fd=self.dir_fd))
            return pyfuse3.FileInfo(fh=self._fh(fd, name, stage), direct_io=True)
        fd = _call(lambda: os.open(name, flags & ~os.O_CREAT | os.O_CLOEXEC, dir_fd=self.dir_fd))
        return pyfuse3.FileInfo(fh=self._fh(fd, name, None), direct_io=True)

    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self.requests["create"] += 1
        flags |= os.O_CREAT | os.O_CLOEXEC
        fd = _call(lambda: os.open(name, flags, mode, dir_fd=self.dir_fd))
        info = pyfuse3.FileInfo(fh=self._fh(fd, name, None), direct_io=True)
        return info, self._attrs(self._ino(name), os.fstat(fd))

    async def read(self, fh: int, off: int, size: int) -> bytes:
        self.requests["read"] += 1
        return _call(lambda: os.pread(self.open_files[fh][0], size, off))

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.requests["write"] += 1
        return _call(lambda: os.pwrite(self.open_files[fh][0], buf, off))

    async def fsync(self, fh: int, datasync: bool) -> None:
        self.requests["fsync"] += 1
        _call(lambda: os.fsync(self.open_files[fh][0]))

    async def flush(self, fh: int) -> None:
        self.requests["flush"] += 1
        fd, name, stage = self.open_files[fh]
        if stage is None:
            return
        _call(lambda: os.fsync(fd))
        _call(lambda: os.rename(stage, name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd))
        _call(lambda: os.fsync(self.dir_fd))
        self.open_files[fh] = (fd, name, None)

    async def release(self, fh: int) -> None:
        self.requests["release"] += 1
        fd, _, stage = self.open_files.pop(fh)
        os.close(fd)
        if stage is not None:
            os.unlink(stage, dir_fd=self.dir_fd)

    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        self.requests["rename"] += 1
        if flags:
            raise pyfuse3.FUSEError(errno.EINVAL)
        _call(lambda: os.rename(name_old, name_new, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd))
        _call(lambda: os.fsync(self.dir_fd))
        ino = self.ino_of.pop(name_old, None)
        replaced = self.ino_of.pop(name_new, None)
        if replaced is not None:
            del self.name_of[replaced]
        if ino is not None:
            self.ino_of[name_new], self.name_of[ino] = ino, name_new

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self.requests["unlink"] += 1
        _call(lambda: os.unlink(name, dir_fd=self.dir_fd))

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        if inode == pyfuse3.ROOT_INODE and name == REQUESTS_XATTR:
            return json.dumps(dict(self.requests)).encode()
        # Counted as memfs counts it: the kernel asks for security.capability before writes.
        self.requests["getxattr"] += 1
        raise pyfuse3.FUSEError(errno.ENODATA)


def main() -> int:
    mountpoint, folder = sys.argv[1], sys.argv[2]
    serve(PassFS(folder), mountpoint, "passfs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
