"""Loading projects and keeping them true to disk: first loads, inotify, changes (§5.4, §7a).

Role: every read of a source folder while the mount serves goes through here, in a worker
thread; the catalog and its projects are changed only on the trio thread, from what the
worker found. Knows trio but not pyfuse3 (must not import pyfuse3): it tells
the adapter through `Listener` which projects changed, and the adapter invalidates.

Threading contract:
- `load` builds a project in a worker thread (watch each folder, then scan it, until no
  folder is new) and publishes it on the trio thread; one load per project, however many
  requests wait for it. Every other request is answered meanwhile.
- `run` reads inotify on the trio thread, decides what to stat or rescan there (memory
  only), does that I/O in one worker call per batch, and absorbs the results on the trio
  thread. Watches a worker adds are registered on the trio thread; their events that come
  first are held back and replayed then.
- Never rescans on a timer; only an inotify queue overflow rescans the loaded projects. A
  folder made, moved or removed has what lies below it scanned, not its whole origin.
- The inotify binding (syscalls, decoding, which renames are memfs's own) is the disk
  layer's `memfs.disk.inotify`, which never waits; the waiting is here (`read_events`).
- So that a worker's long Python loop does not hold up the request thread, which needs
  the GIL at every request, `turns.Turns` sets a short GIL switch interval once for the
  process, and freezes each project just loaded out of full collections (see turns.py).

Watched: each source's root (projects appearing or vanishing), every folder of every
loaded project, and for a project folder whose memory folder does not exist yet, the
nearest existing folder on the way to it (for global/'s origins, up to and past the
origin's root, which no Root watch covers: `Watches.pending`, `_waiting`). A Gemini CLI
source's folders are named by ids that markers map to projects (disk/gemini.py): its root,
each ``tmp/<id>`` folder (for its ``.project_root``) and the Gemini folder (for
``projects.json``) are watched too, and a change of any re-reads the whole map in a worker
(`_remap`; a few small reads a folder).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import trio

from memfs.adapter import mapping, workers
from memfs.adapter.batches import Job, Work, jobs_of
from memfs.adapter.readahead import ReadAhead
from memfs.adapter.turns import Turns
from memfs.adapter.watches import (
    ENTRY_EVENTS,
    ROOT_MASK,
    Folder,
    Pairs,
    Pending,
    Root,
    Target,
    Watches,
)
from memfs.disk import roots, sources, state
from memfs.disk.config import GOOSE
from memfs.disk.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MASK_ADD,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
    Raw,
    sift,
    unheld,
)
from memfs.view.catalog import Catalog
from memfs.view.project import Origin, Project

log = logging.getLogger(__name__)

MARK_WAIT_S = 0.002  # how long a rename's events wait for memfs's mark (`read_events`)
EVENTS_WAIT_S = 0.003  # how long new events wait for the worker calls in flight (same)


async def read_events(inotify: Inotify) -> tuple[list[Event], int]:
    """The next batch of events as (wd, mask, name), without the two events of each
    rename this process made itself, when its mark follows them (`inotify.sift`): the plan
    that renamed reads both names back. Returns the batch and how many renames it skipped."""
    await trio.lowlevel.wait_readable(inotify.fd)
    # A change of memfs's own (a commit: the kept version's link, the prune, the rename,
    # its mark) makes its events while its worker runs: they are read once it is done, in
    # one batch, not in a pass each contending with that worker for the GIL (writes were
    # about 10 % faster). Others' changes wait as long, EVENTS_WAIT_S at most.
    await workers.quiet(EVENTS_WAIT_S)
    raw = await _queued(inotify)
    events: list[Event] = []
    held: list[Raw] = []
    own = 0
    while True:
        sifted = sift(raw, held)
        events += sifted.events
        held = sifted.held
        own += sifted.own_renames
        if not held:
            return events, own
        # The worker makes the mark a moment after its rename: wait that moment for it
        # (a rename of anyone else's waits as long, then is read as usual).
        raw = []
        with trio.move_on_after(MARK_WAIT_S):
            raw = await _queued(inotify)
        if not raw:
            return events + unheld(held), own


async def _queued(inotify: Inotify) -> list[Raw]:
    """The events queued, once there are any."""
    while True:
        raw = inotify.read_queued()
        if raw:
            return raw
        await trio.lowlevel.wait_readable(inotify.fd)


class Listener(Protocol):
    def project_changed(self, project: Project) -> None: ...
    def root_changed(self, slug: str) -> None: ...


STASH_MAX = 65_536  # events held back for watches not registered yet; past it: overflow


def _meanwhile(catalog: Catalog, project: Project) -> Work:
    """What changed while a worker built ``project``: the folders that joined it (a mapped
    folder whose map was read meanwhile), registered unread, to scan; and a slug source's
    memory folder found to be a link (made before its watch, issue 38), whose root is
    listed again."""
    joined = [o for o in catalog.origins(project.slug) if project.origin_index(o) is None]
    scans = {(project.slug, project.add_origin(o, sources.Scan()), "") for o in joined}
    linked = {
        o.source
        for i, o in enumerate(project.origins)
        if not catalog.config.sources[o.source].mapped
        and (project.left_out_in(i, "") or "").startswith("symlink")
    }
    return Work(scans=scans, remaps=linked)


class Watcher:
    def __init__(self, catalog: Catalog, listener: Listener, turns: Turns | None = None) -> None:
        self.catalog = catalog
        self.listener = listener
        self.turns = turns if turns is not None else Turns()
        self.inotify = Inotify()
        config = catalog.config
        roots = frozenset(s.root for s in config.sources if s.projects)
        self.watches = Watches(self.inotify, config.limits.max_file_bytes, roots)
        self._targets: dict[int, Target] = {}  # watch descriptor -> what it watches
        self._mapped: dict[int, mapping.Role] = {}  # watch descriptor -> its mapping role
        # watch descriptor -> (slug, origin) of missing folders waiting there (`Pending`):
        # roles beside the targets too, as a folder a missing root waits in may be one
        self._waiting: dict[int, set[tuple[str, int]]] = {}
        # watch descriptor -> sources whose missing root waits there (`_watch_root`)
        self._root_waits: dict[int, frozenset[int]] = {}
        # Names on the way to any root: only an entry of one of them in a folder a missing
        # root waits in (the home, often, where tools rewrite their files all day) can
        # bring that root nearer.
        self._root_names = frozenset(p for s in config.sources for p in s.root.parts)
        # (id(project), origin) -> folders watched, relative to the origin ('' for itself)
        self._folders: dict[tuple[int, int], set[str]] = {}
        self._stash: dict[int, list[Event]] = {}  # events of watches not registered yet
        self._stashed = 0
        self._busy = 0  # worker calls that may add watches, in flight
        self._loads: dict[str, trio.Event] = {}  # slug ('' for the listing) -> loaded
        self._send, self._receive = trio.open_memory_channel[list[Event] | Work](math.inf)
        self.ahead = ReadAhead(catalog)  # the adapter asks it too, after a write
        self.events = 0
        self.own_renames = 0  # renames of this process's, skipped (`read_events`)
        self.overflows = 0
        self.loads = 0
        # Called in the worker on a project just built, before anyone sees it: the adapter
        # renders what the first requests will ask for (PREAMBLE.md reads up to 50 files).
        self.warm: Callable[[Project], object] | None = None
        for i, source in enumerate(catalog.config.sources):
            if not source.projects:
                continue  # its folder is an origin of global/ only, watched when loaded
            self._watch_root(i)
            if source.mapped:  # its folders' markers are watched by a first remap
                self._send.send_nowait(Work(remaps={i}))

    # --- loading ------------------------------------------------------------------

    async def listing(self) -> None:
        """The catalog's listing of every source root, read once in a worker."""
        if not self.catalog.listed:
            await self._once("", self._list)

    async def _list(self) -> None:
        self.catalog.set_listing(*await workers.run(roots.list_folders, self.catalog.config))

    async def load(self, slug: str) -> Project | None:
        """The loaded project of ``slug``, built off the trio thread on first use; None
        when no source holds it."""
        await self.listing()
        found = self.catalog.loaded().get(slug)
        if found is None and self.catalog.has(slug):
            await self._once(slug, lambda: self._load(slug))
            found = self.catalog.loaded().get(slug)
        return found

    async def _once(self, key: str, job: Callable[[], Awaitable[object]]) -> None:
        """Run ``job`` once for ``key`` however many callers wait for it at once."""
        running = self._loads.get(key)
        if running is not None:
            await running.wait()
            return
        done = self._loads[key] = trio.Event()
        try:
            await job()
        finally:
            del self._loads[key]
            done.set()

    async def _load(self, slug: str) -> None:
        origins = self.catalog.origins(slug)
        self._busy += 1
        try:
            project, pairs = await workers.run(self._build, slug, origins)
        finally:
            self._busy -= 1
        if self.catalog.loaded().get(slug) is not None or not self.catalog.has(slug):
            return  # it came or went meanwhile
        self.catalog.adopt(project)
        if meanwhile := _meanwhile(self.catalog, project):
            self._send.send_nowait(meanwhile)
        self.turns.settled()
        self.loads += 1
        self._register(project, pairs)
        self.listener.root_changed(slug)  # its folder's attributes (st_nlink) are known now

    def _build(self, slug: str, origins: list[Origin]) -> tuple[Project, Pairs]:
        """Worker thread: the project, every folder watched before it is scanned."""
        config = self.catalog.config
        saved = state.load_project(config.state_dir, slug)
        project = Project(slug, config, *saved, read_body=self.catalog.read_body)
        pairs: Pairs = []
        for origin in origins:
            i = project.add_origin(origin, sources.Scan(exists=False))
            at = time.monotonic_ns()
            scan, added = self.watches.settle(slug, i, origin, set())
            project.rescan(i, scan, at)
            pairs += added
        if self.warm is not None:
            self.warm(project)  # still nobody else's: its first renderings cost no request
        # What changed while it was built is every path it has: the kernel holds none of
        # them yet, and kept until the project's first change, the set of them was 1.5 MiB
        # of the benchmark's fixture once walked.
        project.tree.changes.clear()
        return project, pairs

    def _register(self, project: Project, pairs: Pairs) -> None:
        """Trio thread: the watches a worker added are ours now; replay what they saw."""
        replay: list[Event] = []
        for wd, target in pairs:
            if isinstance(target, Pending):
                self._waiting.setdefault(wd, set()).add((target.slug, target.origin))
                replay += self._stash.pop(wd, [])
                continue
            before = self._targets.get(wd)
            self._targets[wd] = target
            if isinstance(target, Folder) and target.path == "":
                self._found((target.slug, target.origin))
            if isinstance(target, Folder):
                folders = self._folders.setdefault((id(project), target.origin), set())
                # Renamed: its old path has no watch now, unless a folder made there since
                # has one (O(watches), only when a folder was renamed).
                renamed = isinstance(before, Folder) and before != target
                if renamed and before not in self._targets.values():
                    assert isinstance(before, Folder)
                    folders.discard(before.path)
                folders.add(target.path)
            replay += self._stash.pop(wd, [])
        if not self._busy:
            self._stash.clear()  # events of watches that are gone: nobody will claim them
            self._stashed = 0
        if replay:
            self._send.send_nowait(replay)

    def _found(self, waited: tuple[str, int]) -> None:
        """A missing folder is watched now: it waits nowhere any more (O(waits))."""
        for wd in [wd for wd, origins in self._waiting.items() if waited in origins]:
            self._waiting[wd].discard(waited)
            if not self._waiting[wd]:
                del self._waiting[wd]

    def recheck(self, project: Project, i: int, path: str) -> None:
        """A request found ``path`` of origin ``i`` changed on disk before inotify said so:
        read it again (off the request thread) and tell the adapter."""
        self._send.send_nowait(Work(stats={(project.slug, i, path)}))

    # --- roots --------------------------------------------------------------------

    def _watch_root(self, i: int) -> bool:
        """Watch source ``i``'s root, or the nearest existing folder on its way to it."""
        root = self.catalog.config.sources[i].root
        if self._add(root, ROOT_MASK, Root(i)):
            return True
        for folder in root.parents:
            try:
                wd = self.inotify.add(folder, ROOT_MASK | IN_MASK_ADD)
            except OSError:
                continue
            # Several missing roots may wait on one folder (the home, often), beside what
            # else watches it (a global/ origin's folder, a missing folder's wait).
            self._root_waits[wd] = self._root_waits.get(wd, frozenset()) | {i}
            break
        return False

    def _pending_roots(self, wd: int) -> None:
        """Something changed on the way to missing roots: each waits again where it now
        must (here, or in a deeper folder), or is watched and listed if it exists now."""
        for i in sorted(self._root_waits.pop(wd, frozenset())):
            self._root_appeared(i)
        held = (self._root_waits, self._targets, self._mapped, self._waiting)
        if not any(wd in by for by in held):  # nothing else watches it: the watch goes
            self.inotify.remove(wd)

    def _root_appeared(self, i: int) -> None:
        """A step towards a missing root appeared: watch further, and list it once there.

        Lists one new root folder on the trio thread: it happens once per root, when a
        source that was missing at mount time appears (a new account), and it is empty
        then but for the folders made since.
        """
        if not self._watch_root(i):
            return
        if self.catalog.config.sources[i].mapped:
            self._send.send_nowait(Work(remaps={i}))  # its map, read in a worker
            return
        for name in sources.list_slug_folders(self.catalog.config.sources[i].root):
            slug = self.catalog.folder_added(i, name)
            if slug is not None:
                self.listener.root_changed(slug)

    def sources_added(self, first: int) -> None:
        """Sources from ``first`` on were appended to the config while serving (`_added`)."""
        _added(self, first)

    def _add(self, path: Path, mask: int, target: Target) -> bool:
        wd = self.watches.add(path, mask)
        if wd is None:
            return False
        self._targets[wd] = target
        return True

    # --- events -------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read)
            nursery.start_soon(self.ahead.run)
            async for item in self._receive:
                await self._process([item, *self._queued()])

    def _queued(self) -> list[list[Event] | Work]:
        """Everything sent since: one pass takes it all in, each path looked at once.

        Events come faster than passes go when something on disk changes all the time
        (a sync tool, an appending log): one pass per batch would leave batches piling up
        in memory without end (the soak's RSS grew 0.45 MiB a second), and the view ever
        further behind the disk. Merged, a pass costs one look per path changed, however
        many events named it, and what waits is at most what came during one pass."""
        items: list[list[Event] | Work] = []
        while True:
            try:
                items.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                return items

    async def _read(self) -> None:
        while True:
            batch, own = await read_events(self.inotify)
            self.own_renames += own
            self.events += len(batch)
            self._send.send_nowait(batch)

    async def _process(self, items: list[list[Event] | Work]) -> None:
        touched: dict[str, Project] = {}
        work = Work()
        for n, item in enumerate(items):  # in order: an event may change what the next means
            if n:
                # Requests get their turn between two batches, as when each was a pass:
                # a merged pass holds the trio thread no longer than one batch did.
                await trio.lowlevel.checkpoint()
            if isinstance(item, Work):
                work.take(item)
                continue
            for wd, mask, name in item:
                try:
                    self._handle(wd, mask, name, work, touched)
                except Exception:
                    log.exception("watch event %s %#x %r failed", wd, mask, name)
        before: dict[str, int] = {}  # each absorbed project's generation before its looks
        while work:
            if work.remaps:
                await self._remap(work, touched)
                if not work:
                    break
            jobs = self._jobs(work)
            self._busy += 1
            try:
                results = await workers.run(self._read_jobs, jobs)
            finally:
                self._busy -= 1
            work = Work()
            for job, result in zip(jobs, results, strict=True):
                before.setdefault(job.project.slug, job.project.generation)
                self._absorb(job, result, touched)
        for project in touched.values():
            self.listener.project_changed(project)
        # Only a project whose view changed needs bodies read ahead: the looks of memfs's
        # own commits (most events, while agents write) find what the commit took in.
        for slug, project in touched.items():
            if slug in before and project.generation != before[slug]:
                self.ahead.soon(project)

    def _jobs(self, work: Work) -> list[Job]:
        """Trio thread: the worker's looks for ``work`` (`batches.jobs_of`)."""
        return jobs_of(work, self.catalog.loaded(), self._folders)

    def _read_jobs(
        self, jobs: list[Job]
    ) -> list[tuple[int, sources.FileStat | str | tuple[sources.Scan, Pairs] | None]]:
        """Worker thread: stat each path, settle and scan each origin or folder; no project
        touched. Each result comes with when the look began (the project takes the latest)."""
        max_bytes = self.catalog.config.limits.max_file_bytes
        out: list[tuple[int, sources.FileStat | str | tuple[sources.Scan, Pairs] | None]] = []
        for job in jobs:
            at = time.monotonic_ns()
            origin = job.origin
            if job.path is None:
                slug, watched = job.project.slug, job.watched
                out.append((at, self.watches.settle(slug, job.i, origin, watched, job.under)))
            else:
                out.append((at, sources.look(origin.root, origin.parts, job.path, max_bytes)))
        return out

    def _absorb(
        self,
        job: Job,
        timed: tuple[int, sources.FileStat | str | tuple[sources.Scan, Pairs] | None],
        touched: dict[str, Project],
    ) -> None:
        """Trio thread: take in what the worker found, if the project is still the same."""
        project, i, origin = job.project, job.i, job.origin
        if self.catalog.loaded().get(project.slug) is not project or project.origins[i] != origin:
            return
        if not self.catalog.holds(project.slug, origin):
            return  # a Gemini folder mapped to another project since: not this one's
        touched[project.slug] = project
        at, result = timed
        if isinstance(result, tuple):
            scan, pairs = result
            project.rescan(i, scan, at, job.under)
            self._register(project, pairs)
            if mapping.found_link(self.catalog.config, origin, scan, job.under):
                self._send.send_nowait(Work(remaps={origin.source}))  # made before its watch
        else:
            assert job.path is not None
            project.observe(i, job.path, result, at)

    def _handle(
        self, wd: int, mask: int, name: str, work: Work, touched: dict[str, Project]
    ) -> None:
        """Trio thread, memory only: what one event asks to read."""
        if mask & IN_Q_OVERFLOW:
            self._overflow(work)
            return
        target = self._targets.get(wd)
        if mask & IN_IGNORED:
            self._forget(wd, work)
            return
        mapped = self._mapped.get(wd)
        if mapped is not None and mapped.asks(name):
            work.remaps.add(mapped.source)
        waiting = self._waiting.get(wd)
        for slug, i in waiting or ():
            if (project := self.catalog.loaded().get(slug)) is not None:
                work.scans.add((slug, i, ""))  # its memory folder may be there, or a link to it
                work.remaps |= mapping.relinks(self.catalog.config, project.origins[i], name)
        roots = wd in self._root_waits
        if roots and (not name or name in self._root_names):
            self._pending_roots(wd)
        if target is None:
            if mapped is None and waiting is None and not roots:
                self._hold(wd, mask, name, work)
            return
        if name.startswith(sources.OWN_STAGE_PREFIX):
            # This process's own stage files (pwrite by pwrite) and marks: the plans read
            # back what they change. Any other `.memfs-stage.*` name (a crashed memfs's the
            # sweep removes, another machine's, `memfs adopt`'s) is read as any left-out file,
            # so that status stops listing it once it is gone.
            return
        if isinstance(target, Root):
            self._root_event(target, mask, name, work)
            return
        project = self.catalog.loaded().get(target.slug)
        if project is None or target.origin >= len(project.origins):
            return
        if isinstance(target, Pending):
            work.scans.add((project.slug, target.origin, ""))  # its memory folder may be there
            return
        path = f"{target.path}/{name}" if target.path else name
        if not project.origins[target.origin].admits(path):
            return  # a Claude Code config folder's other files (§4.1): its tool's, not memory
        if mask & IN_ISDIR and not mask & (ENTRY_EVENTS | IN_DELETE_SELF | IN_MOVE_SELF):
            # A folder's own attributes: read afresh at the next getattr (read_folders);
            # a rescan would only move the atimes of every folder it lists.
            project.tree.changes.add(path)
            touched[project.slug] = project
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_ISDIR):
            # A folder came, went or moved: what lies below it is scanned and watched anew
            # (O(its files)); the origin's own folder is all of it. Only that folder: the
            # first version a path keeps makes one under .history/, and a scan of the
            # whole origin each time would cost O(the project's files) a write.
            below = target.path if mask & (IN_DELETE_SELF | IN_MOVE_SELF) else path
            work.scans.add((project.slug, target.origin, below))
            return
        work.stats.add((project.slug, target.origin, path))

    def _hold(self, wd: int, mask: int, name: str, work: Work) -> None:
        """An event of a watch a worker just added: replayed once it is registered."""
        if not self._busy:
            return  # no watch is being added: this one is gone
        if self._stashed >= STASH_MAX:
            self._overflow(work)
            return
        self._stash.setdefault(wd, []).append((wd, mask, name))
        self._stashed += 1

    def _forget(self, wd: int, work: Work) -> None:
        """The kernel dropped a watch (its folder went): a folder made again is watched anew."""
        self._mapped.pop(wd, None)
        for slug, i in self._waiting.pop(wd, ()):
            if slug in self.catalog.loaded():
                work.scans.add((slug, i, ""))  # a rescan waits again, further up
        for i in sorted(self._root_waits.pop(wd, frozenset())):
            self._watch_root(i)  # the folder missing roots waited in went: wait further up
        target = self._targets.pop(wd, None)
        if isinstance(target, Root):  # the root itself went: wait for it again
            self._watch_root(target.source)
        if isinstance(target, Folder):
            project = self.catalog.loaded().get(target.slug)
            if project is not None:
                self._folders.get((id(project), target.origin), set()).discard(target.path)
                if target.path == "":  # the memory folder itself went: wait for it again
                    origin = project.origins[target.origin]
                    pending = self.watches.pending(target.slug, target.origin, origin)
                    if pending is not None:
                        self._waiting.setdefault(pending[0], set()).add(
                            (target.slug, target.origin)
                        )

    def _root_event(self, target: Root, mask: int, name: str, work: Work) -> None:
        config = self.catalog.config
        if config.sources[target.source].mapped or not mask & (
            IN_ISDIR | IN_DELETE | IN_MOVED_FROM
        ):
            # Which project a mapped folder is (its marker, its manifest), or an entry that
            # may be a link to a folder (issue 38): read again in a worker.
            work.remaps.add(target.source)
            return
        work.remaps |= mapping.goose_sources(config)  # goose looks in the roots known
        if mask & (IN_CREATE | IN_MOVED_TO):
            slug = self.catalog.folder_added(target.source, name)
        else:
            slug = self.catalog.folder_removed(target.source, name)
        if slug is not None:
            self._slug_changed(slug, work)

    def _slug_changed(self, slug: str, work: Work, mapped: int | None = None) -> None:
        """A folder of ``slug`` came or went at a source's root (at mapped source ``mapped``'s:
        each of its folders is read again, as one back in a project it left was watched all
        along)."""
        self.listener.root_changed(slug)
        for dropped in self.catalog.take_dropped():
            self.listener.project_changed(dropped)
        project = self.catalog.loaded().get(slug)
        if project is not None:
            # A new folder of a loaded project: registered empty, scanned and watched now.
            for i, origin in enumerate(project.origins):
                if (id(project), i) not in self._folders or origin.source == mapped:
                    work.scans.add((slug, i, ""))
            self.listener.project_changed(project)

    # --- mapped sources (Gemini CLI) ----------------------------------------------

    async def _remap(self, work: Work, touched: dict[str, Project]) -> None:
        """Read the map of each source in ``work.remaps`` again, in one worker call, and
        move each folder whose project changed (a new id folder, a new or changed marker).
        After the listing, so no map read before it is taken in after it."""
        await self.listing()
        remaps, work.remaps = sorted(work.remaps), set()
        self._busy += 1
        try:
            config = self.catalog.config
            found = await workers.run(mapping.read, config, remaps, self.watches.add, ROOT_MASK)
        finally:
            self._busy -= 1
        for read in found:
            if read.root is not None:
                self._targets[read.root] = Root(read.source)
            self._mapped.update(read.roles)
            replay = [event for wd in read.watches() for event in self._stash.pop(wd, [])]
            moved = self.catalog.remap(read.source, read.mapping, read.reals)
            for slug in moved:
                self._slug_changed(slug, work, read.source)
            if moved and config.sources[read.source].kind != GOOSE:
                work.remaps |= mapping.goose_sources(config)  # a new root may hold goose's
            for wd, mask, name in replay:
                self._handle(wd, mask, name, work, touched)

    def refollow(self, slugs: list[str]) -> None:
        """Folders changed project outside any event (a move followed, adapter/moves.py)."""
        work = Work()
        for slug in slugs:
            self._slug_changed(slug, work)  # told, and a loaded project reads its new folders
        self._send.send_nowait(work)

    def _overflow(self, work: Work) -> None:
        self.overflows += 1
        log.warning("inotify queue overflowed; rescanning the loaded projects")
        for project in self.catalog.loaded().values():
            for i in range(len(project.origins)):
                work.scans.add((project.slug, i, ""))

    def close(self) -> None:
        self.inotify.close()


def _added(watcher: Watcher, first: int) -> None:
    """Sources from ``first`` on were appended to the config while serving (another
    machine's folders arrived, §12; adapter/machines.py): watch each root and take in
    its projects, as for a root that appears after the mount. A loaded project that
    gains a folder has it scanned and watched."""
    added = range(first, len(watcher.catalog.config.sources))
    specs = [watcher.catalog.config.sources[i] for i in added]
    watcher.watches.roots = watcher.watches.roots | {s.root for s in specs if s.projects}
    watcher._root_names = watcher._root_names | {p for s in specs for p in s.root.parts}
    work = Work()
    for i, spec in zip(added, specs, strict=True):
        if not spec.projects:
            continue
        if not watcher._watch_root(i):
            continue  # it waits on its way, as any missing root
        if spec.mapped:
            work.remaps.add(i)  # its map, read in a worker
            continue
        for name in sources.list_slug_folders(spec.root):
            slug = watcher.catalog.folder_added(i, name)
            if slug is not None:
                watcher._slug_changed(slug, work)
    if work:
        watcher._send.send_nowait(work)
