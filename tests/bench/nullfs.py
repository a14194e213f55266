"""The pyfuse3 floor: a filesystem that does nothing but answer, for comparison with memfs.

``python -m tests.bench.nullfs MOUNTPOINT SHAPE.json`` serves the tree described in
SHAPE.json (``{"dirs": [path, ...], "files": [[path, size], ...]}``, paths relative to
the root; the benchmark records memfs's own tree there), every file full of one byte. It
makes memfs's caching choices (one hour entry and attribute timeouts, pages kept across
opens, noatime) and its handlers are as cheap as handlers get, so the time a request takes
here is what pyfuse3 and trio cost; the benchmark prints it beside memfs's. The xattr
``user.null.requests`` on the root returns the request counters as JSON.

With ``NULLFS_SPIN_US=N`` in the environment every handler first spins N µs: a floor that
does that much work a request, so the benchmark can show what a few µs of a daemon's own
work become on this machine (`run.Bench.floor_pairs`).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyfuse3
import trio

TIMEOUT = 3600.0
REQUESTS_XATTR = b"user.null.requests"
SPIN_ENV = "NULLFS_SPIN_US"
SPUN = ("lookup", "getattr", "opendir", "readdir", "releasedir", "open", "read", "flush", "release")


class NullFS(pyfuse3.Operations):
    def __init__(self, dirs: list[str], files: list[tuple[str, int]]) -> None:
        super().__init__()
        self.requests: Counter[str] = Counter()
        self.uid, self.gid = os.getuid(), os.getgid()
        self.size: dict[int, int] = {}  # inode -> file size; folders absent
        self.children: dict[int, list[tuple[bytes, int]]] = {pyfuse3.ROOT_INODE: []}
        self.by_name: dict[tuple[int, bytes], int] = {}  # (parent, name) -> inode
        ino_of = {"": pyfuse3.ROOT_INODE}
        next_ino = pyfuse3.ROOT_INODE + 1
        for path, size in [(d, -1) for d in sorted(dirs, key=lambda d: d.count("/"))] + files:
            parent, _, name = path.rpartition("/")
            ino = next_ino
            next_ino += 1
            ino_of[path] = ino
            if size < 0:
                self.children[ino] = []
            else:
                self.size[ino] = size
            entry = (os.fsencode(name), ino)
            self.children[ino_of[parent]].append(entry)
            self.by_name[(ino_of[parent], entry[0])] = ino
        for entries in self.children.values():
            entries.sort()
        self.data = b"x" * max(self.size.values(), default=0)

    def _attrs(self, ino: int) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        e.entry_timeout = e.attr_timeout = TIMEOUT
        size = self.size.get(ino)
        if size is None:
            e.st_mode = stat.S_IFDIR | 0o755
            e.st_nlink = 2
        else:
            e.st_mode = stat.S_IFREG | 0o644
            e.st_nlink = 1
            e.st_size = size
        e.st_uid, e.st_gid = self.uid, self.gid
        e.st_blksize = 4096
        e.st_blocks = (e.st_size + 511) // 512
        return e

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self.requests["lookup"] += 1
        ino = self.by_name.get((parent_inode, name))
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(ino)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        self.requests["getattr"] += 1
        return self._attrs(inode)

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self.requests["opendir"] += 1
        return inode

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        self.requests["readdir"] += 1
        entries = self.children[fh]
        for pos in range(start_id, len(entries)):
            name, ino = entries[pos]
            if not pyfuse3.readdir_reply(token, name, self._attrs(ino), pos + 1):
                return

    async def releasedir(self, fh: int) -> None:
        self.requests["releasedir"] += 1

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        self.requests["open"] += 1
        return pyfuse3.FileInfo(fh=inode, keep_cache=True)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        self.requests["read"] += 1
        end = min(off + size, self.size[fh])
        return self.data[off:end] if end > off else b""

    async def flush(self, fh: int) -> None:
        self.requests["flush"] += 1

    async def release(self, fh: int) -> None:
        self.requests["release"] += 1

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        if inode == pyfuse3.ROOT_INODE and name == REQUESTS_XATTR:
            return json.dumps(dict(self.requests)).encode()
        raise pyfuse3.FUSEError(errno.ENODATA)


def spin(ops: NullFS, us: float) -> None:
    """Make each of ``ops``'s handlers (`SPUN`) spin ``us`` µs before it answers."""
    ns = int(us * 1000)

    def spun(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*args: Any) -> Any:
            end = time.perf_counter_ns() + ns
            while time.perf_counter_ns() < end:
                pass
            return await handler(*args)

        return wrapper

    for name in SPUN:
        setattr(ops, name, spun(getattr(ops, name)))


def serve(ops: pyfuse3.Operations, mountpoint: str, fsname: str) -> None:
    """Mount ``ops`` with memfs's mount options and answer until it is unmounted (the
    benchmark's comparison filesystems: this one and `tests.bench.passfs`)."""
    options = set(pyfuse3.default_options) | {f"fsname={fsname}", "noatime"}
    pyfuse3.init(ops, mountpoint, options)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


def main() -> int:
    mountpoint, shape_path = sys.argv[1], Path(sys.argv[2])
    shape = json.loads(shape_path.read_text())
    ops = NullFS(shape["dirs"], [(p, s) for p, s in shape["files"]])
    if os.environ.get(SPIN_ENV):
        spin(ops, float(os.environ[SPIN_ENV]))
    serve(ops, mountpoint, "nullfs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
