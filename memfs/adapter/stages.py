"""Every change through the mount, one way down, and a writer's stage from making to commit.

Layer adapter (trio). A change goes one way: the handler decodes (fs.py), the view plans
(`writes.Planner`), one worker call applies the plan under the commit lock (`run`:
`steps.apply`), the view absorbs what the worker found (`writes.absorb`), and the adapter
publishes what the kernel must forget (`Publisher.plan_applied`). Nothing climbs back: the
plan carries what the worker needs, and the worker returns plain results.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Protocol

import pyfuse3
import trio

from memfs.adapter import workers
from memfs.adapter.inodes import Key
from memfs.adapter.writing import OpenFile, OpenFiles
from memfs.disk import procs, staging, state, steps
from memfs.disk.config import Config
from memfs.rules.tree import parent_of
from memfs.view import writes
from memfs.view.catalog import Catalog
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
        plan's one step in a worker (with the project's whiteouts, read there too)."""
        step = writes.plan_new_project(self.catalog, slug, mode)

        def made() -> set[state.Whiteout]:
            step.run()
            return state.load_whiteouts(self.config.state_dir, slug)  # off this thread

        await self._take_commit_lock()
        try:
            whiteouts = await workers.run(made)
        finally:
            self._commit_lock.release()
        project = self.catalog.own_folder_made(slug, whiteouts)
        self.publisher.publish_root(slug)
        return project

    async def _take_commit_lock(self) -> None:
        """The commit lock, at once when it is free: `async with` would yield to the loop
        first, a round of the scheduler per plan (the worker call after it checkpoints)."""
        try:
            self._commit_lock.acquire_nowait()
        except trio.WouldBlock:
            await self._commit_lock.acquire()

    # --- making a stage -------------------------------------------------------------

    async def open(
        self, f: OpenFile, project: Project, leaf: Leaf, truncate: bool, place: staging.Place
    ) -> None:
        """An open for writing of ``leaf`` (its version pinned by the caller, unless
        ``truncate``): what its stage will start from."""
        f.keeps_history = True
        if truncate:
            # Nothing of the head is read: no descriptor of it is opened (closing it after
            # the commit would free the replaced inode on the request thread).
            mode = leaf.version.mode if leaf.kind is Kind.FILE and leaf.version else 0o644
            await self.empty(f, mode or staging.FILE_MODE, place)
            # `> file` empties the file even if nothing is written; a shell closes a dup of
            # the descriptor (a flush) before writing, so the bare truncation commits only
            # at its last close, and readers never see the empty in-between file.
            f.unsaved = True
        elif leaf.kind is Kind.MEMORY:
            # Editing the union starts from what the reader saw: the union becomes the own
            # source's MEMORY.md, so no topic linked elsewhere is lost.
            f.data = project.memory_index()
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
            plan = self.planner(project, f.pid).commit(
                stage, f.key[1], keep=f.keeps_history, created=created
            )
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
