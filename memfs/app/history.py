"""`memfs restore` and `memfs log`: kept versions back, and who changed what (§7.2).

Layer app. `restore` works through a live mount: it reads a version under the project's
``.history/`` and writes it to the file's path in the mount, as any writer would, so the
version it replaces is kept in turn and the journal records it. `log` reads the journal in
the state folder (disk/journal.py); it needs no mount. Given a path in a live mount, it
reads that mount's journal, wherever its state folder is (a demo's is in its own folder).
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
from dataclasses import asdict
from pathlib import Path

from memfs.adapter.status import STATUS_XATTR
from memfs.disk import journal
from memfs.disk.config import Config
from memfs.rules.history import HISTORY

HERE = "here"
GLOBAL = "global"


class HistoryError(Exception):
    """One line naming the cause and the fix."""


def locate(path: Path) -> tuple[Path, str, str]:
    """(mount root, project slug, path in the project) of ``path`` in a memfs mount; the
    path need not exist (a removed file's versions are still kept). A project folder
    itself gives the path ''."""
    absolute = Path(os.path.abspath(path))
    for root in [absolute, *absolute.parents]:
        try:
            os.getxattr(root, STATUS_XATTR)
        except OSError:
            continue
        parts = absolute.relative_to(root).parts
        if parts[:1] == (GLOBAL,):  # global/<kind>/...: a project (§4.1)
            parts = (f"{GLOBAL}/{parts[1]}", *parts[2:]) if len(parts) >= 2 else ()
        if not parts:
            break
        project, rest = parts[0], "/".join(parts[1:])
        if project == HERE:
            project = os.readlink(root / HERE)  # the caller's project, as `here` says
        return root, project, rest
    raise HistoryError(
        f"{path} is not a file in a memfs mount; give its path in the mount "
        "(e.g. ~/memfs/here/notes.md)"
    )


def parse_time(text: str) -> int:
    """ISO 8601 (`2026-12-02T17:30`, `2026-12-02 17:30:05Z`, with an offset or without: UTC)
    as ns since the epoch."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise HistoryError(
            f"--at {text!r} is no time; give it as 2026-12-02T17:30 (UTC) or with an offset"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1e9)


def versions(root: Path, project: str, path: str) -> list[tuple[int, str]]:
    """(mtime_ns, name) of every version of ``path`` under the project's .history/,
    oldest first."""
    folder = root / project / HISTORY / path
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        st = os.stat(folder / name)
        found.append((st.st_mtime_ns, name))
    return sorted(found)


def restore(path: Path, at: str | None) -> str:
    """Put back the newest kept version of ``path`` (no later than ``at``) through its
    mount; returns what was done, one line."""
    root, project, rel = locate(path)
    if not rel:
        raise HistoryError(f"{path} is a project folder; name a file in it")
    if rel == HISTORY or rel.startswith(HISTORY + "/"):
        # A version named directly: `.history/<path>/<name>` goes back to <path>.
        folder, _, name = rel.removeprefix(HISTORY + "/").rpartition("/")
        chosen, rel = name, folder
        if not folder:
            raise HistoryError(f"{path} is no version of a file; name one under .history/<path>/")
    else:
        limit = parse_time(at) if at is not None else None
        kept = [v for v in versions(root, project, rel) if limit is None or v[0] <= limit]
        if not kept:
            when = f" from before {at}" if at is not None else ""
            raise HistoryError(
                f"no kept version of {project}/{rel}{when}; see 'memfs log' for its changes"
            )
        chosen = kept[-1][1]
    source = root / project / HISTORY / rel / chosen
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        raise HistoryError(f"no version {source}; list {source.parent} for the kept ones") from None
    target = root / project / rel
    try:
        # A write through the mount: the version it replaces is kept too.
        with open(target, "wb") as f:
            f.write(data)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EROFS):
            raise HistoryError(
                f"cannot write {target}: {exc.strerror}; is the mount writable?"
            ) from None
        raise
    return f"restored {project}/{rel} from {HISTORY}/{rel}/{chosen} ({len(data)} bytes)"


def changes(config: Config, path: Path | None) -> list[journal.Change]:
    """The journal, newest first; only the changes of ``path`` (a file or folder in a mount,
    a project folder included, or a path within projects) when given. A path in a live
    mount reads the journal of that mount's state folder (`mount_state_dir`), else the
    configuration's."""
    if path is None:
        return journal.read(config.state_dir)
    try:
        root, project, rel = locate(path)
    except HistoryError:
        state_dir, project, rel = config.state_dir, "", str(path).strip("/")
    else:
        state_dir = mount_state_dir(root) or config.state_dir

    def touches(c: journal.Change) -> bool:
        if project and c.project != project:
            return False
        return not rel or any(p == rel or p.startswith(rel + "/") for p in (c.path, c.to) if p)

    return [c for c in journal.read(state_dir) if touches(c)]


def mount_state_dir(root: Path) -> Path | None:
    """The state folder of the memfs serving ``root``, as its status says; None when it
    does not say (an older memfs)."""
    try:
        found = json.loads(os.getxattr(root, STATUS_XATTR)).get("state_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(found) if isinstance(found, str) and found else None


def render(found: list[journal.Change], *, as_json: bool, limit: int) -> str:
    shown = found[:limit] if limit else found
    if as_json:
        return json.dumps([asdict(c) for c in shown], indent=1)
    if not shown:
        return "no changes through the mount recorded yet"
    return "\n".join(journal.render(c) for c in shown)
