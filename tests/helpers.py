"""Shared builders for the tier-1 and tier-2 tests: a fake home with agents' memory folders,
and the sample home the adapter tests share.

Nothing here touches the real home: every path lives under the folder the test passes
in (its ``tmp_path``), and the environment is an explicit dict handed to the config
functions, never ``os.environ``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyfuse3
import pytest
import trio
from fakes import FakeContext, FakeToken

from memfs.adapter.fs import ROOT_INODE, MemFS
from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import sources
from memfs.disk.sources import STAGE_PREFIX
from memfs.rules.slug import canonical_slug, claude_slug
from memfs.view.project import Leaf, Origin, Project, history_stamp

# 2026-01-01T00:00:00Z: a fixed "now" so no test depends on the clock.
T0_NS = 1_767_225_600 * 1_000_000_000
SECOND_NS = 1_000_000_000

# One project seen by every tool: Claude Code and pi spell its slug differently.
PROJECT_PATH = "/home/a/my_proj.v2"
CLAUDE_SLUG = claude_slug(PROJECT_PATH)  # "-home-a-my-proj-v2"
PI_SLUG = "-home-a-my_proj.v2"  # pi keeps every character but '/'

XDG_VARS = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")

# The sources a fake home's config discovers, in their order: the own Claude Code account,
# the other account, pi, then each tool memfs knows by its folder.
DISCOVERED = ("claude", "work", "pi", "gemini", "codex", "kilo", "goose")


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


def project_of(
    slug: str,
    config: cfg.Config,
    origins: Iterable[Origin],
    whiteouts: Iterable[tuple[str, str, int]] = (),
) -> Project:
    """A project of ``origins``, each read from disk now, with ``whiteouts``."""
    project = Project(slug, config, whiteouts, read_body=sources.read_file)
    for origin in origins:
        offline.add_origin(project, origin)
    return project


def load_project(config: cfg.Config, slug: str = CLAUDE_SLUG) -> Project:
    """A project freshly loaded from disk, checked."""
    project = project_of(slug, config, origins_for(config, slug))
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


# --- tier 2: the sample home the adapter tests share ---------------------------------

CTX = FakeContext()

OWN_MEMORY = "- [A](a.md)\n"
WORK_MEMORY = "- [A](a.md)\n- [B](b.md)\n"
UNION = "- [A](a.md)\n- [B](b.md)\n"
OWN_A = "own a\n"
WORK_A = "work a, newer than the own one\n"
B_BODY = "---\ndescription: bee\n---\nb body\n"
C_BODY = "c\n"
D_BODY = "d from pi\n"
# A project only pi has: pi keeps '.' in its folder name, the mount shows the canonical slug.
PI_ONLY_FOLDER = "-home-a-pi.only"
PI_ONLY_SLUG = canonical_slug(PI_ONLY_FOLDER)
PROJECT_LISTING = [".history", "MEMORY.md", "PREAMBLE.md", "a.md", "b.md", "d.md", "sub"]
WORK_A_HISTORY = f".history/a.md/work@{history_stamp(at(30))}.md"


@dataclass
class Sample:
    home: FakeHome
    own: Path  # ~/.claude/projects/<slug>/memory
    work: Path  # ~/.claude-work/projects/<slug>/memory
    pi: Path  # ~/.pi/agent/memory/<pi's spelling of the slug>
    mnt: Path
    ops: MemFS


def build(home: FakeHome, mnt: Path, config: cfg.Config | None = None) -> MemFS:
    return MemFS(config or home.config(), mountpoint=mnt)


def make_sample(base: Path) -> Sample:
    """The sample home of the tier-2 tests (the ``sample`` fixture in conftest.py): own
    source ``claude``, read-only ``work`` and ``pi``, and a project only pi has."""
    home = fake_home(base)
    own, work, pi = home.memory(".claude"), home.memory(".claude-work"), home.pi()
    write(own / "MEMORY.md", OWN_MEMORY, at(10))
    write(own / "a.md", OWN_A, at(5))
    write(work / "MEMORY.md", WORK_MEMORY, at(20))
    write(work / "a.md", WORK_A, at(30))
    write(work / "b.md", B_BODY, at(15))
    write(work / "sub" / "c.md", C_BODY, at(12))
    write(pi / "d.md", D_BODY, at(40))
    write(home.pi(PI_ONLY_FOLDER) / "p.md", "p\n", at(1))
    mnt = base / "mnt"
    config = home.config()
    assert [s.name for s in config.sources] == list(DISCOVERED)
    assert config.own is not None
    assert config.own.name == "claude"
    return Sample(home, own, work, pi, mnt, build(home, mnt, config))


# --- handler helpers ---------------------------------------------------------------------------


async def fuse_errno(call: Awaitable[object]) -> int:
    """The errno of the FUSEError a handler raises; fails the test when it raises none."""
    with pytest.raises(pyfuse3.FUSEError) as info:
        await call
    return info.value.errno


async def walk(ops: MemFS, path: str) -> pyfuse3.EntryAttributes:
    """Look up each '/'-separated component from the root, as the kernel's path walk does."""
    attrs = await ops.getattr(ROOT_INODE, CTX)
    for name in path.split("/"):
        attrs = await ops.lookup(attrs.st_ino, os.fsencode(name), CTX)
    return attrs


async def read_all(ops: MemFS, fh: int, chunk: int = 7) -> bytes:
    """Every byte of an open handle, read in small pieces at increasing offsets."""
    out = b""
    while True:
        piece = await ops.read(fh, len(out), chunk)
        out += piece
        if len(piece) < chunk:
            return out


async def cat(ops: MemFS, ino: int) -> bytes:
    info = await ops.open(ino, os.O_RDONLY, CTX)
    try:
        return await read_all(ops, info.fh)
    finally:
        await ops.release(info.fh)


async def write_through(ops: MemFS, ino: int, data: bytes, flags: int) -> None:
    """open for writing, write, flush (what close() waits for), release."""
    info = await ops.open(ino, flags, CTX)
    try:
        assert await ops.write(info.fh, 0, data) == len(data)
        await ops.flush(info.fh)
    finally:
        await ops.release(info.fh)


async def listing(ops: MemFS, ino: int, room: int | None = None) -> list[str]:
    """A whole listing through one handle, ``room`` entries per readdir call."""
    fh = await ops.opendir(ino, CTX)
    names: list[str] = []
    start = 0
    try:
        while True:
            token = FakeToken(room)
            await ops.readdir(fh, start, token)
            names += token.names
            if not token.refused:
                return names
            assert token.accepted, "a refused first entry would loop forever"
            start = token.next_id
    finally:
        await ops.releasedir(fh)


def drain(ops: MemFS) -> set[tuple[str, int, bytes]]:
    """Every kernel invalidation the adapter queued since the last drain."""
    return ops.kernel.drain()


def rescan(ops: MemFS, slug: str = CLAUDE_SLUG) -> Project:
    """What the watcher does after inotify reports a change in a loaded project's folders."""
    project = ops.catalog.loaded()[slug]
    for i in range(len(project.origins)):
        offline.rescan(project, i)
    project._check()
    return project


def digest(folder: Path) -> dict[str, tuple[int, str, int]]:
    """Every entry below ``folder``: mode, sha256 of a file's bytes, mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            body = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            rel = str(path.relative_to(folder))
            out[rel] = (st.st_mode, hashlib.sha256(body).hexdigest(), st.st_mtime_ns)
    return out


def read_only_trees(sample: Sample) -> dict[str, dict[str, tuple[int, str, int]]]:
    home = sample.home.home
    return {"work": digest(home / ".claude-work"), "pi": digest(home / ".pi")}


def stage_leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(STAGE_PREFIX)]
