"""Every change through the mount, one way down, and a writer's stage from making to commit.

Layer adapter (trio). A change goes one way: the handler decodes (fs.py), the view plans
(`writes.Planner`; a writer's session, view/session.py), one worker call applies the plan
under the commit lock (`run`: `steps.apply`), the view absorbs what the worker found
(`writes.absorb`) before the lock is let go, and the adapter publishes what the kernel must
forget (`Publisher.plan_applied`). Nothing climbs back: the plan carries what the worker
needs, and the worker returns plain results. A plan is made once the commit lock is held
(`run` takes a function that makes it), so it is made against the view every plan before
it left, never a view that a plan applied meanwhile changes under it.

MEMORY.md is the view's union, so a save of it (a commit, a rename onto it, a truncate)
is planned as a change of what its writer read (view/indexes.py, §5.3); what each process
read is `index_reads` (indexes.py).

A stage is a writer's temp file in the own source (staging.Stage, §7.1). What a request on
a writer's handle means is its session's to say (view/session.py: one state machine); here
each thing the session needs is done by a plan in one worker call: the stage made (a copy
of the head, or an empty one), made anew after a commit, moved with its name, its temp file
forgotten with an unlinked name, committed, kept as a version when another file replaced
its name, dropped at the release. A close commits only at the writer's own last close, and
the worker, not the request thread, reads /proc to tell (steps.LastClose). The request
thread only writes the stage's bytes (pwrite). A stage is not thread-safe: while a worker
has it, its handle's other requests that change it wait (`held`, `free`).
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
from memfs.view.session import Do, Need, State, WriteSession
from memfs.view.session import plan as session_plan

log = logging.getLogger(__name__)

MakeStage = Callable[[staging.Place, str], staging.Stage]  # (own folder, file name) -> stage
DISCARDED = "discarded"  # `Stages.commit` found its session discarded meanwhile


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
        self, project: Project, plan: writes.Plan | Callable[[], writes.Plan | None]
    ) -> steps.Applied | None:
        """Apply a plan in one worker call, absorb what it found, publish; then raise the
        error of the step that failed, if one did (the view shows the disk either way).

        ``plan`` is a plan, or what makes one once the commit lock is held (None: nothing
        to do any more): made then, it is made against the view every earlier plan left.
        Returns what the worker found (`Applied.skipped` when a step stopped the plan)."""
        await self._take_commit_lock()
        try:
            made = plan() if callable(plan) else plan
            if made is None:
                return None
            apply = made.application(project, self.config.limits.max_file_bytes)
            applied = await workers.run(apply)
            # Absorbed before the lock goes: the next plan is made against this view.
            new_root = writes.absorb(self.catalog, project, made, applied)
        finally:
            self._commit_lock.release()
        if new_root:
            self.publisher.publish_root(project.slug)
        self.publisher.plan_applied(project)
        if applied.error is not None:
            raise applied.error
        return applied

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
        for the save of it that an editor's backup-then-write makes next."""
        planner = self.planner(project, pid)
        tgid = procs.tgid(pid)
        if project.is_index(dst) and src != dst:

            def onto() -> writes.Plan:
                change = self.index_reads.change(tgid, project, dst)
                return indexes.plan_rename_onto(planner, src, flags, change, dst)

            await self.run(project, onto)
        elif project.is_index(src) and dst != src:
            view = project.memory_index(src)
            plan, step = indexes.plan_move_away(planner, dst, flags, view, src)
            await self.run(project, plan)
            read = self.index_reads.read_by(tgid, (project.slug, src))
            moved = IndexChange(view if read is None else read, step.data)
            self.index_reads.moved((project.slug, src), moved)
        else:
            await self.run(project, lambda: planner.rename(src, dst, flags))

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

        def made() -> writes.Plan:
            kept = planner.times(path, *times) if times != (None, None) else None
            if project.is_index(path):
                return indexes.plan_attrs(planner, mode=mode, size=size, times=kept, path=path)
            return planner.set_attrs(path, mode=mode, size=size, times=kept)

        await self.run(project, made)

    # --- a writer's session ----------------------------------------------------------

    async def open(
        self, f: OpenFile, project: Project, leaf: Leaf, flags: int, place: staging.Place
    ) -> None:
        """An open for writing of ``leaf`` (its version pinned by the caller, unless
        O_TRUNC is in ``flags``): its session, and what its stage will start from."""
        path = f.key[1]
        change = None
        if project.is_index(path):
            # A save of MEMORY.md is a change of what its writer read (§5.3,
            # view/indexes.py): the view it opens, when it may read it through this open
            # (O_RDWR) or writes after it (O_APPEND); else (vim's O_WRONLY then a truncate,
            # a shell's `>`) what its process last read here, if it did.
            view = project.memory_index(path)
            mine = flags & os.O_APPEND or (flags & os.O_RDWR and not flags & os.O_TRUNC)
            read = None if mine else self.index_reads.read_by(f.tgid, f.key)
            change = self.index_reads.saving(f.key, view if read is None else read)
            if leaf.kind is Kind.MEMORY and not flags & os.O_TRUNC:
                f.data = view  # an edit of the union starts from it, as the writer reads it
        if flags & os.O_TRUNC:
            f.session = WriteSession.truncating(change)
            # Nothing of the head is read: no descriptor of it is opened (closing it after
            # the commit would free the replaced inode on the request thread). `> file`
            # empties the file even if nothing is written; a shell closes a dup of the
            # descriptor (a flush) before writing, so the bare truncation commits only at
            # its last close, and readers never see the empty in-between file.
            mode = leaf.version.mode if leaf.kind is Kind.FILE and leaf.version else 0o644
            await self.empty(f, mode or staging.FILE_MODE, place)
        else:
            # The stage (a copy of the head) is made at the first change: an editor
            # opening read-write, or `touch`, copies nothing and leaves no temp file.
            f.session = WriteSession(index=change)

    async def empty(self, f: OpenFile, mode: int, place: staging.Place) -> None:
        """An empty stage for ``f`` in ``place``, the own folder of its name: O_TRUNC, or a
        create (its session starts STAGED)."""
        await self._make(
            f, lambda place, name: staging.Stage(place, name, initial_fd=None, mode=mode), place
        )

    async def prepare(self, f: OpenFile, place: staging.Place) -> None:
        """Before a change through ``f`` (a write, truncate, chmod, utimens): the stage its
        session needs, made in a worker: a copy of the head it opened, or a new one copied
        from what its last commit landed."""
        assert f.session is not None
        await self.free(f)  # a worker may be committing it: what it needs is what that left
        need = f.session.change() if f.stage is not None else Need.COPY
        if need is Need.COPY:
            await self.copy(f, place)
            f.session.staged()
        elif need is Need.RESTAGE:
            assert f.stage is not None
            stage = f.stage
            async with self.held(f):
                await workers.run(steps.Restage(stage).run)
            f.session.staged()

    async def copy(self, f: OpenFile, place: staging.Place) -> None:
        """The first change through a write handle: stage a copy of the head it opened."""
        if f.version is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        union, head = f.data, f.fd
        mode = (f.version.mode if union is None else 0) or staging.FILE_MODE
        await self._make(
            f, lambda place, name: staging.Stage.copy_of(place, name, mode, head, union), place
        )
        assert f.session is not None
        assert f.stage is not None
        if f.session.state is State.DISCARDED:
            await workers.run(steps.ForgetTemp(f.stage).run)  # its name is gone already

    async def _make(self, f: OpenFile, make: MakeStage, place: staging.Place) -> None:
        """Make ``f``'s stage: a plan of its own, whose worker call may create the own
        source's folders on the way (the view records them, `Planner.stage`)."""
        project = await self._project(f.key[0])
        step = steps.MakeStage(make, place, parent_of(f.key[1])[1])
        await self.run(project, lambda: self.planner(project).stage(f.key[1], step))
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
        """Their name was unlinked: their temp files go now (`Stage.forget_temp`), each
        while its stage is held, so a release dropping it at the same time waits (it would
        close the folder's descriptor under the unlink: EBADF)."""
        for f in writers:
            if f.stage is None:
                continue
            stage = f.stage
            async with self.held(f):
                await workers.run(steps.ForgetTemp(stage).run)

    async def retarget(self, f: OpenFile, place: staging.Place) -> None:
        """``f``'s name was renamed: its stage commits under the new name (rename(2))."""
        assert f.stage is not None
        step = steps.Retarget(f.stage, place, parent_of(f.key[1])[1])
        async with self.held(f):
            await workers.run(step.run)

    # --- committing -----------------------------------------------------------------

    async def flush(self, f: OpenFile) -> None:
        """A close of one of the writer's descriptors: what its session asks, done at its
        own last close only (§7.1; steps.LastClose tells, in the worker)."""
        assert f.session is not None
        created = self.files.pending(f.key) is f
        do = f.session.close(created=created)
        if do is Do.NOTHING:
            return  # nothing to commit or report (an fsync committed it): no look at /proc
        gate = steps.LastClose(f.pid, f.tgid, self._mount_path(f.key))
        done = await self.commit(f, do, gate=gate, created=created)
        if done == steps.KILLED:
            log.info("writer %d of %s was killed: its bytes are dropped", f.pid, f.key)
        if done == "" and do in (Do.FAIL, Do.FAIL_EMPTY):
            raise pyfuse3.FUSEError(f.session.errno)  # close() returns it; the file stays

    async def fsync(self, f: OpenFile) -> None:
        if f.session is None or f.stage is None:
            return
        do = f.session.fsync()  # even a bare new or truncated file is committed now
        if do is Do.FAIL:
            raise pyfuse3.FUSEError(f.session.errno)
        if do is Do.COMMIT:
            await self.commit(f, do, created=self.files.pending(f.key) is f)

    async def commit(
        self, f: OpenFile, do: Do, *, created: bool, gate: steps.LastClose | None = None
    ) -> str:
        """What ``do`` asks of ``f``'s session, in one plan: its stage lands (the file, an
        index's change, a kept version: `session.plan`), or a created name whose write
        failed lands empty, or nothing but the ``gate`` (a failure to report). Returns why
        the gate stopped it ('' when it did not)."""
        session = f.session
        assert session is not None
        project = await self._project(f.key[0])
        path = f.key[1]

        def made() -> writes.Plan | None:
            # Made once the lock is held: a rename onto its name or an unlink that ran
            # meanwhile changed what its commit means (view/session.py).
            if not session.commits:
                return None  # discarded (unlinked, killed) while it waited
            planner = self.planner(project, f.pid)
            if do is Do.FAIL:
                plan = planner.nothing()
            else:
                if project.is_index(path) and session.index is None:
                    # A handle renamed onto MEMORY.md did not open it: its process's
                    # read, or the view now (§5.3).
                    session.index = self.index_reads.change(f.tgid, project, path)
                assert f.stage is not None
                empty = do is Do.FAIL_EMPTY
                size = f.stage.size() if session.replaced else 0  # an fstat of the stage
                plan = session_plan(
                    session, planner, f.stage, path, created=created, empty=empty, size=size
                )
            if gate is not None:
                plan.steps.insert(0, gate)
            return plan

        async with self.held(f):  # a flush and an fsync at once: one after the other
            applied = await self.run(project, made)
        if applied is None:
            return DISCARDED  # unlinked or killed while it waited: nothing to do
        if applied.skipped:
            if applied.skipped == steps.KILLED:
                session.discarded()
            return applied.skipped
        if do is Do.COMMIT:
            session.committed()
            self.files.settled(f)
            self.commits += 1
        elif do is Do.FAIL_EMPTY:
            session.emptied()
            self.files.settled(f)
        return ""

    async def release(self, f: OpenFile, *, created: bool) -> bool:
        """The last reference to a writer's handle went: what its closes left is committed
        (a ``created`` name whose write failed stays, empty), then the stage is dropped,
        in a worker. True when its temp file went (its name may need dropping)."""
        session, stage = f.session, f.stage
        assert session is not None
        assert stage is not None
        do = session.release(created=created)
        if do is not Do.NOTHING:
            gate = steps.LastClose(f.pid, f.tgid, "", held=False)  # a kill drops it
            try:
                await self.commit(f, do, gate=gate, created=created)
            except (OSError, pyfuse3.FUSEError) as exc:
                log.warning("committing %s at release failed: %s", f.key, exc)
        # A handle released without a successful commit is dropped: the target stays as
        # it was. A rename may be moving it, or an unlink forgetting it: held.
        async with self.held(f):
            had_temp = bool(stage.temp)
            await workers.run(steps.Abort(stage).run)
        session.released()
        return had_temp

    def _mount_path(self, key: Key) -> str:
        return f"{self.mountpoint}/{key[0]}/{key[1]}"
