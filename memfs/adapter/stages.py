"""Every change through the mount, one way down, and a writer's stage from making to commit.

Layer adapter (trio). A change goes one way: the handler decodes (fs.py), the view plans
(`writes.Planner`), one worker call applies the plan under the commit lock (`run`:
`steps.apply`), the view absorbs what the worker found (`writes.absorb`), and the adapter
publishes what the kernel must forget (`Publisher.plan_applied`). Nothing climbs back: the
plan carries what the worker needs, and the worker returns plain results.

MEMORY.md is the view's union, so a save of it (a commit, a rename onto it, a truncate)
is planned as a change of what its writer read (view/indexes.py, §5.3); what each process
read is `index_reads` (indexes.py).

A stage is a writer's temp file in the own source (staging.Stage, §7.1): made by a plan of
its own (its worker call may make the own source's folders, which the view then records),
written on the trio thread (pwrite), committed by a plan. A stage is not thread-safe: while a worker
commits or moves it, its handle's other requests wait (`held`, `free`). Only the writer's
own last close commits (`flush`): a forked child's close of the descriptor it inherited,
or a dup's, commits nothing; the release commits what is left.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Protocol

import pyfuse3
import trio

from memfs.adapter import workers
from memfs.adapter.indexes import IndexReads
from memfs.adapter.inodes import Key
from memfs.adapter.writing import OpenFile, OpenFiles
from memfs.disk import procs, staging, state, steps
from memfs.disk.config import Config
from memfs.rules.tree import parent_of
from memfs.view import indexes, writes
from memfs.view.catalog import Catalog
from memfs.view.indexes import IndexChange
from memfs.view.project import Kind, Leaf, Project

log = logging.getLogger(__name__)

MakeStage = Callable[[staging.Place, str], staging.Stage]  # (own folder, file name) -> stage


class Publisher(Protocol):
    """What the adapter does once a plan was applied and absorbed (fs.MemFS)."""

    def plan_applied(self, project: Project) -> None: ...
    def publish_root(self, slug: str) -> None: ...


class Stages:
    """The write path's one way down, and the stages of the handles that write."""

    def __init__(
        self,
        config: Config,
        catalog: Catalog,
        files: OpenFiles,
        mountpoint: Path,
        project: Callable[[str], Awaitable[Project]],
        publisher: Publisher,
    ) -> None:
        self.config = config
        self.catalog = catalog
        self.files = files
        self.mountpoint = mountpoint
        self._project = project  # a slug's project, loaded off the trio thread if need be
        self.publisher = publisher
        self.commits = 0
        self._commit_lock = trio.Lock()  # one plan at a time: history names stay ordered
        # Stages a worker is committing or moving, with what is set when it is done.
        self._busy: dict[OpenFile, trio.Event] = {}
        self.index_reads = IndexReads()  # what writers read of MEMORY.md (§5.3)

    # --- the one way down -----------------------------------------------------------

    def planner(self, project: Project, who: int = 0) -> writes.Planner:
        """The planner of a change to ``project`` that process ``who`` asked for."""
        return writes.Planner.of(self.config, self.catalog, project, who)

    async def run(
        self, project: Project, plan: writes.Plan, *, void: Callable[[], bool] | None = None
    ) -> None:
        """Apply ``plan`` in one worker call, absorb what it found, publish; then raise the
        error of the step that failed, if one did (the view shows the disk either way).
        ``void`` is asked once the commit lock is held: a plan it voids is not applied."""
        apply = plan.application(project, self.config.limits.max_file_bytes)
        await self._take_commit_lock()
        try:
            if void is not None and void():
                return
            applied = await workers.run(apply)
        finally:
            self._commit_lock.release()
        if writes.absorb(self.catalog, project, plan, applied):
            self.publisher.publish_root(project.slug)
        self.publisher.plan_applied(project)
        if applied.error is not None:
            raise applied.error

    async def new_project(self, slug: str, mode: int) -> Project:
        """mkdir at the root: the own source's folder of a canonical slug, made by its
        plan's one step in a worker (with what the state folder keeps of the project, read
        there too)."""
        step = writes.plan_new_project(self.catalog, slug, mode)

        def made() -> state.Saved:
            step.run()
            return state.load_project(self.config.state_dir, slug)  # off this thread

        await self._take_commit_lock()
        try:
            saved = await workers.run(made)
        finally:
            self._commit_lock.release()
        project = self.catalog.own_folder_made(slug, saved)
        self.publisher.publish_root(slug)
        return project

    async def _take_commit_lock(self) -> None:
        """The commit lock, at once when it is free: `async with` would yield to the loop
        first, a round of the scheduler per plan (the worker call after it checkpoints)."""
        try:
            self._commit_lock.acquire_nowait()
        except trio.WouldBlock:
            await self._commit_lock.acquire()

    async def rename(self, project: Project, src: str, dst: str, flags: int, pid: int) -> None:
        """rename(2) of ``src`` to ``dst`` in ``project`` by thread ``pid`` (§7.3). Onto
        MEMORY.md it is a save of the view (§5.3); MEMORY.md moved away is kept a moment
        for the create of it that an editor's backup-then-write makes next."""
        planner = self.planner(project, pid)
        if project.is_index(dst) and src != dst:
            change = self.index_reads.change(procs.tgid(pid), project, dst)
            await self.run(project, indexes.plan_rename_onto(planner, src, flags, change, dst))
        elif project.is_index(src) and dst != src:
            view, before = project.memory_index(src), project.whiteouts
            plan, step = indexes.plan_move_away(planner, dst, flags, view, src)
            await self.run(project, plan)
            read = self.index_reads.read_by(procs.tgid(pid), (project.slug, src))
            lift = frozenset(project.whiteouts - before)
            moved = IndexChange(view if read is None else read, step.data, lift)
            self.index_reads.moved((project.slug, src), moved)
        else:
            await self.run(project, planner.rename(src, dst, flags))

    async def set_attrs(
        self,
        project: Project,
        path: str,
        pid: int,
        mode: int | None,
        size: int | None,
        times: tuple[int | None, int | None],
    ) -> None:
        """chmod, truncate, utimens of ``path`` by thread ``pid``, through no open handle
        (§7.3); None keeps what it has. A truncate of MEMORY.md is a save of the view (§5.3)."""
        planner = self.planner(project, pid)
        kept = planner.times(path, *times) if times != (None, None) else None
        if project.is_index(path):
            plan = indexes.plan_attrs(planner, mode=mode, size=size, times=kept, path=path)
        else:
            plan = planner.set_attrs(path, mode=mode, size=size, times=kept)
        await self.run(project, plan)

    # --- making a stage -------------------------------------------------------------

    async def open(
        self, f: OpenFile, project: Project, leaf: Leaf, flags: int, place: staging.Place
    ) -> None:
        """An open for writing of ``leaf`` (its version pinned by the caller, unless
        O_TRUNC is in ``flags``): what its stage will start from."""
        f.keeps_history = True
        view = project.memory_index(f.key[1]) if project.is_index(f.key[1]) else None
        if view is not None:
            # A save of MEMORY.md is a change of what its writer read (§5.3,
            # view/indexes.py): the view it opens, when it may read it through this open
            # (O_RDWR) or writes after it (O_APPEND); else (vim's O_WRONLY then a truncate,
            # a shell's `>`) what its process last read here, if it did.
            mine = flags & os.O_APPEND or (flags & os.O_RDWR and not flags & os.O_TRUNC)
            read = None if mine else self.index_reads.read_by(f.tgid, f.key)
            f.index = IndexChange(view if read is None else read)
        if flags & os.O_TRUNC:
            # Nothing of the head is read: no descriptor of it is opened (closing it after
            # the commit would free the replaced inode on the request thread).
            mode = leaf.version.mode if leaf.kind is Kind.FILE and leaf.version else 0o644
            await self.empty(f, mode or staging.FILE_MODE, place)
            # `> file` empties the file even if nothing is written; a shell closes a dup of
            # the descriptor (a flush) before writing, so the bare truncation commits only
            # at its last close, and readers never see the empty in-between file.
            f.unsaved = True
        elif leaf.kind is Kind.MEMORY:
            f.data = view  # an edit of the union starts from it, as the writer reads it
        # Otherwise the stage (a copy of the head) is made at the first write or truncate:
        # an editor opening read-write, or `touch`, copies nothing and leaves no temp file.

    async def empty(self, f: OpenFile, mode: int, place: staging.Place) -> None:
        """An empty stage for ``f`` in ``place``, the own folder of its name: O_TRUNC, or a
        create."""
        await self._make(
            f, lambda place, name: staging.Stage(place, name, initial_fd=None, mode=mode), place
        )

    async def copy(self, f: OpenFile, place: staging.Place) -> None:
        """The first change through a write handle: stage a copy of the head it opened."""
        if f.version is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        union, head = f.data, f.fd
        mode = (f.version.mode if union is None else 0) or staging.FILE_MODE
        await self._make(
            f, lambda place, name: staging.Stage.copy_of(place, name, mode, head, union), place
        )

    async def _make(self, f: OpenFile, make: MakeStage, place: staging.Place) -> None:
        """Make ``f``'s stage: a plan of its own, whose worker call may create the own
        source's folders on the way (the view records them, `Planner.stage`)."""
        project = await self._project(f.key[0])
        step = steps.MakeStage(make, place, parent_of(f.key[1])[1])
        await self.run(project, self.planner(project).stage(f.key[1], step))
        assert step.made is not None  # it ran, or `run` raised its error
        f.stage = step.made
        f.data = None  # reads now see the writer's own bytes

    # --- holding a stage ------------------------------------------------------------

    def busy(self, f: OpenFile) -> bool:
        return f in self._busy

    async def free(self, f: OpenFile) -> None:
        """Wait while a worker commits or moves ``f``'s stage (`held`)."""
        while (busy := self._busy.get(f)) is not None:
            await busy.wait()

    @contextlib.asynccontextmanager
    async def held(self, f: OpenFile) -> AsyncIterator[None]:
        """``f``'s stage in a worker's hands for the block, once whoever held it let go: its
        handle's other requests (a write, a truncate, a second commit, the release) wait."""
        await self.free(f)
        done = self._busy[f] = trio.Event()  # no checkpoint since it was free
        try:
            yield
        finally:
            del self._busy[f]
            done.set()

    async def forget(self, writers: list[OpenFile]) -> None:
        """Their name was unlinked or replaced: their temp files go now (`Stage.forget_temp`),
        each while its stage is held, so a release dropping it at the same time waits
        (it would close the folder's descriptor under the unlink: EBADF)."""
        for f in writers:
            if f.stage is None:
                continue
            async with self.held(f):
                await workers.run(f.stage.forget_temp)

    async def retarget(self, f: OpenFile, place: staging.Place) -> None:
        """``f``'s name was renamed: its stage commits under the new name (rename(2))."""
        assert f.stage is not None
        async with self.held(f):
            await workers.run(f.stage.retarget, place, parent_of(f.key[1])[1])

    # --- committing -----------------------------------------------------------------

    async def flush(self, f: OpenFile) -> None:
        """A close of one of the writer's descriptors: its own last close commits (§7.1)."""
        if not (f.failed or f.unsaved or (f.stage is not None and f.stage.dirty)):
            return  # nothing to commit or report (an fsync committed it): no look at /proc
        if self.killed(f):
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
                await self.commit(f, empty=True)
            raise pyfuse3.FUSEError(f.failed)  # close() returns it; the file stays as it was
        await self.commit(f)

    async def fsync(self, f: OpenFile) -> None:
        if f.stage is None:
            return
        if f.failed:
            raise pyfuse3.FUSEError(f.failed)
        if f.stage.dirty or f.unsaved:
            # Asked for durability: even a bare new or truncated file is committed now.
            await self.commit(f)

    async def commit(self, f: OpenFile, *, empty: bool = False) -> None:
        """Make the staged bytes the target, atomically (§7.1); ``empty``: an empty file
        instead (a create whose write failed)."""
        project = await self._project(f.key[0])
        async with self.held(f):  # a flush and an fsync at once: one after the other
            stage = f.stage
            assert stage is not None
            if f.discard or (f.failed and not empty):
                return
            if empty:
                stage.truncate(0)
            stage.dirty = True
            created = self.files.pending(f.key) is f  # its name's first commit
            planner = self.planner(project, f.pid)
            if project.is_index(f.key[1]):
                # A save of the view: a change of what the writer read (§5.3; a handle
                # renamed onto MEMORY.md did not open it: its process's read, or the view
                # now). Its later commits are changes of the same read.
                f.index = f.index or self.index_reads.change(f.tgid, project, f.key[1])
                plan = indexes.plan_commit(
                    planner, stage, f.index, keep=f.keeps_history, created=created, path=f.key[1]
                )
            else:
                plan = planner.commit(stage, f.key[1], keep=f.keeps_history, created=created)
            # A rename onto its name or an unlink may run while this commit waits for the
            # lock: it discards the handle before any other plan runs (fs.py), and then
            # this one must not land (the name is another file's, or none).
            await self.run(project, plan, void=lambda: f.discard)
        f.keeps_history = f.unsaved = False
        self.files.settled(f)
        self.commits += 1

    async def release(self, f: OpenFile, *, created: bool) -> bool:
        """The last reference to a writer's handle went: commit what its closes left (a
        ``created`` name that never committed stays, empty, if a write failed), then drop
        the stage. True when its temp file went (its name may need dropping)."""
        stage = f.stage
        assert stage is not None
        if (f.unsaved or stage.dirty) and not self.killed(f):
            try:
                await self.commit(f, empty=bool(f.failed) and created)
            except (OSError, pyfuse3.FUSEError) as exc:
                log.warning("committing %s at release failed: %s", f.key, exc)
        # A handle released without a successful commit is dropped: the target stays as
        # it was (the temp file goes in a worker: unlinking is the disk's business).
        async with self.held(f):  # a rename may be moving it, or an unlink forgetting it
            if stage.temp:
                await workers.run(stage.abort)
                return True
            stage.abort()
            return False

    def killed(self, f: OpenFile) -> bool:
        """A writer killed mid-write (its files are closed for it) commits nothing."""
        if f.pid and not f.discard and procs.killed_by_signal(f.pid):
            f.discard = True
            log.info("writer %d of %s was killed: its bytes are dropped", f.pid, f.key)
        return f.discard

    def _mount_path(self, key: Key) -> str:
        return f"{self.mountpoint}/{key[0]}/{key[1]}"
