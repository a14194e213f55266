"""inotify on the source folders -> changes to the loaded projects (SPEC 5.4).

Knows trio (it waits on the inotify descriptor) but not pyfuse3: it changes the catalog and
its projects, then tells the adapter through `Listener` which view paths to invalidate.
Never rescans on a timer; only an inotify queue overflow rescans the loaded projects.

Watched: each source's root (projects appearing or vanishing), every folder of every
loaded project, and for a project folder whose memory folder does not exist yet, the
nearest existing folder on the way to it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import trio

from memfs import sources
from memfs.catalog import Catalog
from memfs.project import Project

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_MASK_ADD = 0x20000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_ENTRY_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
_FOLDER_MASK = (
    _ENTRY_EVENTS
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_ATTRIB
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
_ROOT_MASK = _ENTRY_EVENTS | IN_ONLYDIR | IN_DONT_FOLLOW
_EVENT = struct.Struct("iIII")


class Inotify:
    """A thin inotify(7) binding over libc, read from trio."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd

    def add(self, path: Path, mask: int) -> int:
        wd: int = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")
        return wd

    def remove(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self.fd, wd)

    async def read(self) -> list[tuple[int, int, str]]:
        """The next batch of events as (wd, mask, name)."""
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
                break
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.fd)
        events = []
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            pos += _EVENT.size
            name = os.fsdecode(data[pos : pos + length].rstrip(b"\0"))
            pos += length
            events.append((wd, mask, name))
        return events

    def close(self) -> None:
        os.close(self.fd)


class Listener(Protocol):
    def project_changed(self, project: Project) -> None: ...
    def root_changed(self, slug: str) -> None: ...


@dataclass(frozen=True)
class _Root:
    source: int


@dataclass(frozen=True)
class _Folder:
    slug: str
    origin: int
    path: str  # relative to the origin folder; '' for the folder itself


@dataclass(frozen=True)
class _Pending:
    slug: str
    origin: int


@dataclass(frozen=True)
class _RootPending:
    """Source roots that do not exist yet: the nearest folder on their way is watched."""

    sources: frozenset[int]


_Target = _Root | _Folder | _Pending | _RootPending


class Watcher:
    def __init__(self, catalog: Catalog, listener: Listener) -> None:
        self.catalog = catalog
        self.listener = listener
        self.inotify = Inotify()
        self._targets: dict[int, _Target] = {}  # watch descriptor -> what it watches
        self._watched: dict[str, tuple[int, int]] = {}  # slug -> (id(project), origins watched)
        # (id(project), origin) -> folders watched, relative to the origin ('' for itself)
        self._folders: dict[tuple[int, int], set[str]] = {}
        self.events = 0
        self.overflows = 0
        for i in range(len(catalog.config.sources)):
            self._watch_root(i)

    def _watch_root(self, i: int) -> bool:
        """Watch source ``i``'s root, or the nearest existing folder on its way to it."""
        root = self.catalog.config.sources[i].root
        if self._add(root, _ROOT_MASK, _Root(i)):
            return True
        for folder in root.parents:
            try:
                wd = self.inotify.add(folder, _ROOT_MASK | IN_MASK_ADD)
            except OSError:
                continue
            known = self._targets.get(wd)
            if known is None or isinstance(known, _RootPending):
                # Several missing roots may wait on one folder (the home, often).
                waiting = known.sources if known is not None else frozenset()
                self._targets[wd] = _RootPending(waiting | {i})
            else:
                log.warning("source root %s is missing and its parent is watched already", root)
            break
        return False

    def _pending_roots(self, wd: int, target: _RootPending) -> None:
        """Something changed on the way to missing roots: each waits again where it now
        must (here, or in a deeper folder), or is watched and listed if it exists now."""
        self._targets[wd] = _RootPending(frozenset())
        for i in sorted(target.sources):
            self._root_appeared(i)
        still = self._targets.get(wd)
        if isinstance(still, _RootPending) and not still.sources:
            del self._targets[wd]
            self.inotify.remove(wd)

    def _root_appeared(self, i: int) -> None:
        """A step towards a missing root appeared: watch further, and list it once there."""
        if not self._watch_root(i):
            return
        for name in sources.list_slug_folders(self.catalog.config.sources[i].root):
            slug = self.catalog.folder_added(i, name)
            if slug is not None:
                self.listener.root_changed(slug)

    def _add(self, path: Path, mask: int, target: _Target) -> bool:
        try:
            wd = self.inotify.add(path, mask)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                log.warning("cannot watch %s: %s", path, exc)
            return False
        self._targets[wd] = target
        return True

    def ensure(self, project: Project) -> None:
        """Watch every folder of a loaded project (cheap when nothing is new)."""
        ident, done = self._watched.get(project.slug, (0, 0))
        if ident != id(project):
            done = 0  # a project that vanished and came back is a new object
        if done == len(project.origins):
            return
        self._watched[project.slug] = (id(project), len(project.origins))
        for i in range(done, len(project.origins)):
            self._settle(project, i)

    def _settle(self, project: Project, i: int) -> None:
        """Watch every folder of origin ``i``, then scan it again, until no folder is new.

        A folder is scanned only after it is watched: whatever lands in it before the watch
        is found by the scan, whatever lands after raises an event. Costs one more scan of
        the origin per round, and rounds happen only when folders appear.
        """
        while self._watch_origin(project, i):
            project.rescan(i)

    def _watch_origin(self, project: Project, i: int) -> bool:
        """Add the watches origin ``i`` lacks; True when any was added."""
        origin = project.origins[i]
        watched = self._folders.setdefault((id(project), i), set())
        if "" not in watched:
            if not self._add(origin.folder, _FOLDER_MASK, _Folder(project.slug, i, "")):
                self._watch_pending(project, i)
                return False
            watched.add("")
            added = True
        else:
            added = False
        for path in project.folders():
            if path not in watched and i in project.dir_holders(path):
                target = _Folder(project.slug, i, path)
                if self._add(origin.folder / path, _FOLDER_MASK, target):
                    watched.add(path)
                    added = True
        return added

    def _watch_pending(self, project: Project, i: int) -> None:
        """The memory folder is missing: watch the nearest folder that exists on its way."""
        origin = project.origins[i]
        for depth in range(len(origin.parts) - 1, 0, -1):
            if self._add(
                origin.root.joinpath(*origin.parts[:depth]), _ROOT_MASK, _Pending(project.slug, i)
            ):
                return

    async def run(self) -> None:
        while True:
            batch = await self.inotify.read()
            self.events += len(batch)
            touched: dict[str, Project] = {}
            for wd, mask, name in batch:
                try:
                    self._handle(wd, mask, name, touched)
                except Exception:
                    log.exception("watch event %s %#x %r failed", wd, mask, name)
            for project in touched.values():
                self.ensure(project)
                self.listener.project_changed(project)

    def _handle(self, wd: int, mask: int, name: str, touched: dict[str, Project]) -> None:
        if mask & IN_Q_OVERFLOW:
            self._overflow(touched)
            return
        target = self._targets.get(wd)
        if mask & IN_IGNORED:
            self._forget(wd)
            return
        if target is None or name.startswith(sources.STAGE_PREFIX):
            return
        if isinstance(target, _Root):
            self._root_event(target, mask, name, touched)
            return
        if isinstance(target, _RootPending):
            self._pending_roots(wd, target)
            return
        project = self.catalog.loaded().get(target.slug)
        if project is None or target.origin >= len(project.origins):
            return
        touched[project.slug] = project
        if isinstance(target, _Pending):
            self._rescan(project, target.origin)
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            self._rescan(project, target.origin)
            return
        path = f"{target.path}/{name}" if target.path else name
        if mask & IN_ISDIR:
            # A folder came or went: the origin is rescanned (O(its files)) and watched anew.
            self._rescan(project, target.origin)
            return
        origin = project.origins[target.origin]
        found = sources.stat_file(
            origin.root, origin.parts, path, self.catalog.config.limits.max_file_bytes
        )
        if found is None:
            project.drop_version(target.origin, path)
        else:
            project.set_version(target.origin, found)

    def _rescan(self, project: Project, i: int) -> None:
        project.rescan(i)
        self._settle(project, i)  # new folders get watches, then one more look

    def _forget(self, wd: int) -> None:
        """The kernel dropped a watch (its folder went): a folder made again is watched anew."""
        target = self._targets.pop(wd, None)
        if isinstance(target, _Root):  # the root itself went: wait for it again
            self._watch_root(target.source)
        if isinstance(target, _Folder):
            project = self.catalog.loaded().get(target.slug)
            if project is not None:
                self._folders.get((id(project), target.origin), set()).discard(target.path)
                if target.path == "":  # the memory folder itself went: wait for it again
                    self._watch_pending(project, target.origin)

    def _root_event(self, target: _Root, mask: int, name: str, touched: dict[str, Project]) -> None:
        if not mask & IN_ISDIR and not mask & (IN_DELETE | IN_MOVED_FROM):
            return
        if mask & (IN_CREATE | IN_MOVED_TO):
            slug = self.catalog.folder_added(target.source, name)
        else:
            slug = self.catalog.folder_removed(target.source, name)
        if slug is None:
            return
        self.listener.root_changed(slug)
        project = self.catalog.loaded().get(slug)
        if project is not None:
            touched[slug] = project

    def _overflow(self, touched: dict[str, Project]) -> None:
        self.overflows += 1
        log.warning("inotify queue overflowed; rescanning the loaded projects")
        for project in self.catalog.loaded().values():
            for i in range(len(project.origins)):
                self._rescan(project, i)
            touched[project.slug] = project

    def close(self) -> None:
        self.inotify.close()
