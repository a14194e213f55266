"""Tier 2: the pyfuse3 adapter's read side, its handlers awaited directly with a stand-in
request context: lookups and forget, attributes, listings, reads, ``here``, invalidations,
xattr and statfs. Every write handler is in test_fs_writes.py.

No mount: ``pyfuse3.init`` is never called. The sources are the ``sample`` fake home
(conftest.py, built by helpers.make_sample) with two Claude Code accounts (``~/.claude``,
the own source named ``claude``; ``~/.claude-work``, named ``work``) and pi's memory folder.
The kernel invalidations the adapter queues are read back from its channel instead of being
sent.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyfuse3
import pytest
from fakes import FakeContext, FakeToken, fields
from helpers import (
    B_BODY,
    CLAUDE_SLUG,
    CTX,
    D_BODY,
    OWN_A,
    PI_ONLY_FOLDER,
    PI_ONLY_SLUG,
    PI_SLUG,
    PROJECT_LISTING,
    UNION,
    WORK_A,
    WORK_A_HISTORY,
    WORK_MEMORY,
    Sample,
    at,
    build,
    cat,
    drain,
    fake_home,
    fuse_errno,
    listing,
    read_all,
    rescan,
    walk,
    write,
    write_through,
)

from memfs.adapter import folders as folders_module
from memfs.adapter import fs, kernel
from memfs.adapter.fs import HERE_INODE, ROOT_INODE, STATUS_XATTR, MemFS
from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import sources
from memfs.disk.pins import folder_limit
from memfs.disk.sources import NAME_MAX
from memfs.rules.slug import claude_slug
from memfs.view import documents as documents_module
from memfs.view.project import history_stamp

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
    assert ops.inodes.lookups(a.st_ino) == 2
    await ops.forget([(a.st_ino, 1)])
    assert ops.inodes.lookups(a.st_ino) == 1
    inodes = ops.status()["inodes"]
    await ops.forget([(a.st_ino, 1), (project.st_ino, 1)])
    assert ops.inodes.lookups(a.st_ino) == 0
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


async def test_preamble_of_a_project_with_no_memory_shows_the_mounts_start(
    sample: Sample,
) -> None:
    # Issue 36: it drew on nothing and showed 1970, so mtime ranking put it oldest of all.
    ops = sample.ops
    for name in ("PREAMBLE.md", "PREAMBLE-600.md"):
        found = await walk(ops, f"-home-a-brand-new/{name}")
        assert found.st_mtime_ns == ops.started_ns, name
        assert (await ops.getattr(found.st_ino, CTX)).st_mtime_ns == ops.started_ns, name
    # One that draws on files keeps the newest of them, however old (§4).
    assert (await walk(ops, f"{CLAUDE_SLUG}/PREAMBLE.md")).st_mtime_ns == at(40) < ops.started_ns


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
    assert set(names) == {"global", "here", CLAUDE_SLUG, PI_ONLY_SLUG}
    slugs = [n for n in names if n not in ("global", "here")]
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


def spy_shown(ops: MemFS, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The keys whose attributes the adapter makes from now on (`Shown.of`)."""
    made: list[tuple[str, str]] = []
    of = ops.shown.of

    def spied(
        ino: int, key: tuple[str, str], project: object, *read: object
    ) -> pyfuse3.EntryAttributes:
        made.append(key)
        return of(ino, key, project, *read)  # type: ignore[arg-type]

    monkeypatch.setattr(ops.shown, "of", spied)
    return made


@pytest.mark.usefixtures("readdir_reply")
async def test_a_warm_readdir_sends_every_entry_as_the_first_made_it(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing keeps its entries' attributes packed and sends them through one object:
    every field of every entry is what the first readdir made, a folder's link count, an
    atime apart from the mtime and a time too late for the packing (made again) included."""
    ops = sample.ops
    os.utime(sample.own / "a.md", ns=(at(-7200), at(-60)))
    write(sample.own / "late.md", "dated after 2262\n", 2**63 + 10**9)
    project = await walk(ops, CLAUDE_SLUG)

    async def entries() -> dict[bytes, dict[str, float]]:
        fh = await ops.opendir(project.st_ino, CTX)
        sent: dict[bytes, dict[str, float]] = {}
        token = FakeToken()
        while not sent or token.refused:  # 3 a reply, as a kernel with a small buffer asks
            start, token = token.next_id, FakeToken(room=3)
            await ops.readdir(fh, start, token)
            sent |= {name: fields(a) for name, a, _ in token.accepted}
        await ops.releasedir(fh)
        return sent

    first = await entries()
    made = spy_shown(ops, monkeypatch)
    assert await entries() == first
    # Only the time past 2262 is made again (once more when a full reply refused it).
    assert set(made) == {(CLAUDE_SLUG, "late.md")}
    assert stat.S_ISDIR(int(first[b"sub"]["st_mode"]))
    assert first[b"sub"]["st_nlink"] == 2
    assert first[b"a.md"]["st_atime_ns"] == at(-7200) != first[b"a.md"]["st_mtime_ns"]
    assert first[b"late.md"]["st_mtime_ns"] == 2**63 + 10**9
    for name, sent in first.items():
        found = await ops.lookup(project.st_ino, name, CTX)
        assert sent == fields(found), name


def spy_folder_stats(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(view folder, whether on the trio thread) of every real folder stat from now on."""
    made: list[tuple[str, bool]] = []
    stat_folder = sources.stat_folder

    def spied(root: Path, parts: Sequence[str], path: str) -> sources.FileStat | None:
        made.append((path, threading.current_thread() is threading.main_thread()))
        return stat_folder(root, parts, path)

    monkeypatch.setattr(sources, "stat_folder", spied)
    return made


async def test_a_folders_attributes_are_its_real_folders_read_in_a_worker(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§7a, §7.6: a folder below a project's top shows its real folder's mode and times,
    read off the request thread (the kernel then keeps them an hour), the own source's
    folder first; and again after a change through the mount."""
    ops = sample.ops

    def times(folder: Path) -> tuple[int, int]:
        st = folder.stat()  # its atime as the scans left it
        return st.st_atime_ns, st.st_mtime_ns

    os.utime(sample.work / "sub", ns=(at(-50), at(-70)))
    stats = spy_folder_stats(monkeypatch)
    found = await walk(ops, f"{CLAUDE_SLUG}/sub")
    assert (found.st_atime_ns, found.st_mtime_ns) == times(sample.work / "sub")
    assert found.st_mtime_ns == at(-70)
    assert stat.S_IMODE(found.st_mode) == stat.S_IMODE((sample.work / "sub").stat().st_mode)
    assert fields(await ops.getattr(found.st_ino, CTX)) == fields(found)
    (sample.own / "sub").mkdir()
    os.utime(sample.own / "sub", ns=(at(-5), at(-7)))
    rescan(ops)
    shown = await ops.getattr(found.st_ino, CTX)
    assert (shown.st_atime_ns, shown.st_mtime_ns) == times(sample.own / "sub")
    assert shown.st_mtime_ns == at(-7)  # the own source's folder first
    assert {path for path, _ in stats} == {"sub"}
    assert not any(on_trio for _, on_trio in stats)


@pytest.mark.usefixtures("readdir_reply")
async def test_readdir_reads_subfolders_in_a_worker_a_batch_at_a_time(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§7a: each subfolder's entry shows its real folder's times, read off the request
    thread, `READ_AHEAD` entries' in one worker call: a listing longer than that too."""
    ops = sample.ops
    count = folders_module.READ_AHEAD + 40
    for i in range(count):
        (sample.own / f"dir{i:03}").mkdir()
        os.utime(sample.own / f"dir{i:03}", ns=(at(-i), at(-i)))
    project = await walk(ops, CLAUDE_SLUG)
    stats = spy_folder_stats(monkeypatch)
    calls = 0
    read = ops.shown.read_folders

    async def counted(*args: Any) -> dict[str, sources.FileStat | None]:
        nonlocal calls
        calls += 1
        return await read(*args)

    monkeypatch.setattr(ops.shown, "read_folders", counted)
    fh = await ops.opendir(project.st_ino, CTX)
    token = FakeToken()
    await ops.readdir(fh, 0, token)
    await ops.releasedir(fh)
    sent = {os.fsdecode(name): a for name, a, _ in token.accepted}
    assert len(sent) == len(PROJECT_LISTING) + count
    assert all(sent[f"dir{i:03}"].st_mtime_ns == at(-i) for i in range(count))
    assert sent["sub"].st_mtime_ns == (sample.work / "sub").stat().st_mtime_ns
    assert calls == 2  # 256 entries' subfolders, then the rest
    assert len(stats) == count + 1
    assert not any(on_trio for _, on_trio in stats)


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
    made = spy_shown(ops, monkeypatch)
    assert fields(await preamble_entry()) == fields(first)
    assert made == []  # kept: no rendering, no attributes made
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
    assert ops.inodes.known((CLAUDE_SLUG, "b.md")) is None  # no number for what was skipped


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
            assert ops.inodes.lookups(attrs.st_ino) == 1  # every accepted entry counts as a lookup
        if not token.refused:
            break
        # The kernel stops at the first refusal: exactly one entry offered and not counted.
        assert len(token.refused) == 1
        name, refused, next_id = token.refused[0]
        assert next_id == token.next_id + 1
        assert ops.inodes.lookups(refused.st_ino) == 0
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
        assert ops.inodes.lookups(found.st_ino) == 2, name


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

    def fails_third(
        ino: int, key: tuple[str, str], p: object, *read: object
    ) -> pyfuse3.EntryAttributes:
        nonlocal made
        made += 1
        if made == 3:
            raise RuntimeError("an unexpected failure")
        return attrs_of(ino, key, p, *read)  # type: ignore[arg-type]

    monkeypatch.setattr(ops.shown, "of", fails_third)
    token = FakeToken()
    assert await fuse_errno(ops.readdir(fh, 0, token)) == errno.EIO
    assert len(token.accepted) == 2  # the reply took two entries before the failure
    assert all(ops.inodes.lookups(a.st_ino) == 0 for _, a, _ in token.accepted)
    monkeypatch.setattr(ops.shown, "of", attrs_of)
    again = FakeToken()
    await ops.readdir(fh, 0, again)  # the kernel asks again from where it stood
    await ops.releasedir(fh)
    assert again.names == PROJECT_LISTING
    assert all(ops.inodes.lookups(a.st_ino) == 1 for _, a, _ in again.accepted)


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
    catalog.adopt(offline.build(catalog, CLAUDE_SLUG))
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


def whole_ways(ops: MemFS, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the opens that take the whole way (`MemFS._open`), not the warm one."""
    calls: list[int] = []
    whole_way = ops._open

    async def counted(inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        calls.append(inode)
        return await whole_way(inode, flags, ctx)

    monkeypatch.setattr(ops, "_open", counted)
    return calls


async def test_a_warm_open_checks_only_the_disk_and_reads_through_the_kept_descriptor(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kernel.py: once an open took the whole way and was served through the page cache
    with the record's descriptor, the next read-only open of that inode, the view and the
    file unchanged, is answered from the record."""
    ops = sample.ops
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    assert await cat(ops, a.st_ino) == OWN_A.encode()
    assert await cat(ops, a.st_ino) == OWN_A.encode()
    opens, fds = ops.stats.open, open_fds()
    whole = whole_ways(ops, monkeypatch)
    first = await ops.open(a.st_ino, os.O_RDONLY, CTX)
    second = await ops.open(a.st_ino, os.O_RDONLY, FakeContext(pid=os.getpid() + 1))
    assert whole == []
    assert first.keep_cache
    assert not first.direct_io
    assert ops.files.get(first.fh).borrowed  # no descriptor of its own: no openat, no close
    assert await read_all(ops, first.fh) == OWN_A.encode()
    assert await read_all(ops, second.fh) == OWN_A.encode()
    assert ops.kernel.holds_other(a.st_ino, None)  # two readers of its pages
    for info in (first, second):
        await ops.flush(info.fh)
        await ops.release(info.fh)
    assert ops.stats.open == opens + 2
    assert open_fds() == fds
    assert not ops.kernel.holds_other(a.st_ino, None)  # both readers counted out
    # Any open but a plain read takes the whole way.
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_APPEND):
        info = await ops.open(a.st_ino, flags, CTX)
        await ops.release(info.fh)
    assert whole == [a.st_ino] * 3
    ops._check()


async def test_past_the_kept_descriptors_limit_an_open_takes_the_whole_way(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kernel.version_fd_limit: a version read once the records keep as many descriptors as
    they may keeps none; each of its opens takes the whole way and reads right."""
    ops = sample.ops
    ops.kernel.fd_limit = 1
    a = await walk(ops, f"{CLAUDE_SLUG}/a.md")
    b = await walk(ops, f"{CLAUDE_SLUG}/b.md")
    for _ in range(2):
        assert await cat(ops, a.st_ino) == OWN_A.encode()
        assert await cat(ops, b.st_ino) == B_BODY.encode()
    fds = open_fds()
    whole = whole_ways(ops, monkeypatch)
    for _ in range(2):
        assert await cat(ops, a.st_ino) == OWN_A.encode()
        assert await cat(ops, b.st_ino) == B_BODY.encode()
    assert whole == [b.st_ino] * 2
    assert ops.kernel.fds_kept == 1
    assert open_fds() == fds  # b's descriptor closed at each release
    ops._check()


@pytest.mark.parametrize("soft", [256, 1024, 4096, 20_000, 524_288, 1 << 20])
def test_the_descriptor_limit_is_shared_by_versions_folders_and_the_rest(soft: int) -> None:
    versions, folders = kernel.version_fd_limit(soft), folder_limit(soft)
    rest = soft - versions - folders
    assert 0 <= versions <= kernel.MOST_VERSION_FDS
    assert rest >= min(max(soft // 8, kernel.OTHER_DESCRIPTORS), soft - folders)
    if soft == 20_000:  # this machine's hard limit: a version descriptor for 15,000 files
        assert versions == 15_000


def _touched_on_disk(sample: Sample, path: str) -> bytes:
    os.utime(sample.own / path, ns=(time.time_ns(), time.time_ns()))
    return (sample.own / path).read_bytes()


def _appended_on_disk(sample: Sample, path: str) -> bytes:
    with (sample.own / path).open("ab") as f:
        f.write(b"appended on disk\n")
    return (sample.own / path).read_bytes()


def _unlinked_on_disk(sample: Sample, path: str) -> bytes:
    """The watcher not told yet: the view still shows the version, which the whole way
    serves from the descriptor it holds (as a local reader's open descriptor would)."""
    body = (sample.own / path).read_bytes()
    (sample.own / path).unlink()
    return body


def _newer_in_another_source(sample: Sample, path: str) -> bytes:
    """Not published yet (a watcher's pass takes in all its batches first): the view
    alone changed, and the file the record keeps is just as it was."""
    write(sample.pi / path, "b, as pi wrote it later\n", at(50))
    rescan(sample.ops)
    return b"b, as pi wrote it later\n"


def _built_again(sample: Sample, path: str) -> bytes:
    """Another Project object shows the slug, with the very same files: the one the warm
    record names is let go."""
    catalog = sample.ops.catalog
    catalog.adopt(offline.build(catalog, CLAUDE_SLUG))
    return (sample.own / path).read_bytes()


def _invalidated(sample: Sample, path: str) -> bytes:
    ino = sample.ops.inodes.known((CLAUDE_SLUG, path))
    assert ino is not None
    sample.ops.kernel.inode(ino)  # what every change the kernel must forget queues
    return (sample.own / path).read_bytes()


async def _opened_for_writing(sample: Sample, path: str) -> bytes:
    ino = sample.ops.inodes.known((CLAUDE_SLUG, path))
    assert ino is not None
    writer = await sample.ops.open(ino, os.O_RDWR, CTX)
    assert await sample.ops.write(writer.fh, 0, b"O") == 1  # its stage is made now
    return (sample.own / path).read_bytes()  # others read the committed bytes meanwhile


@pytest.mark.parametrize(
    "change",
    [
        _touched_on_disk,
        _appended_on_disk,
        _unlinked_on_disk,
        _newer_in_another_source,
        _built_again,
        _invalidated,
        _opened_for_writing,
    ],
)
async def test_a_warm_open_after_a_change_takes_the_whole_way(
    sample: Sample,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[Sample, str], bytes | Awaitable[bytes]],
) -> None:
    """What fails the warm record's check or clears it: the disk's fstat, the project's
    generation (a change of its view, or another object built for it), an invalidation of
    the inode, a writer. The open after it reads what the
    whole way serves: the view's version, or what the disk shows."""
    ops = sample.ops
    path = "b.md" if change is _newer_in_another_source else "a.md"  # b.md: work's alone
    found = await walk(ops, f"{CLAUDE_SLUG}/{path}")
    body = await cat(ops, found.st_ino)
    await cat(ops, found.st_ino)
    whole = whole_ways(ops, monkeypatch)
    assert await cat(ops, found.st_ino) == body
    assert whole == []  # warm
    expected = change(sample, path)
    if not isinstance(expected, bytes):
        expected = await expected
    whole.clear()
    again = await ops.open(found.st_ino, os.O_RDONLY, FakeContext(pid=os.getpid() + 1))
    assert whole == [found.st_ino]
    assert await read_all(ops, again.fh) == expected
    await ops.release(again.fh)


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


@pytest.mark.usefixtures("readdir_reply")
async def test_preamble_n_is_found_by_name_and_never_listed(sample: Sample) -> None:
    # §6: PREAMBLE-<N>.md is the same rendering as PREAMBLE.md under a budget of N bytes,
    # served like it (a real size, the page cache), looked up by name only.
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    files_at = f"{sample.mnt}/{CLAUDE_SLUG}"
    whole = await cat(ops, (await ops.lookup(project.st_ino, b"PREAMBLE.md", CTX)).st_ino)
    loaded = ops.catalog.loaded()[CLAUDE_SLUG]
    assert len(whole) > 400  # so that the budgets below cut
    for n in (256, 300, 400, 1200, 1 << 20):
        found = await ops.lookup(project.st_ino, f"PREAMBLE-{n}.md".encode(), CTX)
        assert stat.S_ISREG(found.st_mode)
        assert stat.S_IMODE(found.st_mode) == 0o444
        # The kernel keeps no entry and no attributes of it: each use looks it up again
        # and finds the current rendering, so no change needs to reach it (renderings.py).
        assert (found.entry_timeout, found.attr_timeout) == (0, 0)
        info = await ops.open(found.st_ino, os.O_RDONLY, CTX)
        assert info.keep_cache  # the page cache, so mmap works: the inode's bytes never change
        assert not info.direct_io
        body = await read_all(ops, info.fh)
        await ops.release(info.fh)
        assert len(body) <= n
        assert found.st_size == len(body)
        assert (await ops.getattr(found.st_ino, CTX)).st_size == len(body)
        assert body == loaded.preamble(files_at, budget=n)
        assert (body == whole) == (n >= len(whole)), n
        assert found.st_ino != project.st_ino
    assert "PREAMBLE-1200.md" not in await listing(ops, project.st_ino)
    assert await listing(ops, project.st_ino) == PROJECT_LISTING
    # Any other N, any other spelling, anywhere but a project's top: no such file.
    sub = await ops.lookup(project.st_ino, b"sub", CTX)
    for parent, name in [
        (project.st_ino, b"PREAMBLE-255.md"),
        (project.st_ino, b"PREAMBLE-1048577.md"),
        (project.st_ino, b"PREAMBLE-0256.md"),
        (project.st_ino, b"PREAMBLE-abc.md"),
        (project.st_ino, b"PREAMBLE-+300.md"),
        (project.st_ino, b"PREAMBLE-300.MD"),
        (sub.st_ino, b"PREAMBLE-1200.md"),
        (ROOT_INODE, b"PREAMBLE-1200.md"),
    ]:
        assert await fuse_errno(ops.lookup(parent, name, CTX)) == errno.ENOENT, name
    ops._check()


async def test_preamble_n_follows_changes_and_each_open_keeps_its_rendering(
    sample: Sample,
) -> None:
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    found = await ops.lookup(project.st_ino, b"PREAMBLE-2000.md", CTX)
    info = await ops.open(found.st_ino, os.O_RDONLY, CTX)
    body = await read_all(ops, info.fh)
    settled(ops)
    write(sample.own / "fresh.md", "fresh\n", at(50))
    rescan(ops)
    ops.publisher.project_changed(ops.catalog.loaded()[CLAUDE_SLUG])
    # Nothing to tell the kernel of it: it keeps no entry of the name.
    assert not [q for q in drain(ops) if q[2].startswith(b"PREAMBLE-")]
    assert await read_all(ops, info.fh) == body  # one open, one rendering
    assert (await ops.getattr(found.st_ino, CTX)).st_size == len(body)
    fresh = await ops.lookup(project.st_ino, b"PREAMBLE-2000.md", CTX)
    assert fresh.st_ino != found.st_ino
    new = await cat(ops, fresh.st_ino)
    assert b"fresh.md" in new
    assert b"fresh.md" not in body
    assert fresh.st_size == len(new) <= 2000
    await ops.release(info.fh)
    # Once the kernel forgets an inode, its rendering goes with it.
    await ops.forget([(found.st_ino, 1), (fresh.st_ino, 1)])
    assert not ops.renderings.holds(found.st_ino)
    assert not ops.renderings.holds(fresh.st_ino)
    ops._check()


async def test_preamble_n_of_a_project_with_no_memory(sample: Sample) -> None:
    ops = sample.ops
    slug = "-home-a-brand-new"
    empty = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    found = await ops.lookup(empty.st_ino, b"PREAMBLE-300.md", CTX)
    body = await cat(ops, found.st_ino)
    assert found.st_size == len(body) <= 300
    assert body == documents_module.empty_preamble(
        ops.config, slug, f"{sample.mnt}/{slug}", budget=300
    )
    assert b"No memory for this project yet" in body


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


async def test_here_inside_a_mount_reached_through_a_symlink(
    sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # mount.prepare() makes the mountpoint absolute (os.path.abspath) but does not resolve
    # links, while /proc/<pid>/cwd is always resolved, so _here() misses the "inside the
    # mount" case: it walks up for .git through the mount and answers the slug of the
    # mount's own path instead of the project the caller is in.
    real = tmp_path / "real-mnt"
    (real / CLAUDE_SLUG).mkdir(parents=True)
    link = tmp_path / "mnt-link"
    link.symlink_to(real)
    ops = build(sample.home, link)
    monkeypatch.chdir(link / CLAUDE_SLUG)
    me = type(CTX)(pid=os.getpid())
    assert await ops.readlink(HERE_INODE, me) == CLAUDE_SLUG.encode()


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
    offline.rescan(ops.catalog.loaded()[slug], 0)  # what the watcher then reads, off the thread
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
    names = ["claude", "work", "pi", "gemini", "codex", "kilo", "goose"]
    assert [s["name"] for s in status["sources"]] == names
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
