"""Tier 2: a seeded model-based stress test of the adapter against §5 and §7.

Each seed drives thousands of random operations through the handlers of `memfs.adapter.fs.MemFS`
(create, open, write, truncate, read, flush, close, rename, unlink, mkdir, rmdir, setattr,
forget, and now and then a remount), interleaved with changes made directly on disk, in the
own source and in the read-only ones, which reach memfs through the real inotify `Watcher`
beside it, wired as mount.py wires it. Odd seeds run the watcher all along, as a mount does;
even seeds run it only while a change made on disk settles, so that what a handler itself
leaves in the view is checked before any inotify event could mend it.

After every step the view is compared with a small model of what §5 and §7 promise:

- each path reads its head: the own source's version if there is one, else the newest by
  mtime (ties in config order), unless a whiteout hides it; a created file not committed
  yet is empty to everyone but its writer, whose getattr shows its own size;
- every other version is under ``.history/<path>/<source>@<UTC>.md``;
- folders show while they hold something, or while a source holds them unhidden;
- the own source on disk holds exactly the model's files, and the read-only sources are
  byte-identical to their fingerprint (memfs never writes them);
- then ``MemFS._check()``.

The model keeps to what the behaviour contract (docs/BEHAVIOUR.md) states plainly: at most
one writer per path, and a path with a writer is not renamed, unlinked or changed on disk
meanwhile (what a second open sees then, and how an unlinked file behaves, are tested one by
one in test_fs_writes.py).
A change on disk is awaited by polling the view against the model under a deadline.

The versions a change on disk replaced (the keeper, and a plan's catch-up with the disk
before it runs: disk/baselines.py) are left out here (`writes.own_folder` is None): this
model keeps what the view promises; test_baselines_model.py keeps theirs.

Deterministic given the seed: the operations depend only on the seed and the model (and,
where the contract leaves a choice open, on what memfs chose: whether a stage made its folder
yet). Each seed prints itself and its operation count, which the test id carries too;
MEMFS_MODEL_SEEDS (comma-separated) and MEMFS_MODEL_OPS change them.
"""

from __future__ import annotations

import errno
import os
import random
import stat
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pyfuse3
import pytest
import trio
from fakes import FakeContext, FakeToken, SetattrFields, fake_readdir_reply
from helpers import CLAUDE_SLUG, PI_SLUG, FakeHome, at, fake_home

from memfs.adapter import fs
from memfs.adapter.fs import ROOT_INODE, MemFS
from memfs.adapter.watch import Watcher
from memfs.disk import config as cfg
from memfs.disk.sources import STAGE_PREFIX
from memfs.view import writes
from memfs.view.project import history_stamp

T = TypeVar("T")

SEEDS = [int(s) for s in os.environ.get("MEMFS_MODEL_SEEDS", "1,2,3").split(",")]
OPS = int(os.environ.get("MEMFS_MODEL_OPS", "1500"))

OWN = "claude"
READ_ONLY = ("work", "pi")  # config order: ties in mtime go to work
FOLDERS = ("", "sub", "n0")
HANDOFF = "handoff-a_20260101.md"
NAMES = ("f0.md", "f1.md", HANDOFF)
PATHS = tuple(f"{d}/{n}" if d else n for d in FOLDERS for n in NAMES)
DISK_FOLDERS = ("", "sub")  # where agents writing directly on disk put their files
MODES = (0o600, 0o640, 0o644, 0o664)
KEEP_LAST = 3  # [limits] versions: small, so pruning happens
MAX_WRITERS = 4
# The whole view is compared every FULL_EVERY steps (and after each change on disk); in
# between, what the step touched (each full comparison costs ~150 handler calls).
FULL_EVERY = 10
SETTLE_SECONDS = 5.0  # a change on disk shows within one second (§5.4); slack for CI
DIR_WHITEOUT = -1

WRITER = FakeContext()  # the tests' own pid: every writer
OBSERVER = FakeContext(pid=1)  # another process: sees committed files only


def folder_of(path: str) -> str:
    return path.rpartition("/")[0]


def name_of(path: str) -> str:
    return path.rpartition("/")[2]


def kept_order(name: str) -> tuple[str, int]:
    """How kept versions sort: by "<source>@<UTC>", then by the "~N" of one second."""
    base, _, n = name.removesuffix(".md").partition("~")
    return base, int(n) if n.isdigit() else 1


# --- the model -------------------------------------------------------------------------------


@dataclass
class File:
    data: bytes
    mtime_ns: int | None  # None: set by memfs at a commit, so whatever the disk says
    mode: int = 0o644


@dataclass
class Writer:
    """One handle open for writing (O_RDWR), as its writer sees it."""

    path: str
    ino: int
    data: bytes
    mode: int  # what its commit gets
    dirty: bool = False  # written or truncated since its last commit
    unsaved: bool = False  # created or opened with O_TRUNC, never committed
    created: bool = False  # the name exists only through this handle so far
    keeps: bool = True  # a handle keeps at most once: what stood before its first commit


@dataclass
class Model:
    own: dict[str, File] = field(default_factory=dict)
    own_dirs: set[str] = field(default_factory=set)
    # Folders a writer's stage may have made in the own source already: the contract does not
    # say when a stage is made, so the disk decides (see Run.resolve_folders).
    maybe_dirs: set[str] = field(default_factory=set)
    ro: dict[str, dict[str, File]] = field(default_factory=lambda: {s: {} for s in READ_ONLY})
    ro_dirs: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in READ_ONLY})
    whiteouts: set[tuple[str, str, int]] = field(default_factory=set)
    writers: dict[int, Writer] = field(default_factory=dict)  # fh -> writer
    # path -> the versions memfs kept in the own source's .history/<path>/
    kept: dict[str, dict[str, File]] = field(default_factory=dict)

    def head(self, path: str) -> tuple[str, File] | None:
        """§5.2: the own version, else the newest visible one; ties in config order."""
        if path in self.own:
            return OWN, self.own[path]
        visible = [
            (-f.mtime_ns, i, source, f)
            for i, source in enumerate(READ_ONLY)
            if (f := self.ro[source].get(path)) is not None
            and f.mtime_ns is not None
            and (path, source, f.mtime_ns) not in self.whiteouts
        ]
        if not visible:
            return None
        _, _, source, found = min(visible, key=lambda v: (v[0], v[1]))
        return source, found

    def pending(self, path: str) -> Writer | None:
        """The writer of a created file nothing has committed yet."""
        return next((w for w in self.writers.values() if w.path == path and w.created), None)

    def writer_on(self, path: str) -> Writer | None:
        return next((w for w in self.writers.values() if w.path == path), None)

    def shows_file(self, path: str) -> bool:
        return self.head(path) is not None or self.pending(path) is not None

    def history(self, path: str) -> dict[str, bytes]:
        """Every version but the head, by the name memfs gives it under .history/<path>/."""
        head = self.head(path)
        kept = {name: f.data for name, f in self.kept.get(path, {}).items()}
        for source in READ_ONLY:
            f = self.ro[source].get(path)
            if f is not None and (head is None or head[1] is not f):
                assert f.mtime_ns is not None
                kept[f"{source}@{history_stamp(f.mtime_ns)}.md"] = f.data
        return kept

    def shows_folder(self, folder: str) -> bool:
        if not folder:
            return True
        if any(self.shows_file(p) for p in PATHS if folder_of(p) == folder):
            return True
        if folder in self.own_dirs:
            return True
        return any(
            folder in self.ro_dirs[s] and (folder, s, DIR_WHITEOUT) not in self.whiteouts
            for s in READ_ONLY
        )

    def children(self, folder: str) -> list[str]:
        names = {name_of(p) for p in PATHS if folder_of(p) == folder and self.shows_file(p)}
        if not folder:
            names |= {"PREAMBLE.md", *(d for d in FOLDERS if d and self.shows_folder(d))}
            if any(self.history(p) for p in PATHS):
                names.add(".history")
        return sorted(names)

    def hide(self, path: str) -> None:
        """unlink, or the old name of a rename: the read-only versions get whiteouts."""
        self.own.pop(path, None)
        for source in READ_ONLY:
            f = self.ro[source].get(path)
            if f is not None and f.mtime_ns is not None:
                self.whiteouts.add((path, source, f.mtime_ns))

    def keep(self, path: str, mtime_ns: int) -> None:
        """An own version is about to be replaced or removed: memfs keeps it as
        ``.history/<path>/<own>@<UTC of its mtime>~<N>.md`` (N: the order kept, none for
        1), the last KEEP_LAST kept (the project's bytes for history are far from spent);
        a version with bytes kept already adds none."""
        if path not in self.own or not self.own[path].data:
            return  # an empty version holds no memory: none is kept
        kept = self.kept.setdefault(path, {})
        if any(f.data == self.own[path].data for f in kept.values()):
            return  # identical bytes are one version
        base = f"{OWN}@{history_stamp(mtime_ns)}"
        # Numbered in the order kept; pruned in that order, never by mtime (§7.2).
        n = max((kept_order(k)[1] for k in kept), default=0) + 1
        kept[f"{base}.md" if n == 1 else f"{base}~{n}.md"] = self.own[path]
        for old in list(kept)[: max(0, len(kept) - KEEP_LAST)]:
            del kept[old]
        parts = f".history/{path}".split("/")
        self.own_dirs |= {"/".join(parts[: i + 1]) for i in range(len(parts))}

    def own_files(self) -> dict[str, File]:
        """Every file the own source holds: the versions, then the kept versions."""
        files = dict(self.own)
        for path, kept in self.kept.items():
            files |= {f".history/{path}/{name}": f for name, f in kept.items()}
        return files

    def commit(self, writer: Writer) -> None:
        self.own[writer.path] = File(writer.data, None, writer.mode)
        if folder_of(writer.path):
            self.own_dirs.add(folder_of(writer.path))
        writer.dirty = writer.unsaved = writer.created = writer.keeps = False


# --- the kernel's side: lookups counted, handlers awaited, invariants checked -----------------


class Rejected(Exception):
    """A handler refused: which one, and with what."""

    def __init__(self, code: int, handler: str) -> None:
        super().__init__(f"{handler}: {errno.errorcode.get(code, str(code))}")
        self.errno = code


class Kernel:
    """Calls the handlers as the kernel would, and counts the lookups it holds.

    ``MemFS._check()`` runs after each operation and after each comparison (every handler
    call in between would cost a check of the whole project each).
    """

    def __init__(self, ops: MemFS) -> None:
        self.ops = ops
        self.lookups: Counter[int] = Counter()  # inode -> lookups not forgotten yet

    async def call(self, handler: Awaitable[T]) -> T:
        try:
            return await handler
        except pyfuse3.FUSEError as exc:
            raise Rejected(exc.errno, getattr(handler, "__qualname__", "?")) from None

    async def lookup(self, parent: int, name: str, ctx: FakeContext) -> pyfuse3.EntryAttributes:
        attrs = await self.call(self.ops.lookup(parent, os.fsencode(name), ctx))
        self.lookups[attrs.st_ino] += 1
        return attrs

    async def find(self, path: str, ctx: FakeContext = OBSERVER) -> pyfuse3.EntryAttributes:
        attrs = await self.lookup(ROOT_INODE, CLAUDE_SLUG, ctx)
        for name in filter(None, path.split("/")):
            attrs = await self.lookup(attrs.st_ino, name, ctx)
        return attrs

    async def listing(self, ino: int) -> list[str]:
        fh = await self.call(self.ops.opendir(ino, OBSERVER))
        names: list[str] = []
        start = 0
        try:
            while True:
                token = FakeToken(room=3)
                await self.call(self.ops.readdir(fh, start, token))
                for name, attrs, _ in token.accepted:
                    names.append(os.fsdecode(name))
                    self.lookups[attrs.st_ino] += 1  # an accepted entry counts as a lookup
                if not token.refused:
                    return names
                start = token.next_id
        finally:
            await self.call(self.ops.releasedir(fh))

    async def read(self, ino: int) -> bytes:
        info = await self.call(self.ops.open(ino, os.O_RDONLY, OBSERVER))
        try:
            out = b""
            while piece := await self.call(self.ops.read(info.fh, len(out), 64)):
                out += piece
            return out
        finally:
            await self.call(self.ops.release(info.fh))

    async def forget_all(self, keep: set[int]) -> None:
        """What the kernel does under memory pressure: forget every inode not held open."""
        gone = [(ino, n) for ino, n in self.lookups.items() if ino not in keep]
        await self.call(self.ops.forget(gone))
        for ino, _ in gone:
            del self.lookups[ino]


# --- the disk ----------------------------------------------------------------------------------


@dataclass
class Disk:
    home: FakeHome
    scratch: Path  # temp files of the agents writing directly, outside every source

    def __post_init__(self) -> None:
        # path -> ((inode, size, ctime, mtime), bytes) of each file last read
        self._bodies: dict[str, tuple[tuple[int, int, int, int], bytes]] = {}
        self.folders = {
            OWN: self.home.memory(".claude"),
            "work": self.home.memory(".claude-work"),
            "pi": self.home.pi(PI_SLUG),  # pi's spelling: the same canonical slug
        }

    def folder(self, source: str) -> Path:
        return self.folders[source]

    def put(self, source: str, path: str, f: File) -> None:
        """An agent's atomic replace, made directly in a source folder."""
        assert f.mtime_ns is not None
        target = self.folder(source) / path
        target.parent.mkdir(exist_ok=True)
        temp = self.scratch / "incoming.md"
        temp.write_bytes(f.data)
        temp.chmod(f.mode)
        os.utime(temp, ns=(f.mtime_ns, f.mtime_ns))
        os.replace(temp, target)

    def remove(self, source: str, path: str) -> None:
        (self.folder(source) / path).unlink()

    def tree(self, source: str) -> tuple[dict[str, tuple[bytes, int, int]], set[str], int]:
        """Files (bytes, mode, mtime), folders, and memfs's stage files in a source folder.

        A file whose inode, size and ctime are as last time is not read again: any write,
        chmod, utime or replace changes one of them.
        """
        files, dirs, stages = {}, set(), 0
        todo = [("", str(self.folder(source)))]
        while todo:
            prefix, folder = todo.pop()
            with os.scandir(folder) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        dirs.add(prefix + e.name)
                        todo.append((f"{prefix}{e.name}/", e.path))
                    elif e.name.startswith(STAGE_PREFIX):
                        stages += 1
                    else:
                        st = e.stat(follow_symlinks=False)
                        key = (st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns)
                        known = self._bodies.get(e.path)
                        if known is None or known[0] != key:
                            known = (key, Path(e.path).read_bytes())
                            self._bodies[e.path] = known
                        mode = stat.S_IMODE(st.st_mode)
                        files[prefix + e.name] = (known[1], mode, st.st_mtime_ns)
        return files, dirs, stages


# --- one run ------------------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


class Run:
    def __init__(self, seed: int, disk: Disk, config: cfg.Config, mountpoint: Path) -> None:
        self.seed = seed
        self.config = config
        self.mountpoint = mountpoint
        # Odd seeds run the watcher all along, as a mount does, so its events interleave
        # with the handlers' awaits. Even seeds run it only while a change made on disk
        # settles: a handler's own result is then checked before any event could mend it.
        self.all_along = bool(seed % 2)
        self.nursery: trio.Nursery | None = None  # where the watcher runs all along
        self.watching: trio.CancelScope | None = None
        self.rng = random.Random(seed)
        self.disk = disk
        self.model = Model()
        self.log: list[str] = []  # every step so far, for the failure message
        self.touched: set[str] = set()  # paths the last step may have changed
        self.clock = 0  # seconds after T0 for the mtimes agents set

    # --- mounting ----------------------------------------------------------------------------

    async def mount(self) -> None:
        """A fresh MemFS and Watcher, wired as mount.py wires them; the kernel knows nothing."""
        self.ops = MemFS(self.config, mountpoint=self.mountpoint)
        self.ops.kernel.enabled = False  # no kernel to tell
        self.watcher = Watcher(self.ops.catalog, self.ops.publisher)
        self.ops.attach(self.watcher)  # the adapter asks it to watch each loaded project
        self.kernel = Kernel(self.ops)
        if self.all_along:
            assert self.nursery is not None
            self.watching = await self.nursery.start(self._watch)

    async def _watch(self, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        self.stopped = trio.Event()
        try:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await self.watcher.run()
        finally:
            self.stopped.set()

    async def unmount(self) -> None:
        if self.watching is not None:
            self.watching.cancel()
            self.watching = None
            await self.stopped.wait()  # out of its wait on the inotify descriptor
        self.watcher.close()

    # --- setting up -------------------------------------------------------------------------

    def populate(self) -> None:
        """A random start on disk, before the project loads."""
        for source in (OWN, *READ_ONLY):
            for path in PATHS:
                if folder_of(path) in DISK_FOLDERS and self.rng.random() < 0.35:
                    self._disk_write(source, path)

    # --- comparing ----------------------------------------------------------------------------

    async def compare(self, paths: set[str] | None = None) -> None:
        """Everything the model says about the view, the disk and the invariants.

        With ``paths``, the view is compared for those paths and their folders only (the
        disk, the writers and the invariants always whole). Walks as the kernel does with
        its dentries cached: each folder is looked up once, then its children from it.
        """
        self._compare_disk()
        project = await self.kernel.lookup(ROOT_INODE, CLAUDE_SLUG, OBSERVER)
        wanted = set(PATHS) if paths is None else paths
        folders = {folder_of(p) for p in wanted} | {""}
        for folder in FOLDERS:
            if folder in folders:
                ino = await self._compare_folder(project.st_ino, folder)
                for path in sorted(p for p in wanted if folder_of(p) == folder):
                    await self._compare_file(ino, path)
        if paths is None:
            await self._compare_history(project.st_ino)
        else:
            for path in sorted(paths):
                await self._compare_history_of(project.st_ino, path)
        for writer in self.model.writers.values():
            seen = await self.kernel.call(self.ops.getattr(writer.ino, WRITER))
            self.expect(seen.st_size == len(writer.data), f"writer's size of {writer.path}")
        self.ops._check()

    async def child(self, parent: int, name: str) -> pyfuse3.EntryAttributes | None:
        try:
            return await self.kernel.lookup(parent, name, OBSERVER)
        except Rejected as exc:
            if exc.errno != errno.ENOENT:
                raise
            return None

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            raise Mismatch(what)

    def _compare_disk(self) -> None:
        m = self.model
        for source in READ_ONLY:
            files, dirs, stages = self.disk.tree(source)
            want = {p: (f.data, f.mode, f.mtime_ns) for p, f in m.ro[source].items()}
            self.expect(files == want, f"{source} on disk: {files} != {want}")
            self.expect(dirs == m.ro_dirs[source], f"{source} folders: {dirs}")
            self.expect(stages == 0, f"stage files in {source}")
        files, dirs, stages = self.disk.tree(OWN)
        self.resolve_folders(dirs)
        own = m.own_files()
        self.expect(set(files) == set(own), f"own files {sorted(files)} != {sorted(own)}")
        for path, f in own.items():
            data, mode, mtime = files[path]
            self.expect(data == f.data, f"own {path} on disk: {data!r} != {f.data!r}")
            self.expect(mode == f.mode, f"own {path} mode on disk: {mode:o} != {f.mode:o}")
            if f.mtime_ns is not None:
                self.expect(mtime == f.mtime_ns, f"own {path} mtime on disk")
        self.expect(dirs == m.own_dirs, f"own folders {sorted(dirs)} != {sorted(m.own_dirs)}")
        if not m.writers:
            self.expect(stages == 0, f"{stages} stage files left with no writer open")

    def resolve_folders(self, on_disk: set[str]) -> None:
        """A folder a stage made is the own source's from then on, like any other; one no
        writer can make any more never comes."""
        m = self.model
        busy = {folder_of(w.path) for w in m.writers.values()}
        for folder in sorted(m.maybe_dirs):
            if folder in on_disk:
                m.own_dirs.add(folder)
            if folder in on_disk or folder not in busy:
                m.maybe_dirs.discard(folder)

    def may_stage(self, path: str) -> None:
        folder = folder_of(path)
        if folder and folder not in self.model.own_dirs:
            self.model.maybe_dirs.add(folder)

    async def _compare_folder(self, project: int, folder: str) -> int | None:
        """Compare a folder's listing; returns its inode, None when it is not shown."""
        found = await self.child(project, folder) if folder else None
        ino = found.st_ino if found is not None else (project if not folder else None)
        shown = self.model.shows_folder(folder)
        self.expect((ino is not None) == shown, f"folder {folder!r} shown: {not shown}")
        if ino is None:
            return None
        if found is not None:
            self.expect(stat.S_ISDIR(found.st_mode), f"{folder!r} is no folder")
        names = await self.kernel.listing(ino)
        want = self.model.children(folder)
        self.expect(names == want, f"listing of {folder!r}: {names} != {want}")
        return ino

    async def _compare_file(self, folder: int | None, path: str) -> None:
        m = self.model
        expected: File | None
        head = m.head(path)
        if head is not None:
            expected = head[1]
        elif (pending := m.pending(path)) is not None:
            expected = File(b"", None, pending.mode)
        else:
            expected = None
        if folder is None:  # not shown: nothing in it may be
            self.expect(expected is None, f"{path} shown in a hidden folder")
            return
        found = await self.child(folder, name_of(path))
        self.expect((found is None) == (expected is None), f"{path} shown: {found is not None}")
        if found is None or expected is None:
            return
        self.expect(stat.S_ISREG(found.st_mode), f"{path} is no file")
        attrs = await self.kernel.call(self.ops.getattr(found.st_ino, OBSERVER))
        for a in (found, attrs):
            self.expect(a.st_size == len(expected.data), f"{path} size {a.st_size}")
            self.expect(stat.S_IMODE(a.st_mode) == expected.mode, f"{path} mode")
        mtime = expected.mtime_ns
        if mtime is None and head is not None:  # committed by memfs: the disk's mtime
            mtime = (self.disk.folder(OWN) / path).stat().st_mtime_ns
        if mtime is not None:
            self.expect(attrs.st_mtime_ns == mtime, f"{path} mtime {attrs.st_mtime_ns}")
        data = await self.kernel.read(found.st_ino)
        self.expect(data == expected.data, f"{path} reads {data!r}, not {expected.data!r}")

    async def _compare_history(self, project: int) -> None:
        """.history/ lists exactly the paths with other versions, and each its versions."""
        kept = {p: h for p in PATHS if (h := self.model.history(p))}
        history = await self.child(project, ".history")
        self.expect((history is not None) == bool(kept), f".history shown: {sorted(kept)}")
        if history is None:
            return
        top = sorted({p.split("/")[0] for p in kept})
        names = await self.kernel.listing(history.st_ino)
        self.expect(names == top, f".history lists {names}, not {top}")
        for folder in FOLDERS[1:]:
            inside = sorted(name_of(p) for p in kept if folder_of(p) == folder)
            if not inside:
                continue
            found = await self.child(history.st_ino, folder)
            self.expect(found is not None, f".history/{folder} missing")
            assert found is not None
            names = await self.kernel.listing(found.st_ino)
            self.expect(names == inside, f".history/{folder} lists {names}, not {inside}")
        for path in kept:
            await self._compare_history_of(project, path)

    async def _compare_history_of(self, project: int, path: str) -> None:
        """.history/<path> lists exactly the other versions of ``path``, each as it reads."""
        want = self.model.history(path)
        found = await self.child(project, ".history")
        for name in path.split("/"):
            if found is not None:
                found = await self.child(found.st_ino, name)
        self.expect((found is not None) == bool(want), f"history of {path}: {sorted(want)}")
        if found is None:
            return
        names = await self.kernel.listing(found.st_ino)
        self.expect(names == sorted(want), f"history of {path}: {names} != {sorted(want)}")
        for name, data in want.items():
            version = await self.kernel.lookup(found.st_ino, name, OBSERVER)
            self.expect(stat.S_IMODE(version.st_mode) == 0o444, f"{path}/{name} is writable")
            got = await self.kernel.read(version.st_ino)
            self.expect(got == data, f"history {path}/{name} reads {got!r}, not {data!r}")

    async def settle(self) -> None:
        """Wait until memfs has absorbed a change made on disk: the view matches the model,
        first for what changed, then whole."""
        if self.all_along:
            await self._settle()
            return
        # The watcher runs only now: it reads what memfs's own writes queued since the last
        # time, then this change.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watcher.run)
            await self._settle()
            nursery.cancel_scope.cancel()

    async def _settle(self) -> None:
        deadline = trio.current_time() + SETTLE_SECONDS
        for paths in (self.touched, None):
            while True:
                try:
                    await self.compare(paths)
                    break
                except (Mismatch, Rejected):
                    # Until memfs has seen the change, a reader may meet the file it knew
                    # gone from the disk (read: ENOENT): only the end state must agree.
                    if trio.current_time() > deadline:
                        raise
                await trio.sleep(0.001)

    # --- the operations -----------------------------------------------------------------------

    def data(self) -> bytes:
        return bytes(self.rng.choice(b"abcxyz\n") for _ in range(self.rng.randint(1, 9)))

    def free_writers(self) -> bool:
        return len(self.model.writers) < MAX_WRITERS

    def idle_heads(self) -> list[str]:
        """Paths with a head and no writer: what may be opened, renamed, changed."""
        m = self.model
        return [p for p in PATHS if m.head(p) is not None and m.writer_on(p) is None]

    async def step(self) -> None:
        choices: list[tuple[int, Callable[[], Awaitable[None]]]] = [
            (10, self.op_create),
            (10, self.op_open),
            (18, self.op_write),
            (5, self.op_truncate),
            (5, self.op_pread),
            (6, self.op_flush),
            (12, self.op_close),
            (9, self.op_rename),
            (6, self.op_unlink),
            (5, self.op_mkdir),
            (5, self.op_rmdir),
            (7, self.op_setattr),
            (2, self.op_forget),
            (5, self.op_disk_write),
            (3, self.op_disk_remove),
            (2, self.op_disk_folder),
            (1, self.op_remount),
        ]
        weights = [w for w, _ in choices]
        op = self.rng.choices([c for _, c in choices], weights)[0]
        await op()

    def note(self, text: str, *paths: str) -> None:
        """Log a step; ``paths`` are the paths it may change (a folder: all it holds)."""
        self.log.append(text)
        for path in paths:
            self.touched |= {p for p in PATHS if p == path or folder_of(p) == path}

    async def op_create(self) -> None:
        m = self.model
        free = [
            p
            for p in PATHS
            if not m.shows_file(p) and m.shows_folder(folder_of(p)) and m.writer_on(p) is None
        ]
        if not free or not self.free_writers():
            return
        path = self.rng.choice(free)
        self.note(f"create {path}", path)
        parent = (await self.kernel.find(folder_of(path))).st_ino
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        info, attrs = await self.kernel.call(
            self.ops.create(parent, name_of(path).encode(), stat.S_IFREG | 0o644, flags, WRITER)
        )
        self.kernel.lookups[attrs.st_ino] += 1
        self.may_stage(path)
        m.writers[info.fh] = Writer(path, attrs.st_ino, b"", 0o644, unsaved=True, created=True)

    async def op_open(self) -> None:
        heads = self.idle_heads()
        if not heads or not self.free_writers():
            return
        path = self.rng.choice(heads)
        trunc = self.rng.random() < 0.3
        self.note(f"open {path} {'O_TRUNC' if trunc else ''}", path)
        head = self.model.head(path)
        assert head is not None
        ino = (await self.kernel.find(path, WRITER)).st_ino
        flags = os.O_RDWR | (os.O_TRUNC if trunc else 0)
        info = await self.kernel.call(self.ops.open(ino, flags, WRITER))
        data = b"" if trunc else head[1].data
        self.may_stage(path)
        self.model.writers[info.fh] = Writer(path, ino, data, head[1].mode, unsaved=trunc)

    def pick_writer(self) -> tuple[int, Writer] | None:
        if not self.model.writers:
            return None
        # In the order they opened: memfs's handle numbers must not steer the choice.
        fh = self.rng.choice(list(self.model.writers))
        return fh, self.model.writers[fh]

    async def op_write(self) -> None:
        picked = self.pick_writer()
        if picked is None:
            return
        fh, w = picked
        off = self.rng.randint(0, len(w.data) + 2)
        buf = self.data()
        self.note(f"write {w.path} at {off}: {buf!r}", w.path)
        written = await self.kernel.call(self.ops.write(fh, off, buf))
        self.expect(written == len(buf), f"write returned {written}")
        w.data = w.data[:off].ljust(off, b"\0") + buf + w.data[off + len(buf) :]
        w.dirty = True

    async def op_truncate(self) -> None:
        picked = self.pick_writer()
        if picked is None:
            return
        fh, w = picked
        size = self.rng.randint(0, len(w.data) + 3)
        self.note(f"ftruncate {w.path} to {size}", w.path)
        attrs = pyfuse3.EntryAttributes()
        attrs.st_size = size
        fields = SetattrFields(update_size=True)
        done = await self.kernel.call(self.ops.setattr(w.ino, attrs, fields, fh, WRITER))
        self.expect(done.st_size == size, f"ftruncate answered size {done.st_size}")
        seen = await self.kernel.call(self.ops.getattr(w.ino, WRITER))
        self.expect(seen.st_size == size, f"after ftruncate the writer sees {seen.st_size}")
        w.data = w.data[:size].ljust(size, b"\0")
        w.dirty = True

    async def op_pread(self) -> None:
        picked = self.pick_writer()
        if picked is None:
            return
        fh, w = picked
        off, size = self.rng.randint(0, len(w.data) + 1), self.rng.randint(1, 12)
        self.note(f"pread {w.path} {size} at {off}", w.path)
        got = await self.kernel.call(self.ops.read(fh, off, size))
        want = w.data[off : off + size]
        self.expect(got == want, f"writer of {w.path} reads {got!r}, not {want!r}")

    def own_mtime(self, path: str) -> int:
        """The mtime of the own version of ``path``, from the disk when memfs set it."""
        f = self.model.own[path]
        if f.mtime_ns is not None:
            return f.mtime_ns
        return (self.disk.folder(OWN) / path).stat().st_mtime_ns

    def keep(self, path: str) -> None:
        """Before memfs replaces or removes ``path``: what it will keep."""
        if path in self.model.own:
            self.model.keep(path, self.own_mtime(path))

    async def _flush(self, fh: int, w: Writer) -> None:
        # Our pid holds no descriptor on the mount path: a bare create or truncation
        # commits at its flush too.
        commits = w.dirty or w.unsaved
        if commits and w.keeps:
            self.keep(w.path)
        await self.kernel.call(self.ops.flush(fh))
        if commits:
            self.model.commit(w)

    async def op_flush(self) -> None:
        picked = self.pick_writer()
        if picked is None:
            return
        fh, w = picked
        self.note(f"flush {w.path}", w.path)
        await self._flush(fh, w)

    async def op_close(self) -> None:
        picked = self.pick_writer()
        if picked is None:
            return
        fh, w = picked
        self.note(f"close {w.path}", w.path)
        await self._flush(fh, w)
        await self.kernel.call(self.ops.release(fh))
        del self.model.writers[fh]

    async def op_rename(self) -> None:
        m = self.model
        heads = self.idle_heads()
        if not heads:
            return
        src = self.rng.choice(heads)
        targets = [
            p for p in PATHS if p != src and m.shows_folder(folder_of(p)) and m.writer_on(p) is None
        ]
        if not targets:
            return
        dst = self.rng.choice(targets)
        flags = self.rng.choices([0, 1, 2], [75, 20, 5])[0]  # RENAME_NOREPLACE, _EXCHANGE
        self.note(f"rename {src} -> {dst} flags {flags}", src, dst)
        old = (await self.kernel.find(folder_of(src), WRITER)).st_ino
        new = (await self.kernel.find(folder_of(dst), WRITER)).st_ino
        names = name_of(src).encode(), name_of(dst).encode()
        call = self.ops.rename(old, names[0], new, names[1], flags, WRITER)
        refusal = errno.EINVAL if flags == 2 else None
        if flags == 1 and m.shows_file(dst):
            refusal = errno.EEXIST
        if refusal is not None:
            await self.refused(call, refusal, "rename")
            return
        head = m.head(src)
        assert head is not None
        moved = head[1]
        self.keep(dst)
        await self.kernel.call(call)
        m.hide(src)
        m.own[dst] = File(moved.data, moved.mtime_ns, moved.mode)
        if folder_of(dst):
            m.own_dirs.add(folder_of(dst))

    async def refused(self, call: Awaitable[object], code: int, what: str) -> None:
        try:
            await self.kernel.call(call)
        except Rejected as exc:
            self.expect(exc.errno == code, f"{what} refused with {exc}, not {code}")
            return
        raise Mismatch(f"{what} was not refused with {errno.errorcode[code]}")

    async def op_unlink(self) -> None:
        heads = self.idle_heads()
        if not heads:
            return
        path = self.rng.choice(heads)
        self.note(f"unlink {path}", path)
        parent = (await self.kernel.find(folder_of(path), WRITER)).st_ino
        self.keep(path)
        await self.kernel.call(self.ops.unlink(parent, name_of(path).encode(), WRITER))
        self.model.hide(path)

    async def op_mkdir(self) -> None:
        m = self.model
        folder = self.rng.choice(FOLDERS[1:])
        self.note(f"mkdir {folder}", folder)
        root = (await self.kernel.find("", WRITER)).st_ino
        call = self.ops.mkdir(root, folder.encode(), stat.S_IFDIR | 0o755, WRITER)
        if m.shows_folder(folder):
            await self.refused(call, errno.EEXIST, "mkdir")
            return
        attrs = await self.kernel.call(call)
        self.kernel.lookups[attrs.st_ino] += 1
        m.own_dirs.add(folder)

    async def op_rmdir(self) -> None:
        m = self.model
        folder = self.rng.choice(FOLDERS[1:])
        self.note(f"rmdir {folder}", folder)
        root = (await self.kernel.find("", WRITER)).st_ino
        call = self.ops.rmdir(root, folder.encode(), WRITER)
        if not m.shows_folder(folder):
            await self.refused(call, errno.ENOENT, "rmdir")
            return
        if m.children(folder):
            await self.refused(call, errno.ENOTEMPTY, "rmdir")
            return
        await self.kernel.call(call)
        m.own_dirs.discard(folder)
        for source in READ_ONLY:
            if folder in m.ro_dirs[source]:
                m.whiteouts.add((folder, source, DIR_WHITEOUT))

    async def op_setattr(self) -> None:
        m = self.model
        heads = self.idle_heads()
        if not heads:
            return
        path = self.rng.choice(heads)
        head = m.head(path)
        assert head is not None
        old = head[1]
        what = self.rng.choice(["mode", "times", "size"])
        attrs = pyfuse3.EntryAttributes()
        fields = SetattrFields()
        new = File(old.data, old.mtime_ns, old.mode)
        if what == "mode":
            new.mode = self.rng.choice(MODES)
            attrs.st_mode = stat.S_IFREG | new.mode
            fields.update_mode = True
        elif what == "size":
            size = self.rng.randint(0, len(old.data) + 3)
            attrs.st_size = size
            fields.update_size = True
            new.data = old.data[:size].ljust(size, b"\0")
            new.mtime_ns = None  # truncate(2) may set the mtime: the disk says
        else:
            self.clock += 1
            attrs.st_atime_ns = attrs.st_mtime_ns = new.mtime_ns = at(self.clock)
            fields.update_atime = fields.update_mtime = True
        self.note(f"setattr {path} {what}: {new.mode:o} {len(new.data)} {new.mtime_ns}", path)
        ino = (await self.kernel.find(path, WRITER)).st_ino
        if what == "size" and len(new.data) != len(old.data):
            self.keep(path)  # a truncate that changes the bytes replaces the version
        await self.kernel.call(self.ops.setattr(ino, attrs, fields, None, WRITER))
        m.own[path] = new  # a read-only head is copied up first
        if folder_of(path):
            m.own_dirs.add(folder_of(path))

    async def op_forget(self) -> None:
        self.note("forget")
        await self.kernel.forget_all({w.ino for w in self.model.writers.values()})

    def _disk_write(self, source: str, path: str) -> None:
        self.clock += 1
        # Read-only sources get old and new mtimes, so either may be the newest, with ties.
        mtime = at(self.rng.randint(0, self.clock) if source != OWN else self.clock)
        f = File(self.data(), mtime)
        self.disk.put(source, path, f)
        if source == OWN:
            self.model.own[path] = f
            dirs = self.model.own_dirs
        else:
            self.model.ro[source][path] = f
            dirs = self.model.ro_dirs[source]
        if folder_of(path):
            dirs.add(folder_of(path))

    def disk_paths(self) -> list[str]:
        m = self.model
        return [p for p in PATHS if folder_of(p) in DISK_FOLDERS and m.writer_on(p) is None]

    async def op_disk_write(self) -> None:
        source = self.rng.choice((OWN, *READ_ONLY, *READ_ONLY))
        path = self.rng.choice(self.disk_paths() or [""])
        if not path:
            return
        self.note(f"on disk: {source} writes {path}", path)
        self._disk_write(source, path)
        await self.settle()

    async def op_disk_remove(self) -> None:
        m = self.model
        source = self.rng.choice((OWN, *READ_ONLY))
        files = m.own if source == OWN else m.ro[source]
        present = [p for p in self.disk_paths() if p in files]
        if not present:
            return
        path = self.rng.choice(present)
        self.note(f"on disk: {source} removes {path}", path)
        self.disk.remove(source, path)
        del files[path]
        await self.settle()

    async def op_disk_folder(self) -> None:
        """A read-only source makes or removes an empty folder (one memfs may hide)."""
        source = self.rng.choice(READ_ONLY)
        folder = self.disk.folder(source) / FOLDERS[2]
        dirs = self.model.ro_dirs[source]
        if FOLDERS[2] in dirs:
            self.note(f"on disk: {source} removes folder {FOLDERS[2]}", FOLDERS[2])
            folder.rmdir()
            dirs.discard(FOLDERS[2])
        else:
            self.note(f"on disk: {source} makes folder {FOLDERS[2]}", FOLDERS[2])
            folder.mkdir()
            dirs.add(FOLDERS[2])
        await self.settle()

    async def op_remount(self) -> None:
        """Every file closed, memfs stopped and started again: only the disk and memfs's
        state folder (whiteouts) carry over."""
        await self.close_all()
        self.note("remount", *FOLDERS)
        await self.unmount()
        await self.mount()

    async def close_all(self) -> None:
        for fh in list(self.model.writers):
            w = self.model.writers[fh]
            self.note(f"close {w.path} (end)")
            await self._flush(fh, w)
            await self.kernel.call(self.ops.release(fh))
            del self.model.writers[fh]


@pytest.fixture
def readdir_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs.pyfuse3, "readdir_reply", fake_readdir_reply)


CONFIG = f"""
[[source]]
name = "{OWN}"
path = "~/.claude/projects/{{slug}}/memory"
own = true

[[source]]
name = "work"
path = "~/.claude-work/projects/{{slug}}/memory"

[[source]]
name = "pi"
path = "~/.pi/agent/memory/{{slug}}"

[limits]
versions = {KEEP_LAST}
"""


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}-{OPS}ops" for s in SEEDS])
@pytest.mark.usefixtures("readdir_reply")
async def test_random_operations_agree_with_the_model(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "own_folder", lambda *_: None)  # see the module
    home = fake_home(tmp_path)
    (tmp_path / "config.toml").write_text(CONFIG, encoding="utf-8")
    config = cfg.load(home.env, tmp_path / "config.toml")
    assert [s.name for s in config.sources] == [OWN, *READ_ONLY]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run = Run(seed, Disk(home, scratch), config, tmp_path / "mnt")
    run.populate()
    mode = "all along" if run.all_along else "only while changes on disk settle"
    print(f"model seed {seed}: {OPS} operations, the watcher running {mode}")
    async with trio.open_nursery() as nursery:
        run.nursery = nursery
        await run.mount()
        try:
            await run.compare()
            tries = 0
            while len(run.log) < OPS:
                tries += 1
                assert tries < 10 * OPS, "the operations found nothing to do"
                run.touched = set()
                await run.step()
                run.ops._check()
                await run.compare(None if tries % FULL_EVERY == 0 else run.touched)
            await run.close_all()
            await run.settle()  # every event memfs's own writes raised, then all again
        except (AssertionError, Rejected) as exc:
            tail = "\n  ".join(run.log[-25:])
            raise AssertionError(
                f"seed {seed}, operation {len(run.log)}: {exc}\nlast steps:\n  {tail}"
            ) from exc
        finally:
            await run.unmount()
            nursery.cancel_scope.cancel()
    print(f"model seed {seed}: {len(run.log)} operations done, all agree")
