"""Shared builders for the tier-1 tests: a fake home with agents' memory folders.

Nothing here touches the real home: every path lives under the folder the test passes
in (its ``tmp_path``), and the environment is an explicit dict handed to the config
functions, never ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import trio

from memfs.disk import config as cfg
from memfs.disk import sources
from memfs.rules.slug import canonical_slug, claude_slug
from memfs.view.project import Leaf, Origin, Project

# 2026-01-01T00:00:00Z: a fixed "now" so no test depends on the clock.
T0_NS = 1_767_225_600 * 1_000_000_000
SECOND_NS = 1_000_000_000

# One project seen by every tool: Claude Code and pi spell its slug differently.
PROJECT_PATH = "/home/a/my_proj.v2"
CLAUDE_SLUG = claude_slug(PROJECT_PATH)  # "-home-a-my-proj-v2"
PI_SLUG = "-home-a-my_proj.v2"  # pi keeps every character but '/'

XDG_VARS = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")


def at(seconds: float) -> int:
    """An mtime in nanoseconds, ``seconds`` after T0."""
    return T0_NS + int(seconds * SECOND_NS)


def set_mtime(path: Path, mtime_ns: int) -> None:
    os.utime(path, ns=(mtime_ns, mtime_ns), follow_symlinks=False)


def write(path: Path, body: str | bytes, mtime_ns: int | None = None) -> Path:
    """Create ``path`` (and its folders) holding ``body``, with the given mtime."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = body.encode() if isinstance(body, str) else body
    path.write_bytes(data)
    if mtime_ns is not None:
        set_mtime(path, mtime_ns)
    return path


def make_env(base: Path) -> dict[str, str]:
    """HOME and every XDG folder inside ``base``; the home itself is ``base/home``."""
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home)}
    for var in XDG_VARS:
        folder = base / "xdg" / var.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[var] = str(folder)
    return env


@dataclass
class FakeHome:
    """A home with Claude Code accounts and a pi memory folder, all under a tmp folder."""

    base: Path
    env: dict[str, str]

    @property
    def home(self) -> Path:
        return Path(self.env["HOME"])

    @property
    def pi_root(self) -> Path:
        return self.home / ".pi" / "agent" / "memory"

    def account(self, account: str) -> Path:
        """An account's config dir, e.g. ``account(".claude-work")``."""
        return self.home / account

    def memory(self, account: str, slug: str = CLAUDE_SLUG) -> Path:
        """``~/<account>/projects/<slug>/memory``, created."""
        folder = self.account(account) / "projects" / slug / "memory"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def pi(self, slug: str = PI_SLUG) -> Path:
        """``~/.pi/agent/memory/<slug>``, created."""
        folder = self.pi_root / slug
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def config(self) -> cfg.Config:
        """The discovered configuration: claude (own), work, pi."""
        return cfg.load(self.env)


def fake_home(
    base: Path,
    accounts: Iterable[str] = (".claude", ".claude-work"),
    *,
    pi: bool = True,
) -> FakeHome:
    """Claude Code accounts (each with ``projects/``) and, optionally, pi's memory root."""
    env = make_env(base)
    fh = FakeHome(base, env)
    for account in accounts:
        (fh.account(account) / "projects").mkdir(parents=True, exist_ok=True)
    if pi:
        fh.pi_root.mkdir(parents=True, exist_ok=True)
    return fh


def origins_for(config: cfg.Config, slug: str) -> list[Origin]:
    """Every source folder whose canonical slug is ``slug``, in config order, names sorted."""
    found = []
    for i, source in enumerate(config.sources):
        for name in sorted(sources.list_slug_folders(source.root)):
            if canonical_slug(name) == slug:
                found.append(Origin(i, source.root, (name, *source.tail)))
    return found


def load_project(config: cfg.Config, slug: str = CLAUDE_SLUG) -> Project:
    """A project freshly loaded from disk, checked."""
    project = Project(slug, config, origins_for(config, slug))
    project._check()
    return project


def view(project: Project) -> tuple[list[tuple[str, Leaf]], dict[str, list[str]]]:
    """Everything the merged view shows: sorted leaves and every folder's sorted children."""
    leaves = sorted(project.tree.leaves())
    folders: dict[str, list[str]] = {}
    todo = [""]
    while todo:
        folder = todo.pop()
        children = project.tree.children(folder)
        assert children is not None, folder
        folders[folder] = list(children)
        for name in children:
            child = f"{folder}/{name}" if folder else name
            if project.tree.is_dir(child):
                todo.append(child)
    return leaves, folders


def errno_of(call: Callable[..., object], *args: object, **kwargs: object) -> int | None:
    """The errno of the OSError ``call`` raises; fails the test when it raises none."""
    try:
        call(*args, **kwargs)
    except OSError as exc:
        return exc.errno
    raise AssertionError(f"{getattr(call, '__name__', call)} raised no OSError")


async def eventually(condition: Callable[[], bool], what: str, within: float = 5.0) -> None:
    """Poll ``condition`` until a deadline; other trio tasks run between polls."""
    deadline = trio.current_time() + within
    while trio.current_time() < deadline:
        if condition():
            return
        await trio.sleep(0.002)
    raise AssertionError(f"{what}: not within {within}s")
