"""The `global/` folder itself (§4.1): its listing and its PREAMBLE.md.

Layer adapter (trio thread). global/claude, global/codex and global/gemini are projects
(view/userlevel.py) and served as any; this folder only lists them and renders
global/PREAMBLE.md and PREAMBLE-<N>.md from their own renderings (rules/userpreamble.py).
That rendering has no inode of its own per version, as a project's has (renderings.py):
it is looked up again at each lookup and open, never cached by the kernel (timeouts 0,
direct I/O), since nothing would tell the kernel when one of three projects changed it.

It is prepared as a project's PREAMBLE.md is (§7a): the bodies it draws on are read in a
worker thread (`Documents.bodies_wanted`, `sources.read_bodies`, as the watcher reads ahead), and
the trio thread then renders it from those cached inputs only, once per budget and state
of the three projects (their generations): a lookup, a stat and an open in a row cost one
rendering, and any change to a kind's view makes a new one, so none is served stale.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pyfuse3

from memfs.adapter import workers
from memfs.adapter.attrs import Shown
from memfs.adapter.inodes import GLOBAL, Key
from memfs.disk import sources
from memfs.disk.config import Config
from memfs.rules import userpreamble
from memfs.rules.preamble import sized_budget
from memfs.view import userlevel
from memfs.view.catalog import Catalog
from memfs.view.project import PREAMBLE, Project

RENDERINGS_KEPT = 8  # budgets whose rendering is kept (PREAMBLE.md and a few PREAMBLE-<N>.md)


# The kinds, their projects and those projects' generations a rendering was made from.
_State = tuple[tuple[str, ...], tuple[Project, ...], tuple[int, ...]]


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
        # budget -> (the kinds and projects it was rendered from, the bytes, their mtime)
        self._kept: dict[int, tuple[_State, bytes, int]] = {}

    async def render(self, budget: int) -> tuple[bytes, int]:
        """global/PREAMBLE.md under ``budget``, and the newest mtime it draws on."""
        kinds, projects = await self._projects()
        kept = self._kept.get(budget)
        if kept is not None and self._current(kept[0], kinds, projects):
            return kept[1], kept[2]
        # What the renderings read, read in a worker; the projects may change meanwhile,
        # so the rendering below is of what they show after it (reading nothing itself
        # unless a change came in between).
        wanted = [(p, p.bodies_wanted()) for p in projects]
        wanted = [(p, reads) for p, reads in wanted if reads]
        if wanted:
            found = await workers.run(lambda: [sources.read_bodies(reads) for _, reads in wanted])
            for (p, _), bodies in zip(wanted, found, strict=True):
                p.keep_bodies(bodies)
            kinds, projects = await self._projects()
        data, mtime = self._render(kinds, projects, budget)
        if mtime <= time.time_ns():  # a file dated later would come due by itself
            if len(self._kept) >= RENDERINGS_KEPT:
                self._kept.clear()
            state = (tuple(kinds), tuple(projects), tuple(p.generation for p in projects))
            self._kept[budget] = (state, data, mtime)
        return data, mtime

    async def _projects(self) -> tuple[list[str], list[Project]]:
        kinds = self.catalog.global_kinds()
        return kinds, [await self._project(userlevel.slug_of(k)) for k in kinds]

    @staticmethod
    def _current(state: _State, kinds: Sequence[str], projects: Sequence[Project]) -> bool:
        """Whether a rendering made at ``state`` is of the projects as they are now."""
        held_kinds, held, generations = state
        return (
            held_kinds == tuple(kinds)
            and len(held) == len(projects)
            and all(a is b for a, b in zip(held, projects, strict=True))
            and generations == tuple(p.generation for p in projects)
        )

    def _render(
        self, kinds: Sequence[str], projects: Sequence[Project], budget: int
    ) -> tuple[bytes, int]:
        """Memory only, from the bodies kept: the frame, then each kind's PREAMBLE.md under
        its share. A kind with no memory yet (a tool not installed, discovery names it all
        the same) takes no bytes."""
        held = [(k, p) for k, p in zip(kinds, projects, strict=True) if p.heads]
        kinds, projects = [k for k, _ in held], [p for _, p in held]
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
        # As a project's (§4): the newest its kinds' PREAMBLE.md draw on; the mount's start
        # when no kind has memory yet.
        leaves = [(p, p.tree.leaf(PREAMBLE)) for p in projects]
        mtime = max(
            (p.mtime_ns(leaf) for p, leaf in leaves if leaf is not None),
            default=self.shown.started_ns,
        )
        return userpreamble.render(head, parts, budget), mtime

    async def attrs(self, ino: int, budget: int) -> pyfuse3.EntryAttributes:
        data, mtime = await self.render(budget)
        return self.shown.entry(ino, stat.S_IFREG | 0o444, len(data), mtime, timeout=0.0)
