"""memfs's own state under ``$XDG_STATE_HOME/memfs``: whiteouts and the MEMORY.md lines a
save hid, per project; the log.

Role: the one reader and writer of the state folder (§3), never a source. State files
are written only through staging.replace, so a crash never leaves a half-written one.
The folder is private to its user whatever the umask: folders 0700, files 0600, and so
are the folders memfs makes above it (``~/.local``, ``~/.local/state``), never one that was
there already. It names the user's projects (the log) and the files they deleted
(whiteouts), which no other local user may read; `make_private` narrows what an older memfs
left readable, and refuses a state folder another user owns or could write to
(`StateError`): what lies in it may not be memfs's own.
Layer disk (its package says what it may import). Threading: every call
does disk I/O (a save fsyncs twice), so while serving it runs in a worker thread: saves as
the `SaveWhiteouts` step of a plan (steps.apply), and the hidden lines by the step that
saves MEMORY.md (index_save.SaveIndex); loads with the project's first load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from memfs.disk import staging
from memfs.rules.index import MEMORY, index_key

log = logging.getLogger(__name__)

Whiteout = tuple[str, str, int]  # (path in the project, source name, mtime_ns; -1: a folder)
# What a project keeps here (`load_project`): its whiteouts, and each index's hidden lines
Saved = tuple[set[Whiteout], dict[str, frozenset[str]]]

FOLDER_MODE = 0o700
FILE_MODE = 0o600
WHITEOUTS = "whiteouts"
HIDDEN_LINES = "hidden-lines"  # lines of MEMORY.md a save removed that other sources hold
LOG_NAME = "memfs.log"
NAME_MAX = 255  # bytes of a file name


class StateError(Exception):
    """A state folder memfs must not use: one line naming the cause and the fix."""


def make_private(state_dir: Path) -> None:
    """Create the state folder, or narrow an existing one: every folder of the tree this
    user owns to 0700, every regular file to 0600. Run at mount start, before anything is
    written there.

    The top is narrowed first: from then on no other user can reach, nor swap, what lies
    below while the walk narrows it. Links are never followed below the top, and what
    another user owns is left alone (not ours to change, and chmod would fail anyway).

    Raises:
        StateError: the folder is another user's, or others may write to it
            (`check_usable`); nothing is changed then.
    """
    try:
        check_usable(state_dir)
        private_folder(state_dir)
    except OSError as exc:  # a read-only home, say: the first save will say so again
        log.warning("cannot make the state folder %s: %s", state_dir, exc)
        return
    for top, folders, files in os.walk(state_dir, onerror=_walk_failed):
        for name in folders:
            _narrow(os.path.join(top, name), FOLDER_MODE, stat.S_ISDIR)
        for name in files:
            _narrow(os.path.join(top, name), FILE_MODE, stat.S_ISREG)


def check_usable(state_dir: Path) -> None:
    """Refuse a state folder that is not this user's alone to write: another user's (who
    could read and change memfs's state), or one group or others may write to (anyone
    could have put files in it). Readable by others only, it is narrowed instead
    (`make_private`): nothing in it came from anyone else. A missing one is fine.

    Raises:
        StateError: with the cause and the fix, in one line.
    """
    try:
        st = os.stat(state_dir)  # followed: the state folder may be a link the user made
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(
            f"the state folder {state_dir} is not a folder; move it away, or set "
            "XDG_STATE_HOME to a folder of yours"
        )
    if st.st_uid != os.geteuid():
        raise StateError(
            f"the state folder {state_dir} belongs to another user (uid {st.st_uid}), who "
            "could read and change memfs's state; remove it (as that user or root), or set "
            "XDG_STATE_HOME to a folder of yours"
        )
    mode = stat.S_IMODE(st.st_mode)
    writers = [who for bit, who in _WRITERS if mode & bit]
    if writers:
        raise StateError(
            f"the state folder {state_dir} is writable by {' and '.join(writers)} (mode "
            f"{mode:04o}), so what it holds may not be memfs's; check it, then run "
            f"'chmod 700 {shlex.quote(str(state_dir))}'"
        )


_WRITERS = ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))


def private_folder(state_dir: Path, *names: str) -> Path:
    """``state_dir/names...``, each folder made (or narrowed to) 0700; returns the path.
    The folders above the state folder that it makes are 0700 too (`_make_parents`).

    The state folder itself may be a link the user made (a state home kept elsewhere): it
    is followed; below it, nothing is.
    """
    _make_parents(state_dir.parent)
    _mkdir_private(state_dir, follow=True)
    folder = state_dir
    for name in names:
        folder = folder / name
        _mkdir_private(folder, follow=False)
    return folder


def _make_parents(folder: Path) -> None:
    """Make ``folder`` and the folders above it that are missing, each 0700 whatever the
    umask: ``~/.local`` and ``~/.local/state`` hold other programs' state too, and under
    umask 000 `mkdir -p` would leave them 0777. A folder that exists is left as it is: its
    mode is its owner's choice, not memfs's."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs
        _narrow(str(path), FOLDER_MODE, stat.S_ISDIR)  # the umask may have narrowed it


def _mkdir_private(path: Path, *, follow: bool) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, FOLDER_MODE)  # the umask may narrow it further: chmod'ed below
    _narrow(str(path), FOLDER_MODE, stat.S_ISDIR, follow=follow)


def _narrow(path: str, mode: int, kind_ok: Callable[[int], bool], *, follow: bool = False) -> None:
    """chmod ``path`` to exactly ``mode`` if it is this user's and of the kind expected
    (``kind_ok``: stat.S_ISDIR or stat.S_ISREG); a link is left alone unless ``follow``."""
    try:
        st = os.stat(path, follow_symlinks=follow)
        if not kind_ok(st.st_mode) or st.st_uid != os.geteuid():
            return
        if stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode)  # a link only when followed on purpose (see private_folder)
    except OSError as exc:
        log.warning("cannot make %s private (mode %o): %s", path, mode, exc)


def _walk_failed(exc: OSError) -> None:
    log.warning("cannot make %s private: %s", exc.filename, exc.strerror)


def log_path(state_dir: Path) -> Path:
    return state_dir / LOG_NAME


def open_log(state_dir: Path) -> BinaryIO:
    """The daemon's log, for appending: created 0600, and an older looser one narrowed."""
    path = log_path(private_folder(state_dir))
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab")


def last_log_line(path: Path) -> str:
    """The log's last line (a failed daemon's own one-line error); '' for none."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return lines[-1] if lines else ""


def save_private(folder: Path, name: str, data: bytes) -> None:
    """``folder/name`` replaced atomically by ``data``, mode 0600 (``folder``: one made by
    `private_folder`)."""
    staging.replace(staging.Place(folder, ()), name, data, mode=FILE_MODE)


def _name(slug: str) -> str:
    # Slugs are single path components already (only [A-Za-z0-9-]); the suffix keeps the
    # folder free for other state kinds. global/claude (§4.1) is `global.claude.json`: a
    # slug begins with '-', so it never collides.
    return f"{slug.replace('/', '.')}.json"


def load_whiteouts(state_dir: Path, slug: str) -> set[Whiteout]:
    path = state_dir / WHITEOUTS / _name(slug)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return set()
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable whiteouts %s: %s", path, exc)
        return set()
    found: set[Whiteout] = set()
    for item in raw if isinstance(raw, list) else []:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and isinstance(item[2], int)
        ):
            found.add((item[0], item[1], item[2]))
    return found


def save_whiteouts(state_dir: Path, slug: str, records: Iterable[Whiteout]) -> None:
    folder = private_folder(state_dir, WHITEOUTS)
    data = json.dumps(sorted([list(r) for r in records]), indent=0).encode()
    save_private(folder, _name(slug), data)


def load_project(state_dir: Path, slug: str) -> Saved:
    """Everything the state folder keeps of project ``slug``: its whiteouts (§7.3) and the
    lines a save hid of each of its indexes (§5.3): its MEMORY.md's, and in global/claude
    (§4.1) each subagent's, found by name (`_hidden_name`)."""
    hidden = {MEMORY: load_hidden_lines(state_dir, slug)}
    if "/" in slug:  # global/<kind>: its indexes below the top too
        prefix = _name(slug).removesuffix(".json") + "."
        with contextlib.suppress(OSError):
            for entry in os.scandir(state_dir / HIDDEN_LINES):
                if entry.name.startswith(prefix):
                    found = _read_hidden(Path(entry.path))
                    if found is not None and found[0] != MEMORY:
                        hidden[found[0]] = found[1]
    return load_whiteouts(state_dir, slug), {p: ls for p, ls in hidden.items() if ls}


def _hidden_name(slug: str, path: str) -> str:
    """The file of index ``path``'s hidden lines: the slug's name for the top MEMORY.md,
    else the slug's and the index's folder (`index.index_key`:
    ``global.claude.agent-memory.<agent>.json``), a hash of the path when that name would
    pass 255 bytes. The file names its index inside (`save_hidden_lines`)."""
    name = _name(index_key(slug, path))
    if len(name.encode("utf-8", "surrogateescape")) <= NAME_MAX:
        return name
    digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"{_name(slug).removesuffix('.json')}.{digest}.json"


def load_hidden_lines(state_dir: Path, slug: str, path: str = MEMORY) -> frozenset[str]:
    """The lines of index ``path`` (the top MEMORY.md unless given) of ``slug`` hidden from
    the union (§5.3), by their text."""
    found = _read_hidden(state_dir / HIDDEN_LINES / _hidden_name(slug, path))
    return found[1] if found is not None and found[0] == path else frozenset()


def _read_hidden(file: Path) -> tuple[str, frozenset[str]] | None:
    """(the index path, its hidden lines) of one record: a list for a top MEMORY.md, an
    object naming its index for any other."""
    try:
        raw = json.loads(file.read_text(encoding="utf-8", errors="surrogateescape"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable hidden lines %s: %s", file, exc)
        return None
    path = MEMORY
    if isinstance(raw, dict) and isinstance(raw.get("index"), str):
        path, raw = raw["index"], raw.get("lines")
    if not isinstance(raw, list):
        return None
    return path, frozenset(line for line in raw if isinstance(line, str))


def save_hidden_lines(state_dir: Path, slug: str, lines: Iterable[str], path: str = MEMORY) -> None:
    """Replace the hidden lines of ``slug``'s index ``path`` (none: the record goes)."""
    folder = private_folder(state_dir, HIDDEN_LINES)
    name = _hidden_name(slug, path)
    found = sorted(lines)
    if not found:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / name)
        return
    # Lines are the user's text: surrogateescape keeps bytes that are not UTF-8 as they were.
    record: object = found if path == MEMORY else {"index": path, "lines": found}
    data = json.dumps(record, indent=0, ensure_ascii=True).encode("ascii")
    save_private(folder, name, data)


@dataclass
class SaveWhiteouts:
    """A plan's step (steps.Step): the project's whole whiteout set, saved atomically."""

    state_dir: Path
    slug: str
    records: set[Whiteout]

    def run(self) -> list[str]:
        save_whiteouts(self.state_dir, self.slug, self.records)
        return []


MOUNTS = "mounts.json"  # mountpoint -> the config it was mounted with (None: discovery)


def remember_mount(state_dir: Path, mountpoint: Path, config: Path | None) -> None:
    """Record that memfs mounts ``mountpoint`` with ``config``: `memfs restore` and
    `memfs log` find a mount that is down by it (app/history.py)."""
    known = mounts(state_dir)
    wanted = str(config) if config is not None else None
    if known.get(str(mountpoint), "") == wanted:
        return
    known[str(mountpoint)] = wanted
    data = json.dumps(known, indent=0, sort_keys=True).encode()
    save_private(private_folder(state_dir), MOUNTS, data)


def mounts(state_dir: Path) -> dict[str, str | None]:
    """Every mountpoint recorded by `remember_mount`, with its config."""
    try:
        raw = json.loads((state_dir / MOUNTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str | None)}
