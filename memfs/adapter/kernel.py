"""What the kernel holds of the view, how an open for reading is served, and telling the
kernel what to forget (§5.4, §7.1).

Layer adapter: knows pyfuse3 and trio. The one place that decides how an open is served, so
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
  (attrs.py, ``Shown.seen_by``); opens of the newer version are served with direct I/O, which
  that size does not cap.
* Otherwise the open is served with direct I/O: every read comes from the handle's own
  version, and direct reads are not capped by a size the kernel may hold from an older
  version.
* A change queues its invalidations at once (the view first, then the queue), so an open
  after a commit returns or after memfs saw a change on disk already takes the direct path
  until the kernel has forgotten the old version.
* No read ever fails because a file changed: a handle reads its version's descriptor, and
  a file rewritten in place on disk (a `touch`, an append, a rewrite) is read as the disk
  shows it, as a local reader would, until the watcher's invalidation reaches the kernel.
  Every open checks its descriptor with an fstat against the version the view reports
  (`pins.py`): one that does not match is served with direct I/O, past the page cache.
* The descriptor of the version the kernel's pages hold is kept with its record, so the
  next open of that version costs an fstat instead of an openat, an fstat and a close
  (`Kernel.reuse`); the fstat is what makes it safe. As many are kept as
  `version_fd_limit` allows, first come first kept. An open served with direct I/O reads
  through a copy of its own: the record may close its descriptor whenever it is dropped.
* An open that took the whole way above and was served through the page cache with the
  record's descriptor leaves the record *warm* (`Kernel.warmed`): what it checked holds
  until the project's view changes (its generation moves) or the inode does (an
  invalidation, an O_TRUNC open, another version's open: each clears it). The next
  read-only open of that inode then checks the project's generation, whether a writer
  opened the file since, and what the view cannot know, the disk: an fstat of the kept
  descriptor shows the same version, still linked (`ReadOpens.open_warm`). A warm `cat`
  is most of what agents do, and every Python statement of its open costs a request
  several times what it costs in a loop (its code and objects are no longer in the CPU's
  caches by then).

Invalidations are sent by `Kernel.run`, a task of its own, from a worker thread: a notify
sent inside a handler can deadlock the mount (FUSE-NOTES).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import pyfuse3
import trio

from memfs.adapter import workers
from memfs.adapter.indexes import IndexReads
from memfs.adapter.inodes import ROOT_INODE, Inodes, Key
from memfs.adapter.renderings import Renderings
from memfs.adapter.writing import OpenFile, OpenFiles
from memfs.disk.pins import Pins, folder_limit
from memfs.disk.staging import Stage
from memfs.rules.tree import parent_of
from memfs.view.catalog import Catalog
from memfs.view.project import MEMORY, PREAMBLE, Kind, Leaf, Project, Version

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
    if leaf.kind is Kind.MEMORY:  # the union shown at its head's path
        data = project.memory_index(leaf.version.path)
        return ("memory", len(data), hash(data))
    v = leaf.version
    return (v.origin, v.path, v.size, v.mtime_ns, v.ino)


# A file that changed this recently is read with direct I/O (`Kernel.open`): the kernel may
# still take in an attribute reply of a version before, and then caps or pads page-cache
# reads with that version's size. Far longer than any reply is in flight.
SETTLE_NS = 250_000_000
SETTLE_KEPT = 4096  # changed inodes remembered before the settled ones are let go
# A warm open reads its version's bytes (`Kernel.open_warm`) up to this size; a bigger one
# takes the whole way. Memory files are a few KiB; reading 64 KiB costs about 10 µs.
WARM_BYTES = 64 << 10

# What the process may open beyond the versions' and the folders' descriptors: handles'
# own descriptors (writers' stages, reads served with direct I/O), a commit's folders, a
# project's load, the watcher, the journal. An eighth of the limit, and never less than this.
OTHER_DESCRIPTORS = 512
MOST_VERSION_FDS = 65536


def version_fd_limit(soft: int) -> int:
    """How many versions' descriptors the records may keep (`Kernel.fd_limit`) when the
    process may open ``soft``: what the source folders (pins.py) and everything else
    (`OTHER_DESCRIPTORS`) leave. A version beyond it is opened and closed at every open
    (an openat, an fstat, a close, and the whole way in Python): with half of the limit, as
    before, a hard limit of 20,000 (a container's) left a third of the benchmark's 15,200
    files so, and a warm `cat` of them all measured 1.24x the floor against 1.16x now
    (ARCHITECTURE.md, "Descriptors")."""
    other = max(soft // 8, OTHER_DESCRIPTORS)
    return max(0, min(soft - folder_limit(soft) - other, MOST_VERSION_FDS))


@dataclass(eq=False, slots=True)
class _Cached:
    token: Token
    readers: int = 0  # opens served through the page cache that are still open
    # That version's descriptor, kept while the kernel may hold its pages: the next open of
    # the same version reads through it once an fstat shows it is still that version.
    fd: int = -1
    # Warm (the rule above): what the last open that took the whole way read, from which
    # project object (a reloaded one is another) at which generation of its view. Set by
    # `warmed`, cleared (``project`` None) by any change of the inode.
    key: Key = ("", "")
    version: Version | None = None
    project: Project | None = None
    generation: int = 0
    # The version's bytes, while an open that read them whole is open (`ReadOpens.snapshot`):
    # an open that comes warm before the kernel holds every page serves the pages it misses
    # from these, never from a disk rewritten in place meanwhile.
    snapshot: bytes | None = None


class Kernel:
    """The page-cache rule above, and the queue of invalidations."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[tuple[str, int, bytes]](math.inf)
        self.enabled = True  # off in adapter tests, where no kernel is attached
        self._queued: Counter[int] = Counter()  # inode -> invalidations queued, not sent
        self._cached: dict[int, _Cached] = {}
        self._writers_coming: Counter[int] = Counter()  # inode -> O_TRUNC opens waiting
        self._changed: dict[int, int] = {}  # inode -> when its last change was queued (ns)
        self._drained: dict[int, trio.Event] = {}  # inode -> set when its readers are gone
        self.sent = 0
        self.errors = 0
        self.fd_limit = version_fd_limit(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self.fds_kept = 0

    # --- serving an open ------------------------------------------------------------

    def open(self, ino: int, token: Token) -> bool | None:
        """How to serve an open of ``ino`` reading version ``token``: True through the
        page cache, its pages kept; None with direct I/O. Pair True with `closed`."""
        if self._queued.get(ino) or self._writers_coming.get(ino) or self._unsettled(ino):
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
        cached.project = None
        # Pages or a size of another version may be held: this open reads past them, and
        # if nobody reads that version any more the kernel is told to drop them, so the
        # next open finds the cache clean.
        if not cached.readers:
            self.inode(ino)
        return None

    def _unsettled(self, ino: int) -> bool:
        """Whether ``ino`` changed within `SETTLE_NS`. A file rewritten in place in a loop
        (an agent saving again and again) is so for as long as the loop runs: its size
        changes faster than the kernel's copy of it can be trusted, and a read through the
        page cache against a size of the version before is cut short or padded with zeros
        (NUL bytes no version had)."""
        at = self._changed.get(ino)
        if at is None:
            return False
        if time.monotonic_ns() - at < SETTLE_NS:
            return True
        del self._changed[ino]
        return False

    def reuse(self, f: OpenFile, token: Token) -> bool:
        """Let ``f`` read through the descriptor kept for its very version, if one is and
        an fstat shows the file behind it is still that version (a file rewritten in place
        is another version under the same descriptor): no openat, no close."""
        cached, v = self._cached.get(f.ino), f.version
        if cached is None or cached.fd < 0 or cached.token != token or v is None:
            return False
        if self._queued.get(f.ino):
            return False
        st = os.fstat(cached.fd)
        if (st.st_mtime_ns, st.st_size, st.st_ino) != (v.mtime_ns, v.size, v.ino):
            return False
        f.fd, f.borrowed = cached.fd, True
        return True

    def lend(self, f: OpenFile, served: bool | None) -> None:
        """After `open` said how ``f`` is served: a reader through the page cache hands
        its descriptor to the record (or goes on borrowing the record's); any other must
        not borrow it (the record may close it while ``f`` reads), so it reads through a
        copy of its own."""
        if served and f.fd >= 0 and not f.borrowed and f.data is None:
            f.borrowed = self._keep_fd(f.ino, f.fd)
        elif not served and f.borrowed:
            f.fd, f.borrowed = os.dup(f.fd), False

    def warmed(self, f: OpenFile, project: Project) -> None:
        """``f``, an open of a plain file served through the page cache with the record's
        descriptor, checked everything the next open of its inode may skip (`open_warm`)."""
        cached = self._cached.get(f.ino)
        if f.version is not None and cached is not None and cached.fd == f.fd:
            cached.key, cached.version = f.key, f.version
            cached.project, cached.generation = project, project.generation
            cached.snapshot = f.snapshot

    def open_warm(self, ino: int) -> tuple[_Cached, bytes] | None:
        """The record of ``ino`` if it is warm and its kept descriptor shows the version it
        checked, still linked on disk, with that version's bytes: counted a reader (pair
        with `closed`); None: the open takes the whole way.

        The bytes (`ReadOpens.snapshot`'s reason) are those an open still holds, else read
        now, before the fstat that checks them: a warm open whose pages the kernel let go
        serves them from these, never from a disk rewritten in place since. A version past
        `WARM_BYTES` takes the whole way instead (a big file's every open would copy it)."""
        cached = self._cached.get(ino)
        if cached is None or cached.project is None:
            return None
        v = cached.version
        assert v is not None
        data = cached.snapshot
        try:
            if data is None:
                if v.size > WARM_BYTES:
                    return None
                data = os.pread(cached.fd, v.size + 1, 0)  # one more: grown since shows
            st = os.fstat(cached.fd)
        except OSError:
            return None
        if st.st_mtime_ns != v.mtime_ns or st.st_size != v.size or st.st_ino != v.ino:
            return None
        if not st.st_nlink or len(data) != v.size:
            return None  # unlinked on disk (the watcher not told yet), or rewritten
        cached.readers += 1
        return cached, data

    def _keep_fd(self, ino: int, fd: int) -> bool:
        """Keep ``fd`` with the record of ``ino``; False when one is kept already or too
        many are."""
        cached = self._cached.get(ino)
        if cached is None or cached.fd >= 0 or self.fds_kept >= self.fd_limit:
            return False
        cached.fd = fd
        self.fds_kept += 1
        return True

    def _drop(self, ino: int) -> None:
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
            if not cached.readers:
                cached.snapshot = None  # read whole by now: the kernel holds its pages
                if ino in self._drained:
                    self._drained.pop(ino).set()

    async def truncating(self, ino: int, patience: float) -> None:
        """An open with O_TRUNC is about to let the kernel set the inode's size to 0 for
        everyone (atomic_o_trunc): let the opens reading through the page cache finish
        first (at most ``patience`` seconds), and send every new one past it meanwhile,
        so that no reader's read is cut at 0. Pair with `truncated`."""
        self._writers_coming[ino] += 1
        cached = self._cached.get(ino)
        if cached is not None:
            cached.project = None
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

    # --- invalidations --------------------------------------------------------------

    def entry(self, parent: int, name: str) -> None:
        """The kernel must look ``name`` up again in folder ``parent``."""
        if self.enabled:
            self._send.send_nowait(("entry", parent, os.fsencode(name)))

    def inode(self, ino: int) -> None:
        """The kernel must forget ``ino``'s attributes and pages."""
        cached = self._cached.get(ino)
        if cached is not None:
            cached.project = None  # the view changed: the next open checks it again
        now = time.monotonic_ns()
        if len(self._changed) >= SETTLE_KEPT:
            self._changed = {i: t for i, t in self._changed.items() if now - t < SETTLE_NS}
        self._changed[ino] = now
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


class ReadOpens:
    """The version an open for reading fixes, and how it is served (the rule above): the
    page cache when the kernel holds that very version or nothing, else direct I/O."""

    def __init__(
        self,
        kernel: Kernel,
        files: OpenFiles,
        pins: Pins,
        renderings: Renderings,
        recheck: Callable[[Project, int, str], None],
        index_reads: IndexReads,
        loaded: Callable[[], dict[str, Project]],
    ) -> None:
        self.kernel = kernel
        self.files = files
        self.pins = pins
        self.renderings = renderings
        self.recheck = recheck  # the watcher looks again at a file the disk holds anew
        self.index_reads = index_reads  # what each process read of MEMORY.md (§5.3)
        self.loaded = loaded  # the catalog's loaded projects, by slug

    def own_stage(self, ino: int, pid: int) -> Stage | None:
        """The stage through which thread ``pid`` writes ``ino`` itself, if it does: its
        reads see what it wrote, as its stat shows it (writing.py)."""
        if not self.files.has_writers(ino):
            return None
        mine = self.files.own_writer(ino, pid)
        return mine.stage if mine is not None else None

    def open(self, f: OpenFile, project: Project, leaf: Leaf | None) -> pyfuse3.FileInfo:
        """Serve ``f``, an open for reading of ``leaf``; registers it in `files`."""
        if (mine := self.own_stage(f.ino, f.pid)) is not None:
            # The writer reads back what it wrote and has not closed yet, as its stat shows
            # it (writing.py): its own stage, which nobody else sees.
            f.fd = os.dup(mine.fd)
            return pyfuse3.FileInfo(fh=self.files.add(f), direct_io=True)
        assert leaf is not None  # a name being created is read through its stage
        if leaf.kind is Kind.PREAMBLE:
            # This inode shows one rendering, ever (renderings.py): its size and pages are that
            # one's. Reached through a name the kernel has not looked up again since the
            # project changed, it still serves that rendering, whole; the lookup queued by
            # the change brings the new one.
            f.data = self.renderings.of(f.ino, project, f.key[1])
            return pyfuse3.FileInfo(fh=self.files.add(f), keep_cache=True)
        if leaf.kind is Kind.MEMORY:
            f.data = project.memory_index(f.key[1])
        else:
            f.version = leaf.version
        index = project.is_index(f.key[1])
        if index:
            # What this process read: a save of the index it makes is a change of that.
            self.index_reads.noted(f.pid, f.key, f.data or project.memory_index(f.key[1]))
        token = token_of_leaf(project, leaf)
        # Pin the version now and check it is the one the view reports: a change inotify
        # has not told yet is read as the disk shows it, past the pages and size of the
        # version before.
        kernel = self.kernel
        current = f.data is not None or kernel.reuse(f, token) or self.pin(f, project)
        writing = self.files.has_writers(f.ino)
        served = kernel.open(f.ino, token) if current and not writing else None
        if served and f.data is None and not self.snapshot(f):
            # Rewritten in place between its fstat and now: read past the page cache.
            kernel.closed(f.ino)
            served = None
            if f.version is not None:
                self.recheck(project, f.version.origin, f.version.path)
        f.token = token if served is not None else None
        kernel.lend(f, served)
        if served and f.borrowed and f.data is None and not index:
            kernel.warmed(f, project)
        # Direct I/O: every read comes from this open's descriptor, and is not capped by a
        # size the kernel may hold from another version.
        return pyfuse3.FileInfo(
            fh=self.files.add(f), direct_io=served is None, keep_cache=served is True
        )

    def open_warm(self, ino: int, pid: int) -> pyfuse3.FileInfo | None:
        """A read-only open of a plain file served as the last open of its inode was, when
        nothing changed since but what an fstat shows (`Kernel.open_warm`); None: take the
        whole way (`open`). Registers it in `files`."""
        if self.files.has_writers(ino):
            return None  # a writer opened it since: its own reads and everyone's size differ
        warm = self.kernel.open_warm(ino)
        if warm is None:
            return None
        cached, data = warm
        project = self.loaded().get(cached.key[0])
        if project is None or project is not cached.project:
            self.kernel.closed(ino)  # it was dropped or built again: the whole way
            return None
        if project.generation != cached.generation:
            self.kernel.closed(ino)  # its view changed since: the whole way
            return None
        f = OpenFile(
            ino, cached.key, cached.version, cached.fd, borrowed=True, token=cached.token, pid=pid
        )
        f.snapshot = data
        return pyfuse3.FileInfo(fh=self.files.add(f), keep_cache=True)

    def pin(self, f: OpenFile, project: Project) -> bool:
        """Open the version ``f`` reads; False when the disk holds another one by now (it is
        read as the disk shows it, and the watcher reads the change)."""
        v = f.version
        assert v is not None
        origin = project.origins[v.origin]
        f.fd, current = self.pins.open(
            origin.root, origin.parts, v.path, (v.size, v.mtime_ns, v.ino)
        )
        if not current:
            self.recheck(project, v.origin, v.path)
        return current

    def released(self, fh: int) -> bool:
        """Release ``fh`` if it reads through the page cache's record (kernel.lend): it
        closes nothing. False for every other handle (`release`, and its stage's end)."""
        f = self.files.get(fh)
        if f is None or not f.borrowed or f.writer:
            return False
        self.files.pop(fh)
        self.kernel.closed(f.ino)
        return True

    def release(self, f: OpenFile) -> None:
        """``f`` was released: its own descriptor closed, the page cache's readers counted."""
        if f.token is not None:
            self.kernel.closed(f.ino)
        if f.fd >= 0 and not f.borrowed:
            os.close(f.fd)

    @staticmethod
    def snapshot(f: OpenFile) -> bool:
        """Read the whole version ``f`` opened, for an open served through the page cache;
        False when the disk no longer holds that version (rewritten in place since its
        fstat), and nothing is kept.

        Why: the kernel caches what a read through the page cache answers as that inode's
        pages, up to the size it was told. A file rewritten in place on disk (Gemini CLI's
        `write_file`, an `echo >`, O_TRUNC then write) is shorter for a moment; a read
        answered from the disk then is short, the kernel fills the rest of the page with
        zeros, and when an attribute update races the read it keeps the old size: the
        reader gets NUL bytes no version had. Served from the bytes of the very version it
        opened (checked by fstat before and after the read), such an open is never short.
        One pread of the file (at most `max_file_bytes`), on the descriptor the open is
        served from; the bytes live as long as the open."""
        v = f.version
        if v is None or f.fd < 0:
            return True  # synthetic: its bytes are fixed already
        data = os.pread(f.fd, v.size + 1, 0)  # one more: a file grown since shows it
        st = os.fstat(f.fd)
        if len(data) != v.size or (st.st_size, st.st_mtime_ns, st.st_ino) != (
            v.size,
            v.mtime_ns,
            v.ino,
        ):
            return False
        f.snapshot = data
        return True

    @staticmethod
    def read(f: OpenFile, off: int, size: int) -> bytes:
        """Never refused for a change on disk: the version it opened, or the bytes the disk
        holds, as a local read (and never a part of another version through the page
        cache: `snapshot`)."""
        if f.snapshot is not None:
            return f.snapshot[off : off + size]
        if f.stage is not None:
            return f.stage.read(off, size)
        if f.data is not None:
            return f.data[off : off + size]
        if f.token is not None and f.version is not None and ReadOpens.snapshot(f):
            # A warm open (no bytes read at its open) whose pages the kernel let go.
            return (f.snapshot or b"")[off : off + size]
        return os.pread(f.fd, size, off)


class Publisher:
    """What the kernel must forget after a change, whoever made it: the watcher (its
    Listener protocol: a change on disk) and the write path (stages.Publisher)."""

    def __init__(self, kernel: Kernel, catalog: Catalog, inodes: Inodes) -> None:
        self.kernel = kernel
        self.catalog = catalog
        self.inodes = inodes
        self.read_ahead: Callable[[Project], None] | None = None  # the watcher's, in a mount

    def project_changed(self, project: Project) -> None:
        self.kernel.publish(project, self.inodes.known)

    def plan_applied(self, project: Project) -> None:
        """A plan through the mount changed ``project``: once its changes pause, the
        watcher reads ahead, off this thread, what the next renderings need."""
        self.kernel.publish(project, self.inodes.known)
        if self.read_ahead is not None:
            self.read_ahead(project)

    def root_changed(self, slug: str) -> None:
        self.publish_root(slug)

    def publish_root(self, slug: str) -> None:
        self.kernel.publish_root(slug, self.inodes.known)

    def publish_all(self) -> None:
        for project in list(self.catalog.loaded().values()):
            self.project_changed(project)
