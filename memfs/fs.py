"""The pyfuse3 adapter: inode numbers, handles and errno over the catalog of projects.

A protocol adapter only: what the tree looks like is decided by catalog.py and project.py,
what is written by staging.py. This module translates inode numbers and bytes names into
core calls and core errors into ``FUSEError``, the only exception a handler lets out.

Threading: every handler runs on pyfuse3's one trio thread and must not block for long;
commits (fsync) go to a worker thread. Kernel cache invalidations are never sent from a
handler (that can deadlock the mount): handlers and the watcher queue them, and the task in
`Invalidator.run` sends them from a worker thread.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pyfuse3
import trio

from memfs import procs, sources, staging, state, writes
from memfs import slug as slugs
from memfs.catalog import Catalog
from memfs.config import Config
from memfs.project import HISTORY, MEMORY, PREAMBLE, Kind, Leaf, Origin, Project
from memfs.tree import parent_of
from memfs.watch import Watcher
from memfs.writes import RENAME_NOREPLACE

log = logging.getLogger(__name__)

ROOT_INODE = pyfuse3.ROOT_INODE
HERE_INODE = ROOT_INODE + 1
FIRST_FREE_INODE = HERE_INODE + 1
HERE = "here"
STATUS_XATTR = b"user.memfs.status"

# Long kernel caching, kept true by explicit invalidation on every change (FUSE-NOTES).
CACHE_TIMEOUT = 3600.0

Key = tuple[str, str]  # (slug, view path); ("", "") is the root, (slug, "") a project
ROOT_KEY: Key = ("", "")
HERE_KEY: Key = ("", HERE)

P = ParamSpec("P")
R = TypeVar("R")


def _oserror_to_fuse(fn: Callable[P, Any]) -> Callable[P, Any]:
    """Turn an OSError from a backing folder into FUSEError(errno); log anything else."""

    @wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except writes.Refused as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        except Exception:
            log.exception("unexpected error in %s", fn.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


def _err(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


@dataclass
class Handle:
    """One open file: a source file read lazily, a snapshot, or a staged write."""

    ino: int
    key: Key
    leaf: Leaf | None = None
    fd: int = -1  # source descriptor, opened on first read
    data: bytes | None = None  # PREAMBLE.md or the MEMORY.md union, fixed at open
    stage: staging.Stage | None = None
    # A handle keeps the version it replaces at most once: at its first commit, what stood
    # before it opened. Later commits of the same handle replace only its own bytes.
    keeps_history: bool = False
    # Created or opened with O_TRUNC and not committed yet: committed at release even when
    # nothing was written (`touch new`, `: > file`).
    unsaved: bool = False
    discard: bool = False  # unlinked before its first commit, or its writer was killed
    pid: int = 0  # the process that opened it for writing
    append: bool = False  # opened with O_APPEND


@dataclass
class Stats:
    requests: Counter[str] = field(default_factory=Counter)
    invalidations: int = 0
    invalidation_errors: int = 0
    commits: int = 0
    stale_swept: bool = False  # the crash sweep of the own source has finished
    stale_removed: int = 0


class Invalidator:
    """Sends queued kernel cache invalidations from outside any handler."""

    def __init__(self, stats: Stats) -> None:
        self._send, self._receive = trio.open_memory_channel[tuple[str, int, bytes]](math.inf)
        self._stats = stats
        self.enabled = True  # off in adapter tests, where no kernel is attached

    def entry(self, parent: int, name: str) -> None:
        if self.enabled:
            self._send.send_nowait(("entry", parent, os.fsencode(name)))

    def inode(self, ino: int) -> None:
        if self.enabled:
            self._send.send_nowait(("inode", ino, b""))

    async def run(self) -> None:
        async with self._receive:
            async for first in self._receive:
                batch = {first}
                while True:
                    try:
                        batch.add(self._receive.receive_nowait())
                    except trio.WouldBlock:
                        break
                # Abandoned on unmount: a notify stuck in the kernel must not hold up the exit.
                await trio.to_thread.run_sync(self._send_batch, batch, abandon_on_cancel=True)

    def _send_batch(self, batch: set[tuple[str, int, bytes]]) -> None:
        # Entries first: a dropped dentry makes the next walk look the name up again.
        for kind, ino, name in sorted(batch, key=lambda b: b[0]):
            try:
                if kind == "entry":
                    pyfuse3.invalidate_entry(ino, name)
                else:
                    pyfuse3.invalidate_inode(ino)
                self._stats.invalidations += 1
            except OSError as exc:
                # ENOENT: the kernel had no such entry or inode cached; nothing to forget.
                if exc.errno != errno.ENOENT:
                    self._stats.invalidation_errors += 1
                    log.debug("invalidate %s %s %r: %s", kind, ino, name, exc)


class MemFS(pyfuse3.Operations):
    """The merged view of SPEC 4 as a FUSE filesystem."""

    enable_writeback_cache = False

    def __init__(self, config: Config, mountpoint: Path) -> None:
        super().__init__()
        self.config = config
        # /proc/<pid>/cwd is always resolved: compare `here` callers with the real path.
        self.mountpoint = Path(os.path.realpath(mountpoint))
        self.catalog = Catalog(config)
        self.stats = Stats()
        self.invalidator = Invalidator(self.stats)
        self._uid, self._gid = os.getuid(), os.getgid()
        self.started_ns = time.time_ns()
        self._ino_by_key: dict[Key, int] = {ROOT_KEY: ROOT_INODE, HERE_KEY: HERE_INODE}
        self._key_by_ino: dict[int, Key] = {ROOT_INODE: ROOT_KEY, HERE_INODE: HERE_KEY}
        self._lookups: Counter[int] = Counter()  # inode -> the kernel's lookup count
        self._next_ino = FIRST_FREE_INODE
        self._handles: dict[int, Handle] = {}  # file handle -> open file
        self._dir_handles: dict[int, list[tuple[str, Key]]] = {}  # handle -> listing snapshot
        self._next_fh = 1
        self._commit_lock = trio.Lock()  # one commit at a time: history links stay ordered
        self._here_cache: dict[str, tuple[float, str]] = {}  # cwd -> (expiry, slug)
        self._pending: dict[Key, Handle] = {}  # created, not yet committed -> its handle
        self.watcher: Watcher | None = None  # set by mount.py; adapter tests run without

    def _check(self) -> None:
        """Assert every invariant of the adapter and the core below it; tests call it after
        each step."""
        assert all(self._ino_by_key.get(k) == i for i, k in self._key_by_ino.items())
        assert all(self._key_by_ino.get(i) == k for k, i in self._ino_by_key.items())
        assert all(n > 0 for n in self._lookups.values()), self._lookups
        assert all(any(h is p for h in self._handles.values()) for p in self._pending.values())
        self.catalog._check()

    # --- inodes ----------------------------------------------------------------------

    def _ino(self, key: Key) -> int:
        ino = self._ino_by_key.get(key)
        if ino is None:
            ino = self._next_ino
            self._next_ino += 1
            self._ino_by_key[key] = ino
            self._key_by_ino[ino] = key
        return ino

    def _key(self, ino: int) -> Key:
        key = self._key_by_ino.get(ino)
        if key is None:
            raise _err(errno.ENOENT)
        return key

    def _child_key(self, parent: int, name: bytes) -> Key:
        if len(name) > sources.NAME_MAX:
            raise _err(errno.ENAMETOOLONG)
        slug, path = self._key(parent)
        text = os.fsdecode(name)
        if not sources.valid_name(text):
            raise _err(errno.EINVAL)
        if parent == ROOT_INODE:
            return (text, "") if text != HERE else HERE_KEY
        if parent == HERE_INODE:
            raise _err(errno.ENOTDIR)
        return (slug, f"{path}/{text}" if path else text)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, n in inode_list:
            left = self._lookups[ino] - n
            if left > 0:
                self._lookups[ino] = left
                continue
            self._lookups.pop(ino, None)
            key = self._key_by_ino.get(ino)
            # Keep the number while the path exists, so a path keeps its inode across walks;
            # a vanished path's number is never handed out again.
            if key is not None and ino > HERE_INODE and not self._exists(key):
                del self._key_by_ino[ino]
                if self._ino_by_key.get(key) == ino:
                    del self._ino_by_key[key]

    def _exists(self, key: Key) -> bool:
        slug, path = key
        if not path:
            return self.catalog.has(slug) if slug else True
        project = self.catalog.loaded().get(slug)
        return project is not None and (
            project.tree.leaf(path) is not None or project.tree.is_dir(path)
        )

    # --- attributes ------------------------------------------------------------------

    def _project(self, slug: str) -> Project:
        project = self.catalog.project(slug)
        if project is None:
            raise _err(errno.ENOENT)
        if self.watcher is not None:
            self.watcher.ensure(project)
        return project

    def _attrs(self, ino: int, key: Key, project: Project | None = None) -> pyfuse3.EntryAttributes:
        """``project``: ``key``'s project when the caller has it already (readdir)."""
        slug, path = key
        if key == ROOT_KEY:
            return self._dir_attrs(ino, 0o755, self.started_ns)
        if key == HERE_KEY:
            return self._entry(ino, stat.S_IFLNK | 0o777, 0, self.started_ns, timeout=0.0)
        if not path:
            if not self.catalog.has(slug):
                raise _err(errno.ENOENT)
            return self._dir_attrs(ino, self._dir_mode(), self.started_ns)
        if project is None:
            project = self._project(slug)
        leaf = project.tree.leaf(path)
        if leaf is None:
            pending = self._pending.get(key)
            if pending is not None and pending.stage is not None:
                # Nothing committed yet: an empty file to all but its writer (_as_seen_by).
                st = os.fstat(pending.stage.fd)
                return self._entry(ino, stat.S_IFREG | pending.stage.mode, 0, st.st_mtime_ns)
            if not project.tree.is_dir(path):
                raise _err(errno.ENOENT)
            if writes.in_history(path):
                return self._dir_attrs(ino, 0o555, self.started_ns)
            found = project.folder_stat(path)
            if found is None:  # a folder only the merge makes: no real one to show
                return self._dir_attrs(ino, self._dir_mode(), self.started_ns)
            mode = found.mode if self.config.own is not None else found.mode & ~0o222
            return self._dir_attrs(ino, mode, found.mtime_ns)
        size = self._leaf_size(project, leaf)
        timeout = CACHE_TIMEOUT
        if leaf.kind is Kind.PREAMBLE:
            # Its size changes by itself when a future-dated file comes due: the kernel may
            # keep it only until then.
            due = (project.preamble_valid_until() - time.time_ns()) / 1e9
            timeout = max(0.0, min(CACHE_TIMEOUT, due))
        mode = stat.S_IFREG | self._file_mode(leaf)
        return self._entry(ino, mode, size, project.mtime_ns(leaf), timeout)

    def _dir_mode(self) -> int:
        return 0o755 if self.config.own is not None else 0o555

    def _file_mode(self, leaf: Leaf) -> int:
        """A head shows its real permission bits (a chmod through the mount shows);
        what memfs serves read-only shows no write bit."""
        writable = self.config.own is not None
        if leaf.kind is Kind.FILE and leaf.version is not None:
            return leaf.version.mode if writable else leaf.version.mode & ~0o222
        if leaf.kind is Kind.MEMORY and writable:
            return 0o644
        return 0o444

    def _leaf_size(self, project: Project, leaf: Leaf) -> int:
        if leaf.kind is Kind.PREAMBLE:
            return len(project.preamble(self._files_at(project.slug)))
        if leaf.kind is Kind.MEMORY:
            return len(project.memory_index())
        assert leaf.version is not None
        return leaf.version.size

    def _files_at(self, slug: str) -> str:
        return f"{self.mountpoint}/{slug}"

    def _dir_attrs(self, ino: int, mode: int, mtime_ns: int) -> pyfuse3.EntryAttributes:
        return self._entry(ino, stat.S_IFDIR | mode, 0, mtime_ns)

    def _entry(
        self, ino: int, mode: int, size: int, mtime_ns: int, timeout: float = CACHE_TIMEOUT
    ) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        e.generation = 0
        e.entry_timeout = timeout
        e.attr_timeout = timeout
        e.st_mode = mode
        e.st_nlink = 2 if stat.S_ISDIR(mode) else 1
        e.st_uid = self._uid
        e.st_gid = self._gid
        e.st_rdev = 0
        e.st_size = size
        e.st_blksize = 4096
        e.st_blocks = (size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = mtime_ns
        return e

    def _count(self, op: str) -> None:
        self.stats.requests[op] += 1

    @_oserror_to_fuse
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self._count("lookup")
        if name == b".":
            key = self._key(parent_inode)
        elif name == b"..":
            key = _parent_key(self._key(parent_inode))
        else:
            key = self._child_key(parent_inode, name)
        # Attributes first: a name that does not exist must not take an inode number
        # (editors and desktops probe many such names).
        attrs = self._attrs(0, key)
        attrs.st_ino = self._ino(key)
        self._lookups[attrs.st_ino] += 1
        return self._as_seen_by(attrs, ctx)

    @_oserror_to_fuse
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        self._count("getattr")
        return self._as_seen_by(self._attrs(inode, self._key(inode)), ctx)

    def _as_seen_by(
        self, attrs: pyfuse3.EntryAttributes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        """While a file is being written, its writer sees its own size, everyone else the
        committed file's (SPEC 7.1), and the kernel must ask again each time."""
        staged = [h for h in self._handles.values() if h.ino == attrs.st_ino and h.stage]
        if staged:
            me = procs.tgid(ctx.pid)
            mine = next((h for h in staged if h.pid == me), None)
            if mine is not None and mine.stage is not None:
                attrs.st_size = mine.stage.size()
                attrs.st_blocks = (attrs.st_size + 511) // 512
            attrs.attr_timeout = 0
            attrs.entry_timeout = 0
        return attrs

    @_oserror_to_fuse
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        self._count("readlink")
        if inode != HERE_INODE:
            raise _err(errno.EINVAL)
        return os.fsencode(await self._here(ctx.pid))

    async def _here(self, pid: int) -> str:
        """The caller's project: its cwd, up to the git work tree (SPEC 4)."""
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            raise _err(errno.ENOENT) from None
        mount = str(self.mountpoint)
        if cwd == mount or cwd.startswith(mount + "/"):
            # Inside the mount itself: walking up for .git would call back into this very
            # process and deadlock; the project is the first component.
            first = cwd[len(mount) + 1 :].split("/", 1)[0]
            if not first or first == HERE:
                raise _err(errno.ENOENT)
            return first
        now = time.monotonic()
        cached = self._here_cache.get(cwd)
        if cached is not None and cached[0] > now:
            return cached[1]
        slug = await trio.to_thread.run_sync(slugs.project_slug, cwd)
        if len(self._here_cache) > 1024:
            self._here_cache.clear()
        # Short-lived: a `git init` or a new worktree changes the answer.
        self._here_cache[cwd] = (now + 2.0, slug)
        return slug

    # --- listing ---------------------------------------------------------------------

    @_oserror_to_fuse
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self._count("opendir")
        slug, path = self._key(inode)
        if inode == ROOT_INODE:
            entries = [(HERE, HERE_KEY), *((s, (s, "")) for s in self.catalog.slugs())]
        else:
            project = self._project(slug)
            children = project.tree.children(path)
            if children is None:
                raise _err(errno.ENOTDIR if project.tree.leaf(path) else errno.ENOENT)
            prefix = f"{path}/" if path else ""
            names = set(children)
            names.update(
                p[len(prefix) :]
                for s_, p in self._pending
                if s_ == slug and p.startswith(prefix) and "/" not in p[len(prefix) :]
            )
            entries = [(name, (slug, prefix + name)) for name in sorted(names)]
        # A snapshot per handle: cookies are positions in it, so a folder changing
        # mid-listing neither skips nor repeats an entry.
        fh = self._new_fh()
        self._dir_handles[fh] = entries
        return fh

    @_oserror_to_fuse
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        self._count("readdir")
        entries = self._dir_handles.get(fh, [])
        project: Project | None = None  # the entries of a project folder share its project
        for pos in range(start_id, len(entries)):
            name, key = entries[pos]
            try:
                in_project = bool(key[0] and key[1])  # not an entry of the root
                if in_project and project is None:
                    project = self._project(key[0])
                attrs = self._attrs(0, key, project if in_project else None)
            except pyfuse3.FUSEError:
                continue  # vanished since opendir
            attrs.st_ino = self._ino(key)
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, pos + 1):
                return
            self._lookups[attrs.st_ino] += 1  # every accepted entry counts as a lookup

    async def releasedir(self, fh: int) -> None:
        self._dir_handles.pop(fh, None)

    def _new_fh(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    # --- reading ---------------------------------------------------------------------

    @_oserror_to_fuse
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        self._count("open")
        key = self._key(inode)
        slug, path = key
        if not path or key == HERE_KEY:
            raise _err(errno.EISDIR if key != HERE_KEY else errno.ELOOP)
        project = self._project(slug)
        leaf = project.tree.leaf(path)
        if leaf is None and key in self._pending:
            return await self._open_pending(inode, key, flags, procs.tgid(ctx.pid))
        if leaf is None:
            raise _err(errno.EISDIR if project.tree.is_dir(path) else errno.ENOENT)
        if flags & (os.O_WRONLY | os.O_RDWR):
            pid = procs.tgid(ctx.pid)
            return await self._open_for_write(inode, key, project, leaf, flags, pid)
        handle = Handle(inode, key, leaf)
        if leaf.kind is Kind.PREAMBLE:
            handle.data = project.preamble(self._files_at(slug))
            fh = self._add_handle(handle)
            # One snapshot per open, read whole: direct I/O keeps the page cache (and the
            # kernel's idea of the size, which may be older) out of its way. st_size stays
            # real for stat; mmap of PREAMBLE.md is not supported.
            return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False)
        if leaf.kind is Kind.MEMORY:
            handle.data = project.memory_index()
        if self._stage_of_inode(inode) is not None:
            # Being written: the page cache and the kernel's size follow the writer; this
            # reader must get the old whole file, straight from memfs (SPEC 7.1).
            return pyfuse3.FileInfo(fh=self._add_handle(handle), direct_io=True)
        return pyfuse3.FileInfo(fh=self._add_handle(handle), keep_cache=True)

    async def _open_pending(self, inode: int, key: Key, flags: int, pid: int) -> pyfuse3.FileInfo:
        """Open a name another open created and has not committed: it is still empty.

        Its writer's bytes so far are a part of a file; nobody else sees them (SPEC 7.1).
        """
        if not flags & (os.O_WRONLY | os.O_RDWR):
            handle = Handle(inode, key, None, data=b"")
            return pyfuse3.FileInfo(fh=self._add_handle(handle), direct_io=True)
        place = self._writable(key)
        name = parent_of(key[1])[1]
        stage = await trio.to_thread.run_sync(
            lambda: staging.Stage(place, name, initial_fd=None, mode=staging.FILE_MODE)
        )
        handle = Handle(inode, key, None, stage=stage, unsaved=True, keeps_history=True, pid=pid)
        handle.append = bool(flags & os.O_APPEND)
        return pyfuse3.FileInfo(fh=self._add_handle(handle), direct_io=True)

    def _add_handle(self, handle: Handle) -> int:
        fh = self._new_fh()
        self._handles[fh] = handle
        return fh

    @_oserror_to_fuse
    async def read(self, fh: int, off: int, size: int) -> bytes:
        self._count("read")
        handle = self._handles[fh]
        if handle.stage is not None:
            return handle.stage.read(off, size)
        if handle.data is not None:
            return handle.data[off : off + size]
        if handle.fd < 0:
            project = self._project(handle.key[0])
            assert handle.leaf is not None
            assert handle.leaf.version is not None
            handle.fd = project.open_fd(handle.leaf.version)
        return os.pread(handle.fd, size, off)

    @_oserror_to_fuse
    async def flush(self, fh: int) -> None:
        self._count("flush")
        handle = self._handles.get(fh)
        if handle is None or handle.stage is None or self._writer_killed(handle):
            return
        if handle.stage.dirty:
            await self._commit(handle)
        elif handle.unsaved and not procs.holds(handle.pid, self._mount_path(handle.key)):
            # The last descriptor of a bare create or truncation closes: commit now, so a
            # read right after close() sees it (a shell's dup of the descriptor closes
            # first and must not commit the empty in-between file).
            await self._commit(handle, force=True)

    def _writer_killed(self, handle: Handle) -> bool:
        """A writer killed mid-write (its files are closed for it) commits nothing."""
        if handle.pid and procs.killed_by_signal(handle.pid):
            handle.discard = True
            log.info("writer %d of %s was killed: its bytes are dropped", handle.pid, handle.key)
        return handle.discard

    def _mount_path(self, key: Key) -> str:
        slug, path = key
        return f"{self.mountpoint}/{slug}/{path}"

    @_oserror_to_fuse
    async def fsync(self, fh: int, datasync: bool) -> None:
        self._count("fsync")
        handle = self._handles.get(fh)
        if handle is not None and handle.stage is not None:
            # Asked for durability: even a bare new or truncated file is committed now.
            await self._commit(handle, force=handle.unsaved)

    async def release(self, fh: int) -> None:
        self._count("release")
        handle = self._handles.pop(fh, None)
        if handle is None:
            return
        if handle.fd >= 0:
            os.close(handle.fd)
        if handle.stage is not None:
            if handle.unsaved and not self._writer_killed(handle):
                try:
                    await self._commit(handle, force=True)
                except (OSError, pyfuse3.FUSEError) as exc:
                    log.warning("committing %s at release failed: %s", handle.key, exc)
            if self._pending.get(handle.key) is handle:
                del self._pending[handle.key]
            # A handle released without a successful flush (its commit failed) is dropped:
            # the target stays as it was.
            handle.stage.abort()

    # --- status ----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        projects = self.catalog.loaded()
        left_out = [
            {"project": slug, "source": src, "path": path, "why": why}
            for slug, p in projects.items()
            for src, path, why in p.counts.left_out
        ]
        return {
            "mountpoint": str(self.mountpoint),
            "pid": os.getpid(),
            "sources": [
                {"name": s.name, "path": s.template, "own": s.own} for s in self.config.sources
            ],
            "projects_listed": len(self.catalog.slugs()),
            "projects_loaded": len(projects),
            "files": sum(len(p.tree) for p in projects.values()),
            "left_out": left_out,
            "requests": dict(self.stats.requests),
            "requests_total": sum(self.stats.requests.values()),
            "invalidations": self.stats.invalidations,
            "invalidation_errors": self.stats.invalidation_errors,
            "commits": self.stats.commits,
            "stale_swept": self.stats.stale_swept,
            "stale_removed": self.stats.stale_removed,
            "inodes": len(self._key_by_ino),
            "open_handles": len(self._handles),
        }

    @_oserror_to_fuse
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        # Not counted: reading the counters must not change them.
        if inode == ROOT_INODE and name == STATUS_XATTR:
            return json.dumps(self.status(), sort_keys=True).encode()
        raise _err(errno.ENODATA)

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        return [STATUS_XATTR] if inode == ROOT_INODE else []

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        self._count("statfs")
        own = self.config.own or self.config.sources[0]
        data = pyfuse3.StatvfsData()
        try:
            st = os.statvfs(own.root)
        except OSError:
            st = os.statvfs("/")
        for attr in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail"):
            setattr(data, attr, getattr(st, attr))
        data.f_files = st.f_files
        data.f_ffree = st.f_ffree
        data.f_favail = st.f_favail
        data.f_namemax = sources.NAME_MAX
        return data

    # --- writing ---------------------------------------------------------------------

    def _writable(self, key: Key) -> staging.Place:
        """The own folder holding ``key``'s parent, or the errno SPEC 7.4 names."""
        if key == HERE_KEY:
            raise _err(errno.EACCES)
        return writes.target_folder(self.catalog, *key)

    def _stage_of_inode(self, inode: int) -> Handle | None:
        for handle in self._handles.values():
            if handle.ino == inode and handle.stage is not None:
                return handle
        return None

    async def _open_for_write(
        self, inode: int, key: Key, project: Project, leaf: Leaf, flags: int, pid: int
    ) -> pyfuse3.FileInfo:
        place = self._writable(key)
        if leaf.kind not in (Kind.FILE, Kind.MEMORY):
            raise _err(errno.EACCES)
        _, name = parent_of(key[1])
        handle = Handle(inode, key, leaf, keeps_history=True, pid=pid)
        if leaf.kind is Kind.MEMORY:
            handle.data = project.memory_index()  # what a read on this handle sees
        if flags & os.O_TRUNC:
            head = self._head_fd(project, leaf)
            try:
                # Nothing to copy: an empty temp file is a few quick syscalls, cheaper than
                # a hop to a worker thread.
                handle.stage = staging.Stage(
                    place, name, initial_fd=None, mode=_mode_of(head, leaf)
                )
            finally:
                os.close(head)
        # Otherwise the stage (a copy of the head) is made at the first write or truncate:
        # an editor opening read-write, or `touch`, copies nothing and leaves no temp file.
        # `> file` empties the file even if nothing is written; but a shell closes a dup of
        # the descriptor (a flush) before writing, so the bare truncation is committed only
        # at release, and readers never see the empty in-between file.
        handle.unsaved = bool(flags & os.O_TRUNC)
        handle.append = bool(flags & os.O_APPEND)
        # Direct I/O: the writer's bytes stay out of the page cache other openers share.
        return pyfuse3.FileInfo(fh=self._add_handle(handle), direct_io=True)

    def _head_fd(self, project: Project, leaf: Leaf) -> int:
        if leaf.kind is Kind.MEMORY:
            # Editing the union starts from what the reader saw: the union becomes the own
            # source's MEMORY.md, so no topic linked elsewhere is lost.
            return _memory_fd(project.memory_index())
        assert leaf.version is not None
        return project.open_fd(leaf.version)

    @_oserror_to_fuse
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self._count("create")
        key = self._child_key(parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EACCES)  # the root holds projects only
        place = self._writable(key)
        project = self._project(key[0])
        if project.tree.is_dir(key[1]):
            raise _err(errno.EISDIR)
        text = parent_of(key[1])[1]
        file_mode = stat.S_IMODE(mode) & ~ctx.umask or staging.FILE_MODE
        # An empty temp file: quick syscalls, no thread hop (see _open_for_write).
        stage = staging.Stage(place, text, initial_fd=None, mode=file_mode)
        ino = self._ino(key)
        pid = procs.tgid(ctx.pid)
        handle = Handle(ino, key, None, stage=stage, unsaved=True, keeps_history=True, pid=pid)
        handle.append = bool(flags & os.O_APPEND)
        fh = self._add_handle(handle)
        # Not committed yet: one write costs one commit. Until then the name is pending:
        # memfs answers for it from the stage, so lookups, stat and listings still see it.
        self._pending[key] = handle
        attrs = self._as_seen_by(self._attrs(ino, key), ctx)
        self._lookups[ino] += 1
        return pyfuse3.FileInfo(fh=fh, direct_io=True), attrs

    @_oserror_to_fuse
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self._count("write")
        handle = self._handles[fh]
        if handle.stage is None:
            await self._stage_lazily(handle)
        assert handle.stage is not None
        if handle.append:
            # The kernel's offset comes from its idea of the size, which other callers' stat
            # set to the committed file's: an append goes to the end of the writer's bytes.
            off = handle.stage.size()
        return handle.stage.write(off, buf)

    async def _stage_lazily(self, handle: Handle) -> None:
        """The first change through a write handle: stage a copy of the head it opened."""
        if handle.leaf is None or handle.key in self._pending:
            raise _err(errno.EBADF)
        project = self._project(handle.key[0])
        place = self._writable(handle.key)
        name = parent_of(handle.key[1])[1]
        leaf = handle.leaf
        head = self._head_fd(project, leaf)
        try:
            mode = _mode_of(head, leaf)
            handle.stage = await trio.to_thread.run_sync(
                lambda: staging.Stage(place, name, initial_fd=head, mode=mode)
            )
        finally:
            os.close(head)
        handle.data = None  # reads now see the writer's own bytes

    async def _commit(self, handle: Handle, *, force: bool = False) -> None:
        """flush/fsync: make the staged bytes the target, atomically (SPEC 7.1)."""
        stage = handle.stage
        assert stage is not None
        if handle.discard:
            return
        if force:
            stage.dirty = True
        if not stage.dirty:
            return
        slug, path = handle.key
        keep = self._keep(slug, path) if handle.keeps_history else None
        async with self._commit_lock:
            await trio.to_thread.run_sync(lambda: stage.commit(keep))
        handle.keeps_history = False
        handle.unsaved = False
        if self._pending.get(handle.key) is handle:
            del self._pending[handle.key]
        self.stats.commits += 1
        project = self._project(slug)
        self._sync_own(project, path)
        self._sync_kept(project, path, stage.kept)
        self._publish(project)

    def _keep(self, slug: str, path: str) -> staging.Keep | None:
        return writes.keep_for(self.config, self.catalog, slug, path)

    # --- changing names and attributes (SPEC 7.3) --------------------------------------

    @_oserror_to_fuse
    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self._count("setattr")
        key = self._key(inode)
        if fields.update_uid or fields.update_gid:
            raise _err(errno.EPERM)
        slug, path = key
        if not path:
            raise _err(errno.EPERM)  # the root and project folders are memfs's own
        place = self._writable(key)
        mode = attr.st_mode if fields.update_mode else None
        size = attr.st_size if fields.update_size else None
        times = self._times(attr, fields)
        handle = self._handles.get(fh) if fh is not None else self._pending.get(key)
        project = self._project(slug)
        if handle is not None and handle.stage is None and handle.pid and size is not None:
            await self._stage_lazily(handle)  # ftruncate on a handle not written yet
        if handle is not None and handle.stage is not None:
            self._stage_attrs(handle.stage, mode, size, times)
            attrs = self._attrs(inode, key)
            attrs.st_size = handle.stage.size()
            return attrs
        if project.tree.is_dir(path):
            await self._dir_attrs_change(project, path, mode, times, size)
        else:
            await self._file_attrs_change(project, key, place, mode, size, times)
        self._publish(project)
        return self._attrs(inode, key)

    def _times(
        self, attr: pyfuse3.EntryAttributes, fields: pyfuse3.SetattrFields
    ) -> tuple[int, int] | None:
        if not (fields.update_atime or fields.update_mtime):
            return None
        now = time.time_ns()
        atime = attr.st_atime_ns if fields.update_atime else now
        mtime = attr.st_mtime_ns if fields.update_mtime else now
        return (atime, mtime)

    def _stage_attrs(
        self,
        stage: staging.Stage,
        mode: int | None,
        size: int | None,
        times: tuple[int, int] | None,
    ) -> None:
        if size is not None:
            stage.truncate(size)
        if mode is not None:
            stage.chmod(mode)
        if times is not None:
            os.utime(stage.fd, ns=times)
            stage.dirty = True

    async def _dir_attrs_change(
        self,
        project: Project,
        path: str,
        mode: int | None,
        times: tuple[int, int] | None,
        size: int | None,
    ) -> None:
        if size is not None:
            raise _err(errno.EISDIR)
        own = self.own_origin(project)
        if own not in project.dir_holders(path):
            raise _err(errno.EPERM)  # a folder only a read-only source has
        origin = project.origins[own]
        folder, name = parent_of(path)
        place = staging.Place(origin.root, (*origin.parts, *sources.split(folder)))
        staging.set_attrs(place, name, mode=mode, times_ns=times)

    async def _file_attrs_change(
        self,
        project: Project,
        key: Key,
        place: staging.Place,
        mode: int | None,
        size: int | None,
        times: tuple[int, int] | None,
    ) -> None:
        path = key[1]
        leaf = writes.writable_leaf(project, path)
        assert leaf.version is not None
        own_place = writes.own_folder_of(self.config, project, leaf.version)
        name = parent_of(path)[1]
        if own_place is not None and leaf.kind is Kind.FILE:
            await trio.to_thread.run_sync(
                lambda: staging.set_attrs(own_place, name, mode=mode, times_ns=times, size=size)
            )
            self._sync_origin_path(project, leaf.version.origin, path)
            return
        # Copy-up: the head lives in a read-only source (or is the union): the own source
        # gets a changed copy, committed atomically, and the original stays untouched.
        initial = self._head_fd(project, leaf)
        try:
            stage = staging.Stage(place, name, initial_fd=initial, mode=_mode_of(initial, leaf))
        finally:
            os.close(initial)
        try:
            old_mtime = leaf.version.mtime_ns
            self._stage_attrs(stage, mode, size, times or (old_mtime, old_mtime))
            await trio.to_thread.run_sync(stage.commit)
        finally:
            stage.abort()
        self._sync_own(project, path)

    @_oserror_to_fuse
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._count("unlink")
        key = self._child_key(parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EPERM)
        self._writable(key)
        project = self._project(key[0])
        path = key[1]
        pending = self._pending.pop(key, None)
        if pending is not None:
            pending.discard = True  # a temp file unlinked while open: never lands
            if project.tree.leaf(path) is None:
                return
        writes.writable_leaf(project, path)
        await self._remove_everywhere(project, path)
        self._publish(project)

    async def _remove_everywhere(self, project: Project, path: str) -> None:
        """Remove the own copies of ``path``; hide the read-only ones with whiteouts."""
        name = parent_of(path)[1]
        keep = self._keep(project.slug, path)
        for v in project.versions(path):
            place = writes.own_folder_of(self.config, project, v)
            if place is not None:
                async with self._commit_lock:
                    kept = await trio.to_thread.run_sync(staging.unlink, place, name, keep)
                self._sync_origin_path(project, v.origin, path)
                self._sync_kept(project, path, kept)
        if project.whiteout(path):
            self._save_whiteouts(project)

    def _save_whiteouts(self, project: Project) -> None:
        state.save_whiteouts(self.config.state_dir, project.slug, project.whiteouts)

    @_oserror_to_fuse
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self._count("mkdir")
        key = self._child_key(parent_inode, name)
        if parent_inode == ROOT_INODE:
            project = self._new_project(key[0])
        else:
            place = self._writable(key)
            project = self._project(key[0])
            path = key[1]
            if project.tree.leaf(path) is not None or project.tree.is_dir(path):
                raise _err(errno.EEXIST)
            own = self.own_origin(project)
            if own in project.dir_holders(path):
                # A whiteout hid it; the user wants it back.
                project.set_whiteouts(w for w in project.whiteouts if w[0] != path)
                self._save_whiteouts(project)
            else:
                await trio.to_thread.run_sync(
                    staging.mkdir, place, parent_of(path)[1], stat.S_IMODE(mode) & ~ctx.umask
                )
                project.set_dir(own, path, present=True)
            self._publish(project)
        ino = self._ino(key)
        self._lookups[ino] += 1
        return self._attrs(ino, key)

    def _new_project(self, slug: str) -> Project:
        """mkdir at the root: a new project in the own source, named by its canonical slug."""
        if self.config.own is None:
            raise _err(errno.EROFS)
        if slug == HERE or not slug.startswith("-") or slugs.canonical_slug(slug) != slug:
            raise _err(errno.EINVAL)  # only canonical slugs live at the root
        if self.catalog.has(slug):
            raise _err(errno.EEXIST)
        project = self.catalog.create(slug)
        self.publish_root(slug)
        return project

    @_oserror_to_fuse
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._count("rmdir")
        key = self._child_key(parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EPERM)  # projects are removed in their sources, not here
        self._writable(key)
        project = self._project(key[0])
        path = key[1]
        children = project.tree.children(path)
        if children is None:
            raise _err(errno.ENOTDIR if project.tree.leaf(path) else errno.ENOENT)
        if len(children):
            raise _err(errno.ENOTEMPTY)
        folder, leafname = parent_of(path)
        for i in sorted(project.dir_holders(path)):
            origin = project.origins[i]
            if origin.source == self.config.own_index:
                place = staging.Place(origin.root, (*origin.parts, *sources.split(folder)))
                await trio.to_thread.run_sync(staging.rmdir, place, leafname)
                project.set_dir(i, path, present=False)
        if project.whiteout(path):
            self._save_whiteouts(project)
        self._publish(project)

    @_oserror_to_fuse
    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        self._count("rename")
        src = self._child_key(parent_inode_old, name_old)
        dst = self._child_key(parent_inode_new, name_new)
        if ROOT_INODE in (parent_inode_old, parent_inode_new):
            raise _err(errno.EPERM)
        if src[0] != dst[0]:
            raise _err(errno.EXDEV)  # projects are separate folders
        src_place, dst_place = self._writable(src), self._writable(dst)
        project = self._project(src[0])
        if src in self._pending and project.tree.leaf(src[1]) is None:
            await self._rename_pending(project, src, dst, flags)
            return
        src_path, dst_path = src[1], dst[1]
        writes.check_rename(project, src_path, dst_path, flags)
        if project.tree.is_dir(src_path):
            await self._rename_dir(project, src_path, dst_path, src_place, dst_place)
        else:
            await self._rename_file(project, src_path, dst_path, dst_place)
        self._move_inodes(src, dst)
        self._publish(project)

    async def _rename_pending(self, project: Project, src: Key, dst: Key, flags: int) -> None:
        """Rename a file still being written: its stage will land under the new name.

        Nothing is committed early, so no reader sees a part of it.
        """
        handle = self._pending[src]
        assert handle.stage is not None
        tree = project.tree
        if flags & RENAME_NOREPLACE and (tree.leaf(dst[1]) is not None or dst in self._pending):
            raise _err(errno.EEXIST)
        if tree.is_dir(dst[1]):
            raise _err(errno.EISDIR)
        if parent_of(src[1])[0] != parent_of(dst[1])[0]:
            raise _err(errno.EXDEV)  # the stage lives in the source folder; mv copies
        del self._pending[src]
        replaced = self._pending.pop(dst, None)
        if replaced is not None:
            replaced.discard = True
        handle.stage.name = parent_of(dst[1])[1]
        handle.key = dst
        self._pending[dst] = handle
        self._move_inodes(src, dst)
        handle.ino = self._ino(dst)

    async def _rename_file(
        self, project: Project, src: str, dst: str, dst_place: staging.Place
    ) -> None:
        if src == dst:
            return
        leaf = writes.writable_leaf(project, src)
        assert leaf.version is not None
        dst_name = parent_of(dst)[1]
        keep = self._keep(project.slug, dst)
        own_place = writes.own_folder_of(self.config, project, leaf.version)
        if own_place is not None and leaf.kind is Kind.FILE:
            src_name = parent_of(src)[1]
            async with self._commit_lock:
                kept = await trio.to_thread.run_sync(
                    lambda: staging.rename(own_place, src_name, dst_place, dst_name, keep=keep)
                )
            self._sync_origin_path(project, leaf.version.origin, src)
        else:
            # Copy-up: the own source gets the head's bytes (and mtime) under the new name.
            initial = self._head_fd(project, leaf)
            try:
                stage = staging.Stage(
                    dst_place, dst_name, initial_fd=initial, mode=_mode_of(initial, leaf)
                )
            finally:
                os.close(initial)
            try:
                stage.dirty = True
                mtime = leaf.version.mtime_ns
                os.utime(stage.fd, ns=(mtime, mtime))
                async with self._commit_lock:
                    await trio.to_thread.run_sync(lambda: stage.commit(keep))
                kept = stage.kept
            finally:
                stage.abort()
        self._sync_own(project, dst)
        self._sync_kept(project, dst, kept)
        # The old name must vanish: own copies went with the rename; hide the rest.
        await self._remove_everywhere(project, src)

    async def _rename_dir(
        self,
        project: Project,
        src: str,
        dst: str,
        src_place: staging.Place,
        dst_place: staging.Place,
    ) -> None:
        if src == dst:
            return
        own = self.own_origin(project)
        if not writes.folder_is_own_only(self.config, project, src):
            # Other sources hold part of it: let `mv` fall back to copy and delete, which
            # works through memfs file by file (as on overlayfs).
            raise _err(errno.EXDEV)
        src_name, dst_name = parent_of(src)[1], parent_of(dst)[1]
        await trio.to_thread.run_sync(
            lambda: staging.rename(src_place, src_name, dst_place, dst_name)
        )
        project.rescan(own)

    def _move_inodes(self, src: Key, dst: Key) -> None:
        """The kernel moved its entry: the inode at ``src`` (and below) now lives at ``dst``."""
        slug, src_path = src
        dst_path = dst[1]
        moved = {
            key: ino
            for key, ino in self._ino_by_key.items()
            if key[0] == slug and (key[1] == src_path or key[1].startswith(src_path + "/"))
        }
        for key in moved:
            del self._ino_by_key[key]
        replaced = self._ino_by_key.pop(dst, None)
        if replaced is not None:
            self._key_by_ino.pop(replaced, None)
        for (_, path), ino in moved.items():
            new_key = (slug, dst_path + path[len(src_path) :])
            self._ino_by_key[new_key] = ino
            self._key_by_ino[ino] = new_key

    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise _err(errno.EPERM)  # symlinks are never served (SPEC 5.1)

    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise _err(errno.EPERM)

    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise _err(errno.EPERM)

    # --- keeping the view and the kernel true after a change -------------------------

    def own_origin(self, project: Project) -> int:
        """The own source's canonical folder in ``project``, registered if new."""
        place = self.catalog.own_place(project.slug)
        own = self.config.own_index
        assert place is not None
        assert own is not None
        origin = Origin(own, place.root, place.parts)
        found = project.origin_index(origin)
        if found is None:
            found = project.add_origin(origin)
            self.catalog.folder_added(own, project.slug)
        return found

    def _sync_own(self, project: Project, path: str) -> None:
        """Re-read one path of the own folder after memfs changed it."""
        self._sync_origin_path(project, self.own_origin(project), path)

    def _sync_origin_path(self, project: Project, i: int, path: str) -> None:
        origin = project.origins[i]
        found = sources.stat_file(
            origin.root, origin.parts, path, self.config.limits.max_file_bytes
        )
        if found is None:
            project.drop_version(i, path)
        else:
            project.set_version(i, found)

    def _sync_kept(self, project: Project, path: str, names: list[str]) -> None:
        """Re-read the kept versions of ``path`` a commit added or pruned: O(names)."""
        for name in names:
            self._sync_own(project, f"{HISTORY}/{path}/{name}")

    def publish_all(self) -> None:
        for project in list(self.catalog.loaded().values()):
            self._publish(project)

    def _publish(self, project: Project) -> None:
        """Queue what the kernel must forget about ``project``'s changed view paths."""
        changes = project.tree.changes
        if not changes:
            return
        slug = project.slug
        for path in changes:
            # A name that is gone must leave the kernel's dentry cache. A name that still
            # holds a file or folder keeps its dentry and inode number: forgetting the
            # inode's attributes and pages is enough; a new name was never cached (ENOENT
            # answers are not). That also spares the folder lock an entry invalidation
            # takes, which writers in that folder hold while memfs answers them: were memfs
            # killed then, the invalidating thread would wait for ever and keep the dead
            # daemon's connection open.
            if project.tree.leaf(path) is None and not project.tree.is_dir(path):
                parent, name = parent_of(path)
                parent_ino = self._ino_by_key.get((slug, parent))
                if parent_ino is not None:
                    self.invalidator.entry(parent_ino, name)
            ino = self._ino_by_key.get((slug, path))
            if ino is not None:
                self._invalidate_inode(ino)
        changes.clear()
        # Derived files change with any of their inputs.
        for derived in (PREAMBLE, MEMORY):
            ino = self._ino_by_key.get((slug, derived))
            if ino is not None:
                self._invalidate_inode(ino)

    def _invalidate_inode(self, ino: int) -> None:
        # Attributes and pages: a committed version must not be read through pages of the
        # one it replaced. Writers use direct I/O, so no writer's own pages are dropped.
        self.invalidator.inode(ino)

    # The watcher's Listener protocol.
    def project_changed(self, project: Project) -> None:
        self._publish(project)

    def root_changed(self, slug: str) -> None:
        self.publish_root(slug)

    def publish_root(self, slug: str) -> None:
        """A project appeared or vanished at the root."""
        self.invalidator.entry(ROOT_INODE, slug)
        ino = self._ino_by_key.get((slug, ""))
        if ino is not None:
            self.invalidator.inode(ino)


def _memory_fd(data: bytes) -> int:
    """A readable descriptor over bytes (memfd), to seed a stage from the MEMORY.md union."""
    fd = os.memfd_create("memfs-memory", os.MFD_CLOEXEC)
    os.pwrite(fd, data, 0)
    return fd


def _mode_of(fd: int, leaf: Leaf) -> int:
    """The permission bits a new version inherits from the head it replaces."""
    if leaf.kind is Kind.MEMORY:
        return staging.FILE_MODE  # the union has no file of its own
    return stat.S_IMODE(os.fstat(fd).st_mode) or staging.FILE_MODE


def _parent_key(key: Key) -> Key:
    slug, path = key
    if not path:
        return ROOT_KEY
    return (slug, parent_of(path)[0])
