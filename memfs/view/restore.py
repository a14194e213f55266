"""`memfs restore`: which version goes back, and the plan that puts it back (§7.2).

Layer view: pure (no I/O; imports neither pyfuse3 nor trio). The same choice and plan
serve a live mount (the daemon runs the plan, adapter/restoring.py) and a mount that is
down (the command runs it itself on the sources and the state, app/history.py).

Restore means "as it was":

* The version put back is the **own** source's (its kept versions under ``.history/``,
  and for a time its head as well), never another source's unless asked for by name
  (``--from SOURCE``, or a version named by its ``.history/`` path), which then lands as
  an own copy. With no time, the one kept last (undo the last change); with ``--at T``,
  the newest no later than T on the clock its name shows (a version named
  ``@20261204T141902Z`` is restored by ``--at 20261204T141902``): when that is the head,
  the file is as it was already.
* It lands as any write of the own source does, atomically, the version it replaces kept
  in turn, with the version's mode and times; a folder removed since is made again.
* An index (§5.3) is the view of every source's, so restoring one restores the view as it
  was: the own index's bytes and the lines hidden then (kept in the store's history,
  disk/store.py): lines hidden since show again, lines shown then stay shown.
* A folder is refused: its files are restored one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfs.disk import index_save
from memfs.rules import history
from memfs.rules.history import HISTORY, in_history
from memfs.view.project import Project, Version
from memfs.view.writes import Plan, Planner

SECOND_NS = 1_000_000_000


class NotRestorable(Exception):
    """Nothing to put back, or a request that cannot be: one line naming cause and fix."""


@dataclass(frozen=True)
class Ask:
    """What a user asked to restore: ``path`` (a file of the project), from a version
    named by its view path, from ``source``'s versions, no later than ``at_ns``."""

    path: str
    version: str | None = None  # `.history/<path>/<name>`
    at_ns: int | None = None
    source: str | None = None


@dataclass(frozen=True)
class Choice:
    """The version that goes back (``nothing``: the file is that version already)."""

    version: Version
    view: str  # where the view shows it
    own: bool  # one of the own source's versions
    stamp_ns: int  # the time its name shows (a head's: its mtime)
    nothing: bool = False


@dataclass(frozen=True)
class _Candidate:
    version: Version
    view: str
    own: bool
    stamp_ns: int
    order: tuple[int, int]  # kept first first: (its number, when kept)


def split(view_path: str) -> Ask:
    """A path in the project, or a version's ``.history/<path>/<name>``, as an Ask."""
    if not in_history(view_path):
        return Ask(view_path)
    folder, _, name = view_path.removeprefix(HISTORY + "/").rpartition("/")
    if not folder or history.parse(name) is None:
        raise NotRestorable(f"{view_path} is no version of a file; name one under .history/<path>/")
    return Ask(folder, version=view_path)


def choose(project: Project, ask: Ask) -> Choice:
    """The version ``ask`` puts back.

    Raises:
        NotRestorable: a folder, or no such version.
    """
    path = ask.path
    if project.tree.is_dir(path):
        raise NotRestorable(
            f"{project.slug}/{path} is a folder; restore its files one by one "
            f"(memfs log {path} lists their changes)"
        )
    found = _candidates(project, path)
    if ask.version is not None:
        named = [c for c in found if c.view == ask.version]
        if not named:
            where = f"{HISTORY}/{path}/"
            raise NotRestorable(f"no version {ask.version}; list {where} for the kept ones")
        return _chosen(path, named[0])
    own = project.config.own
    wanted = ask.source or (own.name if own is not None else "")
    mine = [c for c in found if project.source_name(c.version) == wanted]
    if ask.at_ns is not None:
        mine = [c for c in mine if c.stamp_ns <= last_of_second(ask.at_ns)]
        key = lambda c: (c.stamp_ns, c.order)  # noqa: E731
    else:
        if ask.source is None:
            mine = [c for c in mine if c.view != path]  # undo: the version kept last
        key = lambda c: c.order  # noqa: E731
    if not mine:
        raise NotRestorable(_nothing_message(project, path, ask, found))
    return _chosen(path, max(mine, key=key))


def told(project: Project, ask: Ask, choice: Choice) -> str:
    """What a restore did, one line for its user."""
    where = f"{project.slug}/{ask.path}"
    index = project.is_index(ask.path)
    hidden = "; the lines it hid then are hidden again, and only those" if index else ""
    if choice.nothing:
        return f"{where} is that version already ({choice.view}){hidden}"
    size = choice.version.size
    return f"restored {where} from {choice.view} ({size} bytes){hidden}"


def last_of_second(at_ns: int) -> int:
    """The last nanosecond of the second ``at_ns`` lies in: version names show seconds."""
    return at_ns - at_ns % SECOND_NS + SECOND_NS - 1


def _chosen(path: str, c: _Candidate) -> Choice:
    # The own head itself: the file is that version already.
    return Choice(c.version, c.view, c.own, c.stamp_ns, nothing=c.view == path and c.own)


def _candidates(project: Project, path: str) -> list[_Candidate]:
    """Every version of ``path`` the view shows: the head and the rest at the path, and
    the kept versions under ``.history/<path>/``."""
    own = project.config.own_index
    found = []
    for v in project.versions(path):
        mine = project.origins[v.origin].writable(own)
        view = path if project.head(path) == v else project.history_view(v) or path
        found.append(_Candidate(v, view, mine, v.mtime_ns, (1 << 62, v.mtime_ns)))
    folder = f"{HISTORY}/{path}/"
    for v in project.versions_under(folder.rstrip("/")):
        name = v.path[len(folder) :]
        parsed = history.parse(name)
        if "/" in name or parsed is None:
            continue
        mine = project.origins[v.origin].writable(own)
        kept = project.kept.of(path)
        kept_ns = next((k.kept_ns for k in kept if k.view == v.path), v.mtime_ns)
        found.append(_Candidate(v, v.path, mine, parsed[1] * SECOND_NS, (parsed[2], kept_ns)))
    return found


def _nothing_message(project: Project, path: str, ask: Ask, found: list[_Candidate]) -> str:
    when = f" from before {history.stamp(ask.at_ns)}" if ask.at_ns is not None else ""
    whose = f"{ask.source}'s" if ask.source else "own"
    others = sorted({project.source_name(c.version) for c in found if not c.own})
    hint = f"; other sources have versions: --from {' or --from '.join(others)}" if others else ""
    return (
        f"no kept {whose} version of {project.slug}/{path}{when}{hint}; "
        f"'memfs log {path}' lists its changes"
    )


def plan(planner: Planner, choice: Choice, ask: Ask) -> Plan:
    """Put ``choice`` back at ``ask.path``: the own file gets its bytes, mode and times as
    one atomic replace, the version it replaces kept (§7.2); an index's hidden lines go
    back to what they were then (index_save.RestoreHidden finds them in the store)."""
    project = planner.project
    path = ask.path
    plan = planner.restore(path, choice.version, choice.view, nothing=choice.nothing)
    if project.is_index(path) and (choice.own or ask.version is None):
        at = last_of_second(ask.at_ns) if ask.at_ns is not None else None
        kept = next((k.kept_ns for k in project.kept.of(path) if k.view == choice.view), None)
        step = index_save.RestoreHidden(
            planner.config.state_dir,
            project.slug,
            path,
            at_ns=at,
            under=choice.view if choice.own and at is None and not choice.nothing else "",
            fallback_ns=kept if kept is not None else choice.version.mtime_ns,
            replacing=plan.steps[0] if plan.steps else None,
        )
        plan.steps.append(step)
        plan.index = step
    return plan
