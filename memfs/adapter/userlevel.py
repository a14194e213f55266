"""The `global/` folder itself (§4.1): its listing and its PREAMBLE.md.

Layer adapter (trio thread). global/claude, global/codex and global/gemini are projects
(view/userlevel.py) and served as any; this folder only lists them and renders
global/PREAMBLE.md and PREAMBLE-<N>.md from their own renderings (rules/userpreamble.py).
That rendering has no inode of its own per version, as a project's has (renderings.py):
it is computed at each lookup and open, never cached by the kernel (timeouts 0, direct
I/O), since nothing would tell the kernel when one of three projects changed it.
"""

from __future__ import annotations

import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pyfuse3

from memfs.adapter.attrs import Shown
from memfs.adapter.inodes import GLOBAL, Key
from memfs.disk.config import Config
from memfs.rules import userpreamble
from memfs.rules.preamble import sized_budget
from memfs.view import userlevel
from memfs.view.catalog import Catalog
from memfs.view.project import PREAMBLE, Project


def budget_of(key: Key, config: Config) -> int | None:
    """The budget of global/PREAMBLE.md or PREAMBLE-<N>.md at ``key``; None for any other."""
    slug, path = key
    if slug or not path.startswith(GLOBAL + "/"):
        return None
    name = path[len(GLOBAL) + 1 :]
    return config.preamble.budget if name == PREAMBLE else sized_budget(name)


class GlobalFolder:
    def __init__(
        self,
        config: Config,
        catalog: Catalog,
        shown: Shown,
        project: Callable[[str], Awaitable[Project]],
        mountpoint: Path,
    ) -> None:
        self.config = config
        self.catalog = catalog
        self.shown = shown
        self._project = project  # a slug's project, loaded off the trio thread if need be
        self.files_at = f"{mountpoint}/{GLOBAL}"

    async def render(self, budget: int) -> tuple[bytes, int]:
        """global/PREAMBLE.md under ``budget``, and the newest mtime it draws on."""
        kinds = self.catalog.global_kinds()
        projects = [await self._project(userlevel.slug_of(k)) for k in kinds]
        head = userpreamble.frame(self.files_at, kinds)
        at = [f"{self.files_at}/{k}" for k in kinds]
        full = [
            p.preamble(f, budget=max(0, budget - len(head)))
            for p, f in zip(projects, at, strict=True)
        ]
        shares = userpreamble.shares(len(head), [len(b) for b in full], budget)
        parts = [
            body if len(body) <= share else p.preamble(f, budget=share)
            for p, f, body, share in zip(projects, at, full, shares, strict=True)
        ]
        mtime = self.shown.started_ns
        for p in projects:
            leaf = p.tree.leaf(PREAMBLE)
            if leaf is not None:
                mtime = max(mtime, p.mtime_ns(leaf))
        return userpreamble.render(head, parts, budget), mtime

    async def attrs(self, ino: int, budget: int) -> pyfuse3.EntryAttributes:
        data, mtime = await self.render(budget)
        return self.shown.entry(ino, stat.S_IFREG | 0o444, len(data), mtime, timeout=0.0)
