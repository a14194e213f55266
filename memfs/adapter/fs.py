"""The pyfuse3 handlers: they decode, call the piece whose job it is, and answer.

Layer adapter. The pieces, one job each: what a request's numbers and names mean
(keys.py) and the project it needs, loaded off this thread (loading.py); attributes
(attrs.py); open folders (folders.py); how an open for reading is served and what the
kernel must forget (kernel.py: `ReadOpens`, `Kernel`, `Publisher`); a writer's stage and
every change's one way down: plan, one worker call, absorb, publish (stages.py); open files
and inode numbers (writing.py, inodes.py); `here` (here.py).

Threading (§7a): every handler runs on pyfuse3's one trio thread and never blocks on the
disk there: loading a project, rescans and watches are the watcher's (watch.py), in workers;
every change of the own source or the state folder is one `steps.apply` call in a worker.
On this thread only the descriptors a request is served from are read and written (pread,
pwrite of a stage). Kernel cache invalidations are never sent from a handler (that can
deadlock the mount): they are queued, and `Kernel.run` sends them from a worker thread.
Every handler lets out only ``FUSEError``.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pyfuse3

from memfs.adapter import control, keys, restoring, status, userlevel, workers
from memfs.adapter.attrs import Shown, leaf_of, statvfs_of
from memfs.adapter.folders import OpenFolders
from memfs.adapter.here import Here
from memfs.adapter.inodes import (
    GLOBAL_KEY,
    HERE_INODE,
    HERE_KEY,
    ROOT_INODE,
    ROOT_KEY,
    Inodes,
    Key,
)
from memfs.adapter.kernel import Kernel, Publisher, ReadOpens
from memfs.adapter.loading import Projects
from memfs.adapter.moves import Moves
from memfs.adapter.renderings import Renderings, read_body
from memfs.adapter.stages import Stages
from memfs.adapter.userlevel import GlobalFolder
from memfs.adapter.watch import Watcher
from memfs.adapter.writing import OpenFile, OpenFiles
from memfs.disk import procs, staging
from memfs.disk.config import Config
from memfs.disk.pins import Pins
from memfs.view import writes
from memfs.view.catalog import Catalog
from memfs.view.project import Kind, Leaf, Project
from memfs.view.session import WriteSession

log = logging.getLogger(__name__)

STATUS_XATTR = control.STATUS_XATTR
# Open flags of anything but a plain read: those never take the warm way (kernel.py).
NOT_ONLY_READ = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND
TRUNCATE_PATIENCE = 0.5  # seconds an O_TRUNC open waits for cached reads to finish

P = ParamSpec("P")
R = TypeVar("R")


def _handler(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Every handler lets out only FUSEError: a refusal or OSError becomes its errno,
    anything else is logged and becomes EIO."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            raise _translated(exc, fn.__name__) from None

    return wrapper


def _translated(exc: Exception, where: str) -> pyfuse3.FUSEError:
    """The FUSEError a handler answers for ``exc`` (see `_handler`)."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc
    if isinstance(exc, writes.Refused):
        return pyfuse3.FUSEError(exc.errno)
    if isinstance(exc, OSError):
        if exc.errno == errno.EBADF:
            # Never the caller's doing: a descriptor of memfs's own was closed under it.
            log.error("descriptor error in %s", where, exc_info=exc)
        return pyfuse3.FUSEError(exc.errno or errno.EIO)
    log.error("unexpected error in %s", where, exc_info=exc)
    return pyfuse3.FUSEError(errno.EIO)


def _err(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


class MemFS(control.RootXattrs, pyfuse3.Operations):
    """The merged view (§4) as a FUSE filesystem: pyfuse3's handlers, which translate."""

    enable_writeback_cache = False

    def __init__(self, config: Config, mountpoint: Path) -> None:
        super().__init__()
        self.config = config
        # /proc/<pid>/cwd is always resolved: compare `here` callers with the real path.
        self.mountpoint = Path(os.path.realpath(mountpoint))
        self.catalog = Catalog(config, read_body=read_body)
        self.projects = Projects(self.catalog)
        self.stats = status.Stats()
        self.kernel = Kernel()
        self.inodes = Inodes()
        self.files = OpenFiles()
        self.pins = Pins()  # source folders kept open: an open costs an openat and an fstat
        self.renderings = Renderings(config, self.catalog, self.inodes, self.mountpoint)
        self.shown = Shown(
            config, self.catalog, self.files, self.renderings.size, os.getuid(), os.getgid(),
            self.kernel.holds_other,
        )  # fmt: skip
        self.moves = Moves(self.catalog, config.state_dir, self.projects.listed)
        self.here = Here(self.mountpoint, self.moves)
        self.projects.moves = self.moves
        self.global_folder = GlobalFolder(
            config, self.catalog, self.shown, self.projects.get, self.mountpoint
        )
        self.started_ns = self.shown.started_ns
        self.folders = OpenFolders(
            self.catalog, self.files, self.inodes, self.shown, self.renderings, self.projects.get
        )
        self.publisher = Publisher(self.kernel, self.catalog, self.inodes)
        self.stages = Stages(
            config, self.catalog, self.files, self.mountpoint, self.projects.get, self.publisher
        )
        self.restores = restoring.Restores(self.stages, self.projects.get)
        self.reads = ReadOpens(
            self.kernel, self.files, self.pins, self.renderings, self.projects.recheck,
            self.stages.index_reads, self.catalog.loaded,
        )  # fmt: skip
        # Pieces with one job each: what a key means and which project it needs (keys.py,
        # loading.py), how a read is served (kernel.ReadOpens), a writer's stage and every
        # change's way down (stages.py), open folders (folders.py), what the kernel must
        # forget (kernel.Publisher). The handlers below decode, call one of them, answer.

    def attach(self, watcher: Watcher) -> None:
        """mount.py's watcher (adapter tests may run without one): it loads projects off this
        thread, and renders their PREAMBLE.md and MEMORY.md there before publishing."""
        self.projects.watcher, watcher.warm = watcher, self.renderings.warm
        self.moves.changed = watcher.refollow
        self.publisher.read_ahead = watcher.ahead.soon

    def _check(self) -> None:
        """Assert every invariant of the adapter and the core below it; tests call it after
        each step."""
        self.inodes._check()
        self.files._check()
        self.catalog._check()
        for f in self.files:
            assert self.inodes.key(f.ino) is not None, ("an open file with no inode", f.key)
        self.renderings._check()
        self.stages.index_reads._check()

    # --- inodes and attributes ------------------------------------------------------

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, n in inode_list:
            self.inodes.forget(ino, n, self.projects.exists)
            if not self.inodes.lookups(ino):
                self.kernel.forgotten(ino)  # the kernel evicted it, and its pages with it
            if self.inodes.key(ino) is None:
                self.renderings.forgotten(ino)

    async def _attrs_of(self, ino: int, key: Key) -> pyfuse3.EntryAttributes:
        slug, path = key
        if not path:
            await self.projects.listed()
        budget = userlevel.budget_of(key, self.config)
        if budget is not None:  # global/PREAMBLE.md, PREAMBLE-<N>.md (§4.1)
            return await self.global_folder.attrs(ino, budget)
        project = await self.projects.get(slug) if slug and path else None
        return await self.shown.of_read(ino, key, project)

    @_handler
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self.stats.count("lookup")
        if name == b".":
            key = keys.key_of(self.inodes, parent_inode)
        elif name == b"..":
            key = keys.parent_key(keys.key_of(self.inodes, parent_inode))
        else:
            key = keys.child_key(self.inodes, parent_inode, name)
        if parent_inode == ROOT_INODE:
            await self.projects.listed()
        # Attributes first: a name that does not exist must not take an inode number
        # (editors and desktops probe many such names).
        attrs = await self._attrs_of(0, key)
        attrs.st_ino = self.renderings.inode_of(key)
        self.inodes.looked_up(attrs.st_ino)
        return self.shown.seen_by(attrs, ctx.pid, key)

    @_handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        self.stats.count("getattr")
        key = keys.key_of(self.inodes, inode)
        if self.inodes.detached(inode) and not self.renderings.holds(inode):
            if self.files.of_inode(inode):
                return self.shown.detached(inode)
            # Replaced by a rename a moment ago, the kernel's entry not moved yet: what the
            # name shows now, asked again next time.
            attrs = await self._attrs_of(inode, key)
            attrs.attr_timeout = attrs.entry_timeout = 0
            return attrs
        return self.shown.seen_by(await self._attrs_of(inode, key), ctx.pid, key)

    @_handler
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        self.stats.count("readlink")
        if inode != HERE_INODE:
            raise _err(errno.EINVAL)
        return await self.here.link(ctx.pid)

    # --- listing ---------------------------------------------------------------------

    @_handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self.stats.opendir += 1
        slug, path = keys.key_of(self.inodes, inode)
        if inode == ROOT_INODE:
            await self.projects.listed()
            return self.folders.open_root()
        if not slug:  # global/ (§4.1), or a file it serves
            if (slug, path) != GLOBAL_KEY:
                raise _err(errno.ENOTDIR)
            preamble = await self.global_folder.attrs(0, self.config.preamble.budget)
            return self.folders.open_global(preamble)
        # Loaded, as on every warm walk: no coroutine for `projects.get`.
        project = self.catalog.loaded().get(slug) or await self.projects.get(slug)
        return self.folders.open(project, path)

    @_handler
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        self.stats.readdir += 1
        await self.folders.reply(fh, start_id, token)

    async def releasedir(self, fh: int) -> None:
        self.stats.releasedir += 1
        self.folders.close(fh)

    # --- reading ---------------------------------------------------------------------

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        # Not wrapped in _handler: a warm read-only open (most of them) raises nothing.
        self.stats.open += 1
        if not flags & NOT_ONLY_READ:
            served = self.reads.open_warm(inode, ctx.pid)
            if served is not None:
                return served
        return await self._open(inode, flags, ctx)

    @_handler
    async def _open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        key = keys.key_of(self.inodes, inode)
        slug, path = key
        if not path or key in (HERE_KEY, GLOBAL_KEY):
            raise _err(errno.EISDIR if key != HERE_KEY else errno.ELOOP)
        writing = bool(flags & (os.O_WRONLY | os.O_RDWR))
        f = OpenFile(inode, key, pid=ctx.pid, append=bool(flags & os.O_APPEND))
        budget = userlevel.budget_of(key, self.config)
        if not slug:  # what global/ serves: its PREAMBLE.md, rendered now (§4.1)
            if budget is None or writing:
                raise _err(errno.ENOENT if budget is None else errno.EACCES)
            f.data = (await self.global_folder.render(budget))[0]
            return pyfuse3.FileInfo(fh=self.files.add(f), direct_io=True)
        project = self.catalog.loaded().get(slug) or await self.projects.get(slug)
        leaf = leaf_of(project, path)
        if writing:
            f.tgid = procs.tgid(ctx.pid)
        if not writing and (leaf is not None or self.reads.own_stage(inode, ctx.pid)):
            return self.reads.open(f, project, leaf)  # it serves the writer's own stage too
        if leaf is None:
            if self.files.pending(key) is None:
                raise _err(errno.EISDIR if project.tree.is_dir(path) else errno.ENOENT)
            # Created by another open and not committed yet: still empty to everyone else.
            f.data = b""
            if writing:
                change = self.stages.index_reads.change(f.tgid, project, path)
                f.session = WriteSession.truncating(change if project.is_index(path) else None)
                await self.stages.empty(f, staging.FILE_MODE, self._writable(key))
            return pyfuse3.FileInfo(fh=self.files.add(f), direct_io=True)
        if not flags & os.O_TRUNC:
            return await self._open_for_write(f, project, leaf, flags)
        await self.kernel.truncating(inode, TRUNCATE_PATIENCE)
        try:
            return await self._open_for_write(f, project, leaf, flags)
        finally:
            self.kernel.truncated(inode)

    @_handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        self.stats.count("read")
        f = self.files.get(fh)
        if f is None:
            raise _err(errno.EBADF)
        return self.reads.read(f, off, size)

    # --- writing ---------------------------------------------------------------------

    async def _open_for_write(
        self, f: OpenFile, project: Project, leaf: Leaf, flags: int
    ) -> pyfuse3.FileInfo:
        place = self._writable(f.key)
        if leaf.kind not in (Kind.FILE, Kind.MEMORY):
            raise _err(errno.EACCES)
        f.version = leaf.version
        if leaf.kind is Kind.FILE and not flags & os.O_TRUNC:
            self.reads.pin(f, project)  # the version its reads and its stage start from
        await self.stages.open(f, project, leaf, flags, place)
        # Direct I/O: the writer's bytes stay out of the page cache other openers share.
        return pyfuse3.FileInfo(fh=self.files.add(f), direct_io=True)

    def _writable(self, key: Key) -> staging.Place:
        """The own folder holding ``key``'s parent, or the errno §7.4 names."""
        if not key[0]:  # `here` itself, global/ and what it serves: memfs's own
            raise _err(errno.EACCES)
        return writes.target_folder(self.catalog, *key)

    @_handler
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self.stats.count("create")
        key = keys.child_key(self.inodes, parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EACCES)  # the root holds projects only
        place = self._writable(key)
        project = await self.projects.get(key[0])
        if project.tree.is_dir(key[1]):
            raise _err(errno.EISDIR)
        writes.check_new_name(key[1])
        if flags & os.O_EXCL and (project.tree.leaf(key[1]) or self.files.pending(key)):
            raise _err(errno.EEXIST)
        ino = self.inodes.number(key)
        f = OpenFile(ino, key, pid=ctx.pid, append=bool(flags & os.O_APPEND))
        f.tgid = procs.tgid(ctx.pid)
        # The view had no such index: a new one, or one an editor just moved away (§5.3).
        index = self.stages.index_reads.saving(key, None) if project.is_index(key[1]) else None
        f.session = WriteSession.truncating(index)
        await self.stages.empty(f, writes.new_mode(mode, ctx.umask), place)
        fh = self.files.add(f)
        # Not committed yet: one write costs one commit. Until then the name is pending:
        # memfs answers for it from the stage, so lookups, stat and listings still see it.
        self.files.set_pending(f)
        # Empty to everyone, its writer included, until its first write (after which the
        # kernel asks again): the kernel may keep these attributes.
        attrs = self.shown.of(ino, key, project)
        self.inodes.looked_up(ino)
        return pyfuse3.FileInfo(fh=fh, direct_io=True), attrs

    @_handler
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.stats.count("write")
        f = self.files.get(fh)
        if f is None or not f.writer:
            raise _err(errno.EBADF)
        await self.stages.prepare(f, self._writable(f.key))
        assert f.stage is not None
        if f.append:
            # The kernel's offset comes from its idea of the size, which other callers' stat
            # set to the committed file's: an append goes to the end of the writer's bytes.
            off = f.stage.size()
        return f.change(lambda s: s.write(off, buf), off + len(buf), self.config)

    async def flush(self, fh: int) -> None:
        # Not wrapped in _handler: a reader's flush (most of them) does nothing.
        self.stats.flush += 1
        f = self.files.get(fh)
        if f is not None and f.writer:
            await self._flush(f)

    @_handler
    async def _flush(self, f: OpenFile) -> None:
        await self.stages.flush(f)

    @_handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        self.stats.count("fsync")
        f = self.files.get(fh)
        if f is not None and f.writer:
            await self.stages.fsync(f)

    async def release(self, fh: int) -> None:
        # Not wrapped in _handler: a reader of the page cache's record (most) raises nothing.
        self.stats.release += 1
        if not self.reads.released(fh):
            await self._release(fh)

    @_handler
    async def _release(self, fh: int) -> None:
        f = self.files.get(fh)
        if f is None:
            return
        created = self.files.pending(f.key) is f  # never committed: its name stays, if empty
        self.files.pop(fh)
        self.reads.release(f)
        if f.stage is not None and await self.stages.release(f, created=created):
            self._abandoned(f.key)

    def _abandoned(self, key: Key) -> None:
        """A name created through the mount that never landed: the kernel keeps the entry
        `create` answered, and must drop it (a later create of the name must reach here)."""
        if not self.projects.exists(key) and self.files.pending(key) is None:
            self.kernel.name_gone(key, self.inodes.known)

    # --- changing names and attributes (§7.3, §7.6) -------------------------------

    @_handler
    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self.stats.count("setattr")
        key = keys.key_of(self.inodes, inode)
        # Every file shows the mounting user: chown to what is shown changes nothing.
        if (fields.update_uid and attr.st_uid != self.shown.uid) or (
            fields.update_gid and attr.st_gid != self.shown.gid
        ):
            raise _err(errno.EPERM)
        mode = attr.st_mode if fields.update_mode else None
        size = attr.st_size if fields.update_size else None
        atime = attr.st_atime_ns if fields.update_atime else None
        mtime = attr.st_mtime_ns if fields.update_mtime else None
        f = self.files.get(fh) if fh is not None else self.files.setting(inode, key, ctx.pid)
        if f is not None and f.writer and (f.stage is not None or size is not None):
            # ftruncate, fchmod, futimens on a handle being written: its stage changes,
            # and what it sets is committed with it (`cp -p` sets the times last).
            await self.stages.prepare(f, self._writable(key))
            f.set_attrs(self.config, mode=mode, size=size, atime_ns=atime, mtime_ns=mtime)
            return self.shown.writers(f, self.inodes.detached(f.ino))
        if mode is None and size is None and atime is None and mtime is None:
            return await self._attrs_of(inode, key)
        if key in (ROOT_KEY, HERE_KEY, GLOBAL_KEY):
            raise _err(errno.EPERM)  # memfs's own: the root holds projects only
        self._writable(key)
        project = await self.projects.get(key[0])
        await self.stages.set_attrs(project, key[1], ctx.pid, mode, size, (atime, mtime))
        return await self.shown.of_read(inode, key, project)

    @_handler
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self.stats.count("unlink")
        key = keys.child_key(self.inodes, parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EPERM)
        self._writable(key)
        project = await self.projects.get(key[0])
        if project.tree.leaf(key[1]) is None and self.files.pending(key) is not None:
            # A file still being written: it never lands (its stage goes at release).
            await self._gone(key)
            return
        planner = self.stages.planner(project, ctx.pid)
        left_out = project.tree.leaf(key[1]) is None and project.left_out_in(planner.own, key[1])
        plan = planner.unlink_left_out(key[1]) if left_out else planner.unlink(key[1])
        await self.stages.run(project, plan)
        await self._gone(key)

    async def _gone(self, key: Key) -> None:
        """``key`` was unlinked: what is open on it stays usable and never commits; the
        temp files of its stages go now (their descriptors keep the bytes), so that its
        folder can be removed before the kernel's late release."""
        writers = self.files.gone(key)
        ino = self.inodes.detach(key)
        if ino is not None:
            self.kernel.inode(ino)  # its st_nlink is 0 now
        await self.stages.forget(writers)

    @_handler
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self.stats.count("mkdir")
        key = keys.child_key(self.inodes, parent_inode, name)
        wanted = writes.new_mode(mode, ctx.umask)
        if key == GLOBAL_KEY or (key[0].startswith("global/") and not key[1]):
            raise _err(errno.EEXIST)  # memfs's own folders (§4.1)
        if parent_inode == ROOT_INODE:
            await self.projects.listed()
            project = await self.stages.new_project(key[0], wanted)
        else:
            self._writable(key)
            project = await self.projects.get(key[0])
            await self.stages.run(
                project, self.stages.planner(project, ctx.pid).mkdir(key[1], wanted)
            )
        ino = self.inodes.number(key)
        self.inodes.looked_up(ino)
        return await self.shown.of_read(ino, key, project if key[1] else None)

    @_handler
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self.stats.count("rmdir")
        key = keys.child_key(self.inodes, parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EPERM)  # projects are removed in their sources, not here
        self._writable(key)
        project = await self.projects.get(key[0])
        if any(self.files.pending_names(*key)):
            raise _err(errno.ENOTEMPTY)  # a file is being created in it
        await self.stages.run(project, self.stages.planner(project, ctx.pid).rmdir(key[1]))

    @_handler
    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        self.stats.count("rename")
        src = keys.child_key(self.inodes, parent_inode_old, name_old)
        dst = keys.child_key(self.inodes, parent_inode_new, name_new)
        if ROOT_INODE in (parent_inode_old, parent_inode_new):
            raise _err(errno.EPERM)
        if src[0] != dst[0]:
            raise _err(errno.EXDEV)  # projects are separate folders
        self._writable(src)
        self._writable(dst)
        project = await self.projects.get(src[0])
        if project.tree.leaf(src[1]) is None and self.files.pending(src) is not None:
            # A file still being written: its stage lands under the new name, nothing is
            # committed early, so no reader sees a part of it.
            taken = project.tree.leaf(dst[1]) is not None or self.files.pending(dst) is not None
            writes.check_pending_rename(project, src[1], dst[1], flags, taken=taken)
            self.files.move_pending(src, dst)
            self.inodes.move(src, dst, folder=False)
            return
        folder = project.tree.is_dir(src[1])
        await self.stages.rename(project, src[1], dst[1], flags, ctx.pid)
        if src != dst:
            # What stood at ``dst`` is replaced: its writers' bytes never commit over the
            # file renamed in, and are never dropped either: they land as kept versions
            # (an index's as its change, §5.3) at their commit (view/session.py).
            self.files.replaced(dst)
            self.inodes.move(src, dst, folder=folder)
            for f in self.files.moved(src, dst):
                if f.stage is not None:  # it commits under its new name (rename(2) semantics)
                    await self.stages.retarget(f, self._writable(f.key))

    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise _err(errno.EPERM)  # symlinks are never served (§5.1)

    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise _err(errno.EPERM)

    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise _err(errno.EPERM)

    @_handler
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        self.stats.count("statfs")
        own = self.config.own or self.config.sources[0]
        return await workers.run(statvfs_of, own.root)
