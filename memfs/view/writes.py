"""The rules of writing through the mount (§7), as plans: what a change does, not doing it.

Layer view: imports neither pyfuse3 nor trio, and does no I/O. Each ``plan_*`` function
checks a change against the merged view and returns a `Plan`: the steps that change the own
source (copy a head up, commit a stage, rename, unlink, set attributes, make or remove a
folder, save whiteouts; handoff versions are kept by the steps that replace one) and the
paths to stat again afterwards. `steps.apply` runs a whole plan in one worker-thread call;
the adapter then absorbs what it found into the project on its own thread. Every refusal is
a `Refused` carrying the errno the behaviour contract names (docs/BEHAVIOUR.md); the
adapter returns it as is.

Names: a name a writer creates through the mount (create, mkdir, a rename onto it) that is a
tool's own file (`names.Way.REFUSED`: ``.git``, ``._x``, Syncthing's temp names, ...) or,
for a file, a sync tool's conflict copy (``x.sync-conflict-<date>-<time>-<dev>.md``) is
refused with EINVAL (`check_new_name`): no source ever shows such a name as itself, so
accepting it would lose it from the view at once or at the next mount while it stays on
disk. Every other name is accepted and stays shown for as long as it is on disk.

Threading: called on the adapter's trio thread only; reads the project, never changes it.
"""

from __future__ import annotations

import errno
import functools
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memfs.disk import journal, sources, staging, state, steps
from memfs.disk.baselines import OwnFolder
from memfs.disk.config import Config
from memfs.disk.index_save import RestoreHidden, SaveIndex
from memfs.disk.staging import RENAME_NOREPLACE
from memfs.disk.steps import Applied, Step  # by name: in Plan's body, steps is its field
from memfs.rules import history, names, preamble
from memfs.rules.history import in_history
from memfs.rules.names import is_temp_name
from memfs.rules.tree import ancestors, parent_of
from memfs.view.catalog import Catalog, is_project_name, own_folder
from memfs.view.holdings import cached_path_rule
from memfs.view.project import (
    PREAMBLE,
    Kind,
    Leaf,
    Origin,
    Project,
    Version,
    conflict_original,
)
from memfs.view.versions import fill_times

__all__ = ["RENAME_EXCHANGE", "RENAME_NOREPLACE", "Plan", "Refused", "in_history", "is_temp_name"]

RENAME_EXCHANGE = 2


class Refused(Exception):
    """A change the behaviour contract does not allow: ``errno`` says which refusal."""

    def __init__(self, code: int) -> None:
        super().__init__(errno.errorcode.get(code, str(code)))
        self.errno = code


@dataclass
class Plan:
    """Steps for `steps.apply`, then what the adapter must absorb.

    ``reread`` names (origin index, path) pairs to stat after the steps; versions kept by a
    step are added to them by apply. ``whiteouts``, when set, is the project's new whiteout
    set (saved by a step first). ``rescan`` asks for a full scan of one origin (a folder
    renamed whole). ``dirs`` are folders the steps make (True) or remove (False). ``index``
    is the step saving MEMORY.md as a change (view/indexes.py), whose hidden lines the
    project takes.
    """

    slug: str
    steps: list[Step] = field(default_factory=list)
    reread: list[tuple[int, str]] = field(default_factory=list)
    origins: dict[int, Origin] = field(default_factory=dict)  # where each reread lies
    whiteouts: set[tuple[str, str, int]] | None = None
    rescan: int | None = None
    dirs: list[tuple[int, str, bool]] = field(default_factory=list)
    own: int | None = None  # the own origin, where kept versions land
    change: journal.Change | None = None  # what the journal records once it ran (§7.2)
    state_dir: Path | None = None
    own_folder: OwnFolder | None = None  # for what memfs read of it (issue 37)
    index: SaveIndex | RestoreHidden | None = None  # the step that sets an index's hidden lines

    def read_again(self, origin: int, place: Origin, path: str) -> None:
        self.origins[origin] = place
        self.reread.append((origin, path))

    def application(self, project: Project, max_bytes: int) -> Callable[[], Applied]:
        """The one worker-thread call that runs this plan (`steps.apply`), with plain
        copies of where each path lies: the worker touches no project."""
        where = {i: steps.Where(o.root, o.parts, o.only) for i, o in self.origins.items()}
        rescan = None
        if self.rescan is not None:
            origin = project.origins[self.rescan]
            rescan = steps.Where(origin.root, origin.parts, origin.only)
        return functools.partial(
            steps.apply,
            self.steps,
            [(i, where[i], path) for i, path in self.reread],
            own=(self.own, where[self.own]) if self.own is not None else None,
            rescan=rescan,
            max_bytes=max_bytes,
            change=self.change,
            state_dir=self.state_dir,
            own_folder=self.own_folder,
        )


def absorb(catalog: Catalog, project: Project, plan: Plan, applied: Applied) -> bool:
    """What the disk holds after ``plan`` ran, into the project (memory only, on the
    adapter's thread); True when the project's own folder is new at the root."""
    at = applied.at_ns
    for i, path, found in applied.found:
        if isinstance(found, sources.FileStat):
            for folder in ancestors(path):  # a step may have made them (mkdir -p)
                project.observe_dir(i, folder, True, at)
        project.observe(i, path, found, at)
    if plan.index is not None and plan.index.hidden is not None:
        # Saved, whatever failed after it.
        project.set_hidden_lines(plan.index.hidden, plan.index.index)
    if applied.error is None:
        if plan.whiteouts is not None:
            project.set_whiteouts(plan.whiteouts)
        for i, path, present in plan.dirs:
            project.observe_dir(i, path, present, at)
    if applied.scan is not None and plan.rescan is not None:
        project.rescan(plan.rescan, applied.scan, at)
    if not catalog.has(project.slug) and applied.error is None:
        # The first write into a project no source held: the own folder exists now. The
        # project written into is the catalog's (its empty view's), unless that view was let
        # go meanwhile: one built anew keeps what this one knows of the state folder.
        catalog.own_folder_made(project.slug, project.saved)
        return True
    return False


# --- where a write lands -----------------------------------------------------------------


def target_folder(catalog: Catalog, slug: str, path: str) -> staging.Place:
    """The own source's folder that receives a write to ``path`` of project ``slug``.

    Raises:
        Refused: EACCES for what memfs serves read-only (§7.4), EINVAL for a name of
            memfs's own temp files, EROFS with no own source.
    """
    if path == PREAMBLE or preamble.sized_budget(path) is not None or in_history(path):
        raise Refused(errno.EACCES)
    if parent_of(path)[1].startswith(sources.STAGE_PREFIX):
        raise Refused(errno.EINVAL)  # never served, and swept after a crash
    origin = catalog.own_origin(slug)
    if origin is None:
        raise Refused(errno.EROFS)
    if not origin.admits(path):
        # global/claude lands in a Claude Code config folder: only its user memory (§4.1),
        # since anything else there would be written and never shown.
        raise Refused(errno.EACCES)
    folder, _ = parent_of(path)
    return staging.Place(origin.root, origin.parts).below(*sources.split(folder))


def keeps_versions(path: str) -> bool:
    """`history.keeps_versions`, with the name rules' answers kept (holdings.py)."""
    return history.keeps_versions(path, cached_path_rule)


def keep_for(
    config: Config, catalog: Catalog, project: Project, path: str, size: int | None = None
) -> staging.Keep | None:
    """Where the version of ``path`` a change replaces or removes is kept (§7.2): the own
    source's ``.history/<path>/<own>@<UTC>.md``, the last ``versions`` of it, and the
    oldest kept versions of the project that must go so that the project stays within
    ``history_bytes`` (view/kept.py). ``size``: the bytes kept, when they are not the own
    version's at ``path`` (a replaced writer's stage)."""
    own = config.own
    place = catalog.own_place(project.slug)
    if own is None or place is None or not keeps_versions(path):
        return None
    limits = config.limits
    replaced = (
        size
        if size is not None
        else next(
            (
                v.size
                for v in project.versions(path)
                if project.origins[v.origin].writable(config.own_index)
            ),
            0,
        )
    )
    drop = (
        project.kept.over_budget(path, replaced, limits.history_bytes, limits.versions)
        if replaced
        else []
    )
    folder = place.below(history.HISTORY, *sources.split(path))
    return staging.Keep(folder, own.name, limits.versions, path, place, tuple(drop))


def own_folder_of(config: Config, project: Project, v: Version) -> staging.Place | None:
    """The writable folder holding version ``v``, or None when a read-only source has it."""
    origin = project.origins[v.origin]
    if not origin.writable(config.own_index):
        return None
    folder, _ = parent_of(v.path)
    return staging.Place(origin.root, (*origin.parts, *sources.split(folder)))


def check_new_name(path: str, *, folder: bool = False) -> None:
    """A writer creates ``path`` (a folder, if ``folder``) through the mount.

    Refused are the names the view never shows under themselves, so that a name is
    refused at once or stays visible (§5.1): a tool's own name, and a file named like a
    sync tool's conflict copy, which the view shows only as a version of its original
    under ``.history/`` (`project.conflict_original`). A folder of such a name is
    ordinary: only files are conflict copies.

    Raises:
        Refused: EINVAL for either.
    """
    if names.refused(parent_of(path)[1], folder=folder) is not None:
        raise Refused(errno.EINVAL)
    if not folder and conflict_original(path) is not None:
        raise Refused(errno.EINVAL)


def writable_leaf(project: Project, path: str) -> Leaf:
    """The file at ``path`` that a write, unlink or rename may change."""
    leaf = project.tree.leaf(path)
    if leaf is None:
        raise Refused(errno.EISDIR if project.tree.is_dir(path) else errno.ENOENT)
    if leaf.kind not in (Kind.FILE, Kind.MEMORY):
        raise Refused(errno.EACCES)
    return leaf


def check_size(config: Config, size: int) -> None:
    """§7.6: past ``max_file_bytes`` a write or truncate fails at once, changing nothing
    (a bigger file would be left out of the view while it stays on disk)."""
    if size > config.limits.max_file_bytes:
        raise Refused(errno.EFBIG)


def new_mode(mode: int, umask: int) -> int:
    """The permission bits create and mkdir give: the caller's mode and umask, exactly."""
    return stat.S_IMODE(mode) & ~umask


# --- the plans -----------------------------------------------------------------------------


def check_pending_rename(project: Project, src: str, dst: str, flags: int, *, taken: bool) -> None:
    """rename(2) of a file still being written (no version yet), onto ``dst`` (``taken``:
    a file or another pending create is there). Raises Refused."""
    if flags & RENAME_NOREPLACE and taken:
        raise Refused(errno.EEXIST)
    if flags & RENAME_EXCHANGE:
        raise Refused(errno.EINVAL)
    if project.tree.is_dir(dst):
        raise Refused(errno.EISDIR)
    if parent_of(src)[0] != parent_of(dst)[0]:
        raise Refused(errno.EXDEV)  # the stage lives in the source folder; mv copies
    check_new_name(dst)


class Planner:
    """Plans for one project's changes; ``own`` is the own source's origin in it."""

    def __init__(
        self, config: Config, catalog: Catalog, project: Project, own: int, who: int = 0
    ) -> None:
        self.config = config
        self.catalog = catalog
        self.project = project
        self.own = own
        self.who = who  # the process asking (FUSE names its thread): the journal says so

    @classmethod
    def of(cls, config: Config, catalog: Catalog, project: Project, who: int = 0) -> Planner:
        """The planner of ``project``'s changes asked for by process ``who``, its own
        source's canonical folder registered in it (empty) if new. Raises Refused (EROFS)
        with no own source."""
        origin = catalog.own_origin(project.slug)
        own = config.own_index
        if origin is None or own is None:
            raise Refused(errno.EROFS)
        found = project.origin_index(origin)
        if found is None:
            found = project.add_origin(origin, sources.Scan(exists=False))
        return cls(config, catalog, project, found, who)

    def _plan(self, what: str | None = None, path: str = "", to: str = "") -> Plan:
        """An empty plan; with ``what``, one the journal records as that change of
        ``path`` (to ``to``, a rename's), its size before as the view shows it."""
        origin = self._own_origin()
        plan = Plan(self.project.slug, own=self.own, origins={self.own: origin})
        plan.own_folder = own_folder(self.config, self.project.slug, origin)
        if what is not None:
            self._journal(plan, what, path, to)
        return plan

    def _journal(self, plan: Plan, what: str, path: str, to: str = "") -> Plan:
        """``plan`` will be journaled as ``what`` of ``path``, with the size the view
        shows before it (§7.2)."""
        head = self.project.head(path)
        before = head.size if head is not None else None
        plan.change = journal.Change(self.project.slug, path, what, self.who, to=to, before=before)
        plan.state_dir = self.config.state_dir
        return plan

    def nothing(self) -> Plan:
        """A plan that changes nothing: what a gate step alone checks (a failure a
        writer's close reports, view/session.py)."""
        return self._plan()

    def _own_origin(self) -> Origin:
        return self.project.origins[self.own]

    def _keep(self, path: str) -> staging.Keep | None:
        return keep_for(self.config, self.catalog, self.project, path)

    def _place(self, path: str) -> staging.Place:
        return target_folder(self.catalog, self.project.slug, path)

    def times(self, path: str, atime: int | None, mtime: int | None) -> staging.Times:
        """utimensat's pair for ``path``: what is not asked for keeps its value (§7.6), a
        head's as the view shows it; a real folder's is left None, kept by the step that
        sets the other (`staging.set_attrs`, in the plan's worker call)."""
        v = self.project.head(path)
        if v is None and self.project.folder_origins(path):
            return (atime, mtime)
        return fill_times((atime, mtime), v)

    def commit(
        self, stage: staging.Stage, path: str, *, keep: bool, created: bool, empty: bool = False
    ) -> Plan:
        """A staged write becomes the file at ``path`` (§7.1, §7.2). ``created``: the
        name is new, made by this stage; if it is a writer's temporary name, its folder is
        not fsynced (`is_temp_name`). ``empty``: an empty file instead (a create whose
        write failed)."""
        plan = self._plan("create" if created else "write", path)
        sync = not (created and is_temp_name(parent_of(path)[1]))
        keeping = self._keep(path) if keep else None
        plan.steps.append(steps.Commit(stage, keeping, sync, empty=empty))
        plan.read_again(self.own, self._own_origin(), path)
        return plan

    def keep_stage(self, stage: staging.Stage, path: str, size: int) -> Plan:
        """A writer whose name was replaced by another file while it was open: its bytes
        (``size`` of them) become a kept version of ``path`` (§7.2), not the file. A
        writer's own temporary, swap or backup file keeps nothing (`keeps_versions`): its
        bytes go."""
        plan = self._plan("keep", path)
        keep = keep_for(self.config, self.catalog, self.project, path, size)
        if keep is None:
            plan.change = None
            return plan
        plan.steps.append(steps.KeepStage(stage, keep))
        return plan

    def copy_up(
        self,
        path: str,
        *,
        dst: str | None = None,
        mode: int | None = None,
        size: int | None = None,
        times: tuple[int, int] | None = None,
        memory: bytes | None = None,
    ) -> Plan:
        """The head of ``path`` (a read-only source's, or the MEMORY.md union) copied into
        the own source at ``dst`` (default ``path``) with attributes changed, atomically."""
        leaf = writable_leaf(self.project, path)
        assert leaf.version is not None
        target = dst if dst is not None else path
        v = leaf.version
        if leaf.kind is Kind.MEMORY:
            src: steps.Source = steps.Source(None, (), "", memory or b"")
            base_mode = staging.FILE_MODE
        else:
            origin = self.project.origins[v.origin]
            src = steps.Source(origin.root, origin.parts, v.path, None)
            base_mode = v.mode or staging.FILE_MODE
        if size is not None:
            check_size(self.config, size)
        plan = self._plan()
        plan.steps.append(
            steps.CopyUp(
                src,
                self._place(target),
                parent_of(target)[1],
                mode=stat.S_IMODE(mode) if mode is not None else base_mode,
                size=size,
                times=times or (v.atime_ns or v.mtime_ns, v.mtime_ns),
                keep=self._keep(target),
            )
        )
        plan.read_again(self.own, self._own_origin(), target)
        return plan

    def restore(self, path: str, version: Version, view: str, *, nothing: bool) -> Plan:
        """`memfs restore` (view/restore.py): ``version`` (shown at ``view``) becomes the own
        file at ``path``, its bytes, mode and times, as one atomic replace, the version it
        replaces kept (§7.2); ``nothing``: it is that file already, and the plan copies
        nothing (an index's may still restore its hidden lines)."""
        plan = self._plan("restore", path)
        assert plan.change is not None
        plan.change.version = view
        if nothing:
            return plan
        origin = self.project.origins[version.origin]
        plan.steps.append(
            steps.CopyUp(
                steps.Source(origin.root, origin.parts, version.path, None),
                self._place(path),
                parent_of(path)[1],
                mode=stat.S_IMODE(version.mode),
                size=None,
                times=(version.atime_ns or version.mtime_ns, version.mtime_ns),
                keep=self._keep(path),
            )
        )
        plan.read_again(self.own, self._own_origin(), path)
        return plan

    def set_attrs(
        self,
        path: str,
        *,
        mode: int | None,
        size: int | None,
        times: staging.Times | None,
    ) -> Plan:
        """chmod, truncate, utimens of a file (copied up when a read-only source holds its
        head) or of a folder of the own source (MEMORY.md's: view/indexes.py). The project
        folder itself (``path`` '') is the own source's folder for the project, made first
        if only other sources hold the project (`tar -x` sets the times of its `.`)."""
        project = self.project
        what = "truncate" if size is not None else "chmod" if mode is not None else "times"
        if not path:
            if size is not None:
                raise Refused(errno.EISDIR)
            own = self._own_origin()
            *parents, name = own.parts
            plan = self._plan(what, path)
            place = staging.Place(own.root, tuple(parents))
            plan.steps.append(steps.SetAttrs(place, name, mode=mode, times=times, make=True))
            return plan
        if project.tree.is_dir(path):
            if size is not None:
                raise Refused(errno.EISDIR)
            if self.own not in project.dir_holders(path):
                raise Refused(errno.EPERM)  # a folder only a read-only source has
            plan = self._plan(what, path)
            folder, name = parent_of(path)
            place = _place_in(self._own_origin(), folder)
            plan.steps.append(steps.SetAttrs(place, name, mode=mode, times=times))
            return plan
        leaf = writable_leaf(project, path)
        assert leaf.version is not None
        full = fill_times(times, leaf.version) if times is not None else None
        if size is not None:
            check_size(self.config, size)
        own_place = own_folder_of(self.config, project, leaf.version)
        if own_place is None or leaf.kind is not Kind.FILE:
            copy = self.copy_up(path, mode=mode, size=size, times=full)
            return self._journal(copy, what, path)
        if size is not None and size != leaf.version.size and keeps_versions(path):
            # A truncate that changes the bytes replaces the version: done as a copy
            # truncated and renamed over it, the replaced one kept (§7.2), as a write is.
            now = time.time_ns()
            copy = self.copy_up(path, mode=mode, size=size, times=full or (now, now))
            return self._journal(copy, what, path)
        plan = self._plan(what, path)
        step = steps.SetAttrs(own_place, parent_of(path)[1], mode=mode, times=full, size=size)
        plan.steps.append(step)
        plan.read_again(leaf.version.origin, project.origins[leaf.version.origin], path)
        return plan

    def unlink(self, path: str) -> Plan:
        """Remove the own copies of ``path``; hide the read-only ones with whiteouts."""
        writable_leaf(self.project, path)
        plan = self._plan("unlink", path)
        self._remove_everywhere(plan, path)
        return plan

    def unlink_left_out(self, path: str) -> Plan:
        """Remove a file of the own source the view leaves out (§7.6: so that its
        folder can be removed)."""
        plan = self._plan("unlink", path)
        folder, name = parent_of(path)
        plan.steps.append(steps.Unlink(_place_in(self._own_origin(), folder), name, None))
        plan.read_again(self.own, self._own_origin(), path)
        return plan

    def _remove_everywhere(self, plan: Plan, path: str) -> None:
        project = self.project
        keep = self._keep(path)
        name = parent_of(path)[1]
        for v in project.versions(path):
            place = own_folder_of(self.config, project, v)
            if place is not None:
                plan.steps.append(steps.Unlink(place, name, keep))
                plan.read_again(v.origin, project.origins[v.origin], path)
        self._hide(plan, path)

    def _hide(self, plan: Plan, path: str) -> None:
        added = self.project.whiteouts_for(path)
        if added:
            records = (plan.whiteouts or self.project.whiteouts) | set(added)
            self._save(plan, records)

    def _save(self, plan: Plan, records: set[tuple[str, str, int]]) -> None:
        plan.whiteouts = records
        plan.steps.append(state.SaveWhiteouts(self.config.state_dir, plan.slug, records))

    def stage(self, path: str, step: steps.MakeStage) -> Plan:
        """A writer's stage for ``path`` (``step`` makes it): the own source's folders on
        its way are the view's from then on, so they stay when the other sources' folders
        go (§7.3)."""
        plan = self._plan()
        plan.steps.append(step)
        plan.dirs += [(self.own, folder, True) for folder in ancestors(path)]
        return plan

    def mkdir(self, path: str, mode: int) -> Plan:
        project = self.project
        check_new_name(path, folder=True)
        if project.tree.leaf(path) is not None or project.tree.is_dir(path):
            raise Refused(errno.EEXIST)
        plan = self._plan("mkdir", path)
        if self.own in project.dir_holders(path):
            # A whiteout hid it; the user wants it back.
            self._save(plan, {w for w in project.whiteouts if w[0] != path})
            return plan
        folder, name = parent_of(path)
        plan.steps.append(steps.MakeDir(_place_in(self._own_origin(), folder), name, mode))
        plan.dirs.append((self.own, path, True))
        return plan

    def rmdir(self, path: str) -> Plan:
        project = self.project
        if not project.tree.is_dir(path):
            raise Refused(errno.ENOTDIR if project.tree.leaf(path) else errno.ENOENT)
        if project.tree.has_children(path):
            raise Refused(errno.ENOTEMPTY)
        plan = self._plan("rmdir", path)
        folder, name = parent_of(path)
        for i in sorted(project.dir_holders(path)):
            origin = project.origins[i]
            if origin.writable(self.config.own_index):
                plan.steps.append(steps.RemoveDir(_place_in(origin, folder), name))
                plan.dirs.append((i, path, False))
        self._hide(plan, path)
        return plan

    def rename(self, src: str, dst: str, flags: int, *, memory: bytes | None = None) -> Plan:
        """rename(2) on the merged view: within the own source, or a copy-up then hiding
        the old name; a folder only as a whole of the own source (else EXDEV: `mv` copies)."""
        check_rename(self.project, src, dst, flags)
        plan = self._plan("rename", src, dst)
        if src == dst:
            plan.change = None  # rename(2) onto itself changes nothing
            return plan
        if self.project.tree.is_dir(src):
            return self._rename_dir(plan, src, dst, flags)
        leaf = writable_leaf(self.project, src)
        assert leaf.version is not None
        own_place = own_folder_of(self.config, self.project, leaf.version)
        keep = self._keep(dst)
        if own_place is not None and leaf.kind is Kind.FILE:
            step = steps.Rename(
                own_place,
                parent_of(src)[1],
                self._place(dst),
                parent_of(dst)[1],
                keep=keep,
                noreplace=bool(flags & RENAME_NOREPLACE),
            )
            plan.steps.append(step)
            plan.read_again(self.own, self._own_origin(), dst)
            origin = leaf.version.origin
            plan.read_again(origin, self.project.origins[origin], src)
            # Other sources' versions of the old name must vanish too.
            self._remove_others(plan, src, leaf.version)
            return plan
        copy = self.copy_up(src, dst=dst, memory=memory)
        plan.steps += copy.steps
        plan.reread += copy.reread
        self._remove_everywhere(plan, src)
        return plan

    def _remove_others(self, plan: Plan, path: str, moved: Version) -> None:
        name = parent_of(path)[1]
        for v in self.project.versions(path):
            place = own_folder_of(self.config, self.project, v)
            if v.origin != moved.origin and place is not None:
                plan.steps.append(steps.Unlink(place, name, None))
                plan.read_again(v.origin, self.project.origins[v.origin], path)
        self._hide(plan, path)

    def _rename_dir(self, plan: Plan, src: str, dst: str, flags: int) -> Plan:
        if not folder_is_own_only(self.config, self.project, src):
            # Other sources hold part of it: let `mv` fall back to copy and delete, which
            # works through memfs file by file (as on overlayfs).
            raise Refused(errno.EXDEV)
        step = steps.Rename(
            self._place(src),
            parent_of(src)[1],
            self._place(dst),
            parent_of(dst)[1],
            noreplace=bool(flags & RENAME_NOREPLACE),
        )
        plan.steps.append(step)
        plan.rescan = self.own
        return plan


def plan_new_project(catalog: Catalog, slug: str, mode: int) -> steps.MakeDir:
    """mkdir at the root: the own source's folder for a new project (§4), named by its
    canonical slug (the root lists every project: EEXIST for one any source holds).

    Raises:
        Refused: EROFS with no own source, EINVAL for a name that is no canonical slug.
    """
    if catalog.config.own is None:
        raise Refused(errno.EROFS)
    if not is_project_name(slug):
        raise Refused(errno.EINVAL)  # only canonical slugs live at the root
    if catalog.has(slug):
        raise Refused(errno.EEXIST)
    place = catalog.own_place(slug)
    if place is None:
        raise Refused(errno.EROFS)
    *parents, name = place.parts
    return steps.MakeDir(staging.Place(place.root, tuple(parents)), name, mode)


def _place_in(origin: Origin, folder: str) -> staging.Place:
    return staging.Place(origin.root, (*origin.parts, *sources.split(folder)))


def check_rename(project: Project, src: str, dst: str, flags: int) -> None:
    """rename(2)'s rules on the merged view: what may replace what.

    Raises:
        Refused: EINVAL for RENAME_EXCHANGE (no atomic swap across sources) and for a
            folder moved into itself; the usual ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY.
    """
    if flags & RENAME_EXCHANGE:
        raise Refused(errno.EINVAL)
    tree = project.tree
    if tree.leaf(src) is None and not tree.is_dir(src):
        raise Refused(errno.ENOENT)
    if src == dst:
        return
    check_new_name(dst, folder=tree.is_dir(src))
    dst_exists = tree.leaf(dst) is not None or tree.is_dir(dst)
    if flags & RENAME_NOREPLACE and dst_exists:
        raise Refused(errno.EEXIST)
    if tree.is_dir(src):
        if dst.startswith(src + "/"):
            raise Refused(errno.EINVAL)
        if tree.leaf(dst) is not None:
            raise Refused(errno.ENOTDIR)
        if tree.has_children(dst):
            raise Refused(errno.ENOTEMPTY)
    elif tree.is_dir(dst):
        raise Refused(errno.EISDIR)
    else:
        writable_leaf(project, src)


def folder_is_own_only(config: Config, project: Project, folder: str) -> bool:
    """Whether only the own source holds anything in ``folder`` (it may be renamed whole).

    O(versions in the project): renaming a whole folder is rare.
    """
    own = config.own_index
    inside = project.versions_under(folder)
    if any(not project.origins[v.origin].writable(own) for v in inside):
        return False
    below = [p for p in project.folders() if p == folder or p.startswith(folder + "/")]
    return all(
        project.origins[i].writable(own) for path in below for i in project.dir_holders(path)
    )
