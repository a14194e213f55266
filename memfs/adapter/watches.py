"""Adding inotify watches to source folders, from worker threads (§5.4).

Layer adapter, plain (no trio, no pyfuse3). What each watch descriptor stands for (the
`Target` kinds), and `Watches`, which adds watches and scans an origin until every folder
in it is watched; `watch.Watcher` registers what it added on the trio thread.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from pathlib import Path

from memfs.disk import sources
from memfs.disk.inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_EXCL_UNLINK,
    IN_MASK_ADD,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    Inotify,
)
from memfs.view.project import Origin

log = logging.getLogger(__name__)

ENTRY_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
FOLDER_MASK = (
    ENTRY_EVENTS
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_ATTRIB
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
ROOT_MASK = ENTRY_EVENTS | IN_ONLYDIR | IN_DONT_FOLLOW


@dataclass(frozen=True)
class Root:
    source: int


@dataclass(frozen=True)
class Folder:
    slug: str
    origin: int
    path: str  # relative to the origin folder; '' for the folder itself


@dataclass(frozen=True)
class Pending:
    slug: str
    origin: int


Target = Root | Folder | Pending
Pairs = list[tuple[int, Target]]  # watches a worker added, to register on the trio thread


class Watches:
    """Adds watches (any thread): an origin's folders, or the nearest folder on the way to
    a missing one; counts the folders that could not be watched."""

    def __init__(
        self, inotify: Inotify, max_bytes: int, roots: frozenset[Path] = frozenset()
    ) -> None:
        self.inotify = inotify
        self.max_bytes = max_bytes
        # The roots a Root watch covers (sources holding projects). Any other origin (one
        # of global/'s, §4.1: a Codex folder, Gemini CLI's, an account's config folder) may
        # be missing up to its root and beyond, and waits in the nearest folder that exists.
        self.roots = roots
        self.failures = 0  # folders that could not be watched (other than gone)

    def settle(
        self, slug: str, i: int, origin: Origin, watched: set[str], under: str = ""
    ) -> tuple[sources.Scan, Pairs]:
        """Worker thread: watch origin ``i``'s folders, then scan it, until no folder is new.
        With ``under``, the same for that folder of the origin and what lies below it (a
        folder made, moved in or gone): the rest is neither scanned nor watched again.

        A folder is scanned only after it is watched: whatever lands in it before the watch
        is found by the scan, whatever lands after raises an event. Costs one more scan of
        the origin (or of ``under``) per round, and rounds happen only when folders appear.
        """
        pairs: Pairs = []
        max_bytes = self.max_bytes
        while True:
            added = False
            if not under and "" not in watched:
                wd = self.add(origin.folder, FOLDER_MASK)
                if wd is None:
                    pending = self.pending(slug, i, origin)
                    pairs += [pending] if pending is not None else []
                    # The folder may have come between the two (a sync tool makes it and
                    # its files in one go), and the watch on its way then never reports
                    # it: with that watch in place, look once more.
                    wd = self.add(origin.folder, FOLDER_MASK)
                if wd is None:
                    return sources.scan(origin.root, origin.parts, max_bytes, origin.only), pairs
                pairs.append((wd, Folder(slug, i, "")))
                watched.add("")
            scan = sources.scan(origin.root, origin.parts, max_bytes, origin.only, under)
            for path in [under, *scan.dirs] if under and scan.exists else scan.dirs:
                # Every folder is watched again, not only those not known: a folder renamed
                # keeps its watch (the kernel's is on the inode), which must name its new
                # path now, and a folder made at the old path needs a watch of its own.
                # inotify_add_watch of a folder watched already only returns its number.
                wd = self.add(origin.folder / path, FOLDER_MASK)
                if wd is not None:
                    pairs.append((wd, Folder(slug, i, path)))
                    if path not in watched:
                        watched.add(path)
                        added = True
            if not added:
                return scan, pairs

    def pending(self, slug: str, i: int, origin: Origin) -> tuple[int, Target] | None:
        """The memory folder is missing: watch the nearest folder that exists on its way
        (adding to what else watches it: a Gemini folder's marker, a missing root's wait).
        Not a source's root, which its Root watch covers (`roots`)."""
        on_way = [
            origin.root.joinpath(*origin.parts[:d]) for d in range(len(origin.parts) - 1, 0, -1)
        ]
        if origin.root not in self.roots:
            on_way += [origin.root, *origin.root.parents]
        for path in on_way:
            wd = self.add(path, ROOT_MASK | IN_MASK_ADD)
            if wd is not None:
                return (wd, Pending(slug, i))
        return None

    def add(self, path: Path, mask: int) -> int | None:
        """Watch ``path`` (its watch descriptor); None when it is gone, or cannot be."""
        try:
            return self.inotify.add(path, mask)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                log.warning("cannot watch %s: %s", path, exc)
                self.failures += 1  # counted in status
            return None
