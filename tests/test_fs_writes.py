"""Tier 2: every write handler of the adapter, awaited directly (§7, §7.3, §7.4, §7.6).

No mount and no kernel: the handlers of `memfs.adapter.fs.MemFS` are awaited with a stand-in
request context on the ``sample`` home (conftest.py, built by helpers.make_sample: own
source ``claude``; ``work`` and ``pi`` read-only). Each test checks the result twice: on
disk (the own source holds exactly what was asked, the read-only sources are byte-identical
to their fingerprint) and through the handlers (lookup, getattr, readdir, read).
``MemFS._check()`` runs after every step.

Only the handlers, ``_check()`` and ``status()`` are used, so these tests hold for any
implementation behind the pyfuse3 signatures.
"""
# The disk is read synchronously on purpose, between handler calls, with nothing else
# running (ASYNC240).
# ruff: noqa: ASYNC240

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pyfuse3
import pytest
import trio
import trio.testing
from fakes import FakeContext, SetattrFields
from helpers import (
    B_BODY,
    C_BODY,
    CLAUDE_SLUG,
    CTX,
    OWN_A,
    OWN_MEMORY,
    PI_ONLY_SLUG,
    UNION,
    WORK_A,
    WORK_A_HISTORY,
    Sample,
    at,
    build,
    cat,
    digest,
    fake_home,
    fuse_errno,
    listing,
    read_all,
    read_only_trees,
    rescan,
    stage_leftovers,
    walk,
    write,
    write_through,
)

from memfs.adapter.fs import ROOT_INODE, MemFS
from memfs.disk import config as cfg
from memfs.disk import journal, procs, staging
from memfs.disk.sources import STAGE_PREFIX
from memfs.view.project import history_stamp

T = TypeVar("T")

RENAME_NOREPLACE = 1  # renameat2(2)
RENAME_EXCHANGE = 2
MAX_FILE_BYTES = cfg.Limits().max_file_bytes  # the sample's config keeps the default
# Another process than the writer (the tests' own pid): it sees committed files only.
OTHER = FakeContext(pid=1)
NOTES = "notes\n"
WORK_B_HISTORY = f".history/b.md/work@{history_stamp(at(15))}.md"


def attributes(**values: int) -> pyfuse3.EntryAttributes:
    attrs = pyfuse3.EntryAttributes()
    for name, value in values.items():
        setattr(attrs, name, value)
    return attrs


@pytest.fixture(autouse=True)
def strict_process_umask() -> Iterator[None]:
    """memfs's own umask must never narrow what a caller asked for: make it strict."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def notes(sample: Sample) -> Path:
    """An own file no other source has, written before the project loads."""
    return write(sample.own / "notes.md", NOTES, at(8))


# --- steps: every handler call is followed by the invariants -------------------------------


async def ok(ops: MemFS, call: Awaitable[T]) -> T:
    """Await a handler that must succeed, then check every invariant."""
    result = await call
    ops._check()
    return result


async def refused(ops: MemFS, call: Awaitable[object]) -> int:
    """The errno a handler refuses with; then check every invariant."""
    code = await fuse_errno(call)
    ops._check()
    return code


async def find(ops: MemFS, path: str, ctx: pyfuse3.RequestContext = CTX) -> pyfuse3.EntryAttributes:
    """Look up ``path`` below the project, component by component."""
    attrs = await ok(ops, ops.lookup(ROOT_INODE, CLAUDE_SLUG.encode(), ctx))
    for name in filter(None, path.split("/")):
        attrs = await ok(ops, ops.lookup(attrs.st_ino, os.fsencode(name), ctx))
    return attrs


async def missing(ops: MemFS, path: str) -> bool:
    """Whether the walk to ``path`` ends in ENOENT."""
    try:
        await find(ops, path)
    except pyfuse3.FUSEError as exc:
        ops._check()
        return exc.errno == errno.ENOENT
    return False


async def body(ops: MemFS, path: str, ctx: pyfuse3.RequestContext = CTX) -> bytes:
    """What a reader of ``path`` gets: open, read all, release."""
    ino = (await find(ops, path, ctx)).st_ino
    info = await ok(ops, ops.open(ino, os.O_RDONLY, ctx))
    try:
        return await read_all(ops, info.fh)
    finally:
        await ok(ops, ops.release(info.fh))


async def names(ops: MemFS, path: str) -> list[str]:
    names = await listing(ops, (await find(ops, path)).st_ino)
    ops._check()
    return names


async def rename(ops: MemFS, src: str, dst: str, flags: int = 0) -> None:
    await ok(ops, rename_call(ops, src, dst, flags))


async def rename_call(ops: MemFS, src: str, dst: str, flags: int = 0) -> None:
    src_parent, _, src_name = src.rpartition("/")
    dst_parent, _, dst_name = dst.rpartition("/")
    old = (await find(ops, src_parent)).st_ino
    new = (await find(ops, dst_parent)).st_ino
    await ops.rename(old, src_name.encode(), new, dst_name.encode(), flags, CTX)


async def chattr(
    ops: MemFS, path: str, fh: int | None = None, **values: int
) -> pyfuse3.EntryAttributes:
    return await ok(ops, chattr_call(ops, path, fh, **values))


async def chattr_call(
    ops: MemFS, path: str, fh: int | None = None, **values: int
) -> pyfuse3.EntryAttributes:
    """setattr of the named fields: mode, size, atime, mtime (ns), uid, gid."""
    ino = (await find(ops, path)).st_ino
    keys = {"mode": "st_mode", "size": "st_size", "atime": "st_atime_ns"}
    keys |= {"mtime": "st_mtime_ns", "uid": "st_uid", "gid": "st_gid"}
    fields = SetattrFields(**{f"update_{k}": True for k in values})
    attrs = attributes(**{keys[k]: v for k, v in values.items()})
    return await ops.setattr(ino, attrs, fields, fh, CTX)


async def open_for_write(ops: MemFS, path: str, flags: int = os.O_RDWR) -> int:
    ino = (await find(ops, path)).st_ino
    return (await ok(ops, ops.open(ino, flags, CTX))).fh


async def create(
    ops: MemFS, path: str, mode: int = 0o100644, ctx: pyfuse3.RequestContext = CTX
) -> tuple[int, pyfuse3.EntryAttributes]:
    parent, _, name = path.rpartition("/")
    ino = (await find(ops, parent)).st_ino
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    info, attrs = await ok(ops, ops.create(ino, name.encode(), mode, flags, ctx))
    return info.fh, attrs


async def close(ops: MemFS, fh: int) -> None:
    """close(): flush, then release."""
    await ok(ops, ops.flush(fh))
    await ok(ops, ops.release(fh))


async def write_file(ops: MemFS, path: str, data: bytes) -> None:
    """`cat > path`: create or truncate, write, close."""
    if await missing(ops, path):
        fh, _ = await create(ops, path)
    else:
        fh = await open_for_write(ops, path, os.O_WRONLY | os.O_TRUNC)
    assert await ok(ops, ops.write(fh, 0, data)) == len(data)
    await close(ops, fh)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# --- rename ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("readdir_reply")
async def test_rename_within_a_folder_moves_the_own_file_and_its_inode(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    on_disk = notes.stat().st_ino
    ino = (await find(ops, "notes.md")).st_ino
    await rename(ops, "notes.md", "renamed.md")
    # On disk: one rename in the own source, the same file.
    assert not notes.exists()
    assert (sample.own / "renamed.md").stat().st_ino == on_disk
    assert (sample.own / "renamed.md").read_bytes() == NOTES.encode()
    # Through the handlers: the kernel moved its entry, so the inode lives at the new name.
    found = await find(ops, "renamed.md")
    assert found.st_ino == ino
    assert found.st_size == len(NOTES)
    assert found.st_mtime_ns == at(8)
    assert (await ok(ops, ops.getattr(ino, CTX))).st_size == len(NOTES)
    assert await body(ops, "renamed.md") == NOTES.encode()
    assert await missing(ops, "notes.md")
    listed = await names(ops, "")
    assert "renamed.md" in listed
    assert "notes.md" not in listed
    assert read_only_trees(sample) == before
    assert stage_leftovers(sample.home.home) == []


@pytest.mark.usefixtures("readdir_reply")
async def test_rename_across_folders_lands_in_the_own_sources_folders(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    # Into a folder only a read-only source has: the own source gets that folder.
    await rename(ops, "notes.md", "sub/notes.md")
    assert (sample.own / "sub" / "notes.md").read_bytes() == NOTES.encode()
    assert not notes.exists()
    assert await names(ops, "sub") == ["c.md", "notes.md"]
    assert await body(ops, "sub/notes.md") == NOTES.encode()
    assert await missing(ops, "notes.md")
    # Into a folder made through the mount, then back to the top.
    await ok(ops, ops.mkdir((await find(ops, "")).st_ino, b"plans", 0o755, CTX))
    await rename(ops, "sub/notes.md", "plans/notes.md")
    assert (sample.own / "plans" / "notes.md").read_bytes() == NOTES.encode()
    assert not (sample.own / "sub" / "notes.md").exists()
    assert await names(ops, "sub") == ["c.md"]
    assert await names(ops, "plans") == ["notes.md"]
    await rename(ops, "plans/notes.md", "notes.md")
    assert notes.read_bytes() == NOTES.encode()
    assert await names(ops, "plans") == []
    assert await body(ops, "notes.md") == NOTES.encode()
    assert read_only_trees(sample) == before


async def test_rename_onto_an_existing_own_file_replaces_it_whole(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    write(sample.own / "x.md", "x body\n", at(9))
    x = (await find(ops, "x.md")).st_ino
    await find(ops, "notes.md")
    await rename(ops, "x.md", "notes.md")
    assert notes.read_bytes() == b"x body\n"
    assert not (sample.own / "x.md").exists()
    found = await find(ops, "notes.md")
    assert found.st_ino == x  # the replaced file's inode is gone; the moved one is here
    assert found.st_size == len(b"x body\n")
    assert found.st_mtime_ns == at(9)
    assert await body(ops, "notes.md") == b"x body\n"
    assert await missing(ops, "x.md")


async def test_a_writer_of_a_name_renamed_over_never_commits_over_the_file_renamed_in(
    sample: Sample, notes: Path
) -> None:
    """On a local disk the writer writes into the replaced inode: its close never brings its
    bytes back over the file another process renamed onto the name."""
    ops = sample.ops
    write(sample.own / "x.md", "x body\n", at(9))
    await find(ops, "x.md")
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 0, b"the writer's bytes\n")) == 19
    await rename(ops, "x.md", "notes.md")
    await close(ops, fh)
    assert notes.read_bytes() == b"x body\n"
    assert await body(ops, "notes.md") == b"x body\n"
    assert stage_leftovers(sample.home.home) == []


async def test_rename_onto_a_read_only_head_makes_the_own_version_the_head(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    assert await body(ops, "b.md") == B_BODY.encode()
    await rename(ops, "notes.md", "b.md")
    assert (sample.own / "b.md").read_bytes() == NOTES.encode()
    assert await body(ops, "b.md") == NOTES.encode()
    assert (await find(ops, "b.md")).st_size == len(NOTES)
    # The read-only version is untouched and shown as history.
    assert await body(ops, WORK_B_HISTORY) == B_BODY.encode()
    assert read_only_trees(sample) == before


async def test_rename_noreplace_refuses_a_taken_name_and_moves_to_a_free_one(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    for taken in ("b.md", "a.md", "sub"):  # a read-only head, an own head, a folder
        code = await refused(ops, rename_call(ops, "notes.md", taken, RENAME_NOREPLACE))
        assert code == errno.EEXIST, taken
    assert digest(sample.own) == own_before
    assert await body(ops, "b.md") == B_BODY.encode()
    assert await body(ops, "notes.md") == NOTES.encode()
    await rename(ops, "notes.md", "free.md", RENAME_NOREPLACE)
    assert (sample.own / "free.md").read_bytes() == NOTES.encode()
    assert not notes.exists()
    assert await body(ops, "free.md") == NOTES.encode()
    assert await missing(ops, "notes.md")
    assert read_only_trees(sample) == before


async def test_rename_exchange_is_einval_and_moves_nothing(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    for dst in ("a.md", "b.md"):  # an exchange needs both names
        code = await refused(ops, rename_call(ops, "notes.md", dst, RENAME_EXCHANGE))
        assert code == errno.EINVAL, dst
    assert digest(sample.own) == own_before
    assert await body(ops, "notes.md") == NOTES.encode()
    assert await body(ops, "a.md") == OWN_A.encode()
    assert read_only_trees(sample) == before


@pytest.mark.usefixtures("readdir_reply")
async def test_rename_of_a_read_only_head_copies_it_up_and_hides_the_old_name(
    sample: Sample,
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    await rename(ops, "b.md", "b2.md")
    copied = sample.own / "b2.md"
    assert copied.read_bytes() == B_BODY.encode()
    assert copied.stat().st_mtime_ns == at(15)  # a rename keeps the file's mtime
    found = await find(ops, "b2.md")
    assert found.st_size == len(B_BODY)
    assert found.st_mtime_ns == at(15)
    assert await body(ops, "b2.md") == B_BODY.encode()
    assert await missing(ops, "b.md")
    assert "b.md" not in await names(ops, "")
    # Hidden, never deleted: the work version stays on disk and under .history/.
    assert await body(ops, WORK_B_HISTORY) == B_BODY.encode()
    # Across folders, from a folder only a read-only source has.
    await rename(ops, "sub/c.md", "c.md")
    assert (sample.own / "c.md").read_bytes() == C_BODY.encode()
    assert await body(ops, "c.md") == C_BODY.encode()
    assert await missing(ops, "sub/c.md")
    # An own head with a newer read-only version: the own file moves, the other is hidden.
    await rename(ops, "a.md", "a2.md")
    assert (sample.own / "a2.md").read_bytes() == OWN_A.encode()
    assert not (sample.own / "a.md").exists()
    assert await body(ops, "a2.md") == OWN_A.encode()
    assert await missing(ops, "a.md")
    assert read_only_trees(sample) == before
    # The whiteouts are memfs's state: a new mount still hides the old names.
    again = build(sample.home, sample.mnt)
    for gone in ("b.md", "a.md", "sub/c.md"):
        assert await missing(again, gone), gone
    assert await body(again, "b2.md") == B_BODY.encode()


async def test_rename_of_a_folder_holding_read_only_content_is_exdev(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    # `mv` falls back to copy and delete, which works file by file.
    assert await refused(ops, rename_call(ops, "sub", "sub2")) == errno.EXDEV
    assert await body(ops, "sub/c.md") == C_BODY.encode()
    assert await missing(ops, "sub2")
    # Across projects: separate folders.
    project = (await find(ops, "")).st_ino
    other = (await ok(ops, ops.lookup(ROOT_INODE, PI_ONLY_SLUG.encode(), CTX))).st_ino
    for name in (b"a.md", b"b.md", b"sub"):
        code = await refused(ops, ops.rename(project, name, other, b"moved.md", 0, CTX))
        assert code == errno.EXDEV, name
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


@pytest.mark.usefixtures("readdir_reply")
async def test_rename_of_a_folder_only_the_own_source_holds_moves_it_whole(
    sample: Sample,
) -> None:
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    await ok(ops, ops.mkdir(project, b"drafts", 0o755, CTX))
    await write_file(ops, "drafts/d.md", b"draft\n")
    d = (await find(ops, "drafts/d.md")).st_ino
    await rename(ops, "drafts", "final")
    assert (sample.own / "final" / "d.md").read_bytes() == b"draft\n"
    assert not (sample.own / "drafts").exists()
    assert await missing(ops, "drafts")
    assert await names(ops, "final") == ["d.md"]
    assert (await find(ops, "final/d.md")).st_ino == d
    assert await body(ops, "final/d.md") == b"draft\n"


async def test_an_agents_temp_file_then_rename_replaces_the_target(
    sample: Sample, notes: Path
) -> None:
    # Claude Code: open X.tmp.<pid>.<hex> O_EXCL, write, fsync, close, rename over X.
    ops = sample.ops
    before = read_only_trees(sample)
    temp = "notes.md.tmp.4242.0123456789ab"
    fh, _ = await create(ops, temp)
    assert await ok(ops, ops.write(fh, 0, b"new notes\n")) == 10
    await ok(ops, ops.fsync(fh, False))
    await close(ops, fh)
    await rename(ops, temp, "notes.md")
    assert notes.read_bytes() == b"new notes\n"
    assert not (sample.own / temp).exists()
    assert await body(ops, "notes.md") == b"new notes\n"
    assert await missing(ops, temp)
    # Renamed before its close: nothing lands under the temp name, all under the target.
    fh, _ = await create(ops, temp)
    assert await ok(ops, ops.write(fh, 0, b"third\n")) == 6
    await rename(ops, temp, "notes.md")
    await close(ops, fh)
    assert notes.read_bytes() == b"third\n"
    assert not (sample.own / temp).exists()
    assert await body(ops, "notes.md") == b"third\n"
    assert stage_leftovers(sample.home.home) == []
    assert read_only_trees(sample) == before


async def test_a_file_renamed_while_open_commits_under_its_new_name(
    sample: Sample, notes: Path
) -> None:
    # POSIX: a descriptor follows its file across a rename (log rotation, editors that
    # rename the original to a backup and keep writing it).
    ops = sample.ops
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, len(NOTES), b"more\n")) == 5
    await rename(ops, "notes.md", "moved.md")
    await close(ops, fh)
    assert (sample.own / "moved.md").read_bytes() == NOTES.encode() + b"more\n"
    assert not notes.exists()
    assert await missing(ops, "notes.md")
    assert await body(ops, "moved.md") == NOTES.encode() + b"more\n"


async def test_an_unlink_of_an_open_writer_and_its_release_at_once(
    sample: Sample, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The soak's one EBADF: an unlink of a name whose writer is dropping its stage (its
    # last close) while the unlink forgets that stage's temp file, in two worker threads.
    # The release must wait for the forget, or it closes the folder's descriptor under it.
    ops = sample.ops
    forgetting, go = threading.Event(), threading.Event()
    unlink = os.unlink

    def slow_unlink(*args: Any, **kwargs: Any) -> None:
        # The forget is held between its look at the temp name and its unlink.
        if sys._getframe(1).f_code.co_name == "forget_temp" and not forgetting.is_set():
            forgetting.set()
            go.wait(10)
        unlink(*args, **kwargs)

    monkeypatch.setattr(staging.os, "unlink", slow_unlink)
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 0, b"unsaved\n")) == 8
    project = (await find(ops, "")).st_ino
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ok, ops, ops.unlink(project, b"notes.md", CTX))
        assert await trio.to_thread.run_sync(forgetting.wait, 10)
        nursery.start_soon(ok, ops, ops.release(fh))
        # The release runs as far as it may: every task idle a while before the unlink
        # that holds the forget back is let go.
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        go.set()
    assert not notes.exists()  # the unlinked writer never commits
    assert await missing(ops, "notes.md")
    assert stage_leftovers(sample.home.home) == []


async def test_a_writer_whose_name_is_replaced_lands_as_a_kept_version(
    sample: Sample, notes: Path
) -> None:
    # Issue 36: a file renamed over a name while its writer still writes it. On a local
    # disk the writer writes into the replaced inode and its bytes are lost with it; here
    # they land as a kept version, and its close returns 0 only once they have.
    ops = sample.ops
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 0, b"written in place\n")) == 17
    temp, _ = await create(ops, "notes.md.tmp.1.0123456789ab")
    assert await ok(ops, ops.write(temp, 0, b"renamed in\n")) == 11
    await close(ops, temp)
    await rename(ops, "notes.md.tmp.1.0123456789ab", "notes.md")
    await close(ops, fh)
    assert notes.read_bytes() == b"renamed in\n"  # the rename's file stays the head
    kept = sorted(p.read_bytes() for p in (sample.own / ".history" / "notes.md").iterdir())
    # What the rename replaced, and what the writer wrote: nothing is lost.
    assert kept == sorted([NOTES.encode(), b"written in place\n"])
    assert stage_leftovers(sample.home.home) == []


async def test_rename_refusals(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    history = WORK_A_HISTORY
    for src, dst, code in [
        ("PREAMBLE.md", "p.md", errno.EACCES),
        ("notes.md", "PREAMBLE.md", errno.EACCES),
        (history, "h.md", errno.EACCES),
        ("notes.md", ".history/n.md", errno.EACCES),
        ("nothing.md", "n.md", errno.ENOENT),
        ("notes.md", "sub", errno.EISDIR),
        ("sub", "notes.md", errno.ENOTDIR),
        ("sub", "sub/inner", errno.EINVAL),
    ]:
        assert await refused(ops, rename_call(ops, src, dst)) == code, (src, dst)
    project = (await find(ops, "")).st_ino
    # The root holds projects only.
    root_rename = ops.rename(ROOT_INODE, CLAUDE_SLUG.encode(), ROOT_INODE, b"-home-x", 0, CTX)
    assert await refused(ops, root_rename) == errno.EPERM
    to_root = ops.rename(project, b"notes.md", ROOT_INODE, b"-home-y", 0, CTX)
    assert await refused(ops, to_root) == errno.EPERM
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


# --- mkdir and rmdir ---------------------------------------------------------------------------


async def test_mkdir_honours_the_callers_mode_and_umask_exactly(sample: Sample) -> None:
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    for name, mode, umask, expected in [
        ("d755", 0o777, 0o022, 0o755),
        ("d750", 0o777, 0o027, 0o750),
        ("d775", 0o775, 0o002, 0o775),  # memfs's own umask (077 here) must not apply
        ("d700", 0o700, 0o000, 0o700),
        ("d000", 0o000, 0o022, 0o000),  # mode 0 included (§7.6)
    ]:
        ctx = FakeContext(umask=umask)
        attrs = await ok(ops, ops.mkdir(project, name.encode(), stat.S_IFDIR | mode, ctx))
        assert stat.S_ISDIR(attrs.st_mode), name
        assert stat.S_IMODE(attrs.st_mode) == expected, name
        assert mode_of(sample.own / name) == expected, name
        shown = await ok(ops, ops.getattr(attrs.st_ino, CTX))
        assert stat.S_IMODE(shown.st_mode) == expected, name
        assert (await find(ops, name)).st_ino == attrs.st_ino
        assert (shown.st_uid, shown.st_gid) == (os.getuid(), os.getgid())


async def test_create_honours_the_callers_mode_and_umask_exactly(sample: Sample) -> None:
    ops = sample.ops
    for name, mode, umask, expected in [
        ("f644.md", 0o666, 0o022, 0o644),
        ("f664.md", 0o666, 0o002, 0o664),  # memfs's own umask (077 here) must not apply
        ("f640.md", 0o640, 0o000, 0o640),
        ("f000.md", 0o000, 0o022, 0o000),  # mode 0 included (§7.6)
    ]:
        fh, attrs = await create(ops, name, stat.S_IFREG | mode, FakeContext(umask=umask))
        assert stat.S_IMODE(attrs.st_mode) == expected, name
        await ok(ops, ops.write(fh, 0, b"x"))
        await close(ops, fh)
        assert mode_of(sample.own / name) == expected, name
        shown = await find(ops, name)
        assert stat.S_IMODE(shown.st_mode) == expected, name


@pytest.mark.usefixtures("readdir_reply")
async def test_mkdir_of_a_taken_name_and_where_memfs_serves_read_only(sample: Sample) -> None:
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    own_before = digest(sample.own)
    for name in (b"a.md", b"sub"):
        assert await refused(ops, ops.mkdir(project, name, 0o755, CTX)) == errno.EEXIST, name
    # (The kernel answers EEXIST itself for a name its lookup found; either is right here.)
    for name in (b"PREAMBLE.md", b".history"):
        code = await refused(ops, ops.mkdir(project, name, 0o755, CTX))
        assert code in (errno.EEXIST, errno.EACCES), name
    history = (await find(ops, ".history")).st_ino
    assert await refused(ops, ops.mkdir(history, b"d", 0o755, CTX)) == errno.EACCES
    assert digest(sample.own) == own_before
    # At the root: a canonical slug is a new project in the own source; anything else EINVAL.
    slug = "-home-a-brand-new"
    attrs = await ok(ops, ops.mkdir(ROOT_INODE, slug.encode(), 0o755, CTX))
    assert stat.S_ISDIR(attrs.st_mode)
    assert (sample.home.account(".claude") / "projects" / slug / "memory").is_dir()
    assert await listing(ops, attrs.st_ino) == ["PREAMBLE.md"]
    for name in (b"notes", b"-home-a-not_canonical"):
        assert await refused(ops, ops.mkdir(ROOT_INODE, name, 0o755, CTX)) == errno.EINVAL


@pytest.mark.usefixtures("readdir_reply")
async def test_rmdir_removes_an_empty_own_folder(sample: Sample) -> None:
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    await ok(ops, ops.mkdir(project, b"plans", 0o755, CTX))
    plans = (await find(ops, "plans")).st_ino
    await ok(ops, ops.mkdir(plans, b"q3", 0o755, CTX))
    assert await refused(ops, ops.rmdir(project, b"plans", CTX)) == errno.ENOTEMPTY
    await ok(ops, ops.rmdir(plans, b"q3", CTX))
    assert not (sample.own / "plans" / "q3").exists()
    assert await names(ops, "plans") == []
    await ok(ops, ops.rmdir(project, b"plans", CTX))
    assert not (sample.own / "plans").exists()
    assert await missing(ops, "plans")
    assert "plans" not in await names(ops, "")


async def test_rmdir_refusals(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    project = (await find(ops, "")).st_ino
    for name, code in [
        (b"sub", errno.ENOTEMPTY),  # work's sub/c.md is in it
        (b"notes.md", errno.ENOTDIR),
        (b"a.md", errno.ENOTDIR),
        (b"nothing", errno.ENOENT),
        (b"PREAMBLE.md", errno.EACCES),
        (b".history", errno.EACCES),
    ]:
        assert await refused(ops, ops.rmdir(project, name, CTX)) == code, name
    # Projects are removed in their sources, never through the mount.
    assert await refused(ops, ops.rmdir(ROOT_INODE, CLAUDE_SLUG.encode(), CTX)) == errno.EPERM
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


@pytest.mark.usefixtures("readdir_reply")
async def test_rmdir_of_an_empty_read_only_folder_hides_it(sample: Sample) -> None:
    ops = sample.ops
    (sample.work / "empty-dir").mkdir()
    before = read_only_trees(sample)
    project = (await find(ops, "")).st_ino
    assert "empty-dir" in await names(ops, "")
    await ok(ops, ops.rmdir(project, b"empty-dir", CTX))
    assert await missing(ops, "empty-dir")
    assert "empty-dir" not in await names(ops, "")
    assert (sample.work / "empty-dir").is_dir()
    assert read_only_trees(sample) == before
    assert await missing(build(sample.home, sample.mnt), "empty-dir")


@pytest.mark.usefixtures("readdir_reply")
async def test_rmdir_of_a_folder_holding_a_file_being_created_is_enotempty(
    sample: Sample,
) -> None:
    # Found by test_fs_model.py (seed 9): the new name is listed, so the folder is not empty.
    ops = sample.ops
    (sample.work / "empty-dir").mkdir()
    project = (await find(ops, "")).st_ino
    fh, _ = await create(ops, "empty-dir/new.md")
    assert await names(ops, "empty-dir") == ["new.md"]
    assert await refused(ops, ops.rmdir(project, b"empty-dir", CTX)) == errno.ENOTEMPTY
    assert await names(ops, "empty-dir") == ["new.md"]
    await ok(ops, ops.write(fh, 0, b"new\n"))
    await close(ops, fh)
    assert (sample.own / "empty-dir" / "new.md").read_bytes() == b"new\n"
    assert await body(ops, "empty-dir/new.md") == b"new\n"


@pytest.mark.usefixtures("readdir_reply")
async def test_a_folder_holding_a_file_being_created_stays_shown(sample: Sample) -> None:
    # Found by test_fs_model.py (seed 2): the folder the new file's stage made in the own
    # source must show, whatever else in it goes.
    (sample.work / "empty-dir").mkdir()
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    await ok(ops, ops.rmdir(project, b"empty-dir", CTX))  # work's folder is hidden now
    write(sample.work / "empty-dir" / "x.md", "x\n", at(50))
    ops = build(sample.home, sample.mnt)  # a new mount: x.md shows, so its folder does
    project = (await find(ops, "")).st_ino
    assert await names(ops, "empty-dir") == ["x.md"]
    fh, _ = await create(ops, "empty-dir/new.md")
    folder = (await find(ops, "empty-dir")).st_ino
    await ok(ops, ops.unlink(folder, b"x.md", CTX))
    assert "empty-dir" in await names(ops, "")
    assert await names(ops, "empty-dir") == ["new.md"]
    await ok(ops, ops.write(fh, 0, b"new\n"))
    await close(ops, fh)
    assert await names(ops, "empty-dir") == ["new.md"]
    assert await body(ops, "empty-dir/new.md") == b"new\n"


@pytest.mark.parametrize("how", ["create", "rename", "copy-up"])
@pytest.mark.usefixtures("readdir_reply")
async def test_a_folder_a_write_made_in_the_own_source_shows_as_after_a_remount(
    sample: Sample, notes: Path, how: str
) -> None:
    # Found by test_fs_model.py (seed 16): memfs makes the own source's folder for a write
    # into a folder only a read-only source has, but its view does not learn of it, so the
    # folder vanishes once its files go, while a new mount shows it.
    (sample.work / "empty-dir").mkdir()
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    await ok(ops, ops.rmdir(project, b"empty-dir", CTX))  # work's folder is hidden now
    write(sample.work / "empty-dir" / "x.md", "x\n", at(50))
    ops = build(sample.home, sample.mnt)  # x.md shows, so its folder does
    folder = (await find(ops, "empty-dir")).st_ino
    if how == "create":
        await write_file(ops, "empty-dir/new.md", b"new\n")
        await ok(ops, ops.unlink(folder, b"new.md", CTX))
    elif how == "rename":
        await rename(ops, "notes.md", "empty-dir/notes.md")
        await rename(ops, "empty-dir/notes.md", "notes.md")
    else:
        await chattr(ops, "empty-dir/x.md", mode=stat.S_IFREG | 0o600)
    await ok(ops, ops.unlink(folder, b"x.md", CTX))
    assert (sample.own / "empty-dir").is_dir()
    assert list((sample.own / "empty-dir").iterdir()) == []
    remounted = build(sample.home, sample.mnt)
    assert "empty-dir" in await names(remounted, "")
    assert await names(ops, "") == await names(remounted, "")
    assert await names(ops, "empty-dir") == []


@pytest.mark.usefixtures("readdir_reply")
async def test_a_folders_link_count_is_two_plus_its_subfolders(sample: Sample) -> None:
    # find and other tree walkers trust st_nlink to know when a folder has no subfolders.
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    await ok(ops, ops.mkdir(project, b"plans", 0o755, CTX))
    plans = (await find(ops, "plans")).st_ino
    await ok(ops, ops.mkdir(plans, b"q3", 0o755, CTX))
    for path in ("", "plans", "plans/q3", "sub", ".history"):
        attrs = await find(ops, path)
        folders = 0
        for name in await names(ops, path):
            child = await find(ops, f"{path}/{name}" if path else name)
            folders += stat.S_ISDIR(child.st_mode)
        assert attrs.st_nlink == 2 + folders, path
        assert (await ok(ops, ops.getattr(attrs.st_ino, CTX))).st_nlink == 2 + folders, path


# --- setattr -----------------------------------------------------------------------------------


async def test_chmod_of_an_own_file_changes_it_in_place(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    attrs = await chattr(ops, "notes.md", mode=stat.S_IFREG | 0o600)
    assert stat.S_IMODE(attrs.st_mode) == 0o600
    assert mode_of(notes) == 0o600
    assert notes.read_bytes() == NOTES.encode()
    assert notes.stat().st_mtime_ns == at(8)  # chmod changes no content, so no mtime
    found = await find(ops, "notes.md")
    assert stat.S_IMODE(found.st_mode) == 0o600
    assert found.st_mtime_ns == at(8)
    assert stat.S_IMODE((await ok(ops, ops.getattr(found.st_ino, CTX))).st_mode) == 0o600


async def test_chmod_of_a_read_only_head_copies_it_up(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    attrs = await chattr(ops, "b.md", mode=stat.S_IFREG | 0o640)
    assert stat.S_IMODE(attrs.st_mode) == 0o640
    copied = sample.own / "b.md"
    assert copied.read_bytes() == B_BODY.encode()
    assert mode_of(copied) == 0o640
    assert copied.stat().st_mtime_ns == at(15)
    found = await find(ops, "b.md")
    assert stat.S_IMODE(found.st_mode) == 0o640
    assert found.st_mtime_ns == at(15)
    assert await body(ops, "b.md") == B_BODY.encode()
    assert read_only_trees(sample) == before


async def test_truncate_of_an_own_file_and_of_a_read_only_head(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    assert (await chattr(ops, "notes.md", size=3)).st_size == 3
    assert notes.read_bytes() == b"not"
    assert (await find(ops, "notes.md")).st_size == 3
    assert await body(ops, "notes.md") == b"not"
    assert (await chattr(ops, "notes.md", size=6)).st_size == 6
    assert notes.read_bytes() == b"not\0\0\0"
    assert await body(ops, "notes.md") == b"not\0\0\0"
    # A read-only head: the own source gets the truncated copy.
    assert (await chattr(ops, "sub/c.md", size=1)).st_size == 1
    assert (sample.own / "sub" / "c.md").read_bytes() == b"c"
    assert await body(ops, "sub/c.md") == b"c"
    assert (await find(ops, "sub/c.md")).st_size == 1
    assert read_only_trees(sample) == before


async def test_truncate_past_the_size_limit_is_efbig_and_changes_nothing(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    code = await refused(ops, chattr_call(ops, "notes.md", size=MAX_FILE_BYTES + 1))
    assert code == errno.EFBIG
    assert notes.read_bytes() == NOTES.encode()
    assert (await find(ops, "notes.md")).st_size == len(NOTES)
    assert await refused(ops, chattr_call(ops, "b.md", size=MAX_FILE_BYTES + 1)) == errno.EFBIG
    assert not (sample.own / "b.md").exists()
    # At the limit is allowed.
    assert (await chattr(ops, "notes.md", size=MAX_FILE_BYTES)).st_size == MAX_FILE_BYTES
    assert notes.stat().st_size == MAX_FILE_BYTES
    assert (await find(ops, "notes.md")).st_size == MAX_FILE_BYTES


def recent_times() -> tuple[int, int]:
    """(atime, mtime) a little in the past, atime after mtime: relatime leaves such an
    atime alone when the file is read later."""
    now = time.time_ns()
    return now - 10 * 10**9, now - 20 * 10**9


async def test_utimens_of_the_mtime_alone_keeps_the_atime(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    atime_before, mtime = recent_times()
    # An atime after the mtime and recent: no read memfs makes (loading, say) moves it.
    os.utime(notes, ns=(atime_before, at(8)))
    attrs = await chattr(ops, "notes.md", mtime=mtime)
    assert attrs.st_mtime_ns == mtime
    assert notes.stat().st_mtime_ns == mtime
    assert notes.stat().st_atime_ns == atime_before
    assert (await find(ops, "notes.md")).st_mtime_ns == mtime


async def test_utimens_of_the_atime_alone_keeps_the_mtime(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    atime, _ = recent_times()
    attrs = await chattr(ops, "notes.md", atime=atime)
    assert notes.stat().st_atime_ns == atime
    assert notes.stat().st_mtime_ns == at(8)
    assert attrs.st_mtime_ns == at(8)
    assert (await find(ops, "notes.md")).st_mtime_ns == at(8)


async def test_utimens_of_one_time_of_a_folder_keeps_the_other_as_the_disk_has_it(
    sample: Sample,
) -> None:
    """§7.6: the time not asked for is the own folder's, read by the plan's worker call."""
    ops = sample.ops
    folder = sample.own / "sub"
    folder.mkdir()
    os.utime(folder, ns=(at(3), at(4)))
    attrs = await chattr(ops, "sub", atime=at(6))
    assert (folder.stat().st_atime_ns, folder.stat().st_mtime_ns) == (at(6), at(4))
    assert (attrs.st_atime_ns, attrs.st_mtime_ns) == (at(6), at(4))
    attrs = await chattr(ops, "sub", mtime=at(9))
    assert (folder.stat().st_atime_ns, folder.stat().st_mtime_ns) == (at(6), at(9))
    assert (attrs.st_atime_ns, attrs.st_mtime_ns) == (at(6), at(9))


async def test_utimens_times_read_back_through_lookup_and_getattr(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    atime, mtime = recent_times()
    attrs = await chattr(ops, "notes.md", atime=atime, mtime=mtime)
    assert (notes.stat().st_atime_ns, notes.stat().st_mtime_ns) == (atime, mtime)
    assert (attrs.st_atime_ns, attrs.st_mtime_ns) == (atime, mtime)
    found = await find(ops, "notes.md")
    assert (found.st_atime_ns, found.st_mtime_ns) == (atime, mtime)
    shown = await ok(ops, ops.getattr(found.st_ino, CTX))
    assert (shown.st_atime_ns, shown.st_mtime_ns) == (atime, mtime)


async def test_utimens_of_a_read_only_head_copies_it_up_with_those_times(
    sample: Sample,
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    atime, mtime = recent_times()
    attrs = await chattr(ops, "b.md", atime=atime, mtime=mtime)
    assert attrs.st_mtime_ns == mtime
    copied = (sample.own / "b.md").stat()
    assert (copied.st_atime_ns, copied.st_mtime_ns) == (atime, mtime)
    assert (sample.own / "b.md").read_bytes() == B_BODY.encode()
    assert (await find(ops, "b.md")).st_mtime_ns == mtime
    assert await body(ops, "b.md") == B_BODY.encode()
    assert read_only_trees(sample) == before


async def test_setattr_on_an_open_handle_changes_what_it_will_commit(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    fh = await open_for_write(ops, "notes.md")
    # ftruncate before any write: the handle's file, not the committed one, is cut; the
    # reply (kept by the kernel no longer than the request) is the writer's view.
    ino = (await find(ops, "notes.md")).st_ino
    reply = await chattr(ops, "notes.md", fh, size=3)
    assert reply.st_size == 3
    assert reply.attr_timeout == 0
    assert (await ok(ops, ops.getattr(ino, CTX))).st_size == 3
    assert (await ok(ops, ops.getattr(ino, OTHER))).st_size == len(NOTES)
    assert notes.read_bytes() == NOTES.encode()  # readers keep the old whole file
    assert await body(ops, "notes.md", OTHER) == NOTES.encode()
    assert await ok(ops, ops.read(fh, 0, 100)) == b"not"
    assert await ok(ops, ops.write(fh, 3, b"ice\n")) == 4
    await chattr(ops, "notes.md", fh, size=5)
    assert (await ok(ops, ops.getattr(ino, CTX))).st_size == 5
    await chattr(ops, "notes.md", fh, mode=stat.S_IFREG | 0o600)
    when = time.time_ns() - 30 * 10**9
    await chattr(ops, "notes.md", fh, atime=when, mtime=when)
    assert notes.read_bytes() == NOTES.encode()
    await close(ops, fh)
    assert notes.read_bytes() == b"notic"
    assert mode_of(notes) == 0o600
    assert notes.stat().st_mtime_ns == when
    found = await find(ops, "notes.md")
    assert found.st_size == 5
    assert found.st_mtime_ns == when
    assert stat.S_IMODE(found.st_mode) == 0o600
    assert await body(ops, "notes.md") == b"notic"
    assert stage_leftovers(sample.home.home) == []


async def test_chown_to_the_shown_owner_succeeds_and_changes_nothing(
    sample: Sample, notes: Path
) -> None:
    # tar, cp -a, rsync -a and install chown what they write when run as root.
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    uid, gid = os.getuid(), os.getgid()
    for path in ("notes.md", "b.md", "sub"):
        attrs = await chattr(ops, path, uid=uid, gid=gid)
        assert (attrs.st_uid, attrs.st_gid) == (uid, gid), path
        await chattr(ops, path, uid=uid)
        await chattr(ops, path, gid=gid)
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


async def test_chown_to_another_owner_is_eperm(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    uid, gid = os.getuid(), os.getgid()
    for path in ("notes.md", "b.md", "sub"):
        for values in ({"uid": uid + 1234}, {"gid": gid + 1234}, {"uid": uid + 1, "gid": gid}):
            assert await refused(ops, chattr_call(ops, path, **values)) == errno.EPERM, path
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


async def test_setattr_of_what_memfs_serves_read_only_is_eacces(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    for path in ("PREAMBLE.md", WORK_A_HISTORY):
        for values in ({"mode": stat.S_IFREG | 0o600}, {"size": 0}, {"mtime": at(1)}):
            assert await refused(ops, chattr_call(ops, path, **values)) == errno.EACCES
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


# --- unlink ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("readdir_reply")
async def test_unlink_of_an_own_file_removes_it(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    project = (await find(ops, "")).st_ino
    await ok(ops, ops.unlink(project, b"notes.md", CTX))
    assert not notes.exists()
    assert await missing(ops, "notes.md")
    assert "notes.md" not in await names(ops, "")
    # The removed version is kept (§7.2), and reads back as it was.
    kept = await names(ops, ".history/notes.md")
    assert len(kept) == 1, kept
    assert kept[0].startswith("claude@"), kept
    assert await body(ops, f".history/notes.md/{kept[0]}") == NOTES.encode()
    assert read_only_trees(sample) == before


@pytest.mark.usefixtures("readdir_reply")
async def test_each_change_keeps_the_version_it_replaces_and_is_journaled(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    # O_TRUNC rewrite, truncate by path, a rename onto: each keeps the version before.
    await write_file(ops, "notes.md", b"second\n")
    await chattr(ops, "notes.md", size=3)
    fh, _ = await create(ops, "notes.md.tmp.1.0123456789ab")
    assert await ok(ops, ops.write(fh, 0, b"fourth\n")) == 7
    await close(ops, fh)
    await rename(ops, "notes.md.tmp.1.0123456789ab", "notes.md")
    kept = await names(ops, ".history/notes.md")
    bodies = sorted([await body(ops, f".history/notes.md/{k}") for k in kept])
    assert bodies == sorted([NOTES.encode(), b"second\n", b"sec"])
    assert await body(ops, "notes.md") == b"fourth\n"
    assert not (sample.own / ".history" / "notes.md.tmp.1.0123456789ab").exists()
    changes = journal.read(ops.config.state_dir)
    assert [(c.what, c.path, c.to) for c in changes] == [
        ("rename", "notes.md.tmp.1.0123456789ab", "notes.md"),
        ("create", "notes.md.tmp.1.0123456789ab", ""),
        ("truncate", "notes.md", ""),
        ("write", "notes.md", ""),
    ]
    assert [(c.before, c.after) for c in changes] == [(7, 7), (None, 7), (7, 3), (6, 7)]
    assert all(
        c.kept.startswith(".history/notes.md/claude@")
        for c in changes
        if c.to or c.what != "create"
    )
    assert {c.pid for c in changes} == {CTX.pid}


@pytest.mark.usefixtures("readdir_reply")
async def test_unlink_of_a_read_only_file_hides_it_with_a_whiteout(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    project = (await find(ops, "")).st_ino
    await ok(ops, ops.unlink(project, b"b.md", CTX))
    assert await missing(ops, "b.md")
    assert "b.md" not in await names(ops, "")
    assert (sample.work / "b.md").read_bytes() == B_BODY.encode()
    assert read_only_trees(sample) == before
    assert not (sample.own / "b.md").exists()
    assert await body(ops, WORK_B_HISTORY) == B_BODY.encode()
    # An own file shadowing a read-only one: the own copy goes, the other is hidden.
    await ok(ops, ops.unlink(project, b"a.md", CTX))
    assert not (sample.own / "a.md").exists()
    assert await missing(ops, "a.md")
    assert (sample.work / "a.md").read_bytes() == WORK_A.encode()
    # Whiteouts are kept in memfs's state: a new mount still hides both.
    again = build(sample.home, sample.mnt)
    assert await missing(again, "b.md")
    assert await missing(again, "a.md")
    # Written again, the name comes back as an own file.
    await write_file(ops, "b.md", b"back\n")
    assert (sample.own / "b.md").read_bytes() == b"back\n"
    assert await body(ops, "b.md") == b"back\n"
    assert read_only_trees(sample) == before


async def test_a_file_unlinked_while_open_commits_nothing_and_never_comes_back(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 0, b"N")) == 1
    await ok(ops, ops.unlink(project, b"notes.md", CTX))
    assert not notes.exists()
    assert await missing(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 6, b"more\n")) == 5
    # Gone when the last descriptor closes: its writes never bring the name back.
    await close(ops, fh)
    assert not notes.exists()
    assert await missing(ops, "notes.md")
    assert stage_leftovers(sample.home.home) == []
    assert ops.status()["open_handles"] == 0


async def test_a_file_unlinked_while_open_stays_usable_through_its_handle(
    sample: Sample, notes: Path
) -> None:
    # fstat shows st_nlink 0; reads, writes and ftruncate work (§7.6).
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    ino = (await find(ops, "notes.md")).st_ino
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 0, b"N")) == 1
    await ok(ops, ops.unlink(project, b"notes.md", CTX))
    assert await ok(ops, ops.read(fh, 0, 100)) == b"Notes\n"
    assert await ok(ops, ops.write(fh, 6, b"more\n")) == 5
    assert await ok(ops, ops.read(fh, 0, 100)) == b"Notes\nmore\n"
    attrs = await ok(ops, ops.getattr(ino, CTX))
    assert attrs.st_nlink == 0
    assert attrs.st_size == 11
    fields = SetattrFields(update_size=True)
    cut = await ok(ops, ops.setattr(ino, attributes(st_size=4), fields, fh, CTX))
    assert cut.st_size == 4
    assert cut.st_nlink == 0
    assert await ok(ops, ops.read(fh, 0, 100)) == b"Note"
    await close(ops, fh)
    assert ops.status()["open_handles"] == 0


async def test_a_new_file_unlinked_while_open_lands_nowhere(sample: Sample) -> None:
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    fh, _ = await create(ops, "scratch.md")
    assert await ok(ops, ops.write(fh, 0, b"scratch\n")) == 8
    await ok(ops, ops.unlink(project, b"scratch.md", CTX))
    assert await missing(ops, "scratch.md")
    assert await ok(ops, ops.read(fh, 0, 100)) == b"scratch\n"
    assert await ok(ops, ops.write(fh, 8, b"more\n")) == 5
    await close(ops, fh)
    assert not (sample.own / "scratch.md").exists()
    assert await missing(ops, "scratch.md")
    assert stage_leftovers(sample.home.home) == []


async def test_a_new_file_unlinked_while_open_shows_no_link_through_its_handle(
    sample: Sample,
) -> None:
    ops = sample.ops
    project = (await find(ops, "")).st_ino
    fh, attrs = await create(ops, "scratch.md")
    assert await ok(ops, ops.write(fh, 0, b"scratch\n")) == 8
    await ok(ops, ops.unlink(project, b"scratch.md", CTX))
    shown = await ok(ops, ops.getattr(attrs.st_ino, CTX))
    assert shown.st_nlink == 0
    assert shown.st_size == 8
    await close(ops, fh)


async def test_unlink_refusals(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    project = (await find(ops, "")).st_ino
    for name, code in [
        (b"PREAMBLE.md", errno.EACCES),
        (b"nothing.md", errno.ENOENT),
        (b"sub", errno.EISDIR),
    ]:
        assert await refused(ops, ops.unlink(project, name, CTX)) == code, name
    kept_folder = (await find(ops, ".history/a.md")).st_ino
    kept = WORK_A_HISTORY.rpartition("/")[2].encode()
    assert await refused(ops, ops.unlink(kept_folder, kept, CTX)) == errno.EACCES
    assert await refused(ops, ops.unlink(ROOT_INODE, CLAUDE_SLUG.encode(), CTX)) == errno.EPERM
    assert await body(ops, WORK_A_HISTORY) == WORK_A.encode()
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


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


# --- refusals ------------------------------------------------------------------------------------


async def test_symlink_link_and_mknod_are_eperm(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    project = (await find(ops, "")).st_ino
    notes_ino = (await find(ops, "notes.md")).st_ino
    sub = (await find(ops, "sub")).st_ino
    for parent in (project, sub):
        code = await refused(ops, ops.symlink(parent, b"l.md", b"notes.md", CTX))
        assert code == errno.EPERM
        assert await refused(ops, ops.link(notes_ino, parent, b"h.md", CTX)) == errno.EPERM
        for kind in (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK):
            node = ops.mknod(parent, b"n.md", kind | 0o600, 0, CTX)
            assert await refused(ops, node) == errno.EPERM
    for name in ("l.md", "h.md", "n.md", "sub/l.md"):
        assert await missing(ops, name), name
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


async def test_writes_to_preamble_and_history_are_eacces(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    project = (await find(ops, "")).st_ino
    history = (await find(ops, ".history")).st_ino
    kept_folder = (await find(ops, ".history/a.md")).st_ino
    for path in ("PREAMBLE.md", WORK_A_HISTORY):
        ino = (await find(ops, path)).st_ino
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_RDWR | os.O_APPEND):
            assert await refused(ops, ops.open(ino, flags, CTX)) == errno.EACCES, path
    for parent, name in [
        (project, b"PREAMBLE.md"),
        (history, b"x.md"),
        (kept_folder, b"work@20260101T000000Z.md"),
    ]:
        call = ops.create(parent, name, 0o100644, os.O_WRONLY | os.O_CREAT, CTX)
        assert await refused(ops, call) == errno.EACCES, name
    for parent in (history, kept_folder):  # new names: the kernel asks memfs
        assert await refused(ops, ops.mkdir(parent, b"d", 0o755, CTX)) == errno.EACCES
    assert ops.status()["open_handles"] == 0
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before


async def test_without_an_own_source_every_write_handler_is_erofs(tmp_path: Path) -> None:
    home = fake_home(tmp_path)
    work = home.memory(".claude-work")
    write(work / "a.md", WORK_A, at(30))
    write(work / "sub" / "c.md", C_BODY, at(12))
    (work / "empty-dir").mkdir()
    config_file = tmp_path / "config.toml"
    config_file.write_text(
        '[[source]]\nname = "work"\npath = "~/.claude-work/projects/{slug}/memory"\n'
    )
    config = cfg.load(home.env, config_file)
    assert config.own is None
    ops = build(home, tmp_path / "mnt", config)
    before = digest(home.home)
    project = (await find(ops, "")).st_ino
    a = (await find(ops, "a.md")).st_ino
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        assert await refused(ops, ops.open(a, flags, CTX)) == errno.EROFS
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "create": lambda: ops.create(project, b"new.md", 0o100644, os.O_WRONLY, CTX),
        "mkdir": lambda: ops.mkdir(project, b"d", 0o755, CTX),
        "mkdir at the root": lambda: ops.mkdir(ROOT_INODE, b"-home-a-new", 0o755, CTX),
        "rmdir": lambda: ops.rmdir(project, b"empty-dir", CTX),
        "unlink": lambda: ops.unlink(project, b"a.md", CTX),
        "rename": lambda: ops.rename(project, b"a.md", project, b"b.md", 0, CTX),
        "chmod": lambda: chattr_call(ops, "a.md", mode=stat.S_IFREG | 0o600),
        "truncate": lambda: chattr_call(ops, "a.md", size=0),
        "utimens": lambda: chattr_call(ops, "a.md", mtime=at(1)),
    }
    for what, call in calls.items():
        assert await refused(ops, call()) == errno.EROFS, what
    assert await body(ops, "a.md") == WORK_A.encode()
    assert digest(home.home) == before
    assert ops.status()["open_handles"] == 0


async def test_without_an_own_source_writes_are_erofs(tmp_path: Path) -> None:
    home = fake_home(tmp_path)
    a_md = write(home.memory(".claude-work") / "a.md", WORK_A, at(30))
    os.chmod(a_md, 0o644)  # as the usual umask makes it: this module's own umask is 077
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


async def test_preamble_n_is_read_only_like_preamble_md(sample: Sample, notes: Path) -> None:
    # §6, §7.4: PREAMBLE-<N>.md is memfs's own rendering: every change of it is EACCES,
    # as PREAMBLE.md's is, and nothing lands anywhere.
    ops = sample.ops
    before = read_only_trees(sample)
    own_before = digest(sample.own)
    project = (await find(ops, "")).st_ino
    sized = await find(ops, "PREAMBLE-1200.md")
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_RDWR | os.O_APPEND):
        assert await refused(ops, ops.open(sized.st_ino, flags, CTX)) == errno.EACCES, flags
    for name in (b"PREAMBLE-1200.md", b"PREAMBLE-256.md", b"PREAMBLE-1048576.md"):
        call = ops.create(project, name, 0o100644, os.O_WRONLY | os.O_CREAT, CTX)
        assert await refused(ops, call) == errno.EACCES, name
        assert await refused(ops, ops.unlink(project, name, CTX)) == errno.EACCES, name
        assert await refused(ops, ops.mkdir(project, name, 0o755, CTX)) == errno.EACCES, name
        assert await refused(ops, ops.rmdir(project, name, CTX)) == errno.EACCES, name
    for src, dst in [("notes.md", "PREAMBLE-1200.md"), ("PREAMBLE-1200.md", "p.md")]:
        assert await refused(ops, rename_call(ops, src, dst)) == errno.EACCES, (src, dst)
    for change in ({"mode": 0o100644}, {"size": 0}, {"mtime": at(1)}):
        assert await refused(ops, chattr_call(ops, "PREAMBLE-1200.md", **change)) == errno.EACCES
    assert ops.status()["open_handles"] == 0
    assert digest(sample.own) == own_before
    assert read_only_trees(sample) == before
    # A name memfs does not serve is an ordinary name, written into the own source.
    for name in ("PREAMBLE-0256.md", "PREAMBLE-255.md", "sub/PREAMBLE-1200.md"):
        fh, _ = await create(ops, name)
        await ok(ops, ops.write(fh, 0, b"mine\n"))
        await close(ops, fh)
        assert (sample.own / name).read_bytes() == b"mine\n"
        assert await body(ops, name) == b"mine\n"


# --- create, write, flush, release -------------------------------------------------------------


@pytest.mark.usefixtures("readdir_reply")
async def test_create_write_flush_commits_the_whole_file(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    fh, attrs = await create(ops, "sub/new.md")
    target = sample.own / "sub" / "new.md"
    for offset, piece in ((0, b"hello "), (6, b"world"), (11, b"\n")):
        assert await ok(ops, ops.write(fh, offset, piece)) == len(piece)
        # No reader, through the mount or on disk, sees a part.
        assert await body(ops, "sub/new.md", OTHER) == b""
        assert (await ok(ops, ops.getattr(attrs.st_ino, OTHER))).st_size == 0
        assert not target.exists()
    # The writer sees its own bytes.
    assert (await ok(ops, ops.getattr(attrs.st_ino, CTX))).st_size == 12
    assert "new.md" in await names(ops, "sub")
    await ok(ops, ops.flush(fh))
    # A read after close() sees the new whole file.
    assert target.read_bytes() == b"hello world\n"
    assert await body(ops, "sub/new.md", OTHER) == b"hello world\n"
    assert (await find(ops, "sub/new.md", OTHER)).st_size == 12
    await ok(ops, ops.release(fh))
    assert target.read_bytes() == b"hello world\n"
    found = await find(ops, "sub/new.md")
    assert found.st_ino == attrs.st_ino
    assert found.st_mtime_ns == target.stat().st_mtime_ns
    assert await names(ops, "sub") == ["c.md", "new.md"]
    assert stage_leftovers(sample.home.home) == []
    assert read_only_trees(sample) == before


async def test_a_write_while_a_worker_commits_its_handle_waits_for_the_commit(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread of a writer closes a dup of the descriptor (a flush: the commit runs in a
    worker) while another writes through it: a stage is not thread-safe, so the write
    waits, then goes to a new stage, and the next close commits it. Never a write into a
    descriptor the commit is swapping, and never bytes half in the first commit."""
    ops = sample.ops
    fh, _ = await create(ops, "new.md")
    assert await ok(ops, ops.write(fh, 0, b"first\n")) == 6
    in_commit, go = threading.Event(), threading.Event()
    commit = staging.Stage.commit

    def held_commit(stage: staging.Stage, *args: Any, **kwargs: Any) -> Any:
        in_commit.set()
        assert go.wait(30), "the test never let the commit go on"
        return commit(stage, *args, **kwargs)

    monkeypatch.setattr(staging.Stage, "commit", held_commit)
    wrote: list[int] = []

    async def second_write() -> None:
        wrote.append(await ok(ops, ops.write(fh, 6, b"second\n")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ok, ops, ops.flush(fh))
        try:
            assert await trio.to_thread.run_sync(in_commit.wait, 30), "no commit started"
            nursery.start_soon(second_write)
            await trio.testing.wait_all_tasks_blocked()
            assert wrote == []  # waiting for the commit's worker
        finally:
            go.set()  # the held worker goes on whatever the test found
    assert wrote == [7]
    assert (sample.own / "new.md").read_bytes() == b"first\n"  # the first commit, whole
    await close(ops, fh)
    assert (sample.own / "new.md").read_bytes() == b"first\nsecond\n"
    assert stage_leftovers(sample.home.home) == []


async def test_a_rewrite_in_place_commits_at_flush_and_other_files_are_untouched(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    a_before = (sample.own / "a.md").read_bytes()
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 0, b"N")) == 1
    assert await ok(ops, ops.write(fh, len(NOTES), b"tail\n")) == 5
    assert notes.read_bytes() == NOTES.encode()
    assert await body(ops, "notes.md", OTHER) == NOTES.encode()
    assert (await find(ops, "notes.md", OTHER)).st_size == len(NOTES)
    assert (await find(ops, "notes.md", CTX)).st_size == len(NOTES) + 5
    await ok(ops, ops.flush(fh))
    assert notes.read_bytes() == b"Notes\ntail\n"
    assert await body(ops, "notes.md", OTHER) == b"Notes\ntail\n"
    committed = notes.stat()
    # A flush with nothing new changes nothing; a later write commits again.
    await ok(ops, ops.flush(fh))
    assert notes.stat().st_mtime_ns == committed.st_mtime_ns
    assert await ok(ops, ops.write(fh, 0, b"n")) == 1
    await close(ops, fh)
    assert notes.read_bytes() == b"notes\ntail\n"
    assert await body(ops, "notes.md") == b"notes\ntail\n"
    assert (sample.own / "a.md").read_bytes() == a_before
    assert await body(ops, "a.md") == OWN_A.encode()
    assert read_only_trees(sample) == before
    assert stage_leftovers(sample.home.home) == []


async def test_each_open_for_writing_stages_on_its_own(sample: Sample, notes: Path) -> None:
    ops = sample.ops
    first = await open_for_write(ops, "notes.md")
    second = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(first, 0, b"1")) == 1
    assert await ok(ops, ops.write(second, 1, b"2")) == 1
    await close(ops, first)
    assert notes.read_bytes() == b"1otes\n"
    # Another process: this one still writes through ``second``, and reads back its own.
    assert await body(ops, "notes.md", OTHER) == b"1otes\n"
    await close(ops, second)
    # The last close wins with its own whole file, never a mix.
    assert notes.read_bytes() == b"n2tes\n"
    assert await body(ops, "notes.md") == b"n2tes\n"


async def test_a_write_past_the_size_limit_is_efbig_and_the_stage_never_commits(
    sample: Sample, notes: Path
) -> None:
    ops = sample.ops
    fh = await open_for_write(ops, "notes.md")
    assert await ok(ops, ops.write(fh, 0, b"N")) == 1
    code = await refused(ops, ops.write(fh, MAX_FILE_BYTES, b"x"))
    assert code == errno.EFBIG
    # The failed stage never commits: close() returns the error, the file stays whole.
    assert await refused(ops, ops.flush(fh)) == errno.EFBIG
    await ok(ops, ops.release(fh))
    assert notes.read_bytes() == NOTES.encode()
    found = await find(ops, "notes.md")
    assert found.st_size == len(NOTES)
    assert await body(ops, "notes.md") == NOTES.encode()
    # A new file: the create made the name, and stays, empty, as on a local folder (the
    # write that failed changed nothing); close() returns the error.
    fh, _ = await create(ops, "big.md")
    assert await ok(ops, ops.write(fh, 0, b"partial")) == 7
    assert await refused(ops, ops.write(fh, 0, b"x" * (MAX_FILE_BYTES + 1))) == errno.EFBIG
    assert await refused(ops, ops.flush(fh)) == errno.EFBIG
    await ok(ops, ops.release(fh))
    assert (sample.own / "big.md").read_bytes() == b""
    assert (await find(ops, "big.md")).st_size == 0
    assert await body(ops, "big.md", OTHER) == b""
    # ftruncate through the handle past the limit: EFBIG as well.
    fh = await open_for_write(ops, "notes.md")
    code = await refused(ops, chattr_call(ops, "notes.md", fh, size=MAX_FILE_BYTES + 1))
    assert code == errno.EFBIG
    await ok(ops, ops.release(fh))
    assert notes.read_bytes() == NOTES.encode()
    assert stage_leftovers(sample.home.home) == []


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
    assert ops.inodes.lookups(attrs.st_ino) == 1
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
    # The writer edits the union it reads; its save lands as that change alone (§5.3:
    # test_fs_index.py has every way of saving).
    ops = sample.ops
    before = read_only_trees(sample)
    memory = await walk(ops, f"{CLAUDE_SLUG}/MEMORY.md")
    info = await ops.open(memory.st_ino, os.O_RDWR, CTX)
    assert await ops.read(info.fh, 0, 4096) == UNION.encode()
    line = b"- [C](sub/c.md)\n"
    assert await ops.write(info.fh, len(UNION), line) == len(line)
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert (sample.own / "MEMORY.md").read_bytes() == OWN_MEMORY.encode() + line
    assert await cat(ops, memory.st_ino) == OWN_MEMORY.encode() + line + b"- [B](b.md)\n"
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


async def test_a_reader_opening_a_file_being_written_commits_no_part(sample: Sample) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # open() of a pending (created, not yet flushed) name force-commits the writer's stage
    # as it stands, so a reader's open puts a half-written file on disk and in the view
    # (§7.1: readers, through the mount or on disk, never see a part).
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    info, attrs = await ops.create(project.st_ino, b"new.md", 0o100644, os.O_WRONLY, CTX)
    assert await ops.write(info.fh, 0, b"first half, ") == 12
    target = sample.own / "new.md"
    # Another process's reader (the writer's own reads back its bytes).
    reader = await ops.open(attrs.st_ino, os.O_RDONLY, FakeContext(pid=1))
    seen = await ops.read(reader.fh, 0, 4096)
    await ops.release(reader.fh)
    on_disk = target.read_bytes() if target.exists() else b""
    assert await ops.write(info.fh, 12, b"second half\n") == 12
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert target.read_bytes() == b"first half, second half\n"
    assert on_disk == b""
    assert seen == b""


async def test_a_name_memfs_uses_for_temp_files_is_refused_or_kept(sample: Sample) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # sources.scan() and the next mount's recovery treat '.memfs-stage.*' as memfs's own
    # temp files, but create() accepts the name: the file is served until the next rescan,
    # then vanishes from the view, and the next mount deletes it from the own source.
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    name = f"{STAGE_PREFIX}notes.md"
    try:
        info, _ = await ops.create(project.st_ino, name.encode(), 0o100644, os.O_WRONLY, CTX)
    except pyfuse3.FUSEError:
        assert not (sample.own / name).exists()
        return
    await ops.write(info.fh, 0, b"keep me\n")
    await ops.flush(info.fh)
    await ops.release(info.fh)
    assert (sample.own / name).read_bytes() == b"keep me\n"
    rescan(ops)
    assert (await ops.lookup(project.st_ino, name.encode(), CTX)).st_size == 8


# Each spelling names.py reads as a conflict copy of `notes.md` (§5.1): Syncthing's (with
# and without the device id older releases left out), Dropbox's, Nextcloud's, old ownCloud's.
CONFLICT_COPIES = [
    "notes.sync-conflict-20240101-120000-ABCDEFG.md",
    "notes.sync-conflict-20240101-120000.md",
    "notes (Ann's conflicted copy 2024-01-01).md",
    "notes (conflicted copy 2024-01-01 120000).md",
    "notes_conflict-20240101-120000.md",
]


@pytest.mark.usefixtures("readdir_reply")
@pytest.mark.parametrize("name", CONFLICT_COPIES)
async def test_a_file_named_like_a_conflict_copy_is_refused(
    sample: Sample, notes: Path, name: str
) -> None:
    # Failed before its fix (issue 36): the create was accepted and the name then gave
    # ENOENT, since the view shows a conflict copy only under .history/<original>/.
    ops = sample.ops
    project = await walk(ops, CLAUDE_SLUG)
    flags = os.O_WRONLY | os.O_CREAT
    made = ops.create(project.st_ino, name.encode(), 0o100644, flags, CTX)
    assert await refused(ops, made) == errno.EINVAL
    assert await refused(ops, rename_call(ops, "notes.md", name)) == errno.EINVAL
    # A created file not yet committed is renamed by another path (its stage moves along).
    fh, _ = await create(ops, "draft.md")
    assert await refused(ops, rename_call(ops, "draft.md", name)) == errno.EINVAL
    await close(ops, fh)
    assert not (sample.own / name).exists()
    assert (sample.own / "notes.md").read_bytes() == NOTES.encode()
    assert (sample.own / "draft.md").read_bytes() == b""
    # Only files are conflict copies: a folder of such a name is an ordinary folder.
    await ok(ops, ops.mkdir(project.st_ino, name.encode(), 0o755, CTX))
    assert name in await names(ops, "")
    assert (sample.own / name).is_dir()
