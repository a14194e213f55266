"""The bare mountpoint folder, while memfs is not mounted on it (§9).

An agent configured to write into the mount (``autoMemoryDirectory``, an orchestrator) must
never write onto the bare disk while memfs is not running: the next mount would hide what it
wrote. So the folder is *sealed* (no write permission for anyone) whenever memfs is not
mounted on it, *unsealed* (owner write back) only for the moment of mounting, because
fusermount3 refuses a normal user a mountpoint it cannot write; and a mount onto a folder
that is not empty is refused with one line naming what is there and how to move it into
the own source.

Root ignores permission bits, so sealing protects normal users only; that is who runs memfs.

Plain synchronous module: imports neither pyfuse3 nor trio, so that ``memfs service
install`` (service.py) and the mount code (mount.py) share it. Every function is called from
one thread at a time, before a mount starts or after it ended.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import stat
from pathlib import Path

from memfs.disk.config import Config

log = logging.getLogger(__name__)

WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
# At most this many entries are named in the one-line refusal; the next attempt names more.
NAMED = 3
HERE = "here"  # the mount's per-caller symlink: a real folder by that name was written bare


class NotEmptyError(Exception):
    """The mountpoint holds something a mount would hide: one line with the fix."""


def fuse_connection(mountpoint: Path) -> int | None:
    """The FUSE connection mounted at ``mountpoint``, read from mountinfo without touching
    the mount (a hung one would hang whoever stats it)."""
    target = os.path.abspath(mountpoint)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.readlines()
    except OSError:
        return None
    found = None
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or "-" not in fields:
            continue
        where = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        fstype = fields[fields.index("-") + 1]
        if where == target and fstype.startswith("fuse"):
            found = int(fields[2].split(":")[1])  # the last mount there wins
    return found


def seal(target: Path | int) -> bool:
    """Take every write permission away from the folder (a path, or a descriptor of it).

    A descriptor reaches the bare folder even while a mount covers its path. Returns False
    (and logs) when that is not allowed, e.g. a folder another user owns.
    """
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
        if mode & WRITE_BITS:
            os.chmod(target, mode & ~WRITE_BITS)
    except OSError as exc:
        # Not ours (another user's folder): what matters is whether we can write there,
        # and prepare() says so.
        log.debug("cannot take write permission away from mountpoint %s: %s", target, exc)
        return False
    return True


def unseal(target: Path | int) -> None:
    """Give the owner write permission back, which fusermount3 needs to mount there."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
        if not mode & stat.S_IWUSR:
            os.chmod(target, mode | stat.S_IWUSR)
    except OSError as exc:
        # Not ours to change: fusermount3 then says why it refuses, if it does.
        log.info("cannot give write permission to mountpoint %s: %s", target, exc)


def is_sealed(path: Path) -> bool:
    return not stat.S_IMODE(os.stat(path).st_mode) & WRITE_BITS


def entries(target: Path | int) -> list[str]:
    """What the bare folder holds, sorted."""
    return sorted(os.listdir(target))


def refuse_if_not_empty(config: Config, mountpoint: Path, found: list[str] | None = None) -> None:
    """Raise NotEmptyError when the bare folder at ``mountpoint`` holds anything.

    ``found`` is the listing when the caller has it already (read through a descriptor of
    the folder under a fresh mount).
    """
    names = entries(mountpoint) if found is None else sorted(found)
    if names:
        raise NotEmptyError(not_empty_message(config, mountpoint, names))


def not_empty_message(config: Config, mountpoint: Path, names: list[str]) -> str:
    shown = names[:NAMED]
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    listed = ", ".join(_describe(config, mountpoint / name) for name in shown)
    moves = " && ".join(move_command(config, mountpoint, name) for name in shown)
    # The folder is sealed: the user's write permission comes back just for the move.
    q = shlex.quote(str(mountpoint))
    return (
        f"mountpoint {mountpoint} is not empty: it holds {listed}{more}, written while memfs "
        f"was not mounted, which a mount would hide; move it first: chmod u+w {q} && "
        f"{moves} && chmod a-w {q}"
    )


def _describe(config: Config, path: Path) -> str:
    """The entry's name, with what the command does with it when that is not obvious."""
    if not _is_project_folder(config, path):
        where = "no own source to move it to" if config.own is None else "in no project"
        return f"{path.name} ({where}: moved to the home folder)"
    count = sum(len(files) for _, _, files in os.walk(path))
    counted = f"{count} file{'s' if count != 1 else ''}"
    if path.name == HERE:
        return f"{HERE}/ ({counted}, from a project's folder: run the command there)"
    return f"{path.name}/ ({counted})"


def _is_project_folder(config: Config, path: Path) -> bool:
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
    return config.own is not None and is_dir and (path.name.startswith("-") or path.name == HERE)


def move_command(config: Config, mountpoint: Path, name: str) -> str:
    """A shell command that moves ``mountpoint/name`` where it belongs, losing nothing.

    A slug folder goes to the own source's folder of that slug; a ``here`` folder to the
    own source's folder of the project it was written from (``memfs slug`` in that project
    names it); anything else is in no project and is moved out of the way, to the home.
    """
    source = mountpoint / name
    q = shlex.quote
    own = config.own
    if own is None or not _is_project_folder(config, source):
        return f"mv -n {q(str(source))} {q(str(config.home))}/"
    if name == HERE:
        # The slug is the project of whoever wrote there: run in its folder, `memfs slug`
        # names it.
        dest = "/".join([f'{q(str(own.root))}/"$(memfs slug)"', *map(q, own.tail)])
        return (
            f'd={dest} && mkdir -p "$d" && '
            f'cp -a --backup=numbered {q(str(source))}/. "$d"/ && rm -r {q(str(source))}'
        )
    dest_path = own.folder(name)
    if not os.path.lexists(dest_path):
        return f"mkdir -p {q(str(dest_path.parent))} && mv {q(str(source))} {q(str(dest_path))}"
    # The own source has this project already: same names keep the own file as name.~1~.
    return (
        f"cp -a --backup=numbered {q(str(source))}/. {q(str(dest_path))}/ && rm -r {q(str(source))}"
    )
