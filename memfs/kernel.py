"""What the kernel holds of the view, and telling it what to forget (SPEC 5.4, 7.1).

Adapter side: knows pyfuse3 and trio. The one place that decides how an open is served, so
that no read ever combines two versions:

* Every open reads one version, fixed when it opened (the handle holds that version's
  descriptor, or its bytes for a synthetic file); its *token* names that version.
* The kernel's page cache of an inode may hold pages of one version only: the *cached*
  token. An open is served through the page cache only when nothing the kernel holds of
  the inode can be older than the open's version: no invalidation of it is still queued,
  and the cache holds this very version or nothing (``keep_cache``). If it may hold
  another, the open is served with direct I/O, and once nobody reads that other version
  the kernel is told to drop it; the next open then finds the cache clean.
* The size: the kernel keeps one size per inode, set by whoever stats it, and caps page
  cache reads with it. While an open reads an older version through the page cache, every
  caller is told that version's size and the kernel keeps it no longer than one request
  (fs.py, ``_as_seen_by``); opens of the newer version are served with direct I/O, which
  that size does not cap.
* Otherwise the open is served with direct I/O: every read comes from the handle's own
  version, and direct reads are not capped by a size the kernel may hold from an older
  version.
* A change queues its invalidations at once (the view first, then the queue), so an open
  after a commit returns or after memfs saw a change on disk already takes the direct path
  until the kernel has forgotten the old version.
* A warm read open repeats the last one (issue 14): once an open of a version was served
  through the page cache, a `Share` remembers it, and the next read opens of that inode
  join its handle: one lookup and one comparison of what it depended on (past `fd_limit`,
  where no descriptor is kept, the share opens one of its own while an open reads through
  it: trusting inotify, at the first read that reaches memfs, else at the open). A file
  rewritten in place is told by inotify (`trusts_inotify`, docs/ARCHITECTURE.md says
  how); without a watch on every folder, each warm open checks its descriptor with an
  fstat instead. What it depended on is stamped: this module's `Kernel.epoch` (bumped by
  every invalidation queued, every record dropped, every writer coming), the inode
  numbers' epoch and the project's generation. Whatever changes any of them sends the
  next open the long way.

Invalidations are sent by `Kernel.run`, a task of its own, from a worker thread: a notify
sent inside a handler can deadlock the mount (FUSE-NOTES).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import resource
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import pyfuse3
import trio

from memfs import workers
from memfs.inodes import ROOT_INODE, Key
from memfs.project import MEMORY, PREAMBLE, Kind, Leaf, Project
from memfs.tree import parent_of
from memfs.writing import OpenFile

log = logging.getLogger(__name__)

Token = Hashable  # names one version of a file's bytes


def token_of(project: Project | None, path: str) -> Token:
    """What names the version ``path`` of ``project`` shows now; None for no file."""
    if project is None or not path:
        return None
    leaf = project.tree.leaf(path)
    return None if leaf is None else token_of_leaf(project, leaf)


def token_of_leaf(project: Project, leaf: Leaf) -> Token:
    """`token_of` for the leaf a caller holds already (an open: no second lookup)."""
    if leaf.version is None:
        return None
    if leaf.kind is Kind.MEMORY:
        data = project.memory_index()
        return ("memory", len(data), hash(data))
    v = leaf.version
    return (v.origin, v.path, v.size, v.mtime_ns)


def _shows(fd: int, size: int, mtime_ns: int) -> bool:
    """Whether the file behind ``fd`` is still the version of that size and mtime (one
    fstat): a file rewritten in place is another version under the same descriptor."""
    st = os.fstat(fd)
    return st.st_mtime_ns == mtime_ns and st.st_size == size


@dataclass(eq=False, slots=True)
class Share:
    """The handle every read open of one version of ``ino`` joins while nothing it was
    decided on changed (see the module's text): the page cache, and the descriptor it
    reads through (the kept one, or its own)."""

    fh: int
    f: OpenFile
    info: pyfuse3.FileInfo  # what `open` answers (pyfuse3 copies it into each reply)
    cached: _Cached
    project: Project
    # What it was decided on: Kernel.epoch, the inode numbers' epoch, the project's
    # generation; and the version's (size, mtime_ns), for the fstat. Plain fields, not
    # tuples: they are compared at every warm open.
    epoch: int
    inode_epoch: int
    generation: int
    size: int
    mtime_ns: int


@dataclass(eq=False, slots=True)
class _Cached:
    token: Token
    readers: int = 0  # opens served through the page cache that are still open
    # That version's descriptor, kept while the kernel may hold its pages: the next open of
    # the same version reads through it (its reads must return those very bytes anyway).
    fd: int = -1


class Kernel:
    """The page-cache rule above, and the queue of invalidations."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[tuple[str, int, bytes]](math.inf)
        self.enabled = True  # off in adapter tests, where no kernel is attached
        self._queued: Counter[int] = Counter()  # inode -> invalidations queued, not sent
        self._cached: dict[int, _Cached] = {}
        self._writers_coming: Counter[int] = Counter()  # inode -> O_TRUNC opens waiting
        self._drained: dict[int, trio.Event] = {}  # inode -> set when its readers are gone
        # Descriptors kept in _Cached records: at most half of what the process may open
        # (pins.py keeps an eighth), the rest for handles, stages and the rest; a share
        # past it opens its own (OpenFile.pin): at its first read trusting inotify, else
        # at each warm open (two syscalls more).
        self.fd_limit = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2, 65536)
        self.fds_kept = 0
        self.sent = 0
        self.errors = 0
        # Bumped by whatever may change how an open is served: see the module's text.
        self.epoch = 0
        self.shares: dict[int, Share] = {}  # inode -> the share its read opens join
        self.shared_opens = 0
        # Whether inotify tells every file rewritten in place (`shared`): set by the adapter
        # while a watcher watches every folder; else each warm open checks with an fstat.
        self.trusts_inotify = False

    # --- serving an open ------------------------------------------------------------

    def open(self, ino: int, token: Token) -> bool | None:
        """How to serve an open of ``ino`` reading version ``token``: True through the
        page cache, its pages kept; None with direct I/O. Pair True with `closed`."""
        # .get: a Counter's missing key costs a Python call (__missing__), per open
        if self._queued.get(ino) or self._writers_coming.get(ino):
            return None
        cached = self._cached.get(ino)
        if cached is None:
            # Nothing of it is cached: pages were never read since the mount, or the last
            # invalidation dropped them and nobody has read since.
            self._cached[ino] = _Cached(token, 1)
            return True
        if cached.token == token:
            cached.readers += 1
            return True
        # Pages or a size of another version may be held: this open reads past them, and
        # if nobody reads that version any more the kernel is told to drop them, so the
        # next open finds the cache clean.
        if not cached.readers:
            self.inode(ino)
        return None

    def kept_fd(self, ino: int, token: Token) -> int:
        """The descriptor kept for version ``token`` of ``ino``, or -1: the one an open
        of that version served through the page cache may read through (`open` decides)."""
        cached = self._cached.get(ino)
        if cached is None or cached.token != token or self._queued.get(ino):
            return -1
        return cached.fd

    def reuse(self, f: OpenFile, token: Token) -> bool:
        """Let ``f`` read through the descriptor kept for its very version, if one is and
        the file behind it was not rewritten in place since (one fstat)."""
        fd, v = self.kept_fd(f.ino, token), f.version
        if fd < 0 or v is None or not _shows(fd, v.size, v.mtime_ns):
            return False
        f.fd, f.borrowed = fd, True
        return True

    def lend(self, f: OpenFile, served: bool | None) -> None:
        """After `open` said how ``f`` is served: a reader through the page cache hands
        its descriptor to the record (or goes on borrowing the record's); any other must
        not borrow it (the record may close it while ``f`` reads), so it reads through a
        copy of its own."""
        if served and f.fd >= 0 and not f.borrowed and f.data is None:
            f.borrowed = self.keep_fd(f.ino, f.fd)
        elif not served and f.borrowed:
            f.fd, f.borrowed = os.dup(f.fd), False

    def share(
        self,
        fh: int,
        f: OpenFile,
        info: pyfuse3.FileInfo,
        project: Project,
        inode_epoch: int,
        pin: Callable[[], int],
    ) -> None:
        """``f`` (handle ``fh``, answered with ``info``) was served through the page cache:
        the next read opens of its inode may join it. It reads through the kept descriptor,
        or, past `fd_limit`, through its own, closed when no open reads through it and
        opened again (``pin``) by the next."""
        cached, v = self._cached.get(f.ino), f.version
        if cached is None or v is None or f.fd < 0:
            return
        if f.borrowed and cached.fd != f.fd:
            return
        f.shared, f.pin = True, pin
        self.shares[f.ino] = Share(
            fh, f, info, cached, project, self.epoch, inode_epoch, project.generation,
            v.size, v.mtime_ns,
        )  # fmt: skip

    def shared(self, ino: int, inode_epoch: int, loaded: dict[str, Project]) -> Share | None:
        """The share a read open of ``ino`` joins now, or None: then it takes the long way
        (and a share that no longer holds is forgotten). Raises nothing: it runs outside
        the handlers' error translation. Every warm read open runs it."""
        share = self.shares.get(ino)
        if share is None:
            return None
        project = share.project
        if (
            share.epoch == self.epoch
            and share.inode_epoch == inode_epoch
            and share.generation == project.generation
            and loaded.get(project.slug) is project
        ):
            if self.trusts_inotify:
                # Past the kept descriptors' limit a share has no descriptor while nobody
                # reads through it: trusting inotify, the first read that reaches memfs
                # opens the version again (`fs.read`; warm, the page cache serves them
                # all), not every open (an openat and an fstat each, issue 14).
                # A write into the file queued an inotify event before the writer's call
                # returned, and reading that event bumps the epoch (`Listener.rewriting`):
                # a share that passed the stamps above missed only a write whose event is
                # not read yet. Its open reads the version before, as SPEC 5.4 allows
                # until a change shows; `fs.read` refuses a page the kernel lacks rather
                # than mix the two. No fstat: it cost 6 µs of a warm open here (issue 14).
                current = True
            elif share.f.fd < 0:
                current = self._pinned_again(share)
            else:
                try:
                    # Rewritten in place: another version, same descriptor.
                    st = os.fstat(share.f.fd)
                    current = st.st_mtime_ns == share.mtime_ns and st.st_size == share.size
                except OSError:
                    current = False
            if current:
                share.cached.readers += 1
                self.shared_opens += 1
                return share
        del self.shares[ino]
        return None

    @staticmethod
    def _pinned_again(share: Share) -> bool:
        """A share that keeps no descriptor while nobody reads through it (past
        `fd_limit`) opens the very version again; False when the disk holds another."""
        f = share.f
        assert f.pin is not None  # set by `share`
        f.fd = f.pin()
        return f.fd >= 0

    def left(self, f: OpenFile) -> None:
        """An open of shared handle ``f`` was released (after `OpenFiles.leave`): a handle
        with a descriptor of its own closes it when nobody reads through it any more."""
        if not f.opens and not f.borrowed and f.fd >= 0:
            fd, f.fd = f.fd, -1
            with contextlib.suppress(OSError):  # this must not raise (fs.release)
                os.close(fd)
        self.closed(f.ino)

    def changed(self) -> None:
        """Something an open's service depends on changed (a writer's stage came): every
        share takes the long way at its next open."""
        self.epoch += 1

    def keep_fd(self, ino: int, fd: int) -> bool:
        """An open that `open` let use the page cache hands its descriptor over, to be kept
        while the pages may stay; False when one is kept already or too many are."""
        cached = self._cached.get(ino)
        if cached is None or cached.fd >= 0 or self.fds_kept >= self.fd_limit:
            return False
        cached.fd = fd
        self.fds_kept += 1
        return True

    def _drop(self, ino: int) -> None:
        self.epoch += 1
        self.shares.pop(ino, None)
        cached = self._cached.pop(ino, None)
        if cached is not None and cached.fd >= 0:
            os.close(cached.fd)
            self.fds_kept -= 1

    def holds_other(self, ino: int, token: Token) -> bool:
        """Whether an open reading another version than ``token`` uses the page cache."""
        cached = self._cached.get(ino)
        return cached is not None and cached.readers > 0 and cached.token != token

    def closed(self, ino: int) -> None:
        """An open that `open` let use the page cache was released."""
        cached = self._cached.get(ino)
        if cached is not None and cached.readers:
            cached.readers -= 1
            if not cached.readers and ino in self._drained:
                self._drained.pop(ino).set()

    async def truncating(self, ino: int, patience: float) -> None:
        """An open with O_TRUNC is about to let the kernel set the inode's size to 0 for
        everyone (atomic_o_trunc): let the opens reading through the page cache finish
        first (at most ``patience`` seconds), and send every new one past it meanwhile,
        so that no reader's read is cut at 0. Pair with `truncated`."""
        self._writers_coming[ino] += 1
        self.epoch += 1
        cached = self._cached.get(ino)
        if cached is None or not cached.readers:
            return
        drained = self._drained.setdefault(ino, trio.Event())
        with trio.move_on_after(patience):
            await drained.wait()

    def truncated(self, ino: int) -> None:
        left = self._writers_coming[ino] - 1
        if left > 0:
            self._writers_coming[ino] = left
        else:
            del self._writers_coming[ino]

    def forgotten(self, ino: int) -> None:
        """The kernel dropped the inode: nothing of it is cached any more."""
        self._drop(ino)

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each step."""
        for ino, share in self.shares.items():
            f = share.f
            assert f.ino == ino, (ino, f.ino)
            assert f.shared, ino
            assert share.cached is self._cached.get(ino), ino  # a dropped record drops it
            if f.borrowed:
                assert f.fd == share.cached.fd >= 0, (ino, f.fd, share.cached.fd)
            assert share.cached.readers >= f.opens >= 0, (ino, share.cached.readers, f.opens)

    # --- invalidations --------------------------------------------------------------

    def entry(self, parent: int, name: str) -> None:
        """The kernel must look ``name`` up again in folder ``parent``."""
        self.epoch += 1  # what a share was decided on may be gone
        if self.enabled:
            self._send.send_nowait(("entry", parent, os.fsencode(name)))

    def inode(self, ino: int) -> None:
        """The kernel must forget ``ino``'s attributes and pages."""
        self.epoch += 1
        if self.enabled:
            self._queued[ino] += 1
            self._send.send_nowait(("inode", ino, b""))

    def name_gone(self, key: Key, known: Callable[[Key], int | None]) -> None:
        """The kernel must drop its entry of ``key``, a name that is no more."""
        folder, name = parent_of(key[1])
        parent = known((key[0], folder))
        if parent is not None:
            self.entry(parent, name)

    def publish(self, project: Project, known: Callable[[Key], int | None]) -> None:
        """Queue what the kernel must forget of ``project``'s changed view paths;
        ``known`` gives the inode number the kernel may hold for a path."""
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
                parent_ino = known((slug, parent))
                if parent_ino is not None:
                    self.entry(parent_ino, name)
            ino = known((slug, path))
            if ino is not None:
                self.inode(ino)
        changes.clear()
        # Derived files change with any of their inputs. PREAMBLE.md's inode never changes
        # (renderings.py): the kernel looks the name up again and finds the new rendering.
        memory = known((slug, MEMORY))
        if memory is not None:
            self.inode(memory)
        folder = known((slug, ""))
        if folder is not None and known((slug, PREAMBLE)) is not None:
            self.entry(folder, PREAMBLE)

    def publish_root(self, slug: str, known: Callable[[Key], int | None]) -> None:
        """A project appeared, vanished or was loaded at the root."""
        self.entry(ROOT_INODE, slug)
        for ino in (known((slug, "")), ROOT_INODE):
            if ino is not None:
                self.inode(ino)

    def drain(self) -> set[tuple[str, int, bytes]]:
        """Take everything queued (the adapter tests read what a change queued)."""
        batch = set()
        while True:
            try:
                batch.add(self._receive.receive_nowait())
            except trio.WouldBlock:
                return batch

    async def run(self) -> None:
        async with self._receive:
            async for first in self._receive:
                batch = {first} | self.drain()
                queued = Counter(ino for kind, ino, _ in batch if kind == "inode")
                counts = {ino: self._queued[ino] for ino in queued}
                # Abandoned on unmount: a notify stuck in the kernel must not hold up the exit.
                await workers.run(self._send_batch, batch, abandon_on_cancel=True)
                for ino, n in counts.items():
                    # Sent: the kernel holds nothing older than what was queued by then.
                    left = self._queued[ino] - n
                    if left > 0:
                        self._queued[ino] = left
                    else:
                        del self._queued[ino]
                        cached = self._cached.get(ino)
                        if cached is not None and not cached.readers:
                            self._drop(ino)  # the kernel dropped those pages

    def _send_batch(self, batch: set[tuple[str, int, bytes]]) -> None:
        # Entries first: a dropped dentry makes the next walk look the name up again.
        for kind, ino, name in sorted(batch, key=lambda b: b[0]):
            try:
                if kind == "entry":
                    pyfuse3.invalidate_entry(ino, name)
                else:
                    pyfuse3.invalidate_inode(ino)
                self.sent += 1
            except OSError as exc:
                # ENOENT: the kernel had no such entry or inode cached; nothing to forget.
                if exc.errno != errno.ENOENT:
                    self.errors += 1
                    log.debug("invalidate %s %s %r: %s", kind, ino, name, exc)
