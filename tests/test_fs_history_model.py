"""Tier 2: a seeded model test of the history (§7.2) and the index (§5.3), issue 36.

No mount: the handlers of `memfs.adapter.fs.MemFS` are awaited directly, on a project that
an own account (``claude``) and a read-only one (``work``) both hold, each with its
``MEMORY.md`` and topic files. Writers are separate processes (a `FakeContext` pid each,
of a ``sleep`` this test starts, so that /proc answers for them as for a real writer): up
to `MAX_SCRIPTS` of them are under way at once, each a script of requests (open, read,
write, fsync, close, rename, ...) that the driver advances one request at a time in a
seeded random order, several handles open at once, and now and then two or three of them
as trio tasks running at once (their handlers await workers, so their requests really
interleave). Between them come requests that stand alone: ``memfs restore`` (the root's
``user.memfs.restore`` xattr, or ``ops.restores.run``), a rename of MEMORY.md away and
back, ``chmod 000``/``600`` of the own index, a topic file truncated, unlinked or renamed
onto another, and the other account's files changed on disk (then rescanned, as
``helpers.rescan`` does; no watcher runs).

The saves of MEMORY.md: Claude Code's Edit (read, ``MEMORY.md.tmp.<pid>.<12 hex>`` created
O_EXCL, written, fsynced, closed, renamed over MEMORY.md), a rewrite in place (read, open
O_TRUNC, write, close), an O_RDWR edit through the open it read, ``sed -i`` (read,
``sedXXXXXX`` written, renamed over), an append (O_APPEND), a save by a process that never
read it, each adding new lines and removing lines (one only the other account has, one
both have, one of the own index); an editor's backup-then-write (``mv MEMORY.md
MEMORY.md~``, a save, ``rm MEMORY.md~``), ``mv`` away and back, and ``memfs restore``.
The topic files: rewritten in place, temp+rename, appended to, edited O_RDWR, truncated,
unlinked, renamed onto another, restored.

After every step one invariant is checked, in two halves:

**Bodies** (§7.2). Every body that was ever a committed own version of a file (the own
source's file at a path between two plans: each plan is looked at as it is absorbed,
under the commit lock; and the bytes of a writer whose name another file replaced, which
land as a kept version) is its head or a kept version under the own source's
``.history/<path>/``, unless the limits let it go. The model keeps them in the order
kept: a version is kept when a plan replaces or removes its file (another inode at the
path, or none), except when the same plan moved that file (a rename: its inode is at
another path, or its name was renamed onto MEMORY.md as a save), and except empty bodies
and writers' own names (``<name>~``, Claude Code's temp name), which keep nothing; a body
already kept for the path adds nothing. An own index renamed away whole (its file moved
to ``MEMORY.md~``: the own index shown alone) is replaced by the save that takes the index
it moved (the editor's save, or the ``mv`` back unless that puts the very file back): its
body is kept then. The limits, applied as
each version is kept: the oldest kept versions of the path past ``versions``, then the
oldest of the project (in the order kept) while its kept bytes exceed ``history_bytes``,
never the newest kept version of another path. The kept versions on disk are compared
with the model both ways: one missing is a lost version, one too many breaks a limit.

**Lines** (§5.3). Every line (by its text, trailing whitespace ignored) that a save of
MEMORY.md returning 0 added is in the merged index, read through the handlers by a
process that writes nothing, unless a later save removed it. A save is taken against a
version: what its writer read (the bytes its read open served; for an open O_RDWR or
O_APPEND, the view it opened), else, for a process that never read it, the view when it
opened MEMORY.md for writing (a rename onto MEMORY.md: when the rename lands). A save
*adds* the lines of what it wrote that version lacks, and *removes* the lines of that
version it did not write; the rest stays as it was. For each operation:

- Claude Code's Edit, ``sed -i``: the rename onto MEMORY.md is the save; the writer's
  read is the version.
- a rewrite in place, an O_RDWR edit, an append, a save by a process that never read:
  the close (flush) is the save; an append removes nothing.
- a handle whose MEMORY.md was renamed away before its close saves that name, not the
  index: it adds and removes nothing (and commits nothing once that name is removed);
  renamed back before its close, it saves the index against the version it had.
- ``mv MEMORY.md MEMORY.md~``: the own index leaves the view, so its lines are not
  required until the save that follows takes the index it moved (§5.3): then the own
  index's lines are as that save leaves them (the save removes what its version had and
  it did not write), and the save's added lines are added. ``mv MEMORY.md~ MEMORY.md``
  back is such a save (what it wrote: the view when it was moved; its version: the view
  when it lands). ``rm MEMORY.md~`` removes nothing of the index.
- ``memfs restore MEMORY.md`` puts back the view as it was when the version kept last
  was the own index: afterwards exactly the added lines that version holds are required
  (the restore removes the others, and adds back those a save had removed); and the own
  index is that version's body.
- chmod, truncates and renames of topic files, and the other account's changes on disk
  remove nothing (the own index's lines are shown whatever that account holds).

Processes: a save whose version is the view (a process that never read MEMORY.md opening
it, a rename onto it by one, ``mv`` back) runs alone, and the model reads that view just
before through the handlers; every other request may run at once with others. Its
processes never read MEMORY.md otherwise.

Deterministic in what it does given the seed; which of two requests running at once
commits first is the scheduler's, and the model does not depend on it (each save's
version is fixed before the two start, and the bodies are what the disk shows). Each seed
prints itself and its step count; MEMFS_HISTORY_SEEDS (comma-separated) and
MEMFS_HISTORY_STEPS change them, MEMFS_HISTORY_DUMP=<file> writes a failing run's whole log
(every request, and every version the model keeps or lets go) to ``<file>.<seed>``.

It found five bugs of issue 36's write path, each fixed since: an own index renamed away
"whole" and lost, that rename hiding the other account's index at mode 000, the count
and byte limits pruning twice, a keep of bytes kept already dropping versions for bytes,
and a replaced writer's kept bytes measured by the file that replaced it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import stat
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyfuse3
import pytest
import trio
from fakes import FakeContext, SetattrFields, fake_readdir_reply
from helpers import CLAUDE_SLUG, at, fake_home, rescan, write

from memfs.adapter import fs
from memfs.adapter.fs import ROOT_INODE, MemFS
from memfs.disk import config as cfg
from memfs.disk import steps
from memfs.disk.index_save import FromFile, SaveIndex
from memfs.disk.sources import STAGE_PREFIX
from memfs.view import writes

SEEDS = [int(s) for s in os.environ.get("MEMFS_HISTORY_SEEDS", "1,2,3,4").split(",")]
STEPS = int(os.environ.get("MEMFS_HISTORY_STEPS", "2000"))

OWN, WORK = "claude", "work"
MEMORY = "MEMORY.md"
BACKUP = "MEMORY.md~"
TOPICS = ("a.md", "b.md", "c.md")
VERSIONS = 3  # [limits] versions: small, so that the count prunes
HISTORY_BYTES = 2500  # [limits] history_bytes: small, so that the bytes prune too
MAX_SCRIPTS = 5
PROCESSES = 9  # sleepers: the writers' processes
BLIND = 3  # of them, the ones that never read MEMORY.md
OBSERVER = FakeContext()  # the test's own process: reads, never writes

TEMP_NAME = re.compile(r".+\.tmp\.[0-9]+\.[0-9a-f]{12}")


def keeps(path: str) -> bool:
    """Whether a replaced or removed version of ``path`` is kept (§7.2): not a writer's own
    file (a backup ``<name>~``, Claude Code's temp name)."""
    name = path.rpartition("/")[2]
    return not name.endswith("~") and TEMP_NAME.fullmatch(name) is None


def short(body: bytes | None) -> str:
    """A body in a failure message: its size, its hash and how it begins."""
    if body is None:
        return "none"
    return f"<{len(body)} bytes {hashlib.sha256(body).hexdigest()[:8]} {body[:40]!r}>"


def texts(data: bytes | str) -> set[str]:
    """The texts of a MEMORY.md's lines that are not blank (§5.3: trailing whitespace
    ignored)."""
    text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
    return {t for line in text.split("\n") if (t := line.rstrip())}


# --- the model ---------------------------------------------------------------------------


@dataclass
class Kept:
    path: str
    body: bytes
    present: bool = True


@dataclass
class History:
    """The own source's kept versions, in the order kept, and which ones the limits let go."""

    versions: int
    budget: int
    entries: list[Kept] = field(default_factory=list)
    trace: Callable[[str], None] = print

    def present(self, path: str | None = None) -> list[Kept]:
        return [k for k in self.entries if k.present and (path is None or k.path == path)]

    def keep(self, path: str, body: bytes) -> None:
        if not body or not keeps(path):
            return
        mine = self.present(path)
        if any(k.body == body for k in mine):
            self.trace(f"  (kept already: {path} {short(body)})")
            return  # identical bytes are one version
        gone = mine[: max(0, len(mine) + 1 - self.versions)]
        for k in gone:
            k.present = False
        total = sum(len(k.body) for k in self.present()) + len(body)
        for k in self.present():
            if total <= self.budget:
                break
            if k.path != path and k is self.present(k.path)[-1]:
                continue  # never the newest kept version of a path
            k.present = False
            gone.append(k)
            total -= len(k.body)
        self.entries.append(Kept(path, body))
        pruned = ", ".join(f"{k.path} {short(k.body)}" for k in gone)
        self.trace(
            f"  (keep {path} {short(body)}{'; prune ' + pruned if pruned else ''}; "
            f"{sum(len(k.body) for k in self.present())} bytes kept)"
        )

    def last(self, path: str) -> bytes | None:
        found = self.present(path)
        return found[-1].body if found else None


@dataclass
class Lines:
    """The lines saves of MEMORY.md added (by text), and those no later save removed."""

    added: set[str] = field(default_factory=set)
    live: set[str] = field(default_factory=set)
    moved: set[str] | None = None  # the live lines of an own index renamed away

    def save(self, version: bytes, written: bytes) -> None:
        was, wrote = texts(version), texts(written)
        start = self.live if self.moved is None else self.moved
        self.live = (start - (was - wrote)) | (wrote - was)
        self.added |= wrote - was
        self.moved = None

    def move_away(self) -> None:
        self.moved, self.live = self.live, set()

    def restored(self, body: bytes) -> None:
        self.live = self.added & texts(body)
        self.moved = None


class Mismatch(AssertionError):
    pass


class Failed(Exception):
    """A handler refused: which one, with what."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: {errno.errorcode.get(code, str(code))}")
        self.errno = code


# --- one run -----------------------------------------------------------------------------


@dataclass
class Script:
    """One writer: its process, what it does next (a request or a few), and where its
    MEMORY.md handle stands (``index``: the name it follows, None once it is gone)."""

    name: str
    ctx: FakeContext
    make: Callable[[Script], AsyncIterator[None]]
    exclusive: bool = False  # its next request must run alone (its version is the view)
    blind: bool = False  # its process is one that never reads MEMORY.md
    index: str | None = None
    done: bool = False

    def __post_init__(self) -> None:
        self.gen = self.make(self)

    async def advance(self) -> None:
        try:
            await self.gen.__anext__()
        except StopAsyncIteration:
            self.done = True


class Run:
    def __init__(self, seed: int, base: Path, pids: list[int]) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.base = base
        self.home = fake_home(base, pi=False)
        self.own = self.home.memory(".claude")
        self.work = self.home.memory(".claude-work")
        self.pids_free = pids[BLIND:]  # readers: any script
        self.blind_free = pids[:BLIND]  # never read MEMORY.md
        self.lines = Lines()
        self.log: list[str] = []
        self.limits = VERSIONS, HISTORY_BYTES
        self.history = History(*self.limits, trace=self.log.append)
        self.scripts: list[Script] = []
        self.fresh = 0
        self.clock = 100  # seconds after T0 for the other account's mtimes
        self.snapshot: dict[str, tuple[int, bytes]] = {}
        self._bodies: dict[str, tuple[tuple[int, int, int, int], bytes]] = {}
        self.views: list[bytes] = []  # the merged index as the last checks read it
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []  # found while a plan was absorbed (a handler hides them)
        self.required: list[int] = []  # how many lines each check required

    # --- setting up ---------------------------------------------------------------------

    def populate(self) -> None:
        own, work = self.own, self.work
        write(own / MEMORY, "# Memory\n- [A](a.md) shared topic\n- own note: pytest\n", at(10))
        write(own / "a.md", "own a\n", at(11))
        write(own / "b.md", "own b\nsecond line\n", at(12))
        write(
            work / MEMORY,
            "# Memory\n- [A](a.md) shared topic\n- [W](w.md) work topic\n- work note: trio\n",
            at(20),
        )
        write(work / "a.md", "work a\n", at(21))
        write(work / "c.md", "work c\n", at(22))
        write(work / "w.md", "work w\n", at(23))
        config = f"""
[[source]]
name = "{OWN}"
path = "~/.claude/projects/{{slug}}/memory"
own = true

[[source]]
name = "{WORK}"
path = "~/.claude-work/projects/{{slug}}/memory"

[limits]
versions = {self.limits[0]}
history_bytes = {self.limits[1]}
"""
        (self.base / "config.toml").write_text(config, encoding="utf-8")
        self.config = cfg.load(self.home.env, self.base / "config.toml")
        self.ops = MemFS(self.config, mountpoint=self.base / "mnt")
        self.ops.kernel.enabled = False
        self.snapshot = self.heads()

    # --- watching the plans -------------------------------------------------------------

    def heads(self) -> dict[str, tuple[int, bytes]]:
        """The own source's files (not .history/, not stages): inode and bytes."""
        found = {}
        todo = [("", self.own)]
        while todo:
            prefix, folder = todo.pop()
            with os.scandir(folder) as entries:
                for e in entries:
                    if e.name.startswith(STAGE_PREFIX) or (not prefix and e.name == ".history"):
                        continue
                    if e.is_dir(follow_symlinks=False):
                        todo.append((f"{prefix}{e.name}/", Path(e.path)))
                        continue
                    st = e.stat(follow_symlinks=False)
                    found[prefix + e.name] = (st.st_ino, self.body(e.path, st))
        return found

    def body(self, path: str, st: os.stat_result) -> bytes:
        key = (st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns)
        known = self._bodies.get(path)
        if known is None or known[0] != key:
            known = (key, Path(path).read_bytes())
            self._bodies[path] = known
        return known[1]

    def absorbed(self, plan: writes.Plan, applied: steps.Applied) -> None:
        """A plan ran and its project took what it found (under the commit lock): what it
        replaced or removed of the own source is kept, in this order (see the module)."""
        if plan.slug != CLAUDE_SLUG:
            return
        kept: list[tuple[str, bytes]] = []
        consumed = set()
        for step in plan.steps:
            if isinstance(step, steps.KeepStage) and not applied.skipped:
                fd = step.stage.fd
                kept.append((step.keep.path, os.pread(fd, os.fstat(fd).st_size + 1, 0)))
            if isinstance(step, SaveIndex) and isinstance(step.written, FromFile):
                consumed.add(step.written.name)
        now = self.heads()
        where = {ino: path for path, (ino, _) in now.items()}
        for path, (ino, body) in self.snapshot.items():
            after = now.get(path)
            if after is not None and after[0] == ino:
                if after[1] != body:
                    self.errors.append(
                        f"{path} changed in place: {short(body)} -> {short(after[1])}"
                    )
                continue
            if ino in where or path in consumed:
                continue  # moved (a rename), or renamed onto MEMORY.md as a save
            kept.append((path, body))
        for path, body in kept:
            self.history.keep(path, body)
        self.snapshot = now

    # --- the handlers -------------------------------------------------------------------

    async def call(self, what: str, handler: Awaitable[object]) -> object:
        try:
            return await handler
        except pyfuse3.FUSEError as exc:
            raise Failed(exc.errno, what) from None

    async def project(self, ctx: FakeContext) -> int:
        attrs = await self.ops.lookup(ROOT_INODE, CLAUDE_SLUG.encode(), ctx)
        return attrs.st_ino

    async def find(self, name: str, ctx: FakeContext) -> int:
        parent = await self.project(ctx)
        attrs = await self.call(f"lookup {name}", self.ops.lookup(parent, name.encode(), ctx))
        assert isinstance(attrs, pyfuse3.EntryAttributes)
        return attrs.st_ino

    async def read_from(self, fh: int) -> bytes:
        out = b""
        while piece := await self.ops.read(fh, len(out), 4096):
            out += piece
        return out

    async def cat(self, name: str, ctx: FakeContext) -> bytes:
        ino = await self.find(name, ctx)
        info = await self.call(f"open {name}", self.ops.open(ino, os.O_RDONLY, ctx))
        assert isinstance(info, pyfuse3.FileInfo)
        try:
            return await self.read_from(info.fh)
        finally:
            await self.ops.release(info.fh)

    async def open(self, name: str, flags: int, ctx: FakeContext) -> int:
        ino = await self.find(name, ctx)
        info = await self.call(f"open {name}", self.ops.open(ino, flags, ctx))
        assert isinstance(info, pyfuse3.FileInfo)
        return info.fh

    async def create(self, name: str, ctx: FakeContext, mode: int = 0o644) -> int:
        parent = await self.project(ctx)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        made = self.ops.create(parent, name.encode(), stat.S_IFREG | mode, flags, ctx)
        info, _ = await self.call(f"create {name}", made)  # type: ignore[misc]
        return info.fh  # type: ignore[no-any-return]

    async def put(self, fh: int, off: int, data: bytes) -> None:
        done = await self.ops.write(fh, off, data)
        if done != len(data):
            raise Mismatch(f"write returned {done}, not {len(data)}")

    async def close(self, fh: int, what: str) -> None:
        try:
            await self.call(f"close {what}", self.ops.flush(fh))
        finally:
            await self.ops.release(fh)

    async def rename(self, src: str, dst: str, ctx: FakeContext) -> None:
        parent = await self.project(ctx)
        moving = self.ops.rename(parent, src.encode(), parent, dst.encode(), 0, ctx)
        await self.call(f"rename {src} {dst}", moving)

    async def unlink(self, name: str, ctx: FakeContext) -> None:
        parent = await self.project(ctx)
        await self.call(f"unlink {name}", self.ops.unlink(parent, name.encode(), ctx))

    async def setattr(self, name: str, ctx: FakeContext, *, mode: int | None = None,
                      size: int | None = None) -> None:  # fmt: skip
        ino = await self.find(name, ctx)
        attrs = pyfuse3.EntryAttributes()
        fields = SetattrFields()
        if mode is not None:
            attrs.st_mode = stat.S_IFREG | mode
            fields.update_mode = True
        if size is not None:
            attrs.st_size = size
            fields.update_size = True
        await self.call(f"setattr {name}", self.ops.setattr(ino, attrs, fields, None, ctx))

    # --- what writers write -------------------------------------------------------------

    def line(self) -> str:
        self.fresh += 1
        n = self.fresh
        if self.rng.random() < 0.4:
            return f"- [N{n}](n{n}.md) s{self.seed} topic {n}"
        return f"- s{self.seed} note {n}: " + "x" * self.rng.randint(0, 12)

    def edit(self, read: bytes) -> bytes:
        """What a writer that read ``read`` saves: a line or two removed (one only the other
        account has, one both have, one of the own index), a line or two added."""
        lines = [line for line in read.decode("utf-8", "surrogateescape").split("\n") if line]
        own = texts(self.disk(self.own / MEMORY))
        work = texts(self.disk(self.work / MEMORY))
        for _ in range(self.rng.choice((0, 1, 1, 1, 2, 2, 3))):
            kind = self.rng.choice(("own", "own", "work", "both"))
            pick = [
                line
                for line in lines
                if (line.rstrip() in own) == (kind != "work")
                and (line.rstrip() in work) == (kind != "own")
                and not line.startswith("# ")
            ]
            if pick:
                lines.remove(self.rng.choice(pick))
        for _ in range(self.rng.choice((1, 1, 2))):
            lines.insert(self.rng.randint(1 if lines else 0, len(lines)), self.line())
        return "".join(f"{line}\n" for line in lines).encode()

    def disk(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError:
            return b""

    def topic_body(self, path: str) -> bytes:
        self.fresh += 1
        n = self.rng.randint(1, 5)
        return "".join(f"{path} v{self.fresh} line {i}\n" for i in range(n)).encode()

    def hex12(self) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(12))

    # --- the scripts --------------------------------------------------------------------

    def note(self, script: Script | None, text: str) -> None:
        who = f"[{script.name} pid {script.ctx.pid}] " if script is not None else ""
        self.log.append(f"{who}{text}")

    def save(self, script: Script, version: bytes, written: bytes) -> None:
        """A save of MEMORY.md returned 0."""
        self.note(script, f"saved: +{sorted(texts(written) - texts(version))} "
                          f"-{sorted(texts(version) - texts(written))}")  # fmt: skip
        self.lines.save(version, written)

    async def claude_edit(self, s: Script) -> AsyncIterator[None]:
        self.note(s, "Claude Code's Edit: read MEMORY.md")
        read = await self.cat(MEMORY, s.ctx)
        yield
        temp = f"{MEMORY}.tmp.{s.ctx.pid}.{self.hex12()}"
        edit = self.edit(read)
        self.note(s, f"create {temp}, write, fsync")
        fh = await self.create(temp, s.ctx)
        await self.put(fh, 0, edit)
        yield
        await self.call("fsync", self.ops.fsync(fh, False))
        yield
        self.note(s, f"close {temp}")
        await self.close(fh, temp)
        yield
        self.note(s, f"rename {temp} over MEMORY.md")
        await self.rename(temp, MEMORY, s.ctx)
        self.save(s, read, edit)

    async def sed(self, s: Script) -> AsyncIterator[None]:
        self.note(s, "sed -i: read MEMORY.md")
        read = await self.cat(MEMORY, s.ctx)
        yield
        temp = "sed" + "".join(self.rng.choice("ABCDEFabcdef0123") for _ in range(6))
        edit = self.edit(read)
        self.note(s, f"create {temp} 0600, write, close")
        fh = await self.create(temp, s.ctx, 0o600)
        await self.put(fh, 0, edit)
        await self.close(fh, temp)
        yield
        self.note(s, f"rename {temp} over MEMORY.md")
        await self.rename(temp, MEMORY, s.ctx)
        self.save(s, read, edit)

    async def index_handle(self, s: Script, fh: int, version: bytes, written: bytes,
                           step: str) -> AsyncIterator[None]:  # fmt: skip
        """The rest of a save through a handle open on MEMORY.md: write, close, release."""
        s.index = MEMORY
        yield
        self.note(s, f"{step}: write {len(written)} bytes ({s.index})")
        await self.put(
            fh,
            0 if step != "append" else len(version),
            written[len(version) if step == "append" else 0 :],
        )
        if step == "O_RDWR" and len(written) < len(version):
            attrs = pyfuse3.EntryAttributes()
            attrs.st_size = len(written)
            ino = self.ops.files.get(fh).ino  # type: ignore[union-attr]
            await self.call("ftruncate", self.ops.setattr(
                ino, attrs, SetattrFields(update_size=True), fh, s.ctx
            ))  # fmt: skip
        yield
        self.note(s, f"{step}: close ({s.index})")
        try:
            await self.call(f"close {s.index}", self.ops.flush(fh))
            if s.index == MEMORY:
                self.save(s, version, written)
        finally:
            await self.ops.release(fh)
            s.index = None

    async def in_place(self, s: Script) -> AsyncIterator[None]:
        self.note(s, "rewrite in place: read MEMORY.md")
        read = await self.cat(MEMORY, s.ctx)
        yield
        self.note(s, "open MEMORY.md O_WRONLY|O_TRUNC")
        fh = await self.open(MEMORY, os.O_WRONLY | os.O_TRUNC, s.ctx)
        async for _ in self.index_handle(s, fh, read, self.edit(read), "O_TRUNC"):
            yield

    async def rdwr(self, s: Script) -> AsyncIterator[None]:
        self.note(s, "open MEMORY.md O_RDWR, read through it")
        fh = await self.open(MEMORY, os.O_RDWR, s.ctx)
        read = await self.read_from(fh)
        async for _ in self.index_handle(s, fh, read, self.edit(read), "O_RDWR"):
            yield

    async def append(self, s: Script) -> AsyncIterator[None]:
        self.note(s, "open MEMORY.md O_WRONLY|O_APPEND")
        fh = await self.open(MEMORY, os.O_WRONLY | os.O_APPEND, s.ctx)
        # What it opened: the view now (no await since the open), the version it appends to.
        read = self.ops.files.get(fh).data or b""  # type: ignore[union-attr]
        if not read:
            read = self.ops.catalog.loaded()[CLAUDE_SLUG].memory_index()
        written = read + self.line().encode() + b"\n"
        async for _ in self.index_handle(s, fh, read, written, "append"):
            yield

    async def blind(self, s: Script) -> AsyncIterator[None]:
        # Its open must stand alone: its version is the view at that moment.
        version = await self.cat(MEMORY, OBSERVER)
        if self.rng.random() < 0.5:
            written = b"# Memory\n" + self.line().encode() + b"\n"
        else:  # what another process of its pipeline read a while ago, and a line
            written = self.rng.choice(self.views) + self.line().encode() + b"\n"
        self.note(s, "a process that never read MEMORY.md opens it O_WRONLY|O_TRUNC")
        fh = await self.open(MEMORY, os.O_WRONLY | os.O_TRUNC, s.ctx)
        s.exclusive = False
        async for _ in self.index_handle(s, fh, version, written, "O_TRUNC"):
            yield

    async def topic_write(self, s: Script) -> AsyncIterator[None]:
        path = self.rng.choice(TOPICS)
        async for _ in self.topic_save(s, path):
            yield

    async def topic_save(self, s: Script, path: str) -> AsyncIterator[None]:
        how = self.rng.choice(("O_TRUNC", "temp", "append", "O_RDWR"))
        data = self.topic_body(path)
        self.note(s, f"{path}: {how} save of {data!r}")
        try:
            if how == "temp":
                temp = f"{path}.tmp.{s.ctx.pid}.{self.hex12()}"
                fh = await self.create(temp, s.ctx)
                await self.put(fh, 0, data)
                yield
                await self.call("fsync", self.ops.fsync(fh, False))
                await self.close(fh, temp)
                yield
                self.note(s, f"rename {temp} over {path}")
                await self.rename(temp, path, s.ctx)
                return
            flags = {"O_TRUNC": os.O_WRONLY | os.O_TRUNC, "append": os.O_WRONLY | os.O_APPEND,
                     "O_RDWR": os.O_RDWR}[how]  # fmt: skip
            fh = await self.open(path, flags, s.ctx)
            yield
            self.note(s, f"{path}: {how} write")
            await self.put(fh, self.rng.randint(0, 8) if how == "O_RDWR" else 0, data)
            yield
            self.note(s, f"{path}: {how} close")
            await self.close(fh, path)
        except Failed as exc:
            if exc.errno != errno.ENOENT:
                raise
            self.note(s, f"{path}: {exc}")  # gone meanwhile (unlinked, renamed)

    # --- what stands alone --------------------------------------------------------------

    async def restore(self) -> None:
        path = self.rng.choice((MEMORY, MEMORY, *TOPICS))
        want = self.history.last(path)
        ident = f"r{len(self.log)}"
        request = {"id": ident, "project": CLAUDE_SLUG, "path": path, "version": None,
                   "at_ns": None, "source": None}  # fmt: skip
        raw = json.dumps(request).encode()
        if self.rng.random() < 0.5:
            self.note(None, f"memfs restore {path} (the root's xattr)")
            await self.call("setxattr", self.ops.setxattr(ROOT_INODE, b"user.memfs.restore",
                                                          raw, OBSERVER))  # fmt: skip
        else:
            self.note(None, f"memfs restore {path} (ops.restores.run)")
            await self.ops.restores.run(raw)
        got = await self.ops.getxattr(ROOT_INODE, f"user.memfs.result.{ident}".encode(), OBSERVER)
        outcome = json.loads(got)
        self.note(None, f"  -> {outcome}")
        if want is None:
            if outcome["ok"]:
                raise Mismatch(f"restore of {path} with no kept version: {outcome}")
            return
        if not outcome["ok"]:
            raise Mismatch(f"restore of {path} failed: {outcome}; the model has {short(want)}")
        head = self.disk(self.own / path)
        if head != want:
            raise Mismatch(f"restore of {path} put back {short(head)}, not {short(want)}")
        if path == MEMORY:
            self.lines.restored(want)

    async def backup_then_write(self) -> None:
        """vim (backupcopy=no): read, MEMORY.md renamed to MEMORY.md~, written anew, the
        backup removed; or Claude Code's rename as the save that follows."""
        ctx = FakeContext(pid=self.take(blind=False))
        try:
            self.note(None, f"pid {ctx.pid}: read MEMORY.md, mv MEMORY.md MEMORY.md~")
            read = await self.cat(MEMORY, ctx)
            own_before = self.snapshot.get(MEMORY)
            await self.rename(MEMORY, BACKUP, ctx)
            self.moved_handles(MEMORY, BACKUP)
            self.lines.move_away()
            alone = own_before is not None and self.snapshot.get(BACKUP, (0,))[0] == own_before[0]
            edit = self.edit(read)
            if self.rng.random() < 0.5:
                self.note(None, "write MEMORY.md anew (O_TRUNC, or a create)")
                try:
                    fh = await self.open(MEMORY, os.O_WRONLY | os.O_TRUNC, ctx)
                except Failed as exc:
                    if exc.errno != errno.ENOENT:
                        raise
                    fh = await self.create(MEMORY, ctx)
                await self.put(fh, 0, edit)
                await self.close(fh, MEMORY)
            else:
                temp = f"{MEMORY}.tmp.{ctx.pid}.{self.hex12()}"
                self.note(None, f"write {temp}, rename it over MEMORY.md")
                fh = await self.create(temp, ctx)
                await self.put(fh, 0, edit)
                await self.call("fsync", self.ops.fsync(fh, False))
                await self.close(fh, temp)
                await self.rename(temp, MEMORY, ctx)
            self.lines.save(read, edit)
            if alone and own_before is not None:
                # The own index moved whole: the save replaced it (see the module).
                self.history.keep(MEMORY, own_before[1])
            self.note(None, "rm MEMORY.md~")
            await self.unlink(BACKUP, ctx)
            self.moved_handles(BACKUP, None)
        finally:
            self.give(ctx.pid, blind=False)

    async def away_and_back(self) -> None:
        ctx = FakeContext(pid=self.take(blind=True))
        try:
            self.note(None, f"pid {ctx.pid}: mv MEMORY.md MEMORY.md~, mv MEMORY.md~ MEMORY.md")
            view = await self.cat(MEMORY, OBSERVER)
            own_before = self.snapshot.get(MEMORY)
            await self.rename(MEMORY, BACKUP, ctx)
            self.moved_handles(MEMORY, BACKUP)
            self.lines.move_away()
            alone = own_before is not None and self.snapshot.get(BACKUP, (0,))[0] == own_before[0]
            version = await self.cat(MEMORY, OBSERVER)
            await self.rename(BACKUP, MEMORY, ctx)
            self.moved_handles(BACKUP, MEMORY)
            self.lines.save(version, view)
            if alone and own_before is not None and self.snapshot.get(MEMORY) != own_before:
                self.history.keep(MEMORY, own_before[1])  # the save replaced it (the module)
        finally:
            self.give(ctx.pid, blind=True)

    def moved_handles(self, src: str, dst: str | None) -> None:
        for s in self.scripts:
            if s.index == src:
                s.index = dst

    async def chmod(self) -> None:
        mode = self.rng.choice((0o000, 0o600, 0o644))
        self.note(None, f"chmod {mode:03o} MEMORY.md")
        ctx = FakeContext(pid=self.take(blind=True))
        try:
            await self.setattr(MEMORY, ctx, mode=mode)
        finally:
            self.give(ctx.pid, blind=True)

    async def topic_change(self) -> None:
        path = self.rng.choice(TOPICS)
        what = self.rng.choice(("truncate", "unlink", "rename"))
        ctx = FakeContext(pid=self.take(blind=True))
        try:
            if what == "truncate":
                size = self.rng.randint(0, 12)
                self.note(None, f"truncate {path} to {size}")
                await self.setattr(path, ctx, size=size)
            elif what == "unlink":
                self.note(None, f"rm {path}")
                await self.unlink(path, ctx)
            else:
                dst = self.rng.choice([t for t in TOPICS if t != path])
                self.note(None, f"mv {path} {dst}")
                await self.rename(path, dst, ctx)
        except Failed as exc:
            if exc.errno != errno.ENOENT:
                raise
            self.note(None, f"  {exc}")
        finally:
            self.give(ctx.pid, blind=True)

    async def on_disk(self) -> None:
        """The other account changes its files (Claude Code there), then a rescan."""
        self.clock += 1
        mtime = at(self.clock)
        what = self.rng.choice(("index", "index", "index", "topic"))
        if what == "topic":
            path = self.rng.choice((*TOPICS, "w.md"))
            target = self.work / path
            if target.exists() and self.rng.random() < 0.3:
                self.note(None, f"on disk: work removes {path}")
                target.unlink()
            else:
                self.note(None, f"on disk: work writes {path}")
                write(target, self.topic_body(path), mtime)
        else:
            lines = [line for line in self.disk(self.work / MEMORY).decode().split("\n") if line]
            change = self.rng.choice(("add", "remove", "copy"))
            if change == "add" or not lines:
                lines.append(f"- work s{self.seed} {self.fresh}")
                self.fresh += 1
            elif change == "remove":
                lines.remove(self.rng.choice(lines))
            else:  # a line of the own index, copied: both have it now
                own = [t for t in texts(self.disk(self.own / MEMORY)) if t not in lines]
                if own:
                    lines.insert(self.rng.randint(0, len(lines)), self.rng.choice(own))
            self.note(None, f"on disk: work's MEMORY.md ({change})")
            write(self.work / MEMORY, "".join(f"{line}\n" for line in lines), mtime)
        rescan(self.ops)

    # --- processes ----------------------------------------------------------------------

    def take(self, *, blind: bool) -> int:
        pool = self.blind_free if blind else self.pids_free
        return pool.pop(self.rng.randrange(len(pool)))

    def give(self, pid: int, *, blind: bool) -> None:
        (self.blind_free if blind else self.pids_free).append(pid)

    def start(self) -> Script | None:
        kinds: list[tuple[int, str, Callable[[Script], AsyncIterator[None]], bool]] = [
            (4, "edit", self.claude_edit, False),
            (3, "in-place", self.in_place, False),
            (2, "rdwr", self.rdwr, False),
            (2, "sed", self.sed, False),
            (2, "append", self.append, False),
            (1, "blind", self.blind, True),
            (6, "topic", self.topic_write, False),
        ]
        # One process that never read stays free for what stands alone.
        kinds = [k for k in kinds if len(self.blind_free if k[3] else self.pids_free) > k[3]]
        if not kinds:
            return None
        _, name, make, blind = self.rng.choices(kinds, [k[0] for k in kinds])[0]
        ctx = FakeContext(pid=self.take(blind=blind))
        script = Script(f"{name}{len(self.log)}", ctx, make, exclusive=blind, blind=blind)
        self.scripts.append(script)
        return script

    def finished(self) -> None:
        for s in [s for s in self.scripts if s.done]:
            self.scripts.remove(s)
            self.give(s.ctx.pid, blind=s.blind)

    # --- a step -------------------------------------------------------------------------

    async def step(self) -> None:
        alone: list[tuple[int, Callable[[], Awaitable[None]]]] = [
            (3, self.restore),
            (2, self.backup_then_write),
            (1, self.away_and_back),
            (1, self.chmod),
            (3, self.topic_change),
            (3, self.on_disk),
        ]
        can_run = [s for s in self.scripts if not s.exclusive]
        choices: list[tuple[int, str]] = [(10, "one")] if self.scripts else []
        if len(can_run) >= 2:
            choices.append((5, "many"))
        if len(self.scripts) < MAX_SCRIPTS:
            choices.append((6 if len(self.scripts) < 2 else 3, "start"))
        choices.append((sum(w for w, _ in alone) // 2, "alone"))
        kind = self.rng.choices([c for _, c in choices], [w for w, _ in choices])[0]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind == "start":
            script = self.start()
            if script is not None:
                await script.advance()
        elif kind == "one":
            await self.rng.choice(self.scripts).advance()
        elif kind == "many":
            group = self.rng.sample(can_run, min(len(can_run), self.rng.choice((2, 2, 3))))
            self.note(None, f"at once: {', '.join(s.name for s in group)}")
            failed: list[BaseException] = []

            async def advance(s: Script) -> None:
                try:
                    await s.advance()
                except (AssertionError, Failed) as exc:
                    failed.append(exc)

            async with trio.open_nursery() as nursery:
                for s in group:
                    nursery.start_soon(advance, s)
            if failed:
                raise failed[0]
        else:
            op = self.rng.choices([op for _, op in alone], [w for w, _ in alone])[0]
            await op()
        self.finished()

    async def finish(self) -> None:
        while self.scripts:
            await self.scripts[0].advance()
            self.finished()
            await self.check()

    def dump(self, exc: BaseException) -> None:
        """The whole log, to MEMFS_HISTORY_DUMP.<seed> if set: to find a failure's cause."""
        where = os.environ.get("MEMFS_HISTORY_DUMP")
        if where:
            Path(f"{where}.{self.seed}").write_text("\n".join(self.log) + f"\n{exc}\n")

    # --- the invariant ------------------------------------------------------------------

    async def check(self) -> None:
        if self.errors:
            raise Mismatch("; ".join(self.errors))
        self.ops._check()
        self.check_bodies()
        view = await self.cat(MEMORY, OBSERVER)
        self.views = [*self.views[-7:], view]
        self.required.append(len(self.lines.live))
        missing = self.lines.live - texts(view)
        if missing:
            raise Mismatch(f"lines saves added are not in the merged MEMORY.md: {sorted(missing)}"
                           f"\nit reads:\n{view.decode(errors='replace')}")  # fmt: skip

    def kept_on_disk(self) -> dict[str, set[bytes]]:
        found: dict[str, set[bytes]] = {}
        top = self.own / ".history"
        if not top.is_dir():
            return found
        for folder, _, names in os.walk(top):
            for name in names:
                full = Path(folder) / name
                path = str(Path(folder).relative_to(top))
                found.setdefault(path, set()).add(self.body(str(full), full.lstat()))
        return found

    def check_bodies(self) -> None:
        disk = self.kept_on_disk()
        heads = self.heads()
        for path in sorted({k.path for k in self.history.entries} | set(disk)):
            want = {k.body for k in self.history.present(path)}
            have = disk.get(path, set())
            head = heads.get(path, (0, None))[1]
            lost = {b for b in want - have if b != head}
            if lost:
                raise Mismatch(f"{path}: kept versions lost: {[short(b) for b in lost]}; kept "
                               f"{[short(b) for b in have]}")  # fmt: skip
            extra = have - want
            if extra:
                raise Mismatch(f"{path}: kept past the limits: {[short(b) for b in extra]}; "
                               f"the model keeps {[short(b) for b in want]}")  # fmt: skip


@pytest.fixture
def processes() -> Iterator[list[int]]:
    """Writers' processes: sleepers that hold nothing of the mount, so that /proc answers
    for them (their tgid, their descriptors) as for a real writer."""
    started = [subprocess.Popen(["sleep", "600"]) for _ in range(PROCESSES)]
    try:
        yield [p.pid for p in started]
    finally:
        for p in started:
            p.kill()
            p.wait()


@pytest.fixture
def readdir_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs.pyfuse3, "readdir_reply", fake_readdir_reply)


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}-{STEPS}steps" for s in SEEDS])
@pytest.mark.usefixtures("readdir_reply")
async def test_history_and_index_agree_with_the_model(
    tmp_path: Path,
    seed: int,
    processes: list[int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = Run(seed, tmp_path, processes)
    run.populate()
    absorb = writes.absorb

    def absorbed(catalog, project, plan, applied):  # type: ignore[no-untyped-def]
        new_root = absorb(catalog, project, plan, applied)
        run.absorbed(plan, applied)
        return new_root

    monkeypatch.setattr(writes, "absorb", absorbed)
    with capsys.disabled():
        print(f"\nhistory model seed {seed}: {STEPS} steps, limits {run.limits}")
    began = time.monotonic()
    done = 0
    try:
        await run.check()
        while done < STEPS:
            done += 1
            await run.step()
            await run.check()
        await run.finish()
    except (AssertionError, Failed) as exc:
        run.dump(exc)
        tail = "\n  ".join(run.log[-30:])
        raise AssertionError(f"seed {seed}, step {done}: {exc}\nlast steps:\n  {tail}") from exc
    with capsys.disabled():
        print(
            f"\nhistory model seed {seed}: {STEPS} steps ({len(run.log)} requests logged, "
            f"{run.counts}), {len(run.history.entries)} versions kept, "
            f"{len(run.lines.added)} lines added (a check required "
            f"{sum(run.required) / len(run.required):.1f} of them on average, "
            f"{max(run.required)} at most), {time.monotonic() - began:.1f} s"
        )
