"""The pyfuse3 adapter: inode numbers, handles and errno over the catalog of projects.

A protocol adapter only: what the tree looks like is decided by catalog.py and project.py,
what a change does by writes.py (plans), how it touches the disk by staging.py, what is open
by writing.py, what the kernel may cache by kernel.py. A write handler reads: decode, plan,
one await (`staging.apply` in a worker, under the commit lock), absorb, publish.

Threading (SPEC 7a): every handler runs on pyfuse3's one trio thread and never blocks on the
disk there: loading a project, rescans and watches are the watcher's (watch.py), in workers;
every change of the own source or the state folder is one `staging.apply` call in a worker.
On this thread only the descriptors a request is served from are read and written (pread,
pwrite of a stage). Kernel cache invalidations are never sent from a handler (that can
deadlock the mount): they are queued, and `Kernel.run` sends them from a worker thread.
Every handler lets out only ``FUSEError``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pyfuse3
import trio

from memfs.adapter import status, workers
from memfs.adapter.attrs import Listing, Listings, Shown, statvfs_of
from memfs.adapter.here import Here
from memfs.adapter.inodes import HERE, HERE_INODE, HERE_KEY, ROOT_INODE, ROOT_KEY, Inodes, Key
from memfs.adapter.kernel import Kernel, token_of, token_of_leaf
from memfs.adapter.renderings import Renderings
from memfs.adapter.watch import Watcher
from memfs.adapter.writing import OpenFile, OpenFiles
from memfs.disk import procs, sources, staging, state
from memfs.disk.config import Config
from memfs.disk.pins import Pins
from memfs.rules.tree import ancestors, parent_of
from memfs.view import writes
from memfs.view.catalog import Catalog, is_project_name
from memfs.view.project import MEMORY, PREAMBLE, Kind, Leaf, Project

log = logging.getLogger(__name__)

STATUS_XATTR = os.fsencode(status.STATUS_XATTR)
TRUNCATE_PATIENCE = 0.5  # seconds an O_TRUNC open waits for cached reads to finish
# Open flags a shared read open never has (kernel.Share): those take the long way.

MakeStage = Callable[[staging.Place, str], staging.Stage]  # (own folder, file name) -> stage
P = ParamSpec("P")
R = TypeVar("R")


def _handler(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Every handler lets out only FUSEError: a refusal or OSError becomes its errno,
    anything else is logged and becomes EIO."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except writes.Refused as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        except OSError as exc:
            if exc.errno == errno.EBADF:
                # Never the caller's doing: a descriptor of memfs's own was closed under it.
                log.exception("descriptor error in %s", fn.__name__)
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        except Exception:
            log.exception("unexpected error in %s", fn.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


def _err(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


class MemFS(pyfuse3.Operations):
    """The merged view of SPEC 4 as a FUSE filesystem."""

    enable_writeback_cache = False

    def __init__(self, config: Config, mountpoint: Path) -> None:
        super().__init__()
        self.config = config
        # /proc/<pid>/cwd is always resolved: compare `here` callers with the real path.
        self.mountpoint = Path(os.path.realpath(mountpoint))
        self.catalog = Catalog(config)
        self.stats = status.Stats()
        self.kernel = Kernel()
        self.inodes = Inodes()
        self.files = OpenFiles()
        self.pins = Pins()  # source folders kept open: an open costs an openat and an fstat
        self.renderings = Renderings(config, self.catalog, self.inodes, self.mountpoint)
        self.shown = Shown(
            config, self.catalog, self.files, self._preamble_size, os.getuid(), os.getgid()
        )
        self.here = Here(self.mountpoint)
        self.started_ns = self.shown.started_ns
        self._listings: dict[int, Listing] = {}  # dir handle -> snapshot
        self.listings = Listings(self.shown)  # folder -> entries with attributes, kept
        self._next_dh = 1
        self._commit_lock = trio.Lock()  # one plan at a time: history names stay ordered
        # Stages a worker is committing or moving, with what is set when it is done: a stage
        # is not thread-safe, so the other requests of its handle wait (`_stage_held`).
        self._stages_busy: dict[OpenFile, trio.Event] = {}
        self._watcher: Watcher | None = None

    @property
    def watcher(self) -> Watcher | None:
        return self._watcher

    @watcher.setter
    def watcher(self, watcher: Watcher | None) -> None:
        """Set by mount.py (adapter tests run without one): it loads projects off this
        thread, and renders their PREAMBLE.md and MEMORY.md there before publishing."""
        self._watcher = watcher
        if watcher is not None:
            watcher.warm = self._warm

    def _warm(self, project: Project) -> None:
        project.preamble(f"{self.mountpoint}/{project.slug}")
        project.memory_index()

    @property
    def invalidator(self) -> Kernel:
        return self.kernel  # mount.py starts its task

    def _check(self) -> None:
        """Assert every invariant of the adapter and the core below it; tests call it after
        each step."""
        self.inodes._check()
        self.files._check()
        self.catalog._check()
        for f in self.files:
            assert self.inodes.key(f.ino) is not None, ("an open file with no inode", f.key)
        self.renderings._check()

    # --- loading (off this thread) ----------------------------------------------------

    async def _listed(self) -> None:
        if self.watcher is not None:
            await self.watcher.listing()
        elif not self.catalog.listed:
            self.catalog.set_listing(await workers.run(self.catalog.read_listing))

    async def _project(self, slug: str) -> Project:
        """``slug``'s project, loaded off this thread on first use; an empty one for a
        canonical slug no source holds yet (SPEC 4: `here` never dangles)."""
        project = self.catalog.loaded().get(slug)
        if project is not None:
            return project
        await self._listed()
        if self.watcher is not None:
            project = await self.watcher.load(slug)
        elif self.catalog.has(slug):
            project = await workers.run(self.catalog.build, slug)
            project = self.catalog.loaded().get(slug) or self.catalog.adopt(project)
        if project is None:
            project = self.catalog.empty(slug)
        if project is None:
            raise _err(errno.ENOENT)
        return project

    def _exists(self, key: Key) -> bool:
        slug, path = key
        if not path:
            return self.catalog.has(slug) if slug else True
        project = self.catalog.loaded().get(slug)
        return project is not None and (
            project.tree.leaf(path) is not None or project.tree.is_dir(path)
        )

    # --- inodes and attributes ------------------------------------------------------

    def _key(self, ino: int) -> Key:
        key = self.inodes.key(ino)
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
            self.inodes.forget(ino, n, self._exists)
            if not self.inodes.lookups(ino):
                self.kernel.forgotten(ino)  # the kernel evicted it, and its pages with it
            if self.inodes.key(ino) is None:
                self.renderings.forgotten(ino)

    async def _attrs_of(self, ino: int, key: Key) -> pyfuse3.EntryAttributes:
        slug, path = key
        if not path:
            await self._listed()
        project = await self._project(slug) if slug and path else None
        return self.shown.of(ino, key, project)

    def _preamble_size(self, ino: int, project: Project) -> int:
        return len(self.renderings.of(ino, project))

    def _as_seen_by(
        self, attrs: pyfuse3.EntryAttributes, ctx: pyfuse3.RequestContext, key: Key
    ) -> pyfuse3.EntryAttributes:
        ino = attrs.st_ino
        return self.shown.as_seen_by(
            attrs, ctx.pid, older_cached=lambda: self.kernel.holds_other(ino, self._token(key))
        )

    def _token(self, key: Key) -> object:
        """What names the version ``key`` shows now (kernel.py); None for no file."""
        return token_of(self.catalog.loaded().get(key[0]), key[1])

    def _count(self, op: str) -> None:
        requests = self.stats.requests
        requests[op] = requests.get(op, 0) + 1  # half of a Counter's += 1, every request

    @_handler
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
        if parent_inode == ROOT_INODE:
            await self._listed()
        # Attributes first: a name that does not exist must not take an inode number
        # (editors and desktops probe many such names).
        attrs = await self._attrs_of(0, key)
        attrs.st_ino = self._number(key)
        self.inodes.looked_up(attrs.st_ino)
        return self._as_seen_by(attrs, ctx, key)

    def _number(self, key: Key) -> int:
        """The inode number of ``key`` when the kernel looks it up (renderings.py says why
        PREAMBLE.md gets a new one per rendering)."""
        if key[1] != PREAMBLE:
            return self.inodes.number(key)
        project = self.catalog.loaded().get(key[0]) or self.catalog.empty(key[0])
        assert project is not None
        return self.renderings.number(key, project)

    @_handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        self._count("getattr")
        key = self._key(inode)
        if self.inodes.detached(inode) and not self.renderings.holds(inode):
            if self.files.of_inode(inode):
                return self.shown.detached(inode)
            # Replaced by a rename a moment ago, the kernel's entry not moved yet: what the
            # name shows now, asked again next time.
            attrs = await self._attrs_of(inode, key)
            attrs.attr_timeout = attrs.entry_timeout = 0
            return attrs
        return self._as_seen_by(await self._attrs_of(inode, key), ctx, key)

    @_handler
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        self._count("readlink")
        if inode != HERE_INODE:
            raise _err(errno.EINVAL)
        found = await self.here.slug(ctx.pid)
        if found is None:
            raise _err(errno.ENOENT)
        return os.fsencode(found)

    # --- listing ---------------------------------------------------------------------

    @_handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self.stats.opendir += 1
        slug, path = self._key(inode)
        if inode == ROOT_INODE:
            await self._listed()
            names = [(HERE, HERE_KEY), *((s, (s, "")) for s in self.catalog.slugs())]
            listing = Listing((-1, -1), [(os.fsencode(n), k, None) for n, k in names])
        else:
            # Loaded, as on every warm walk: no coroutine for `_project`.
            project = self.catalog.loaded().get(slug) or await self._project(slug)
            pending = list(self.files.pending_names(slug, path)) if self.files.creating() else []
            found = self.listings.of(project, path, pending, self.inodes.epoch)
            if found is None:
                raise _err(errno.ENOTDIR if project.tree.leaf(path) else errno.ENOENT)
            listing = found
        # A snapshot per handle: cookies are positions in it, so a folder changing
        # mid-listing neither skips nor repeats an entry.
        dh = self._next_dh
        self._next_dh += 1
        self._listings[dh] = listing
        return dh

    @_handler
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        self.stats.readdir += 1
        listing = self._listings.get(fh)
        if listing is None or start_id >= len(listing.entries):
            return  # the end (every `ls` asks once more until an empty reply)
        entries = listing.entries
        # The entries of a project folder share its project; the root's (slugs) have none.
        project: Project | None = None
        kept = False  # whether the attributes kept in the listing still hold
        slug, path = entries[start_id][1]
        if slug and path:
            project = self.catalog.loaded().get(slug) or await self._project(slug)
            kept = listing.holds(project, self.inodes.epoch)
        # Every entry the reply takes counts as a kernel lookup, but only once the reply is
        # sent: a readdir that fails mid-way sends the kernel an error and none of them.
        taken: list[int] = []
        reply = pyfuse3.readdir_reply
        for pos in range(start_id, len(entries)):
            name, key, attrs = entries[pos]
            # A warm listing's entry is kept whole (with its number): nothing to do.
            if attrs is None or not kept or key[1] == PREAMBLE or not attrs.st_ino:
                attrs = self._entry_attrs(listing, pos, project, kept)
                if attrs is None:
                    continue  # vanished since opendir
            if not reply(token, name, attrs, pos + 1):
                break
            taken.append(attrs.st_ino)
        self.inodes.looked_up_all(taken)

    def _entry_attrs(
        self, listing: Listing, pos: int, project: Project | None, kept: bool
    ) -> pyfuse3.EntryAttributes | None:
        """Listing entry ``pos``'s attributes made (and kept when they may be), its inode
        number given; None if it is gone."""
        _, key, attrs = listing.entries[pos]
        try:
            if key[1] == PREAMBLE and project is not None:
                return self._preamble_entry(listing, key, project, kept)
            if attrs is None or not kept:
                attrs = self.shown.of(0, key, project)
                if kept:
                    listing.keep(pos, attrs)
        except pyfuse3.FUSEError:
            return None
        if not kept or not attrs.st_ino:  # a kept entry keeps its number with its stamp
            attrs.st_ino = self._number(key)
        return attrs

    def _preamble_entry(
        self, listing: Listing, key: Key, project: Project, kept: bool
    ) -> pyfuse3.EntryAttributes:
        """PREAMBLE.md's entry: its rendering's inode number and size. Made again only
        when the listing's stamp or the rendering changed (each `ls` lists it)."""
        data = self.renderings.render(project)
        if kept and listing.preamble and listing.preamble[0][0] is data:
            return listing.preamble[0][1]
        attrs = self.shown.of(0, key, project)
        attrs.st_ino = self._number(key)
        attrs.st_size = len(self.renderings.of(attrs.st_ino, project))
        listing.preamble[:] = [(data, attrs)] if kept else []
        return attrs

    async def releasedir(self, fh: int) -> None:
        self.stats.releasedir += 1
        self._listings.pop(fh, None)

    # --- reading ---------------------------------------------------------------------

    @_handler
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        self.stats.open += 1
        key = self._key(inode)
        slug, path = key
        if not path or key == HERE_KEY:
            raise _err(errno.EISDIR if key != HERE_KEY else errno.ELOOP)
        project = self.catalog.loaded().get(slug) or await self._project(slug)
        leaf = project.tree.leaf(path)
        writing = bool(flags & (os.O_WRONLY | os.O_RDWR))
        f = OpenFile(inode, key, pid=ctx.pid, append=bool(flags & os.O_APPEND))
        if writing:
            f.writer, f.tgid = True, procs.tgid(ctx.pid)
        if not writing and (mine := self._own_stage(inode, ctx.pid)) is not None:
            # The writer reads back what it wrote and has not closed yet, as its stat shows
            # it (writing.py): its own stage, which nobody else sees.
            f.fd = os.dup(mine.fd)
            return pyfuse3.FileInfo(fh=self.files.add(f), direct_io=True)
        if leaf is None:
            if self.files.pending(key) is None:
                raise _err(errno.EISDIR if project.tree.is_dir(path) else errno.ENOENT)
            # Created by another open and not committed yet: still empty to everyone else.
            f.data = b""
            if writing:
                f.unsaved = f.keeps_history = True
                await self._stage_empty(f, staging.FILE_MODE, self._writable(key))
            return pyfuse3.FileInfo(fh=self.files.add(f), direct_io=True)
        if not writing:
            return self._open_for_read(f, project, leaf)
        if not flags & os.O_TRUNC:
            return await self._open_for_write(f, project, leaf, flags)
        await self.kernel.truncating(inode, TRUNCATE_PATIENCE)
        try:
            return await self._open_for_write(f, project, leaf, flags)
        finally:
            self.kernel.truncated(inode)

    def _own_stage(self, ino: int, pid: int) -> staging.Stage | None:
        """The stage through which thread ``pid`` writes ``ino`` itself, if it does."""
        if not self.files.has_writers(ino):
            return None
        mine = self.files.own_writer(ino, pid)
        return mine.stage if mine is not None else None

    def _open_for_read(self, f: OpenFile, project: Project, leaf: Leaf) -> pyfuse3.FileInfo:
        """One version per open, and the page cache only where it holds that version
        (kernel.py states the rule)."""
        if leaf.kind is Kind.PREAMBLE:
            # This inode shows one rendering, ever (renderings.py): its size and pages are that
            # one's. Reached through a name the kernel has not looked up again since the
            # project changed, it still serves that rendering, whole; the lookup queued by
            # the change brings the new one.
            f.data = self.renderings.of(f.ino, project)
            return pyfuse3.FileInfo(fh=self.files.add(f), keep_cache=True)
        if leaf.kind is Kind.MEMORY:
            f.data = project.memory_index()
        else:
            f.version = leaf.version
        token = token_of_leaf(project, leaf)
        # Pin the version now and check it is the one the view reports: a change inotify
        # has not told yet is read as the disk shows it, past the pages and size of the
        # version before.
        current = f.data is not None or self._pin(f, project)
        writing = self.files.has_writers(f.ino)
        served = self.kernel.open(f.ino, token) if current and not writing else None
        f.token = token if served is not None else None
        # Direct I/O: every read comes from this open's descriptor, and is not capped by a
        # size the kernel may hold from another version.
        return pyfuse3.FileInfo(
            fh=self.files.add(f), direct_io=served is None, keep_cache=served is True
        )

    def _pin(self, f: OpenFile, project: Project) -> bool:
        """Open the version ``f`` reads; False when the disk holds another one by now (it is
        read as the disk shows it, and the watcher reads the change)."""
        v = f.version
        assert v is not None
        origin = project.origins[v.origin]
        f.fd, current = self.pins.open(origin.root, origin.parts, v.path, (v.size, v.mtime_ns))
        if current:
            return True
        if self.watcher is not None:
            self.watcher.recheck(project, v.origin, v.path)
        return False

    @_handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        self._count("read")
        f = self.files.get(fh)
        if f is None:
            raise _err(errno.EBADF)
        if f.stage is not None:
            return f.stage.read(off, size)
        if f.data is not None:
            return f.data[off : off + size]
        # Never refused for a change on disk: the bytes the disk holds, as a local read.
        return os.pread(f.fd, size, off)

    # --- writing ---------------------------------------------------------------------

    async def _open_for_write(
        self, f: OpenFile, project: Project, leaf: Leaf, flags: int
    ) -> pyfuse3.FileInfo:
        place = self._writable(f.key)
        if leaf.kind not in (Kind.FILE, Kind.MEMORY):
            raise _err(errno.EACCES)
        f.version = leaf.version
        f.keeps_history = True
        if flags & os.O_TRUNC:
            # Nothing of the head is read: no descriptor of it is opened (closing it after
            # the commit would free the replaced inode on the request thread).
            mode = leaf.version.mode if leaf.kind is Kind.FILE and leaf.version else 0o644
            await self._stage_empty(f, mode or staging.FILE_MODE, place)
            # `> file` empties the file even if nothing is written; a shell closes a dup of
            # the descriptor (a flush) before writing, so the bare truncation commits only
            # at release, and readers never see the empty in-between file.
            f.unsaved = True
        elif leaf.kind is Kind.MEMORY:
            # Editing the union starts from what the reader saw: the union becomes the own
            # source's MEMORY.md, so no topic linked elsewhere is lost.
            f.data = project.memory_index()
        else:
            self._pin(f, project)  # the version its reads and its stage start from
        # Without O_TRUNC the stage (a copy of the head) is made at the first write or truncate:
        # an editor opening read-write, or `touch`, copies nothing and leaves no temp file.
        # Direct I/O: the writer's bytes stay out of the page cache other openers share.
        return pyfuse3.FileInfo(fh=self.files.add(f), direct_io=True)

    def _writable(self, key: Key) -> staging.Place:
        """The own folder holding ``key``'s parent, or the errno SPEC 7.4 names."""
        if key == HERE_KEY:
            raise _err(errno.EACCES)
        return writes.target_folder(self.catalog, *key)

    async def _stage_empty(self, f: OpenFile, mode: int, place: staging.Place) -> None:
        """An empty stage for ``f`` in ``place`` (`_writable`): O_TRUNC, or a create."""
        await self._stage(
            f,
            lambda place, name: staging.Stage(place, name, initial_fd=None, mode=mode),
            place,
        )

    async def _stage(
        self, f: OpenFile, make: MakeStage, place: staging.Place | None = None
    ) -> None:
        """Make ``f``'s stage in a worker (it may create the own source's folders), in
        ``place``, the own folder of ``f``'s name (`_writable`, if not given)."""
        if place is None:
            place = self._writable(f.key)
        f.stage = await workers.run(make, place, parent_of(f.key[1])[1])
        f.data = None  # reads now see the writer's own bytes
        await self._folders_made(f.key)

    async def _folders_made(self, key: Key) -> None:
        """A stage made the own source's folders of ``key`` (mkdir -p): the view records
        them, so they stay when the other sources' folders go (SPEC 7.3)."""
        project = await self._project(key[0])
        own, now = self._planner(project).own, time.monotonic_ns()
        for folder in ancestors(key[1]):
            project.observe_dir(own, folder, True, now)

    async def _stage_copy(self, f: OpenFile) -> None:
        """The first change through a write handle: stage a copy of the head it opened."""
        if f.version is None:
            raise _err(errno.EBADF)
        union, head = f.data, f.fd
        mode = (f.version.mode if union is None else 0) or staging.FILE_MODE
        await self._stage(
            f, lambda place, name: staging.Stage.copy_of(place, name, mode, head, union)
        )

    @_handler
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self._count("create")
        key = self._child_key(parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EACCES)  # the root holds projects only
        place = self._writable(key)
        project = await self._project(key[0])
        if project.tree.is_dir(key[1]):
            raise _err(errno.EISDIR)
        writes.check_new_name(key[1])
        if flags & os.O_EXCL and (project.tree.leaf(key[1]) or self.files.pending(key)):
            raise _err(errno.EEXIST)
        ino = self.inodes.number(key)
        f = OpenFile(ino, key, writer=True, pid=ctx.pid, append=bool(flags & os.O_APPEND))
        f.tgid = procs.tgid(ctx.pid)
        f.unsaved = f.keeps_history = True
        await self._stage_empty(f, writes.new_mode(mode, ctx.umask), place)
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
        self._count("write")
        f = self.files.get(fh)
        if f is None or not f.writer:
            raise _err(errno.EBADF)
        if f.stage is None:
            await self._stage_copy(f)
        elif f in self._stages_busy:
            await self._stage_free(f)  # a thread of the writer closed a dup meanwhile
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
        if not (f.failed or f.unsaved or (f.stage is not None and f.stage.dirty)):
            return  # nothing to commit or report (an fsync committed it): no look at /proc
        if self._writer_killed(f):
            return
        if procs.holds(f.tgid, self._mount_path(f.key)):
            # Not the writer's last close: a forked child closing the descriptor it
            # inherited (a `subprocess` run mid-write), or a dup (a shell's `> file`).
            # Nobody sees what the writer has not closed; its own last close commits, or
            # at the latest the release.
            return
        if f.failed:
            if self.files.pending(f.key) is f:
                # A create whose write failed: the name stays, empty, as on a local folder.
                await self._commit(f, empty=True)
            raise _err(f.failed)  # close() returns it; the file stays as it was
        await self._commit(f)

    def _writer_killed(self, f: OpenFile) -> bool:
        """A writer killed mid-write (its files are closed for it) commits nothing."""
        if f.pid and not f.discard and procs.killed_by_signal(f.pid):
            f.discard = True
            log.info("writer %d of %s was killed: its bytes are dropped", f.pid, f.key)
        return f.discard

    def _mount_path(self, key: Key) -> str:
        return f"{self.mountpoint}/{key[0]}/{key[1]}"

    @_handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        self._count("fsync")
        f = self.files.get(fh)
        if f is not None and f.writer and f.stage is not None:
            if f.failed:
                raise _err(f.failed)
            if f.stage.dirty or f.unsaved:
                # Asked for durability: even a bare new or truncated file is committed now.
                await self._commit(f)

    async def _commit(self, f: OpenFile, *, empty: bool = False) -> None:
        """flush/fsync: make the staged bytes the target, atomically (SPEC 7.1); ``empty``:
        an empty file instead (a create whose write failed)."""
        project = await self._project(f.key[0])
        async with self._stage_held(f):  # a flush and an fsync at once: one after the other
            stage = f.stage
            assert stage is not None
            if f.discard or (f.failed and not empty):
                return
            if empty:
                stage.truncate(0)
            stage.dirty = True
            created = self.files.pending(f.key) is f  # its name's first commit
            plan = self._planner(project).commit(
                stage, f.key[1], keep=f.keeps_history, created=created
            )
            await self._run(project, plan)
        f.keeps_history = f.unsaved = False
        self.files.settled(f)
        self.stats.commits += 1

    @_handler
    async def release(self, fh: int) -> None:
        self.stats.release += 1
        f = self.files.get(fh)
        if f is None:
            return
        created = self.files.pending(f.key) is f  # never committed: its name stays, if empty
        self.files.pop(fh)
        if f.fd >= 0:
            os.close(f.fd)
        if f.token is not None:
            self.kernel.closed(f.ino)
        if f.stage is None:
            return
        if (f.unsaved or f.stage.dirty) and not self._writer_killed(f):
            try:
                await self._commit(f, empty=bool(f.failed) and created)
            except (OSError, pyfuse3.FUSEError) as exc:
                log.warning("committing %s at release failed: %s", f.key, exc)
        # A handle released without a successful commit is dropped: the target stays as
        # it was (the temp file goes in a worker: unlinking is the disk's business).
        await self._stage_free(f)  # a rename may be moving it
        if f.stage.temp:
            await workers.run(f.stage.abort)
            self._abandoned(f.key)
        else:
            f.stage.abort()

    def _abandoned(self, key: Key) -> None:
        """A name created through the mount that never landed: the kernel keeps the entry
        `create` answered, and must drop it (a later create of the name must reach here)."""
        if not self._exists(key) and self.files.pending(key) is None:
            self.kernel.name_gone(key, self.inodes.known)

    # --- changing names and attributes (SPEC 7.3, 7.6) -------------------------------

    @_handler
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
        # Every file shows the mounting user: chown to what is shown changes nothing.
        if (fields.update_uid and attr.st_uid != self.shown.uid) or (
            fields.update_gid and attr.st_gid != self.shown.gid
        ):
            raise _err(errno.EPERM)
        mode = attr.st_mode if fields.update_mode else None
        size = attr.st_size if fields.update_size else None
        atime = attr.st_atime_ns if fields.update_atime else None
        mtime = attr.st_mtime_ns if fields.update_mtime else None
        asked = atime is not None or mtime is not None
        f = self.files.get(fh) if fh is not None else self.files.pending(key)
        if f is not None and f.writer and (f.stage is not None or size is not None):
            # ftruncate, fchmod, futimens on a handle being written: its stage changes.
            if f.stage is None:
                await self._stage_copy(f)  # ftruncate on a handle not written yet
            await self._stage_free(f)
            f.set_attrs(self.config, mode=mode, size=size, atime_ns=atime, mtime_ns=mtime)
            return self._writers_attrs(f)
        if mode is None and size is None and not asked:
            return await self._attrs_of(inode, key)
        if key in (ROOT_KEY, HERE_KEY):
            raise _err(errno.EPERM)  # memfs's own: the root holds projects only
        self._writable(key)
        project = await self._project(key[0])
        planner = self._planner(project)
        times = planner.times(key[1], atime, mtime) if asked else None
        memory = project.memory_index() if key[1] == MEMORY else None
        plan = planner.set_attrs(key[1], mode=mode, size=size, times=times, memory=memory)
        await self._run(project, plan)
        return self.shown.of(inode, key, project)

    def _writers_attrs(self, f: OpenFile) -> pyfuse3.EntryAttributes:
        """The writer's own attributes, kept by the kernel no longer than this request:
        tools that truncate check the size the kernel then holds (RLIMIT_FSIZE, EFBIG)."""
        if self.inodes.detached(f.ino):
            return self.shown.detached(f.ino)
        assert f.stage is not None
        mode, size = stat.S_IFREG | f.stage.mode, f.stage.size()
        attrs = self.shown.entry(f.ino, mode, size, time.time_ns())
        attrs.attr_timeout = attrs.entry_timeout = 0
        return attrs

    @_handler
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._count("unlink")
        key = self._child_key(parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EPERM)
        self._writable(key)
        project = await self._project(key[0])
        if project.tree.leaf(key[1]) is None and self.files.pending(key) is not None:
            # A file still being written: it never lands (its stage goes at release).
            await self._gone(key)
            return
        planner = self._planner(project)
        left_out = project.tree.leaf(key[1]) is None and project.left_out_in(planner.own, key[1])
        plan = planner.unlink_left_out(key[1]) if left_out else planner.unlink(key[1])
        await self._run(project, plan)
        await self._gone(key)

    async def _gone(self, key: Key) -> None:
        """``key`` was unlinked: what is open on it stays usable and never commits; the
        temp files of its stages go now (their descriptors keep the bytes), so that its
        folder can be removed before the kernel's late release."""
        stages = [f.stage for f in self.files.gone(key) if f.stage is not None]
        ino = self.inodes.detach(key)
        if ino is not None:
            self.kernel.inode(ino)  # its st_nlink is 0 now
        for stage in stages:
            await workers.run(stage.forget_temp)

    @_handler
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self._count("mkdir")
        key = self._child_key(parent_inode, name)
        wanted = writes.new_mode(mode, ctx.umask)
        if parent_inode == ROOT_INODE:
            project = await self._new_project(key[0], wanted)
        else:
            self._writable(key)
            project = await self._project(key[0])
            await self._run(project, self._planner(project).mkdir(key[1], wanted))
        ino = self.inodes.number(key)
        self.inodes.looked_up(ino)
        return self.shown.of(ino, key, project if key[1] else None)

    async def _new_project(self, slug: str, mode: int) -> Project:
        """mkdir at the root: a new project in the own source, named by its canonical slug."""
        if self.config.own is None:
            raise _err(errno.EROFS)
        if slug == HERE or not is_project_name(slug):
            raise _err(errno.EINVAL)  # only canonical slugs live at the root
        await self._listed()
        if self.catalog.has(slug):
            raise _err(errno.EEXIST)
        step = writes.plan_new_project(self.catalog, slug, mode)

        def made() -> set[state.Whiteout]:
            step.run()
            return state.load_whiteouts(self.config.state_dir, slug)  # off this thread

        async with self._commit_lock:
            whiteouts = await workers.run(made)
        project = self.catalog.own_folder_made(slug, whiteouts)
        self.publish_root(slug)
        return project

    @_handler
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._count("rmdir")
        key = self._child_key(parent_inode, name)
        if parent_inode == ROOT_INODE:
            raise _err(errno.EPERM)  # projects are removed in their sources, not here
        self._writable(key)
        project = await self._project(key[0])
        if any(self.files.pending_names(*key)):
            raise _err(errno.ENOTEMPTY)  # a file is being created in it
        await self._run(project, self._planner(project).rmdir(key[1]))

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
        self._count("rename")
        src = self._child_key(parent_inode_old, name_old)
        dst = self._child_key(parent_inode_new, name_new)
        if ROOT_INODE in (parent_inode_old, parent_inode_new):
            raise _err(errno.EPERM)
        if src[0] != dst[0]:
            raise _err(errno.EXDEV)  # projects are separate folders
        self._writable(src)
        self._writable(dst)
        project = await self._project(src[0])
        if project.tree.leaf(src[1]) is None and self.files.pending(src) is not None:
            # A file still being written: its stage lands under the new name, nothing is
            # committed early, so no reader sees a part of it.
            taken = project.tree.leaf(dst[1]) is not None or self.files.pending(dst) is not None
            writes.check_pending_rename(project, src[1], dst[1], flags, taken=taken)
            self.files.move_pending(src, dst)
            self.inodes.move(src, dst, folder=False)
            return
        folder = project.tree.is_dir(src[1])
        memory = project.memory_index() if src[1] == MEMORY else None
        plan = self._planner(project).rename(src[1], dst[1], flags, memory=memory)
        await self._run(project, plan)
        if src != dst:
            self.inodes.move(src, dst, folder=folder)
            for f in self.files.moved(src, dst):
                if f.stage is not None:  # it commits under its new name (rename(2) semantics)
                    place, name = self._writable(f.key), parent_of(f.key[1])[1]
                    async with self._stage_held(f):
                        await workers.run(f.stage.retarget, place, name)

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

    # --- plans: one apply, then absorb, then publish ---------------------------------

    def _planner(self, project: Project) -> writes.Planner:
        return writes.Planner.of(self.config, self.catalog, project)

    async def _run(self, project: Project, plan: writes.Plan) -> None:
        """Apply ``plan`` in one worker call, absorb what it found, publish; then raise the
        error of the step that failed, if one did (the view shows the disk either way)."""
        apply = plan.application(project, self.config.limits.max_file_bytes)
        await self._take_commit_lock()
        try:
            applied = await workers.run(apply)
        finally:
            self._commit_lock.release()
        if writes.absorb(self.catalog, project, plan, applied):
            self.publish_root(project.slug)
        self._publish(project)
        if self.watcher is not None:
            self.watcher.read_ahead_soon(project)  # the next renderings read off this thread
        if applied.error is not None:
            raise applied.error

    async def _stage_free(self, f: OpenFile) -> None:
        """Wait while a worker commits or moves ``f``'s stage (`_stage_held`)."""
        while (busy := self._stages_busy.get(f)) is not None:
            await busy.wait()

    @contextlib.asynccontextmanager
    async def _stage_held(self, f: OpenFile) -> AsyncIterator[None]:
        """``f``'s stage in a worker's hands for the block, once whoever held it let go: its
        handle's other requests (a write, a truncate, a second commit, the release) wait."""
        await self._stage_free(f)
        done = self._stages_busy[f] = trio.Event()  # no checkpoint since it was free
        try:
            yield
        finally:
            del self._stages_busy[f]
            done.set()

    async def _take_commit_lock(self) -> None:
        """The commit lock, at once when it is free: `async with` would yield to the loop
        first, a round of the scheduler per plan (the worker call after it checkpoints)."""
        try:
            self._commit_lock.acquire_nowait()
        except trio.WouldBlock:
            await self._commit_lock.acquire()

    # --- keeping the kernel true after a change --------------------------------------

    def publish_all(self) -> None:
        for project in list(self.catalog.loaded().values()):
            self._publish(project)

    def _publish(self, project: Project) -> None:
        self.kernel.publish(project, self.inodes.known)

    # The watcher's Listener protocol.
    def project_changed(self, project: Project) -> None:
        self._publish(project)

    def root_changed(self, slug: str) -> None:
        self.publish_root(slug)

    def publish_root(self, slug: str) -> None:
        self.kernel.publish_root(slug, self.inodes.known)

    # --- status ----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return status.report(self)

    @_handler
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        # Reading the counters must not change them: only the other names count (the
        # kernel asks for security.capability before every write to a FUSE file).
        if inode == ROOT_INODE and name == STATUS_XATTR:
            return json.dumps(self.status(), sort_keys=True).encode()
        self._count("getxattr")
        raise _err(errno.ENODATA)

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        return [STATUS_XATTR] if inode == ROOT_INODE else []

    @_handler
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        self._count("statfs")
        own = self.config.own or self.config.sources[0]
        return await workers.run(statvfs_of, own.root)


def _parent_key(key: Key) -> Key:
    slug, path = key
    if not path:
        return ROOT_KEY
    return (slug, parent_of(path)[0])
