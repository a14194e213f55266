"""Tier 2: the pyfuse3 adapter, its handlers awaited directly with a stand-in request context.

No mount: ``pyfuse3.init`` is never called. The sources are a fake home on ``tmp_path`` with
two Claude Code accounts (``~/.claude``, the own source named ``claude``; ``~/.claude-work``,
named ``work``) and pi's memory folder. The kernel invalidations the adapter queues are read
back from its channel instead of being sent.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pyfuse3
import pytest
from fakes import FakeContext, FakeToken, fake_readdir_reply
from helpers import CLAUDE_SLUG, PI_SLUG, FakeHome, at, fake_home, write

from memfs.adapter import fs
from memfs.adapter.fs import HERE_INODE, ROOT_INODE, STATUS_XATTR, MemFS
from memfs.disk import config as cfg
from memfs.disk import procs
from memfs.disk.sources import NAME_MAX, STAGE_PREFIX
from memfs.rules.slug import canonical_slug, claude_slug
from memfs.view import documents as documents_module
from memfs.view.project import Project, history_stamp

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


@pytest.fixture
def sample(tmp_path: Path) -> Sample:
    home = fake_home(tmp_path)
    own, work, pi = home.memory(".claude"), home.memory(".claude-work"), home.pi()
    write(own / "MEMORY.md", OWN_MEMORY, at(10))
    write(own / "a.md", OWN_A, at(5))
    write(work / "MEMORY.md", WORK_MEMORY, at(20))
    write(work / "a.md", WORK_A, at(30))
    write(work / "b.md", B_BODY, at(15))
    write(work / "sub" / "c.md", C_BODY, at(12))
    write(pi / "d.md", D_BODY, at(40))
    write(home.pi(PI_ONLY_FOLDER) / "p.md", "p\n", at(1))
    mnt = tmp_path / "mnt"
    config = home.config()
    assert [s.name for s in config.sources] == ["claude", "work", "pi"]
    assert config.own is not None
    assert config.own.name == "claude"
    return Sample(home, own, work, pi, mnt, build(home, mnt, config))


@pytest.fixture
def readdir_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs.pyfuse3, "readdir_reply", fake_readdir_reply)


# --- helpers ---------------------------------------------------------------------------


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
        project.rescan(i)
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


# --- lookup and forget -----------------------------------------------------------------


async def test_lookup_at_the_root_finds_canonical_projects_and_here(sample: Sample) -> None:
    ops = sample.ops
    project = await ops.lookup(ROOT_INODE, CLAUDE_SLUG.encode(), CTX)
    pi_only = await ops.lookup(ROOT_INODE, PI_ONLY_SLUG.encode(), CTX)
    here = await ops.lookup(ROOT_INODE, b"here", CTX)
    assert stat.S_ISDIR(project.st_mode)
    assert stat.S_ISDIR(pi_only.st_mode)
    assert PI_ONLY_SLUG == "-home-a-pi-only"
    assert len({project.st_ino, pi_only.st_ino, HERE_INODE, ROOT_INODE}) == 4
    assert here.st_ino == HERE_INODE
    assert stat.S_ISLNK(here.st_mode)
    # pi's spelling of a slug is folded into the canonical one, not a second project.
    for raw in (PI_SLUG, PI_ONLY_FOLDER):
        assert await fuse_errno(ops.lookup(ROOT_INODE, raw.encode(), CTX)) == errno.ENOENT
    d = await ops.lookup(project.st_ino, b"d.md", CTX)
    assert d.st_size == len(D_BODY)
    p = await ops.lookup(pi_only.st_ino, b"p.md", CTX)
    assert p.st_size == 2
    # "." and ".." name the folder and its parent.
    assert (await ops.lookup(project.st_ino, b".", CTX)).st_ino == project.st_ino
    assert (await ops.lookup(project.st_ino, b"..", CTX)).st_ino == ROOT_INODE


async def test_lookup_of_an_unknown_name_is_enoent(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    sub = await ops.lookup(project.st_ino, b"sub", CTX)
    assert await fuse_errno(ops.lookup(HERE_INODE, b"a.md", CTX)) == errno.ENOTDIR
    for parent, name in [
        (ROOT_INODE, b"nothing"),  # not a canonical slug (an unknown one is an empty project)
        (ROOT_INODE, b"-home-a_x"),
        (project.st_ino, b"nothing.md"),
        (project.st_ino, b"here"),  # `here` lives at the root only
        (project.st_ino, b"c.md"),  # sub/c.md is not at the top
        (sub.st_ino, b"a.md"),
    ]:
        assert await fuse_errno(ops.lookup(parent, name, CTX)) == errno.ENOENT, name


async def test_lookup_of_a_name_over_255_bytes_is_enametoolong(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    # Bytes, not characters: 128 two-byte characters are 256 bytes.
    for name in (b"x" * (NAME_MAX + 1), ("\u00e9" * 128).encode(), b"-" * 300):
        for parent in (ROOT_INODE, project.st_ino):
            assert await fuse_errno(ops.lookup(parent, name, CTX)) == errno.ENAMETOOLONG
    # 255 bytes is a legal name that simply is not there.
    for parent in (ROOT_INODE, project.st_ino):
        assert await fuse_errno(ops.lookup(parent, b"x" * NAME_MAX, CTX)) == errno.ENOENT


async def test_negative_lookups_take_no_inode_number(sample: Sample) -> None:
    # Editors, shells and agents probe many names that do not exist; no forget ever comes
    # for them, so a number handed out there would never be freed.
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    inodes = ops.status()["inodes"]
    for n in range(200):
        name = f"missing-{n}.md".encode()
        assert await fuse_errno(ops.lookup(project.st_ino, name, CTX)) == errno.ENOENT
        assert await fuse_errno(ops.lookup(ROOT_INODE, b"-x" + name, CTX)) == errno.ENOENT
    assert ops.status()["inodes"] == inodes


async def test_a_path_keeps_its_inode_number_across_lookups(sample: Sample) -> None:
    ops = sample.ops
    first = {p: (await walk(ops, f"{CLAUDE_SLUG}/{p}")).st_ino for p in ("a.md", "sub/c.md")}
    project = await walk(ops, CLAUDE_SLUG)
    sub = await ops.lookup(project.st_ino, b"sub", CTX)
    assert (await ops.lookup(project.st_ino, b"a.md", CTX)).st_ino == first["a.md"]
    assert (await ops.lookup(sub.st_ino, b"c.md", CTX)).st_ino == first["sub/c.md"]
    assert (await ops.lookup(ROOT_INODE, CLAUDE_SLUG.encode(), CTX)).st_ino == project.st_ino
    assert first["a.md"] != first["sub/c.md"]


async def test_forget_to_zero_keeps_the_inode_of_a_path_that_exists(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    a = await ops.lookup(project.st_ino, b"a.md", CTX)
    assert (await ops.lookup(project.st_ino, b"a.md", CTX)).st_ino == a.st_ino
    assert ops.inodes._lookups[a.st_ino] == 2
    await ops.forget([(a.st_ino, 1)])
    assert ops.inodes._lookups[a.st_ino] == 1
    inodes = ops.status()["inodes"]
    await ops.forget([(a.st_ino, 1), (project.st_ino, 1)])
    assert ops.inodes._lookups[a.st_ino] == 0
    # The path still exists: its number is kept, so the next walk gets the same one.
    assert ops.status()["inodes"] == inodes
    assert (await ops.getattr(a.st_ino, CTX)).st_size == len(OWN_A)
    assert (await walk(ops, f"{CLAUDE_SLUG}/a.md")).st_ino == a.st_ino


async def test_forget_to_zero_frees_the_inode_of_a_vanished_path(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    b = await ops.lookup(project.st_ino, b"b.md", CTX)
    await ops.lookup(project.st_ino, b"b.md", CTX)
    inodes = ops.status()["inodes"]
    (sample.work / "b.md").unlink()
    rescan(ops)
    assert await fuse_errno(ops.getattr(b.st_ino, CTX)) == errno.ENOENT
    # Still looked up once by the kernel: the number stays reserved.
    await ops.forget([(b.st_ino, 1)])
    assert ops.status()["inodes"] == inodes
    await ops.forget([(b.st_ino, 1)])
    assert ops.status()["inodes"] == inodes - 1
    assert await fuse_errno(ops.getattr(b.st_ino, CTX)) == errno.ENOENT
    # The path comes back: it gets a fresh number, never the freed one.
    write(sample.work / "b.md", B_BODY, at(50))
    rescan(ops)
    again = await ops.lookup(project.st_ino, b"b.md", CTX)
    assert again.st_ino != b.st_ino
    assert again.st_mtime_ns == at(50)


async def test_forget_of_reserved_or_unknown_inodes_is_harmless(sample: Sample) -> None:
    ops = sample.ops
    await ops.lookup(ROOT_INODE, b"here", CTX)
    await ops.forget([(ROOT_INODE, 3), (HERE_INODE, 1), (HERE_INODE, 5), (999_999, 2)])
    assert stat.S_ISDIR((await ops.getattr(ROOT_INODE, CTX)).st_mode)
    assert (await ops.lookup(ROOT_INODE, b"here", CTX)).st_ino == HERE_INODE
    assert await fuse_errno(ops.getattr(999_999, CTX)) == errno.ENOENT


# --- getattr ---------------------------------------------------------------------------


async def test_getattr_of_a_file_is_its_heads_real_size_and_mtime(sample: Sample) -> None:
    ops = sample.ops
    heads = {
        "a.md": sample.own / "a.md",  # the own source's version wins though older
        "b.md": sample.work / "b.md",
        "d.md": sample.pi / "d.md",  # from pi's spelling of the slug
        "sub/c.md": sample.work / "sub" / "c.md",
    }
    for path, real in heads.items():
        found = await walk(ops, f"{CLAUDE_SLUG}/{path}")
        st = real.stat()
        for attrs in (found, await ops.getattr(found.st_ino, CTX)):
            assert attrs.st_ino == found.st_ino
            assert stat.S_ISREG(attrs.st_mode), path
            assert stat.S_IMODE(attrs.st_mode) == 0o644, path
            assert attrs.st_size == st.st_size, path
            assert attrs.st_mtime_ns == st.st_mtime_ns, path
            assert attrs.st_nlink == 1
            assert (attrs.st_uid, attrs.st_gid) == (os.getuid(), os.getgid())


async def test_getattr_of_folders(sample: Sample) -> None:
    ops = sample.ops
    root = await ops.getattr(ROOT_INODE, CTX)
    expected = {
        CLAUDE_SLUG: 0o755,
        f"{CLAUDE_SLUG}/sub": 0o755,
        f"{CLAUDE_SLUG}/.history": 0o555,
        f"{CLAUDE_SLUG}/.history/a.md": 0o555,
    }
    assert stat.S_ISDIR(root.st_mode)
    assert root.st_ino == ROOT_INODE
    for path, mode in expected.items():
        attrs = await walk(ops, path)
        for a in (root, attrs, await ops.getattr(attrs.st_ino, CTX)):
            assert stat.S_ISDIR(a.st_mode), path
            assert a.st_size == 0
            assert (a.st_uid, a.st_gid) == (os.getuid(), os.getgid())
        assert stat.S_IMODE(attrs.st_mode) == mode, path


async def test_getattr_of_preamble_is_the_size_an_open_reads(sample: Sample) -> None:
    ops = sample.ops
    found = await walk(ops, f"{CLAUDE_SLUG}/PREAMBLE.md")
    body = await cat(ops, found.st_ino)
    assert body
    assert found.st_size == len(body)
    attrs = await ops.getattr(found.st_ino, CTX)
    assert attrs.st_size == len(body)
    assert stat.S_ISREG(attrs.st_mode)
    assert stat.S_IMODE(attrs.st_mode) == 0o444
    # As new as the newest file it draws on, so mtime ranking sees it change.
    assert attrs.st_mtime_ns == at(40)


async def test_getattr_of_memory_md_is_the_union_length(sample: Sample) -> None:
    ops = sample.ops
    found = await walk(ops, f"{CLAUDE_SLUG}/MEMORY.md")
    assert found.st_size == len(UNION.encode())
    assert found.st_size != (sample.own / "MEMORY.md").stat().st_size
    assert (await ops.getattr(found.st_ino, CTX)).st_size == len(UNION.encode())
    assert stat.S_IMODE(found.st_mode) == 0o644


async def test_getattr_of_history_is_read_only(sample: Sample) -> None:
    ops = sample.ops
    found = await walk(ops, f"{CLAUDE_SLUG}/{WORK_A_HISTORY}")
    st = (sample.work / "a.md").stat()
    for attrs in (found, await ops.getattr(found.st_ino, CTX)):
        assert stat.S_ISREG(attrs.st_mode)
        assert stat.S_IMODE(attrs.st_mode) == 0o444
        assert attrs.st_size == st.st_size
        assert attrs.st_mtime_ns == st.st_mtime_ns
        assert (attrs.st_uid, attrs.st_gid) == (os.getuid(), os.getgid())


async def test_getattr_of_here_and_of_unknown_inodes(sample: Sample) -> None:
    ops = sample.ops
    here = await ops.getattr(HERE_INODE, CTX)
    assert stat.S_ISLNK(here.st_mode)
    # Computed per caller: the kernel must not cache it.
    assert here.attr_timeout == 0
    assert here.entry_timeout == 0
    assert await fuse_errno(ops.getattr(424_242, CTX)) == errno.ENOENT


# --- opendir and readdir ---------------------------------------------------------------


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_lists_sorted_names(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    names = await listing(ops, project.st_ino)
    assert names == PROJECT_LISTING
    assert names == sorted(names)
    sub = await ops.lookup(project.st_ino, b"sub", CTX)
    assert await listing(ops, sub.st_ino) == ["c.md"]
    history = await ops.lookup(project.st_ino, b".history", CTX)
    assert await listing(ops, history.st_ino) == ["MEMORY.md", "a.md"]
    a_history = await ops.lookup(history.st_ino, b"a.md", CTX)
    assert await listing(ops, a_history.st_ino) == [WORK_A_HISTORY.rpartition("/")[2]]


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_of_the_root_reads_no_project(sample: Sample) -> None:
    ops = sample.ops
    names = await listing(ops, ROOT_INODE)
    assert set(names) == {"here", CLAUDE_SLUG, PI_ONLY_SLUG}
    slugs = [n for n in names if n != "here"]
    assert slugs == sorted(slugs)
    assert ops.catalog.loaded() == {}


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_entries_carry_the_same_attributes_as_lookup(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    fh = await ops.opendir(project.st_ino, CTX)
    token = FakeToken()
    await ops.readdir(fh, 0, token)
    await ops.releasedir(fh)
    for name, attrs, _ in token.accepted:
        found = await ops.lookup(project.st_ino, name, CTX)
        assert attrs.st_ino == found.st_ino, name
        assert attrs.st_mode == found.st_mode, name
        assert attrs.st_size == found.st_size, name
        assert attrs.st_mtime_ns == found.st_mtime_ns, name
    assert [next_id for _, _, next_id in token.accepted] == list(range(1, 8))


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_lists_preamble_as_its_rendering_now(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its entry is kept while the rendering is the same, and made again when it is not:
    also when only time changed it (a file dated in the future comes due)."""
    ops = sample.ops
    now = time.time_ns()
    write(sample.own / "later.md", "a note dated an hour ahead\n", now + 3600 * 10**9)
    project = await walk(ops, CLAUDE_SLUG)

    async def preamble_entry() -> pyfuse3.EntryAttributes:
        fh = await ops.opendir(project.st_ino, CTX)
        token = FakeToken()
        await ops.readdir(fh, 0, token)
        await ops.releasedir(fh)
        return next(a for name, a, _ in token.accepted if name == b"PREAMBLE.md")

    first = await preamble_entry()
    assert await preamble_entry() is first  # kept: no rendering, no attributes made
    assert b"later.md" not in await cat(ops, first.st_ino)
    later = SimpleNamespace(time_ns=lambda: now + 7200 * 10**9, monotonic_ns=time.monotonic_ns)
    monkeypatch.setattr(documents_module, "time", later)  # the rendering's clock
    due = await preamble_entry()
    assert due.st_ino != first.st_ino  # a new rendering, a new inode (renderings.py)
    body = await cat(ops, due.st_ino)
    assert b"later.md" in body
    assert due.st_size == len(body)
    assert (await ops.lookup(project.st_ino, b"PREAMBLE.md", CTX)).st_ino == due.st_ino


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_works_from_a_snapshot_taken_at_opendir(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    fh = await ops.opendir(project.st_ino, CTX)
    first = FakeToken(room=3)
    await ops.readdir(fh, 0, first)
    assert first.names == PROJECT_LISTING[:3]
    # A file sorting before the cookie appears mid-listing: counting positions in the live
    # folder would list PREAMBLE.md twice.
    write(sample.own / "0.md", "zero\n", at(60))
    rescan(ops)
    second = FakeToken()
    await ops.readdir(fh, first.next_id, second)
    await ops.releasedir(fh)
    assert first.names + second.names == PROJECT_LISTING
    # A new handle sees the new file.
    assert "0.md" in await listing(ops, project.st_ino)


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_skips_an_entry_that_vanished_since_opendir(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    fh = await ops.opendir(project.st_ino, CTX)
    first = FakeToken(room=2)
    await ops.readdir(fh, 0, first)
    (sample.work / "b.md").unlink()
    rescan(ops)
    second = FakeToken()
    await ops.readdir(fh, first.next_id, second)
    await ops.releasedir(fh)
    assert first.names + second.names == [n for n in PROJECT_LISTING if n != "b.md"]
    assert (CLAUDE_SLUG, "b.md") not in ops.inodes._by_key  # no number for what was skipped


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_refusal_stops_and_the_next_call_resumes(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    fh = await ops.opendir(project.st_ino, CTX)
    seen: list[str] = []
    start = 0
    calls = 0
    while True:
        token = FakeToken(room=2)
        await ops.readdir(fh, start, token)
        calls += 1
        for _, attrs, _ in token.accepted:
            assert ops.inodes._lookups[attrs.st_ino] == 1  # every accepted entry counts as a lookup
        if not token.refused:
            break
        # The kernel stops at the first refusal: exactly one entry offered and not counted.
        assert len(token.refused) == 1
        name, refused, next_id = token.refused[0]
        assert next_id == token.next_id + 1
        assert ops.inodes._lookups[refused.st_ino] == 0
        assert os.fsdecode(name) == PROJECT_LISTING[len(seen) + len(token.accepted)]
        seen += token.names
        start = token.next_id
    seen += token.names
    await ops.releasedir(fh)
    assert seen == PROJECT_LISTING
    assert calls == 4
    # Each entry was accepted exactly once, so each counts once, whatever was refused before.
    for name in PROJECT_LISTING:
        found = await ops.lookup(project.st_ino, name.encode(), CTX)
        assert ops.inodes._lookups[found.st_ino] == 2, name


@pytest.mark.usefixtures("readdir_reply")
async def test_a_readdir_failing_mid_way_counts_no_lookup(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel gets the error and none of the entries the reply took before it: none
    may count as a lookup, or those inodes would wait for a forget that never comes."""
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    fh = await ops.opendir(project.st_ino, CTX)
    attrs_of = ops.shown.of
    made = 0

    def fails_third(ino: int, key: tuple[str, str], p: object) -> pyfuse3.EntryAttributes:
        nonlocal made
        made += 1
        if made == 3:
            raise RuntimeError("an unexpected failure")
        return attrs_of(ino, key, p)  # type: ignore[arg-type]

    monkeypatch.setattr(ops.shown, "of", fails_third)
    token = FakeToken()
    assert await fuse_errno(ops.readdir(fh, 0, token)) == errno.EIO
    assert len(token.accepted) == 2  # the reply took two entries before the failure
    assert all(ops.inodes._lookups[a.st_ino] == 0 for _, a, _ in token.accepted)
    monkeypatch.setattr(ops.shown, "of", attrs_of)
    again = FakeToken()
    await ops.readdir(fh, 0, again)  # the kernel asks again from where it stood
    await ops.releasedir(fh)
    assert again.names == PROJECT_LISTING
    assert all(ops.inodes._lookups[a.st_ino] == 1 for _, a, _ in again.accepted)


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_past_the_end_and_on_unknown_handles_is_empty(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    fh = await ops.opendir(project.st_ino, CTX)
    token = FakeToken()
    await ops.readdir(fh, len(PROJECT_LISTING), token)
    assert token.accepted == []
    await ops.releasedir(fh)
    token = FakeToken()
    await ops.readdir(fh, 0, token)  # released: nothing to list
    assert token.accepted == []


async def test_opendir_of_a_file_is_enotdir(sample: Sample) -> None:
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    assert await fuse_errno(ops.opendir(a.st_ino, CTX)) == errno.ENOTDIR
    assert await fuse_errno(ops.opendir(424_242, CTX)) == errno.ENOENT


# --- open, read, release ---------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_head_file_is_read_through_the_descriptor_its_open_pinned(
    sample: Sample,
) -> None:
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    fds = open_fds()
    info = await ops.open(a.st_ino, os.O_RDONLY, CTX)
    assert info.keep_cache
    # One version per open (§5.4): the open pins the file it reads; its folder stays
    # open (pins.py), so that the next open costs one openat.
    assert ops.files.get(info.fh).fd >= 0
    assert len(ops.pins) == 1
    assert open_fds() == fds + 2
    body = OWN_A.encode()
    assert await ops.read(info.fh, 0, 4096) == body
    assert await ops.read(info.fh, 2, 3) == body[2:5]
    assert await ops.read(info.fh, len(body) - 1, 100) == body[-1:]
    assert await ops.read(info.fh, len(body), 100) == b""
    assert await ops.read(info.fh, 10_000, 100) == b""
    await ops.release(info.fh)
    # Its pages may stay in the kernel's cache: the descriptor of the version they hold is
    # kept with them (kernel.py), and the next open of that version reads through it once
    # an fstat shows it still is that version.
    assert open_fds() == fds + 2
    assert ops.status()["open_handles"] == 0
    again = await ops.open(a.st_ino, os.O_RDONLY, CTX)
    assert again.keep_cache
    assert open_fds() == fds + 2
    assert ops.files.get(again.fh).borrowed
    assert await ops.read(again.fh, 0, 4096) == body
    await ops.release(again.fh)
    # The kernel forgets the inode: the descriptor goes with its pages.
    await ops.forget([(a.st_ino, ops.inodes.lookups(a.st_ino))])
    ops.pins.close()
    assert open_fds() == fds


async def test_a_reader_open_while_a_file_is_written_reads_the_committed_bytes(
    sample: Sample,
) -> None:
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    assert await cat(ops, a.st_ino) == OWN_A.encode()  # its descriptor is kept
    writer = await ops.open(a.st_ino, os.O_RDWR, CTX)
    assert await ops.write(writer.fh, 0, b"O") == 1
    # While it is written, other readers are served with direct I/O, the committed bytes.
    reader = await ops.open(a.st_ino, os.O_RDONLY, FakeContext(pid=os.getpid() + 1))
    assert reader.direct_io
    # Served past the page cache, it reads through a descriptor of its own: the record
    # that keeps the cached version's may close it at any time.
    assert not ops.files.get(reader.fh).borrowed
    ops.kernel.forgotten(a.st_ino)
    assert await ops.read(reader.fh, 0, 4096) == OWN_A.encode()
    await ops.release(reader.fh)
    await ops.release(writer.fh)  # nothing flushed, but its release commits it
    assert await cat(ops, a.st_ino) == b"O" + OWN_A.encode()[1:]


async def test_a_writer_reads_back_what_it_wrote_before_it_closes(sample: Sample) -> None:
    """The writer's stat shows its own size (writing.py); a read open of its own sees the
    same bytes, while everyone else still reads the committed file."""
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    writer = await ops.open(a.st_ino, os.O_WRONLY | os.O_TRUNC, CTX)
    assert await ops.write(writer.fh, 0, b"x" * 12_000) == 12_000
    attrs = await ops.getattr(a.st_ino, CTX)
    assert attrs.st_size == 12_000
    mine = await ops.open(a.st_ino, os.O_RDONLY, CTX)
    assert mine.direct_io
    assert await read_all(ops, mine.fh) == b"x" * 12_000
    await ops.release(mine.fh)
    other = FakeContext(pid=os.getpid() + 1)
    assert (await ops.getattr(a.st_ino, other)).st_size == len(OWN_A)
    theirs = await ops.open(a.st_ino, os.O_RDONLY, other)
    assert await read_all(ops, theirs.fh) == OWN_A.encode()
    await ops.release(theirs.fh)
    await ops.flush(writer.fh)
    await ops.release(writer.fh)
    assert await cat(ops, a.st_ino) == b"x" * 12_000


def _touched(path: Path, body: bytes) -> bytes:
    os.utime(path, ns=(time.time_ns(), time.time_ns()))
    return body


def _appended(path: Path, body: bytes) -> bytes:
    with path.open("ab") as f:
        f.write(b"appended on disk\n")
    return path.read_bytes()


def _rewritten(path: Path, body: bytes) -> bytes:
    with path.open("r+b") as f:
        f.write(b"X" * len(body))
    return path.read_bytes()


@pytest.mark.parametrize("change", [_touched, _appended, _rewritten])
async def test_no_read_fails_when_its_file_changes_on_disk(
    sample: Sample, change: Callable[[Path, bytes], bytes]
) -> None:
    """§5.4: a change on disk, with or without an open descriptor, never turns a read
    into an error; the reader gets its version, or what the disk shows."""
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    body = OWN_A.encode()
    held = await ops.open(a.st_ino, os.O_RDONLY, CTX)
    assert held.keep_cache
    now = change(sample.own / "a.md", body)
    # The descriptor held across the change reads the disk's bytes, as a local one would
    # (its version's pages, where the kernel has them, are of the same length and place).
    got = await read_all(ops, held.fh)
    assert got in (body, now[: len(body)], now), got
    await ops.release(held.fh)
    # An open after it, the watcher not told yet: read past the page cache, the disk's.
    again = await ops.open(a.st_ino, os.O_RDONLY, CTX)
    assert await read_all(ops, again.fh) == now
    await ops.release(again.fh)
    ops._check()


async def _rewritten_in_place(sample: Sample, a: pyfuse3.EntryAttributes) -> bytes:
    """On disk, before inotify says so: the fstat of the kept descriptor sees it."""
    with (sample.own / "a.md").open("r+b") as f:
        f.write(b"OWN A, longer than it was\n")
    return (sample.own / "a.md").read_bytes()


async def _replaced_on_disk(sample: Sample, a: pyfuse3.EntryAttributes) -> bytes:
    """A sync tool's rename onto the name, taken in by the watcher: the project's
    generation moves."""
    tmp = sample.own / ".a.md.sync"
    write(tmp, "own a, as another machine wrote it\n", at(70))
    tmp.replace(sample.own / "a.md")
    rescan(sample.ops)  # not published yet: the view alone changed
    return (sample.own / "a.md").read_bytes()


async def _committed_through_the_mount(sample: Sample, a: pyfuse3.EntryAttributes) -> bytes:
    await write_through(sample.ops, a.st_ino, b"rewritten\n", os.O_WRONLY | os.O_TRUNC)
    return b"rewritten\n"


async def _renamed_over_through_the_mount(sample: Sample, a: pyfuse3.EntryAttributes) -> bytes:
    """The kernel may still open the replaced inode by its old entry: it shows the name's
    new file (its inode numbers' epoch moved)."""
    project = await walk(sample.ops, CLAUDE_SLUG)
    await sample.ops.lookup(project.st_ino, b"b.md", CTX)
    await sample.ops.rename(project.st_ino, b"b.md", project.st_ino, b"a.md", 0, CTX)
    return B_BODY.encode()


async def _numbers_moved_mid_rename(sample: Sample, a: pyfuse3.EntryAttributes) -> bytes:
    """What a rename through the mount does before its worker call (the view changes
    after it): what the open's inode number names may have moved, so it takes the long way."""
    project = await walk(sample.ops, CLAUDE_SLUG)
    await sample.ops.lookup(project.st_ino, b"b.md", CTX)
    sample.ops.inodes.move((CLAUDE_SLUG, "b.md"), (CLAUDE_SLUG, "a.md"), folder=False)
    return OWN_A.encode()  # the view still shows a.md's own version


async def _project_loaded_again(sample: Sample, a: pyfuse3.EntryAttributes) -> bytes:
    """Its source folders went and came back: another Project object shows the slug."""
    catalog = sample.ops.catalog
    del catalog._projects[CLAUDE_SLUG]
    catalog.adopt(catalog.build(CLAUDE_SLUG))
    return OWN_A.encode()


async def _being_written(sample: Sample, a: pyfuse3.EntryAttributes) -> bytes:
    """A writer's stage: readers read past the page cache, the committed bytes."""
    writer = await sample.ops.open(a.st_ino, os.O_RDWR, CTX)
    assert await sample.ops.write(writer.fh, 0, b"O") == 1
    return OWN_A.encode()


@pytest.mark.parametrize(
    "change",
    [
        _rewritten_in_place,
        _replaced_on_disk,
        _committed_through_the_mount,
        _renamed_over_through_the_mount,
        _numbers_moved_mid_rename,
        _project_loaded_again,
        _being_written,
    ],
)
async def test_a_read_open_after_a_change_reads_the_version_shown_now(
    sample: Sample,
    change: Callable[[Sample, pyfuse3.EntryAttributes], Awaitable[bytes]],
) -> None:
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    assert await cat(ops, a.st_ino) == OWN_A.encode()
    assert await cat(ops, a.st_ino) == OWN_A.encode()
    expected = await change(sample, a)
    again = await ops.open(a.st_ino, os.O_RDONLY, FakeContext(pid=os.getpid() + 1))
    assert await read_all(ops, again.fh) == expected
    await ops.release(again.fh)
    ops._check()


async def test_history_files_read_the_version_they_name(sample: Sample) -> None:
    ops = sample.ops
    found = await walk(ops, f"{CLAUDE_SLUG}/{WORK_A_HISTORY}")
    info = await ops.open(found.st_ino, os.O_RDONLY, CTX)
    assert info.keep_cache
    assert await read_all(ops, info.fh) == WORK_A.encode()
    assert await ops.read(info.fh, 5, 6) == WORK_A.encode()[5:11]
    await ops.release(info.fh)
    # The head at the same path still reads the own version.
    assert await cat(ops, (await walk(ops, f"{CLAUDE_SLUG}/a.md")).st_ino) == OWN_A.encode()


async def test_memory_md_reads_the_union(sample: Sample) -> None:
    ops = sample.ops
    found = await walk(ops, f"{CLAUDE_SLUG}/MEMORY.md")
    info = await ops.open(found.st_ino, os.O_RDONLY, CTX)
    assert info.keep_cache
    assert await read_all(ops, info.fh) == UNION.encode()
    assert await ops.read(info.fh, 12, 100) == b"- [B](b.md)\n"
    await ops.release(info.fh)
    # The version the union draws on is also kept as history.
    history = f"{CLAUDE_SLUG}/.history/MEMORY.md/work@{history_stamp(at(20))}.md"
    assert await cat(ops, (await walk(ops, history)).st_ino) == WORK_MEMORY.encode()


async def test_preamble_is_served_like_a_file_one_snapshot_per_open(sample: Sample) -> None:
    ops = sample.ops
    found = await walk(ops, f"{CLAUDE_SLUG}/PREAMBLE.md")
    info = await ops.open(found.st_ino, os.O_RDONLY, CTX)
    # Its real size, and the page cache (so mmap works), like any merged file (§6).
    assert info.keep_cache
    assert not info.direct_io
    body = await read_all(ops, info.fh)
    assert found.st_size == len(body)
    assert await ops.read(info.fh, 10, 20) == body[10:30]
    assert f"{sample.mnt}/{CLAUDE_SLUG}".encode() in body
    assert D_BODY.encode() in body  # the newest file is inlined
    # The same sources give byte-identical output.
    assert await cat(ops, found.st_ino) == body
    assert len(body) <= cfg.PreambleSettings().budget
    # The project changes: the open handle keeps its snapshot; a new open reads the new
    # body, bypassing the pages of the old one until the kernel has dropped them.
    write(sample.own / "fresh.md", "fresh\n", at(50))
    rescan(ops)
    ops.publisher.project_changed(ops.catalog.loaded()[CLAUDE_SLUG])
    folder = ops.inodes.known((CLAUDE_SLUG, ""))
    assert ("entry", folder, b"PREAMBLE.md") in drain(ops)  # the kernel looks it up again
    assert await read_all(ops, info.fh) == body
    # Reached through the old inode, the old rendering, whole, with its own size.
    old = await ops.open(found.st_ino, os.O_RDONLY, CTX)
    assert await read_all(ops, old.fh) == body
    assert (await ops.getattr(found.st_ino, CTX)).st_size == len(body)
    await ops.release(old.fh)
    # Looked up again: a new inode, with the new rendering and its size.
    fresh = await ops.lookup(folder, b"PREAMBLE.md", CTX)
    assert fresh.st_ino != found.st_ino
    again = await ops.open(fresh.st_ino, os.O_RDONLY, CTX)
    assert again.keep_cache
    new = await read_all(ops, again.fh)
    assert b"fresh.md" in new
    assert fresh.st_size == len(new)
    assert new != body
    await ops.release(again.fh)
    await ops.release(info.fh)
    assert ops.status()["open_handles"] == 0


async def test_open_of_what_is_no_file(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    sub = await ops.lookup(project.st_ino, b"sub", CTX)
    assert await fuse_errno(ops.open(project.st_ino, os.O_RDONLY, CTX)) == errno.EISDIR
    assert await fuse_errno(ops.open(sub.st_ino, os.O_RDONLY, CTX)) == errno.EISDIR
    assert await fuse_errno(ops.open(ROOT_INODE, os.O_RDONLY, CTX)) == errno.EISDIR
    assert await fuse_errno(ops.open(HERE_INODE, os.O_RDONLY, CTX)) == errno.ELOOP
    assert await fuse_errno(ops.open(424_242, os.O_RDONLY, CTX)) == errno.ENOENT
    assert ops.status()["open_handles"] == 0


# --- readlink `here` -------------------------------------------------------------------


async def test_readlink_here_names_the_callers_project(
    sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = sample.ops
    checkout = tmp_path / "code" / "my app"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "src" / "deep").mkdir(parents=True)
    slug = claude_slug(str(checkout.resolve()))
    write(sample.home.memory(".claude-work", slug) / "x.md", "x\n", at(1))
    me = FakeContext(pid=os.getpid())
    monkeypatch.chdir(checkout)
    assert await ops.readlink(HERE_INODE, me) == slug.encode()
    # Up to the git work tree: a folder inside the checkout is the same project.
    monkeypatch.chdir(checkout / "src" / "deep")
    assert await ops.readlink(HERE_INODE, me) == slug.encode()
    # The target is a project the root serves.
    target = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    assert stat.S_ISDIR(target.st_mode)
    assert (await ops.lookup(target.st_ino, b"x.md", CTX)).st_size == 2


def started(pid: int, deadline_s: float = 10.0) -> None:
    """Wait until ``pid``'s new program has its environment: Popen returns once exec has
    closed the child's descriptors, a moment before the kernel sets up its environment,
    and /proc/<pid>/environ reads empty until then (seen under load)."""
    end = time.monotonic() + deadline_s
    while not Path(f"/proc/{pid}/environ").read_bytes():
        assert time.monotonic() < end, f"process {pid} has no environment yet"
        time.sleep(0.001)


async def test_readlink_here_inside_the_mount_is_the_first_component(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = sample.ops
    # Not mounted: a plain folder where the mount would be stands in for it.
    (sample.mnt / CLAUDE_SLUG / "sub").mkdir(parents=True)
    me = FakeContext(pid=os.getpid())
    monkeypatch.chdir(sample.mnt / CLAUDE_SLUG / "sub")
    assert await ops.readlink(HERE_INODE, me) == CLAUDE_SLUG.encode()
    # At the mount's root (where `mkdir -p` stands for a moment on its way down), `here`
    # names the project of the folder the process was started in (its PWD), if any.
    elsewhere = sample.home.home / "src" / "other"
    elsewhere.mkdir(parents=True)
    for pwd, want in ((sample.mnt, None), (elsewhere, claude_slug(str(elsewhere)))):
        env = {"PATH": os.environ.get("PATH", ""), "PWD": str(pwd)}
        # A stand-in caller, killed at once: nothing here waits on it.
        with subprocess.Popen(["sleep", "30"], cwd=sample.mnt, env=env) as walker:  # noqa: ASYNC220
            try:
                started(walker.pid)
                ctx = FakeContext(pid=walker.pid)
                if want is None:
                    assert await fuse_errno(ops.readlink(HERE_INODE, ctx)) == errno.ENOENT
                else:
                    assert await ops.readlink(HERE_INODE, ctx) == want.encode()
            finally:
                walker.kill()


async def test_readlink_of_anything_but_here_is_einval(sample: Sample) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    a = await ops.lookup(project.st_ino, b"a.md", CTX)
    for ino in (ROOT_INODE, project.st_ino, a.st_ino, 424_242):
        assert await fuse_errno(ops.readlink(ino, CTX)) == errno.EINVAL


# --- writes ----------------------------------------------------------------------------


async def test_create_lands_in_the_own_folder_as_a_real_file(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    project = await walk(ops, CLAUDE_SLUG)
    info, attrs = await ops.create(
        project.st_ino, b"new.md", stat.S_IFREG | 0o666, os.O_WRONLY | os.O_CREAT, CTX
    )
    target = sample.own / "new.md"
    assert stat.S_ISREG(attrs.st_mode)
    assert attrs.st_size == 0
    assert ops.inodes._lookups[attrs.st_ino] == 1
    # The name answers through the mount at once.
    assert (await ops.lookup(project.st_ino, b"new.md", CTX)).st_ino == attrs.st_ino
    assert await ops.write(info.fh, 0, b"hello ") == 6
    assert await ops.write(info.fh, 6, b"world\n") == 6
    assert (await ops.getattr(attrs.st_ino, CTX)).st_size == 12  # a writer sees its bytes
    # Readers on disk see no file or a whole one, never a part.
    assert not target.exists() or target.read_bytes() in (b"", b"hello world\n")
    await ops.flush(info.fh)
    assert stat.S_ISREG(target.lstat().st_mode)
    assert stat.S_IMODE(target.lstat().st_mode) == 0o644  # 0o666 under the umask 022
    assert target.read_bytes() == b"hello world\n"
    await ops.release(info.fh)
    assert target.read_bytes() == b"hello world\n"
    assert stage_leftovers(sample.home.home) == []
    found = await ops.lookup(project.st_ino, b"new.md", CTX)
    assert found.st_ino == attrs.st_ino
    assert found.st_size == 12
    assert found.st_mtime_ns == target.stat().st_mtime_ns
    assert await cat(ops, found.st_ino) == b"hello world\n"
    assert read_only_trees(sample) == before


@pytest.mark.usefixtures("readdir_reply")
async def test_a_created_file_is_listed_and_a_bare_create_lands_at_release(
    sample: Sample,
) -> None:
    # `touch new.md`: create, then release with nothing written.
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    info, attrs = await ops.create(project.st_ino, b"touched.md", 0o100644, os.O_WRONLY, CTX)
    assert "touched.md" in await listing(ops, project.st_ino)
    assert (await ops.getattr(attrs.st_ino, CTX)).st_size == 0
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert (sample.own / "touched.md").read_bytes() == b""
    assert "touched.md" in await listing(ops, project.st_ino)
    assert (await ops.lookup(project.st_ino, b"touched.md", CTX)).st_ino == attrs.st_ino
    assert stage_leftovers(sample.home.home) == []
    assert ops.status()["open_handles"] == 0


async def test_a_failed_commit_is_returned_by_flush_and_leaves_nothing_behind(
    sample: Sample,
) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    await ops.lookup(project.st_ino, b"a.md", CTX)  # the project is loaded now
    info, _ = await ops.create(project.st_ino, b"x.md", 0o100644, os.O_WRONLY, CTX)
    assert await ops.write(info.fh, 0, b"x\n") == 2
    # A folder made directly in the own source, not yet reported by the watcher, is in the
    # way of the rename: close() must report it (§7.1).
    (sample.own / "x.md").mkdir()
    assert await fuse_errno(ops.flush(info.fh)) == errno.EISDIR
    await ops.release(info.fh)
    assert (sample.own / "x.md").is_dir()
    assert list((sample.own / "x.md").iterdir()) == []
    assert stage_leftovers(sample.home.home) == []
    assert ops.status()["open_handles"] == 0


@pytest.mark.usefixtures("readdir_reply")
async def test_create_in_a_folder_only_a_read_only_source_has(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    sub = await walk(ops, f"{CLAUDE_SLUG}/sub")
    info, _ = await ops.create(sub.st_ino, b"e.md", 0o100644, os.O_WRONLY, CTX)
    assert await ops.write(info.fh, 0, b"e\n") == 2
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert (sample.own / "sub" / "e.md").read_bytes() == b"e\n"
    assert await listing(ops, sub.st_ino) == ["c.md", "e.md"]
    assert read_only_trees(sample) == before


@pytest.mark.usefixtures("readdir_reply")
async def test_create_in_a_project_the_own_source_lacks_makes_its_folder(
    sample: Sample,
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_folder = sample.home.account(".claude") / "projects" / PI_ONLY_SLUG / "memory"
    assert not own_folder.exists()
    project = await walk(ops, PI_ONLY_SLUG)
    info, _ = await ops.create(project.st_ino, b"q.md", 0o100644, os.O_WRONLY, CTX)
    assert await ops.write(info.fh, 0, b"q\n") == 2
    await ops.flush(info.fh)
    await ops.release(info.fh)
    # Named by the canonical slug, not by pi's spelling.
    assert (own_folder / "q.md").read_bytes() == b"q\n"
    assert await listing(ops, project.st_ino) == ["PREAMBLE.md", "p.md", "q.md"]
    assert read_only_trees(sample) == before


async def test_a_bare_truncation_is_committed_at_release_and_an_idle_writer_changes_nothing(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shell's own descriptor stays open across the flush of its dup.
    monkeypatch.setattr(procs, "holds", lambda pid, path: True)
    ops = sample.ops
    before = read_only_trees(sample)
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    b = await walk(ops, f"{CLAUDE_SLUG}/b.md")
    # Opened for writing, nothing written: release changes nothing anywhere.
    info = await ops.open(b.st_ino, os.O_RDWR, CTX)
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert not (sample.own / "b.md").exists()
    # `: > a.md`: the shell flushes a dup before anything is written; readers keep the old
    # whole file until the release commits the empty one.
    info = await ops.open(a.st_ino, os.O_WRONLY | os.O_TRUNC, CTX)
    await ops.flush(info.fh)
    assert (sample.own / "a.md").read_bytes() == OWN_A.encode()
    await ops.release(info.fh)
    assert (sample.own / "a.md").read_bytes() == b""
    assert (await ops.getattr(a.st_ino, CTX)).st_size == 0
    assert stage_leftovers(sample.home.home) == []
    assert ops.status()["open_handles"] == 0
    assert read_only_trees(sample) == before


async def test_a_bare_truncation_commits_when_its_last_descriptor_closes(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `: > a.md` then `cat a.md`: close() must not return before the truncation lands.
    monkeypatch.setattr(procs, "holds", lambda pid, path: False)
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    info = await ops.open(a.st_ino, os.O_WRONLY | os.O_TRUNC, CTX)
    await ops.flush(info.fh)
    assert (sample.own / "a.md").read_bytes() == b""
    await ops.release(info.fh)
    assert stage_leftovers(sample.home.home) == []


async def test_a_writer_killed_by_a_signal_commits_nothing(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    info = await ops.open(a.st_ino, os.O_WRONLY | os.O_TRUNC, CTX)
    assert await ops.write(info.fh, 0, b"half a line") == 11
    monkeypatch.setattr(procs, "killed_by_signal", lambda pid: True)
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert (sample.own / "a.md").read_bytes() == OWN_A.encode()
    assert stage_leftovers(sample.home.home) == []


async def test_open_for_write_with_trunc_replaces_the_own_version(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    await write_through(ops, a.st_ino, b"rewritten\n", os.O_WRONLY | os.O_TRUNC)
    assert (sample.own / "a.md").read_bytes() == b"rewritten\n"
    attrs = await ops.getattr(a.st_ino, CTX)
    assert attrs.st_size == len(b"rewritten\n")
    assert attrs.st_mtime_ns == (sample.own / "a.md").stat().st_mtime_ns
    assert await cat(ops, a.st_ino) == b"rewritten\n"
    assert stage_leftovers(sample.home.home) == []
    assert read_only_trees(sample) == before


async def test_writing_a_read_only_head_copies_it_up_to_the_own_source(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    b = await walk(ops, f"{CLAUDE_SLUG}/b.md")
    await write_through(ops, b.st_ino, b"own b\n", os.O_WRONLY | os.O_TRUNC)
    assert (sample.own / "b.md").read_bytes() == b"own b\n"
    assert await cat(ops, b.st_ino) == b"own b\n"
    # The work version is untouched, and shown as history now that the own one is head.
    kept = f"{CLAUDE_SLUG}/.history/b.md/work@{history_stamp(at(15))}.md"
    assert await cat(ops, (await walk(ops, kept)).st_ino) == B_BODY.encode()
    # Without O_TRUNC a stage starts as a copy of the head (pi's d.md here).
    d = await walk(ops, f"{CLAUDE_SLUG}/d.md")
    await write_through(ops, d.st_ino, b"D", os.O_RDWR)
    assert (sample.own / "d.md").read_bytes() == b"D from pi\n"
    assert read_only_trees(sample) == before


async def test_editing_memory_md_starts_from_the_union(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    memory = await walk(ops, f"{CLAUDE_SLUG}/MEMORY.md")
    info = await ops.open(memory.st_ino, os.O_RDWR, CTX)
    assert await ops.read(info.fh, 0, 4096) == UNION.encode()
    line = b"- [C](sub/c.md)\n"
    assert await ops.write(info.fh, len(UNION), line) == len(line)
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert (sample.own / "MEMORY.md").read_bytes() == UNION.encode() + line
    assert await cat(ops, memory.st_ino) == UNION.encode() + line
    assert read_only_trees(sample) == before


async def test_a_handoff_write_keeps_the_replaced_version(sample: Sample) -> None:
    ops = sample.ops
    name = "handoff-agent_x_20260101.md"
    write(sample.own / name, "first\n", at(70))
    project = await walk(ops, CLAUDE_SLUG)
    handoff = await ops.lookup(project.st_ino, name.encode(), CTX)
    await write_through(ops, handoff.st_ino, b"second\n", os.O_WRONLY | os.O_TRUNC)
    assert (sample.own / name).read_bytes() == b"second\n"
    kept = sample.own / ".history" / name / f"claude@{history_stamp(at(70))}.md"
    assert kept.read_bytes() == b"first\n"
    shown = await walk(ops, f"{CLAUDE_SLUG}/.history/{name}/{kept.name}")
    assert await cat(ops, shown.st_ino) == b"first\n"


async def test_unlinking_a_handoff_keeps_it_as_history(sample: Sample) -> None:
    # `mv` from another filesystem onto a handoff unlinks it, then creates the new one:
    # the version it replaces is kept, as with a write (§7.2).
    ops = sample.ops
    name = "handoff-agent_x_20260101.md"
    write(sample.own / name, "first\n", at(70))
    project = await walk(ops, CLAUDE_SLUG)
    await ops.lookup(project.st_ino, name.encode(), CTX)
    await ops.unlink(project.st_ino, name.encode(), CTX)
    assert not (sample.own / name).exists()
    kept = sample.own / ".history" / name / f"claude@{history_stamp(at(70))}.md"
    assert kept.read_bytes() == b"first\n"
    shown = await walk(ops, f"{CLAUDE_SLUG}/.history/{name}/{kept.name}")
    assert await cat(ops, shown.st_ino) == b"first\n"


async def test_without_an_own_source_writes_are_erofs(tmp_path: Path) -> None:
    home = fake_home(tmp_path)
    write(home.memory(".claude-work") / "a.md", WORK_A, at(30))
    config_file = tmp_path / "config.toml"
    config_file.write_text(
        '[[source]]\nname = "work"\npath = "~/.claude-work/projects/{slug}/memory"\n'
    )
    config = cfg.load(home.env, config_file)
    assert config.own is None
    ops = build(home, tmp_path / "mnt", config)
    before = digest(home.home)
    project = await walk(ops, CLAUDE_SLUG)
    a = await ops.lookup(project.st_ino, b"a.md", CTX)
    assert stat.S_IMODE(a.st_mode) == 0o444
    assert stat.S_IMODE(project.st_mode) == 0o555
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        assert await fuse_errno(ops.open(a.st_ino, flags, CTX)) == errno.EROFS
    create = ops.create(project.st_ino, b"new.md", 0o100644, os.O_WRONLY, CTX)
    assert await fuse_errno(create) == errno.EROFS
    assert await cat(ops, a.st_ino) == WORK_A.encode()
    assert digest(home.home) == before
    assert ops.status()["open_handles"] == 0


async def test_preamble_and_history_are_eacces_to_writers(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    project = await walk(ops, CLAUDE_SLUG)
    preamble = await ops.lookup(project.st_ino, b"PREAMBLE.md", CTX)
    history = await ops.lookup(project.st_ino, b".history", CTX)
    kept = await walk(ops, f"{CLAUDE_SLUG}/{WORK_A_HISTORY}")
    kept_folder = await walk(ops, f"{CLAUDE_SLUG}/.history/a.md")
    for ino in (preamble.st_ino, kept.st_ino):
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
            assert await fuse_errno(ops.open(ino, flags, CTX)) == errno.EACCES
    for parent, name in [
        (project.st_ino, b"PREAMBLE.md"),
        (history.st_ino, b"x.md"),
        (kept_folder.st_ino, b"work@20260101T000000Z.md"),
        (ROOT_INODE, b"-home-a-new"),  # the root holds projects only
    ]:
        create = ops.create(parent, name, 0o100644, os.O_WRONLY, CTX)
        assert await fuse_errno(create) == errno.EACCES, name
    assert ops.status()["open_handles"] == 0
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


# --- invalidation after changes --------------------------------------------------------


def settled(ops: MemFS) -> None:
    """Drop what loading queued, so a test sees only what its change queues."""
    ops.publisher.publish_all()
    drain(ops)


async def test_a_change_made_directly_in_a_source_invalidates_the_kernels_view(
    sample: Sample,
) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    b = await ops.lookup(project.st_ino, b"b.md", CTX)
    await ops.lookup(project.st_ino, b"PREAMBLE.md", CTX)
    memory = await ops.lookup(project.st_ino, b"MEMORY.md", CTX)
    settled(ops)
    body = "b changed directly in the source, and longer\n"
    write(sample.work / "b.md", body, at(60))
    ops.publisher.project_changed(rescan(ops))
    # The name still holds a file: its dentry stays, its attributes and pages go.
    assert drain(ops) == {
        ("inode", b.st_ino, b""),
        # Derived files change with their inputs: PREAMBLE.md is looked up again, and its
        # new rendering gets a new inode.
        ("entry", project.st_ino, b"PREAMBLE.md"),
        ("inode", memory.st_ino, b""),
    }
    attrs = await ops.getattr(b.st_ino, CTX)
    assert attrs.st_size == len(body)
    assert attrs.st_mtime_ns == at(60)
    assert await cat(ops, b.st_ino) == body.encode()


async def test_a_file_appearing_or_vanishing_in_a_source_invalidates_its_entry(
    sample: Sample,
) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    sub = await ops.lookup(project.st_ino, b"sub", CTX)
    c = await ops.lookup(sub.st_ino, b"c.md", CTX)
    settled(ops)
    write(sample.pi / "sub" / "new.md", "new\n", at(61))
    ops.publisher.project_changed(rescan(ops))
    # A new name: nothing to forget (ENOENT answers are never cached by the kernel, and no
    # inode was handed out for it yet).
    assert drain(ops) == set()
    assert (await ops.lookup(sub.st_ino, b"new.md", CTX)).st_size == 4
    (sample.work / "sub" / "c.md").unlink()
    ops.publisher.project_changed(rescan(ops))
    assert drain(ops) == {("entry", sub.st_ino, b"c.md"), ("inode", c.st_ino, b"")}
    assert await fuse_errno(ops.lookup(sub.st_ino, b"c.md", CTX)) == errno.ENOENT
    assert await fuse_errno(ops.getattr(c.st_ino, CTX)) == errno.ENOENT


async def test_a_project_appearing_in_a_source_invalidates_its_root_entry(
    sample: Sample, readdir_reply: None
) -> None:
    ops = sample.ops
    slug = "-home-a-brand-new"
    # No source has it yet: an empty project (§4), not listed at the root.
    empty = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    assert await fuse_errno(ops.lookup(empty.st_ino, b"n.md", CTX)) == errno.ENOENT
    assert slug not in await listing(ops, ROOT_INODE)
    settled(ops)
    write(sample.home.memory(".claude-work", slug) / "n.md", "n\n", at(1))
    work = [s.name for s in ops.config.sources].index("work")
    assert ops.catalog.folder_added(work, slug) == slug
    ops.publisher.root_changed(slug)
    assert ("entry", ROOT_INODE, slug.encode()) in drain(ops)
    ops.catalog.loaded()[slug].rescan(0)  # what the watcher then reads, off the thread
    project = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    assert project.st_ino == empty.st_ino  # the same folder, now with memory
    assert (await ops.lookup(project.st_ino, b"n.md", CTX)).st_size == 2
    assert slug in await listing(ops, ROOT_INODE)


async def test_a_write_through_the_mount_invalidates_the_written_file(sample: Sample) -> None:
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    preamble = await walk(ops, f"{CLAUDE_SLUG}/PREAMBLE.md")
    settled(ops)
    await write_through(ops, a.st_ino, b"new a\n", os.O_WRONLY | os.O_TRUNC)
    queued = drain(ops)
    assert ("inode", a.st_ino, b"") in queued
    assert ("entry", ops.inodes.known((CLAUDE_SLUG, "")), b"PREAMBLE.md") in queued
    again = await ops.lookup(ops.inodes.known((CLAUDE_SLUG, "")), b"PREAMBLE.md", CTX)
    assert again.st_ino != preamble.st_ino


# --- xattr and statfs ------------------------------------------------------------------


async def test_status_xattr_counts_requests_and_other_names_are_enodata(sample: Sample) -> None:
    ops = sample.ops
    project = await ops.lookup(ROOT_INODE, CLAUDE_SLUG.encode(), CTX)
    await ops.lookup(project.st_ino, b"a.md", CTX)
    await ops.getattr(ROOT_INODE, CTX)
    status = json.loads(await ops.getxattr(ROOT_INODE, STATUS_XATTR, CTX))
    assert status["requests"] == {"lookup": 2, "getattr": 1}
    assert status["requests_total"] == 3
    assert status["mountpoint"] == str(sample.mnt)
    assert status["projects_loaded"] == 1
    assert [s["name"] for s in status["sources"]] == ["claude", "work", "pi"]
    # Reading the counters does not change them.
    again = json.loads(await ops.getxattr(ROOT_INODE, STATUS_XATTR, CTX))
    assert again["requests"] == status["requests"]
    assert await ops.listxattr(ROOT_INODE, CTX) == [STATUS_XATTR]
    assert await ops.listxattr(project.st_ino, CTX) == []
    for ino, name in [
        (ROOT_INODE, b"user.other"),
        (ROOT_INODE, b"security.selinux"),
        (project.st_ino, STATUS_XATTR),
        (HERE_INODE, STATUS_XATTR),
    ]:
        assert await fuse_errno(ops.getxattr(ino, name, CTX)) == errno.ENODATA, (ino, name)
    # Those are requests the kernel makes (security.capability before every write).
    after = json.loads(await ops.getxattr(ROOT_INODE, STATUS_XATTR, CTX))
    assert after["requests"] == {**status["requests"], "getxattr": 4}


async def test_statfs_names_may_be_255_bytes(sample: Sample) -> None:
    data = await sample.ops.statfs(CTX)
    assert data.f_namemax == NAME_MAX == 255
    assert data.f_bsize > 0


async def test_a_descriptor_error_inside_memfs_is_logged_with_its_traceback(
    sample: Sample, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """EBADF from memfs's own system calls is a bug of memfs (a descriptor closed under
    a call), never the caller's: the caller gets the errno, the log says where."""

    def closed_under(path: object) -> object:
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(fs, "statvfs_of", closed_under)
    assert await fuse_errno(sample.ops.statfs(CTX)) == errno.EBADF
    (record,) = [r for r in caplog.records if "descriptor error" in r.getMessage()]
    assert record.getMessage() == "descriptor error in statfs"
    assert record.exc_info is not None
    assert "closed_under" in caplog.text


async def test_opening_for_write_stages_nothing_until_the_first_write(sample: Sample) -> None:
    # An editor opening read-write, or `touch` of an existing file, copies no head and
    # leaves no temp file; the first write stages a copy of the head.
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    info = await ops.open(a.st_ino, os.O_RDWR, CTX)
    assert stage_leftovers(sample.home.home) == []
    assert await ops.read(info.fh, 0, 100) == OWN_A.encode()
    assert await ops.write(info.fh, len(OWN_A), b"more\n") == 5
    assert len(stage_leftovers(sample.home.home)) == 1
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert (sample.own / "a.md").read_bytes() == OWN_A.encode() + b"more\n"
    assert stage_leftovers(sample.home.home) == []


async def test_status_fits_in_an_xattr_however_many_stale_heads(tmp_path: Path) -> None:
    # An xattr value holds at most 64 KiB: long lists are cut, their lengths given beside.
    home = fake_home(tmp_path)
    own, work = home.memory(".claude"), home.memory(".claude-work")
    for n in range(600):
        write(own / f"topic-with-a-long-name-{n:04}.md", "own\n", at(1))
        write(work / f"topic-with-a-long-name-{n:04}.md", "newer\n", at(2))
    ops = build(home, tmp_path / "mnt")
    await walk(ops, f"{CLAUDE_SLUG}/topic-with-a-long-name-0000.md")  # loads the project
    status = ops.status()
    assert status["stale_own_heads_count"] == 600
    assert len(status["stale_own_heads"]) == 100
    raw = await ops.getxattr(ROOT_INODE, STATUS_XATTR, CTX)
    assert len(raw) < 65_536
