"""What memfs asks /proc about the processes that call it, or that hold its mount busy.

Layer disk: imports neither pyfuse3 nor trio. Every answer is best effort: a process may be
gone by the time it is asked about, and then the safe default is returned. Nothing here
reads through the mount (/proc's links are resolved by the kernel, not by memfs), so it
may be called from a handler.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass

# include/linux/sched.h: the task was killed by a signal (set before its files are closed).
PF_SIGNALED = 0x00000400


def _read(path: str) -> bytes:
    """A small /proc file in one read: asked at every open and flush of a writer, where a
    text file object costs more syscalls than the read (an fstat, an ioctl, a seek).

    Raises:
        OSError: the process is gone, or /proc says no.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def tgid(pid: int) -> int:
    """The process (thread group) of a task id: FUSE names the calling thread."""
    try:
        status = _read(f"/proc/{pid}/status")  # Tgid is the fourth line, well inside 4 KiB
        start = status.index(b"\nTgid:") + 6
        return int(status[start : status.index(b"\n", start)])
    except (OSError, ValueError):
        return pid


def killed_by_signal(pid: int) -> bool:
    """True while ``pid`` is dying from a signal (its files are being closed for it)."""
    try:
        text = _read(f"/proc/{pid}/stat").decode("ascii", "replace")
    except OSError:
        return False
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = text.rpartition(")")[2].split()
    try:
        flags = int(fields[6])  # field 9 of proc_pid_stat(5): state is field 3
    except (IndexError, ValueError):
        return False
    return bool(flags & PF_SIGNALED)


def holds(pid: int, path: str) -> bool:
    """Whether process ``pid`` still has a descriptor open on ``path``.

    Unknown (no /proc access) counts as holding: the caller then waits for release.
    """
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return True
    for name in names:
        try:
            if os.readlink(f"{fd_dir}/{name}") == path:
                return True
        except OSError:
            continue
    return False


def cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def shell_folder(pid: int) -> str | None:
    """The ``PWD`` a process was started with: its shell's working folder.

    `mkdir -p` and other tools that walk a path change into each folder on the way, so
    their own working folder may be the mount's root while their user stands elsewhere.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"PWD="):
                    found = os.fsdecode(item[4:])
                    return found if found.startswith("/") else None
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Holder:
    """A process that keeps a folder busy: its command name and pid."""

    pid: int
    name: str


def holders(folder: str, skip: Collection[int] = ()) -> list[Holder]:
    """The processes whose working folder, root folder or an open descriptor lies at or
    below ``folder`` (an absolute path without links), by pid; ``skip`` are left out.

    Only /proc's links are read: the kernel spells out each one's path without asking the
    file system it lies on, whereas a stat would call into it (a busy mount is often a
    slow one). Processes this user may not look into (another user's) are not found, nor
    files only mapped into memory.
    """
    below = folder.rstrip("/") + "/"

    def inside(path: str) -> bool:
        return path == folder or path.startswith(below)

    found = []
    try:
        pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return []
    for pid in pids:
        if pid not in skip and any(inside(path) for path in _places(pid)):
            found.append(Holder(pid, command_name(pid)))
    return found


def _places(pid: int) -> Iterator[str]:
    """Where ``pid`` stands: its working folder, its root, then each open descriptor."""
    base = f"/proc/{pid}"
    for link in (f"{base}/cwd", f"{base}/root"):
        with contextlib.suppress(OSError):
            yield os.readlink(link)
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return
    for fd in fds:
        with contextlib.suppress(OSError):
            yield os.readlink(f"{base}/fd/{fd}")


def command_name(pid: int) -> str:
    """The command name the kernel keeps for ``pid`` (``comm``); '?' once it is gone."""
    try:
        return _read(f"/proc/{pid}/comm").decode("utf-8", "replace").strip() or "?"
    except OSError:
        return "?"
