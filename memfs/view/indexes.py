"""Plans of the changes to MEMORY.md through the mount: a save lands as a change (§5.3).

Layer view: imports neither pyfuse3 nor trio, and does no I/O; plans only, as writes.py
does for every other file (its `Planner` makes the common parts of each plan).

MEMORY.md shows the union of every source's index, but a writer saves the whole of what it
read. So a save of MEMORY.md is taken as a change of the view against the version the
writer read (`IndexChange`), and lands in the own index as that change alone
(index_save.SaveIndex runs the rule, rules/index.py `save_change`, in the plan's worker
call): the lines the writer added are added, the lines of the view it removed are removed
(one that only another source holds is hidden from the union until that source changes
it), and the rest of the own index stays as the disk holds it then, lines another writer
added since this one read included. The own index never receives another source's lines
because a writer saved the view they were in.

Every way a save reaches MEMORY.md is planned here:

* a writer's stage committed onto it (`plan_commit`: `cat >`, an editor writing in place,
  an O_RDWR edit, a create);
* a file renamed onto it (`plan_rename_onto`: Claude Code's temp file, `sed -i`,
  ``os.replace``, rsync);
* a truncate by path, or chmod and utimens (`plan_attrs`): a truncate cuts the view as it
  stands; the attributes are the own index's, made empty when there is none;
* an editor's backup-then-write: MEMORY.md renamed away (`plan_move_away`, which reads the
  own index first), then written anew. A rename of an index away moves the view's bytes
  to the new name and the own index away, and never hides another source's index: no
  sequence of renames hides another account's lines. The adapter keeps what the move took
  (`IndexChange` with ``own_before``) a moment: the save that follows (a create, an
  O_TRUNC write, a rename onto it) is the save of the index, not of a new one, so the own
  index it moved is the one the change applies to.

What the writer read is the adapter's to know (adapter/indexes.py): the view its open for
writing started from when it could read it there (O_RDWR) or appends to it; else what its
process last read through a read open of this MEMORY.md; else the view when it opened
MEMORY.md for writing, or (a rename onto it) when the change is planned.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass

from memfs.disk import index_save, staging, steps
from memfs.disk.index_save import FromBytes, FromFile, FromStage, ReadIndex, SaveIndex
from memfs.rules.tree import parent_of
from memfs.view.versions import MEMORY, Kind, fill_times
from memfs.view.writes import (
    RENAME_NOREPLACE,
    Plan,
    Planner,
    Refused,
    check_rename,
    own_folder_of,
    writable_leaf,
)

__all__ = ["MEMORY", "IndexChange", "Refused"]


@dataclass(frozen=True)
class IndexChange:
    """What a save of MEMORY.md is a change against: ``read``, what its writer read; after
    an editor moved the index away to write it anew, ``own_before``, the own index it moved
    (taken as the own index while the disk has none)."""

    read: bytes
    own_before: bytes | None = None


def plan_commit(
    planner: Planner,
    stage: staging.Stage,
    change: IndexChange,
    *,
    keep: bool,
    created: bool,
    path: str = MEMORY,
) -> Plan:
    """A writer's stage committed onto MEMORY.md (``keep``: the handle's first commit
    keeps the version it replaces, §7.2; ``created``: the name is new, made by it)."""
    plan = planner._plan("create" if created else "write", path)
    return _plan_save(planner, plan, FromStage(stage), change, keep=keep, path=path)


def plan_rename_onto(
    planner: Planner, src: str, flags: int, change: IndexChange, path: str = MEMORY
) -> Plan:
    """rename(2) of ``src`` onto MEMORY.md: its bytes are the writer's save. A folder, or a
    rename onto itself, is writes.py's."""
    project = planner.project
    if src == path or project.tree.is_dir(src):
        return planner.rename(src, path, flags)
    check_rename(project, src, path, flags)
    leaf = writable_leaf(project, src)
    v = leaf.version
    assert v is not None
    place = own_folder_of(planner.config, project, v)
    written: index_save.Written
    if place is not None and leaf.kind is Kind.FILE:
        written = FromFile(place, parent_of(src)[1], bool(flags & RENAME_NOREPLACE))
    else:  # a read-only source's head: its bytes, read in the worker
        origin = project.origins[v.origin]
        times = (v.atime_ns or v.mtime_ns, v.mtime_ns)
        written = FromBytes(None, (origin.root, origin.parts, v.path), v.mode, times)
    plan = planner._plan("rename", src, path)
    _plan_save(planner, plan, written, change, keep=True, path=path)
    plan.read_again(v.origin, project.origins[v.origin], src)
    if place is not None and leaf.kind is Kind.FILE:
        planner._remove_others(plan, src, v)  # the old name's other versions go too
    else:
        planner._remove_everywhere(plan, src)
    return plan


def plan_attrs(
    planner: Planner,
    *,
    mode: int | None,
    size: int | None,
    times: staging.Times | None,
    path: str = MEMORY,
) -> Plan:
    """chmod, truncate, utimens of MEMORY.md by path (a writer's handle changes its stage)."""
    project = planner.project
    leaf = writable_leaf(project, path)
    full = fill_times(times, leaf.version) if times is not None else None
    asked = stat.S_IMODE(mode) if mode is not None else 0
    what = "truncate" if size is not None else "chmod" if mode is not None else "times"
    plan = planner._plan(what, path)
    if size is not None:
        # A save of the view as it stands, cut (or grown with NULs, as a truncate grows a
        # file): the writer changes that view, whatever it read before.
        view = project.memory_index(path)
        text = view[:size] + b"\0" * (size - len(view))
        written = FromBytes(text, mode=asked, times=full)
        return _plan_save(planner, plan, written, IndexChange(view), keep=True, path=path)
    own = next((v for v in project.versions(path) if v.origin == planner.own), None)
    if own is None:
        # The attributes are the own index's: one is made, holding no line (the view's lines
        # stay the other sources').
        made = FromBytes(b"", mode=asked, times=full)
        return _plan_save(planner, plan, made, IndexChange(b""), keep=False, path=path)
    folder = planner._place(path)
    plan.steps.append(steps.SetAttrs(folder, parent_of(path)[1], mode=mode, times=full))
    plan.read_again(planner.own, planner._own_origin(), path)
    return plan


def plan_move_away(
    planner: Planner, dst: str, flags: int, memory: bytes, path: str = MEMORY
) -> tuple[Plan, ReadIndex]:
    """rename(2) of MEMORY.md (whose view is ``memory``) to ``dst``: ``dst`` gets what the
    view showed, the own index goes (kept, §7.2), and the other sources' indexes stay as
    they are: a rename hides none of their lines (§5.3). Its first step reads the own
    index it moves (`ReadIndex`): an editor's backup-then-write writes the index anew at
    once, and that save applies to it. The own index is copied and unlinked, never
    renamed, even when it is shown alone: unlinked, it is kept (§7.2), whereas the name an
    editor moves it to (its backup, ``MEMORY.md~``) keeps nothing, and the save that
    follows replaces it; and a rename would hide the other accounts' indexes (whiteouts)
    where the own index is shown alone only because its owner may not read it (chmod 000).
    """
    project = planner.project
    leaf = writable_leaf(project, path)
    assert leaf.version is not None
    check_rename(project, path, dst, flags)
    plan = planner.copy_up(path, dst=dst, memory=memory if leaf.kind is Kind.MEMORY else None)
    planner._journal(plan, "rename", path, dst)
    for v in project.versions(path):
        place = own_folder_of(planner.config, project, v)
        if place is not None:
            plan.steps.append(steps.Unlink(place, parent_of(path)[1], planner._keep(path)))
            plan.read_again(v.origin, project.origins[v.origin], path)
    step = ReadIndex(planner._place(path), planner.config.limits.max_file_bytes)
    plan.steps.insert(0, step)
    return plan, step


def _plan_save(
    planner: Planner,
    plan: Plan,
    written: index_save.Written,
    change: IndexChange,
    *,
    keep: bool,
    path: str = MEMORY,
) -> Plan:
    """``plan`` (made by ``planner``, journaled as what the writer did) saving ``written``
    as index ``path``, a change against ``change``."""
    project = planner.project
    config = planner.config
    step = SaveIndex(
        written,
        planner._place(path),
        change.read,
        project.documents.other_indexes(path),
        config.state_dir,
        project.slug,
        planner._keep(path) if keep else None,
        config.limits.max_file_bytes,
        own_before=change.own_before,
        index=path,
    )
    plan.steps.append(step)
    plan.index = step
    plan.read_again(planner.own, planner._own_origin(), path)
    return plan
