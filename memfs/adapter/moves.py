"""Following moved projects while mounted (issue 38, §4.2).

Layer adapter (trio): the disk work (statx, the store, a `git` run for a new root) runs in a
worker (disk/moves.py), the catalog is changed on the trio thread, and the watcher reads the
folders that changed project. Asked by `here` (here.py) each time it resolves a working
folder afresh (at most every two seconds a folder), and by loading.py when a project no
source holds is asked for by its slug (at most every `ASKED_KEEP_S` a slug); never per
request otherwise. Once per mount, the roots Claude Code's transcripts name are recorded
(`learn`), after the mount is live.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from memfs.adapter import workers
from memfs.disk import moves
from memfs.disk.config import Config
from memfs.view.catalog import Catalog

log = logging.getLogger(__name__)

ASKED_KEEP_S = 10.0  # a slug asked for by name is looked for again after this long
ASKED_AT_MOST = 1024


class Moves:
    def __init__(
        self, catalog: Catalog, state_dir: Path, listed: Callable[[], Awaitable[None]]
    ) -> None:
        self.catalog = catalog
        self.state_dir = state_dir
        self.listed = listed  # the sources' roots listed, off the trio thread (loading.py)
        # Told the slugs whose folders changed (the watcher's `refollow`); None without one
        self.changed: Callable[[list[str]], None] | None = None
        self.followed = 0  # moves followed since the mount started (status)
        self._asked: dict[str, float] = {}  # slug -> until when it needs no look (asked)

    async def load(self) -> None:
        """The moves followed before (the store), taken in before the first request."""
        for move in await workers.run(moves.followed_now, self.state_dir):
            self.catalog.follow(move.old_slug, move.new_slug, move.old_path)

    async def learn(self, config: Config) -> None:
        """Record the roots Claude Code's transcripts name (disk/moves.learn), once, in a
        worker: after the mount is live, so it delays nothing."""
        try:
            learnt = await workers.run(moves.learn, config)
        except Exception:
            log.exception("reading Claude Code's transcripts for project roots failed")
            return
        log.info("project roots recorded from transcripts: %d", learnt)

    async def resolved(self, root: str, slug: str) -> None:
        """`here` resolved a working folder to project root ``root`` (slug ``slug``): follow
        a move into it that is certain, and record the root while it has memory. A failure
        is logged, never the caller's: `here` still answers."""
        try:
            await self.listed()  # whether the project has memory: the root's listing says
            has_memory = self.catalog.has(slug)
            added = await workers.run(moves.look, self.state_dir, root, slug, has_memory)
        except Exception:
            log.exception("looking for a move into %s failed", root)
            return
        self._asked[slug] = time.monotonic() + ASKED_KEEP_S  # `asked` needs no walk now
        self._take(added)

    async def asked(self, slug: str) -> bool:
        """Project ``slug`` was asked for by name and no source holds it: look for a
        certain move into the folder that slug names (disk/moves.look_slug, a bounded walk
        in a worker), at most every `ASKED_KEEP_S` a slug. Returns whether one was
        followed (the slug is listed then)."""
        now = time.monotonic()
        if self._asked.get(slug, 0.0) > now:
            return False
        if len(self._asked) >= ASKED_AT_MOST:
            self._asked.clear()
        self._asked[slug] = now + ASKED_KEEP_S
        try:
            added = await workers.run(moves.look_slug, self.state_dir, slug)
        except Exception:
            log.exception("looking for a move into %s failed", slug)
            return False
        self._take(added)
        return self.catalog.has(slug)

    def _take(self, added: list[moves.Move]) -> None:
        for move in added:
            touched = self.catalog.follow(move.old_slug, move.new_slug, move.old_path)
            self.followed += 1
            if touched and self.changed is not None:
                self.changed(touched)

    def report(self) -> list[dict[str, str]]:
        """The moves followed, for `memfs status`."""
        return [
            {"from": old, "to": new, "old_path": path}
            for old, (new, path) in sorted(self.catalog.moves().items())
        ]
