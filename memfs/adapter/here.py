"""`here`: the project of the process that looks (§4).

Layer adapter (trio; pyfuse3 for its errno): the caller's working folder from /proc, up to
its git work tree, a linked worktree mapped to its main checkout (slug.py). The walk up reads
the disk, so it runs in a worker thread; answers are kept two seconds per folder, since a
`git init` or a new worktree changes them. Each fresh answer also asks whether the root
moved here from elsewhere (moves.py, §4.2), so the first look from a moved folder already
shows its memory.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pyfuse3

from memfs.adapter import workers
from memfs.adapter.inodes import GLOBAL, HERE
from memfs.adapter.moves import Moves
from memfs.disk import procs
from memfs.rules import slug as slugs
from memfs.view import userlevel

KEEP_SECONDS = 2.0
KEEP_AT_MOST = 1024


class Here:
    def __init__(self, mountpoint: Path, moves: Moves | None = None) -> None:
        self.mount = str(mountpoint)
        self.moves = moves
        self._cache: dict[str, tuple[float, str]] = {}  # cwd -> (expiry, slug)

    async def link(self, pid: int) -> bytes:
        """What `here` reads as for ``pid``: ENOENT when it has no working folder."""
        found = await self.slug(pid)
        if found is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return os.fsencode(found)

    async def slug(self, pid: int) -> str | None:
        """The slug ``pid``'s `here` names; None when it has no working folder."""
        cwd = procs.cwd(pid)
        if cwd is None:
            return None
        if cwd == self.mount:
            # At the mount's root: a tool walking a path down to `here` (`mkdir -p`) stands
            # there for a moment; its user's folder is the one its shell started it in.
            cwd = procs.shell_folder(pid) or cwd
        if cwd == self.mount or cwd.startswith(self.mount + "/"):
            # Inside the mount itself: walking up for .git would call back into this very
            # process and deadlock; the project is the first component.
            first, *rest = cwd[len(self.mount) + 1 :].split("/", 2)
            if first == GLOBAL:  # global/<kind> is the project there (§4.1), global/ none
                kind = f"{GLOBAL}/{rest[0]}" if rest else ""
                return kind if userlevel.kind_of(kind) else None
            return first if first and first != HERE else None
        now = time.monotonic()
        cached = self._cache.get(cwd)
        if cached is not None and cached[0] > now:
            return cached[1]
        root = str(await workers.run(slugs.project_root, cwd))
        # canonical_slug also folds a folder under `.claude/worktrees/` (slug.project_slug)
        found = slugs.canonical_slug(slugs.claude_slug(root))
        if self.moves is not None:
            await self.moves.resolved(root, found)
        if len(self._cache) >= KEEP_AT_MOST:
            self._cache.clear()
        self._cache[cwd] = (now + KEEP_SECONDS, found)
        return found
