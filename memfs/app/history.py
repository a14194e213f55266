"""`memfs restore` and `memfs log`: kept versions back, and who changed what (§7.2).

Layer app. Both take a path in a mount and find the mount it lies in (`locate`): a live
one by its status (the root's ``user.memfs.status`` names its state folder and config, so
a demo's journal is found too); a mount that is down by the record each mount leaves in
the state folder (state.remember_mount), or the default mountpoint.

`restore` chooses and puts back a version as view/restore.py says ("as it was": the own
version, an index's view with the lines hidden then). A live mount does it itself, asked
through its root's xattr (adapter/restoring.py), under its commit lock; with the mount
down this command does it on the sources and the state folder, the same plan, and says
so. `log` reads the journal in the store of the mount's state folder; it needs no mount.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from memfs.adapter import restoring
from memfs.adapter.status import STATUS_XATTR
from memfs.app import offline
from memfs.disk import config, journal, state
from memfs.rules import slug as slugs
from memfs.view import restore
from memfs.view.writes import Planner, Refused

HERE = "here"
GLOBAL = "global"
RESULT_WAIT_S = 60.0  # a restore is one plan: the mount answers at once, or is stuck


class HistoryError(Exception):
    """One line naming the cause and the fix."""


@dataclass(frozen=True)
class Located:
    """Where a path given to `restore` or `log` lies: its mount, project and path there."""

    mountpoint: Path
    live: bool  # a memfs answers there now
    project: str  # the project's slug ('global/<kind>' for user-level memory)
    path: str  # the path in the project ('' for the project folder itself)
    state_dir: Path  # the mount's state folder: its journal and hidden lines
    config: Path | None  # the config file it was mounted with (None: discovery)


def locate(path: Path, env: Mapping[str, str]) -> Located:
    """The mount ``path`` lies in, live or down; the path need not exist (a removed file's
    versions are still kept).

    Raises:
        HistoryError: a path in no memfs mount, or only in a mount's root.
    """
    absolute = Path(os.path.abspath(path))
    for root in [absolute, *absolute.parents]:
        status = _status(root)
        if status is not None:
            where = _parts(absolute, root, live=True)
            state_dir = Path(status.get("state_dir") or config.state_dir(env))
            made = status.get("config")
            return Located(root, True, *where, state_dir, Path(made) if made else None)
    state_dir = config.state_dir(env)
    known = state.mounts(state_dir)
    default = config.home_dir(env) / "memfs"
    for root in [absolute, *absolute.parents]:
        if str(root) in known or root == default:
            where = _parts(absolute, root, live=False)
            made = known.get(str(root))
            return Located(root, False, *where, state_dir, Path(made) if made else None)
    raise HistoryError(
        f"{path} is not a file in a memfs mount; give its path in the mount "
        "(e.g. ~/memfs/here/notes.md)"
    )


def _status(root: Path) -> dict[str, str] | None:
    try:
        found = json.loads(os.getxattr(root, STATUS_XATTR))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _parts(absolute: Path, root: Path, *, live: bool) -> tuple[str, str]:
    """(project, path in it) of ``absolute`` below the mount ``root``."""
    parts = absolute.relative_to(root).parts
    if parts[:1] == (GLOBAL,):  # global/<kind>/...: a project (§4.1)
        parts = (f"{GLOBAL}/{parts[1]}", *parts[2:]) if len(parts) >= 2 else ()
    if not parts:
        raise HistoryError(f"{absolute} is a mount's root; give a file in a project")
    project, rest = parts[0], "/".join(parts[1:])
    if project == HERE:
        # The caller's project, as `here` says: the mount answers it; a mount that is down
        # is asked nothing, and the working folder says it as `memfs slug` does.
        project = os.readlink(root / HERE) if live else slugs.project_slug(os.getcwd())
    return project, rest


def parse_time(text: str) -> int:
    """ISO 8601 (`2026-12-02T17:30`, `2026-12-02 17:30:05Z`, `20261204T141902`, with an
    offset or without: UTC) as ns since the epoch."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise HistoryError(
            f"--at {text!r} is no time; give it as 2026-12-02T17:30 or 20261202T173000 (UTC), "
            "or with an offset"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp()) * restore.SECOND_NS


def restore_file(path: Path, at: str | None, source: str | None, env: Mapping[str, str]) -> str:
    """Put back a version of ``path`` as `restore.choose` picks it; returns what was done,
    one line."""
    where = locate(path, env)
    if not where.path:
        raise HistoryError(f"{path} is a project folder; name a file in it")
    try:
        ask = restore.split(where.path)
    except restore.NotRestorable as exc:
        raise HistoryError(str(exc)) from None
    at_ns = parse_time(at) if at is not None else None
    ask = restore.Ask(ask.path, ask.version, at_ns, source)
    if where.live:
        return _through_the_mount(where, ask)
    return _on_disk(where, ask, env)


def _through_the_mount(where: Located, ask: restore.Ask) -> str:
    """The running mount restores it (adapter/restoring.py), under its commit lock."""
    ident = secrets.token_hex(8)
    request = {
        "id": ident,
        "project": where.project,
        "path": ask.path,
        "version": ask.version,
        "at_ns": ask.at_ns,
        "source": ask.source,
    }
    try:
        os.setxattr(where.mountpoint, restoring.REQUEST, json.dumps(request).encode())
        outcome = json.loads(os.getxattr(where.mountpoint, restoring.RESULT + ident))
    except OSError as exc:
        raise HistoryError(
            f"the memfs at {where.mountpoint} could not restore ({exc.strerror}); "
            "is it an older memfs? remount it"
        ) from None
    if not outcome.get("ok"):
        raise HistoryError(str(outcome.get("error")))
    return str(outcome["line"])


def _on_disk(where: Located, ask: restore.Ask, env: Mapping[str, str]) -> str:
    """The mount is down: the same choice and plan, run here on the sources and the state
    folder (nothing else writes there meanwhile but the tools themselves)."""
    cfg = config.load(env, where.config)
    catalog = offline.listed(cfg)
    project = offline.load(catalog, where.project)
    if project is None:
        raise HistoryError(f"no source holds project {where.project}; see 'memfs sources'")
    try:
        choice = restore.choose(project, ask)
        plan = restore.plan(Planner.of(cfg, catalog, project), choice, ask)
    except restore.NotRestorable as exc:
        raise HistoryError(str(exc)) from None
    except Refused as exc:
        raise HistoryError(
            f"cannot restore {where.project}/{ask.path}: {os.strerror(exc.errno)}"
        ) from None
    applied = plan.application(project, cfg.limits.max_file_bytes)()
    if applied.error is not None:
        raise HistoryError(
            f"cannot restore {where.project}/{ask.path}: {applied.error.strerror}; "
            "check the own source's folder and its permissions"
        )
    done = restore.told(project, ask, choice)
    own = catalog.own_place(project.slug)
    return f"{done} (memfs is not mounted at {where.mountpoint}: written in {own} directly)"


def changes(path: Path | None, env: Mapping[str, str], limit: int = 0) -> list[journal.Change]:
    """The journal, newest first; only the changes of ``path`` (a file or folder in a mount,
    live or down, a project folder included) when given. A path in a mount reads that
    mount's journal (a demo's is in its own state folder)."""
    if path is None:
        return journal.read(config.state_dir(env), limit=limit)
    where = locate(path, env)
    rel = where.path

    def touches(c: journal.Change) -> bool:
        return not rel or any(p == rel or p.startswith(rel + "/") for p in (c.path, c.to) if p)

    found = [c for c in journal.read(where.state_dir, project=where.project) if touches(c)]
    return found[:limit] if limit else found


def render(found: list[journal.Change], *, as_json: bool) -> str:
    if as_json:
        return json.dumps([asdict(c) for c in found], indent=1)
    if not found:
        return "no changes recorded yet"
    return "\n".join(journal.render(c) for c in found)
