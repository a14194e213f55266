"""Tier 2: MEMORY.md saved through the adapter's handlers lands as a change (§5.3), and a
synthetic file is never indexed (§6).

No mount: the handlers of `memfs.adapter.fs.MemFS` are awaited on the ``sample`` home
(conftest.py: own source ``claude`` with ``- [A](a.md)``, read-only ``work`` with
``- [A](a.md)`` and ``- [B](b.md)``; the view shows their union). Each save pattern writers
use is played as its syscalls reach memfs: Claude Code's temp file and rename, a rewrite
with O_TRUNC, an edit with O_RDWR, a truncate, an editor's backup-then-write, Claude Code's
index backfill in a new project. ``MemFS._check()`` runs after every step.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyfuse3
from fakes import FakeContext, SetattrFields
from helpers import (
    CLAUDE_SLUG,
    CTX,
    OWN_MEMORY,
    UNION,
    WORK_MEMORY,
    Sample,
    at,
    fuse_errno,
    read_all,
    read_only_trees,
    rescan,
    stage_leftovers,
    write,
)

from memfs.adapter.fs import ROOT_INODE, MemFS
from memfs.disk import state
from memfs.rules.slug import claude_slug

# A second process (init: it holds nothing of the mount, so its close commits at once).
OTHER = FakeContext(pid=1)
NEW = b"- [C](sub/c.md)\n"


async def ok(ops: MemFS, call: object) -> object:
    result = await call  # type: ignore[misc]
    ops._check()
    return result


async def find(ops: MemFS, name: str, slug: str = CLAUDE_SLUG) -> pyfuse3.EntryAttributes:
    project = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    return await ops.lookup(project.st_ino, name.encode(), CTX)


async def read_as(ops: MemFS, ctx: FakeContext, name: str = "MEMORY.md") -> bytes:
    """What process ``ctx`` reads of ``name``: open, read all, release."""
    info = await ops.open((await find(ops, name)).st_ino, os.O_RDONLY, ctx)
    try:
        return await read_all(ops, info.fh)
    finally:
        await ops.release(info.fh)
    ops._check()


async def create_and_write(
    ops: MemFS, ctx: FakeContext, name: str, data: bytes, slug: str = CLAUDE_SLUG
) -> None:
    """O_CREAT|O_EXCL, write, fsync, close: a new file's whole life before its rename."""
    project = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    info, _ = await ops.create(project.st_ino, name.encode(), 0o100644, flags, ctx)
    assert await ops.write(info.fh, 0, data) == len(data)
    await ok(ops, ops.fsync(info.fh, False))
    await ok(ops, ops.flush(info.fh))
    await ok(ops, ops.release(info.fh))


async def rename_as(ops: MemFS, ctx: FakeContext, src: str, dst: str) -> None:
    project = await ops.lookup(ROOT_INODE, CLAUDE_SLUG.encode(), CTX)
    await ok(ops, ops.rename(project.st_ino, src.encode(), project.st_ino, dst.encode(), 0, ctx))


async def claude_code_edit(ops: MemFS, ctx: FakeContext, edit: bytes) -> None:
    """Claude Code's Edit of MEMORY.md: read it, write ``MEMORY.md.tmp.<pid>.<12 hex>`` with
    O_EXCL, fsync, close, rename it over MEMORY.md. ``edit`` replaces what was read."""
    temp = f"MEMORY.md.tmp.{ctx.pid}.0123456789ab"
    await create_and_write(ops, ctx, temp, edit)
    await rename_as(ops, ctx, temp, "MEMORY.md")


async def rewrite(ops: MemFS, ctx: FakeContext, data: bytes, flags: int) -> None:
    info = await ops.open((await find(ops, "MEMORY.md")).st_ino, flags, ctx)
    assert await ops.write(info.fh, 0, data) == len(data)
    await ok(ops, ops.flush(info.fh))
    await ok(ops, ops.release(info.fh))


def hidden(sample: Sample) -> list[str]:
    """The lines the state folder keeps hidden for the project."""
    return sorted(state.load_hidden_lines(sample.ops.config.state_dir, CLAUDE_SLUG))


async def test_claude_codes_edit_adds_its_line_to_the_own_index_alone(sample: Sample) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    read = await read_as(ops, CTX)
    assert read == UNION.encode()
    await claude_code_edit(ops, CTX, read + NEW)
    # The own index holds its lines and the new one, not a copy of work's.
    assert (sample.own / "MEMORY.md").read_bytes() == OWN_MEMORY.encode() + NEW
    assert await read_as(ops, CTX) == OWN_MEMORY.encode() + NEW + b"- [B](b.md)\n"
    assert sorted(os.listdir(sample.own)) == [".history", "MEMORY.md", "a.md"]  # §7.2
    assert read_only_trees(sample) == before
    # work drops B: the union drops it too, nothing of it stayed in the own index.
    write(sample.work / "MEMORY.md", "- [A](a.md)\n", at(50))
    rescan(ops)
    assert await read_as(ops, CTX) == OWN_MEMORY.encode() + NEW


async def test_a_read_on_one_thread_and_a_rename_on_another_are_one_writer(
    sample: Sample,
) -> None:
    # Node runs file calls on a pool of threads: the read is kept per process.
    ops = sample.ops
    ids: list[int] = []
    started, done = threading.Event(), threading.Event()

    def pool_thread() -> None:
        ids.append(threading.get_native_id())
        started.set()
        done.wait(30)

    thread = threading.Thread(target=pool_thread)
    thread.start()
    started.wait(10)
    try:
        read = await read_as(ops, CTX)
        # Meanwhile another session adds a line to the own index.
        await claude_code_edit(ops, OTHER, await read_as(ops, OTHER) + b"- [D](d.md)\n")
        await claude_code_edit(ops, FakeContext(pid=ids[0]), read + NEW)
    finally:
        done.set()
        thread.join()
    own = (sample.own / "MEMORY.md").read_bytes()
    assert own == OWN_MEMORY.encode() + NEW + b"- [D](d.md)\n"


async def test_two_writers_that_read_the_same_version_keep_both_lines(sample: Sample) -> None:
    ops = sample.ops
    first, second = await read_as(ops, CTX), await read_as(ops, OTHER)
    await claude_code_edit(ops, CTX, first + b"- [One](one.md)\n")
    await claude_code_edit(ops, OTHER, second + b"- [Two](two.md)\n")
    own = (sample.own / "MEMORY.md").read_bytes()
    assert own == OWN_MEMORY.encode() + b"- [Two](two.md)\n- [One](one.md)\n"
    view = await read_as(ops, CTX)
    assert b"- [One](one.md)\n" in view
    assert b"- [Two](two.md)\n" in view


async def test_removing_another_accounts_line_hides_it_until_that_account_changes_it(
    sample: Sample,
) -> None:
    ops = sample.ops
    before = read_only_trees(sample)
    read = await read_as(ops, CTX)
    await claude_code_edit(ops, CTX, read.replace(b"- [B](b.md)\n", b""))
    assert (sample.own / "MEMORY.md").read_bytes() == OWN_MEMORY.encode()
    assert await read_as(ops, CTX) == OWN_MEMORY.encode()
    assert hidden(sample) == ["- [B](b.md)"]
    assert read_only_trees(sample) == before
    # Hidden across a reload of the project (a remount), as whiteouts are.
    ops.catalog.loaded().clear()
    assert await read_as(ops, CTX) == OWN_MEMORY.encode()
    # work rewords the line: a new line, shown again.
    write(sample.work / "MEMORY.md", "- [A](a.md)\n- [B](b.md) reworded\n", at(50))
    rescan(ops)
    assert await read_as(ops, CTX) == OWN_MEMORY.encode() + b"- [B](b.md) reworded\n"


async def test_removing_an_own_line_that_work_holds_too_removes_it_from_the_view(
    sample: Sample,
) -> None:
    ops = sample.ops
    read = await read_as(ops, CTX)
    await claude_code_edit(ops, CTX, read.replace(b"- [A](a.md)\n", b""))
    assert (sample.own / "MEMORY.md").read_bytes() == b""
    assert await read_as(ops, CTX) == b"- [B](b.md)\n"
    # Adding it back shows it again, from the own index.
    await claude_code_edit(ops, CTX, b"- [A](a.md) again\n- [B](b.md)\n")
    assert (sample.own / "MEMORY.md").read_bytes() == b"- [A](a.md) again\n"
    assert await read_as(ops, CTX) == b"- [A](a.md) again\n- [B](b.md)\n"


async def test_an_o_trunc_rewrite_is_a_change_of_what_its_process_read(sample: Sample) -> None:
    ops = sample.ops
    read = await read_as(ops, CTX)
    # Another session saves between this one's read and its write.
    await claude_code_edit(ops, OTHER, await read_as(ops, OTHER) + b"- [D](d.md)\n")
    await rewrite(ops, CTX, read.replace(b"- [B](b.md)\n", b"") + NEW, os.O_WRONLY | os.O_TRUNC)
    own = (sample.own / "MEMORY.md").read_bytes()
    assert own == OWN_MEMORY.encode() + NEW + b"- [D](d.md)\n"
    assert b"(b.md)" not in await read_as(ops, CTX)
    assert stage_leftovers(sample.home.home) == []


async def test_an_edit_in_place_is_a_change_of_what_its_open_read(sample: Sample) -> None:
    # An editor that opens O_RDWR, reads, writes the whole text back and truncates.
    ops = sample.ops
    memory = await find(ops, "MEMORY.md")
    info = await ops.open(memory.st_ino, os.O_RDWR, CTX)
    read = await read_all(ops, info.fh)
    assert read == UNION.encode()
    # Another session rewrites it meanwhile (a rename over it would leave this writer
    # writing into the file it replaced, as on a local disk).
    other = await read_as(ops, OTHER) + b"- [D](d.md)\n"
    await rewrite(ops, OTHER, other, os.O_WRONLY | os.O_TRUNC)
    edited = read.replace(b"- [B](b.md)\n", b"") + NEW
    assert await ops.write(info.fh, 0, edited) == len(edited)
    attrs = pyfuse3.EntryAttributes()
    attrs.st_size = len(edited)
    await ok(ops, ops.setattr(memory.st_ino, attrs, SetattrFields(update_size=True), info.fh, CTX))
    await ok(ops, ops.fsync(info.fh, False))
    # Its own reads still see what it wrote, at its offsets, until it closes.
    assert await ops.read(info.fh, 0, 4096) == edited
    await ok(ops, ops.flush(info.fh))
    await ok(ops, ops.release(info.fh))
    own = (sample.own / "MEMORY.md").read_bytes()
    assert own == OWN_MEMORY.encode() + NEW + b"- [D](d.md)\n"
    assert stage_leftovers(sample.home.home) == []


async def test_vims_save_in_place_is_a_change_of_what_it_loaded(sample: Sample) -> None:
    # vim without a backup by rename: its load is a read open; its save opens O_WRONLY
    # without O_TRUNC, truncates, writes, fsyncs, chmods, closes.
    ops = sample.ops
    read = await read_as(ops, CTX)
    await claude_code_edit(ops, OTHER, await read_as(ops, OTHER) + b"- [D](d.md)\n")
    memory = await find(ops, "MEMORY.md")
    info = await ops.open(memory.st_ino, os.O_WRONLY, CTX)
    attrs = pyfuse3.EntryAttributes()
    attrs.st_size = 0
    await ok(ops, ops.setattr(memory.st_ino, attrs, SetattrFields(update_size=True), info.fh, CTX))
    edited = read.replace(b"- [B](b.md)\n", b"") + NEW
    assert await ops.write(info.fh, 0, edited) == len(edited)
    await ok(ops, ops.fsync(info.fh, False))
    attrs.st_mode = 0o100644
    await ok(ops, ops.setattr(memory.st_ino, attrs, SetattrFields(update_mode=True), info.fh, CTX))
    await ok(ops, ops.flush(info.fh))
    await ok(ops, ops.release(info.fh))
    own = (sample.own / "MEMORY.md").read_bytes()
    assert own == OWN_MEMORY.encode() + NEW + b"- [D](d.md)\n"
    assert await read_as(ops, OTHER) == own
    assert stage_leftovers(sample.home.home) == []


async def test_an_append_lands_the_appended_line_alone(sample: Sample) -> None:
    ops = sample.ops
    info = await ops.open((await find(ops, "MEMORY.md")).st_ino, os.O_WRONLY | os.O_APPEND, OTHER)
    assert await ops.write(info.fh, 0, NEW) == len(NEW)
    await ok(ops, ops.flush(info.fh))
    await ok(ops, ops.release(info.fh))
    assert (sample.own / "MEMORY.md").read_bytes() == OWN_MEMORY.encode() + NEW


async def test_truncate_and_attributes_of_memory_md_copy_no_line_up(sample: Sample) -> None:
    ops = sample.ops
    memory = await find(ops, "MEMORY.md")
    fields = SetattrFields(update_mode=True)
    attrs = pyfuse3.EntryAttributes()
    attrs.st_mode = 0o100600
    await ok(ops, ops.setattr(memory.st_ino, attrs, fields, None, CTX))
    assert (sample.own / "MEMORY.md").read_bytes() == OWN_MEMORY.encode()
    assert (sample.own / "MEMORY.md").stat().st_mode & 0o777 == 0o600
    attrs.st_size = 0
    await ok(ops, ops.setattr(memory.st_ino, attrs, SetattrFields(update_size=True), None, CTX))
    assert (sample.own / "MEMORY.md").read_bytes() == b""
    assert await read_as(ops, CTX) == b""  # every line of the view removed
    assert hidden(sample) == ["- [A](a.md)", "- [B](b.md)"]
    assert (sample.work / "MEMORY.md").read_text() == WORK_MEMORY


async def test_an_editors_backup_then_write_saves_the_index_it_moved(sample: Sample) -> None:
    # vim with backupcopy=no: MEMORY.md renamed to MEMORY.md~, MEMORY.md opened with
    # O_CREAT|O_TRUNC and written, the backup removed. The rename hides none of work's
    # lines (issue 36), so MEMORY.md is still there, work's alone, when vim writes it.
    ops = sample.ops
    before = read_only_trees(sample)
    read = await read_as(ops, CTX)
    await rename_as(ops, CTX, "MEMORY.md", "MEMORY.md~")
    assert await read_as(ops, OTHER) == WORK_MEMORY.encode()  # nothing of work's hidden
    assert await read_as(ops, OTHER, "MEMORY.md~") == read  # the view, as it was
    await rewrite(ops, CTX, read + NEW, os.O_WRONLY | os.O_TRUNC)
    project = await ops.lookup(ROOT_INODE, CLAUDE_SLUG.encode(), CTX)
    await ok(ops, ops.unlink(project.st_ino, b"MEMORY.md~", CTX))
    assert (sample.own / "MEMORY.md").read_bytes() == OWN_MEMORY.encode() + NEW
    assert await read_as(ops, CTX) == OWN_MEMORY.encode() + NEW + b"- [B](b.md)\n"
    assert sorted(os.listdir(sample.own)) == [".history", "MEMORY.md", "a.md"]  # §7.2
    assert hidden(sample) == []
    assert read_only_trees(sample) == before


async def test_an_own_index_alone_moved_away_and_created_again_is_saved(sample: Sample) -> None:
    # The same with no other account's index: MEMORY.md is gone after the rename, and
    # vim's open creates it. The own index it moved is the one the save changes.
    ops = sample.ops
    (sample.work / "MEMORY.md").unlink()  # before the project is loaded
    read = await read_as(ops, CTX)
    assert read == OWN_MEMORY.encode()
    await rename_as(ops, CTX, "MEMORY.md", "MEMORY.md~")
    await create_and_write(ops, CTX, "MEMORY.md", read + NEW)
    assert (sample.own / "MEMORY.md").read_bytes() == OWN_MEMORY.encode() + NEW


async def test_claude_codes_index_backfill_never_links_the_preamble(sample: Sample) -> None:
    # Claude Code 2.1.332 in a folder with no MEMORY.md: a temp file, link() to publish
    # it (memfs answers EPERM), then MEMORY.md created with O_EXCL and written.
    ops = sample.ops
    slug = claude_slug("/home/a/brand-new")
    body = b"# Memory\n- [PREAMBLE](PREAMBLE.md)\n- [Notes](notes.md)\n"
    temp = f".MEMORY.md.backfill-{os.getpid()}-0a1b2c.tmp"
    await create_and_write(ops, CTX, temp, body, slug)
    project = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    temp_ino = (await ops.lookup(project.st_ino, temp.encode(), CTX)).st_ino
    assert await fuse_errno(ops.link(temp_ino, project.st_ino, b"MEMORY.md", CTX)) == 1
    await create_and_write(ops, CTX, "MEMORY.md", body, slug)
    await ok(ops, ops.unlink(project.st_ino, temp.encode(), CTX))
    own = sample.own.parent.parent / slug / "memory"
    assert (own / "MEMORY.md").read_bytes() == b"# Memory\n- [Notes](notes.md)\n"
    assert sorted(os.listdir(own)) == ["MEMORY.md"]  # the temp file, a writer's: no version


def test_state_folder_keeps_hidden_lines_private(tmp_path: Path) -> None:
    state.save_hidden_lines(tmp_path, "-p", ["b", "a\udcff"])
    assert state.load_hidden_lines(tmp_path, "-p") == {"a\udcff", "b"}
    path = tmp_path / state.HIDDEN_LINES / "-p.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / state.HIDDEN_LINES).stat().st_mode & 0o777 == 0o700
    state.save_hidden_lines(tmp_path, "-p", [])
    assert not path.exists()


async def test_a_backfill_of_only_the_preamble_makes_no_empty_index(sample: Sample) -> None:
    # Issue 36: in a brand-new project memfs shows only PREAMBLE.md, so Claude Code's
    # backfill writes an index of that one link: nothing of it may land, not even an
    # empty own MEMORY.md (PREAMBLE.md would show an empty index section).
    ops = sample.ops
    slug = claude_slug("/home/a/brand-new")
    await create_and_write(ops, CTX, "MEMORY.md", b"- [PREAMBLE](PREAMBLE.md)\n", slug)
    own = sample.own.parent.parent / slug / "memory"
    assert not (own / "MEMORY.md").exists()
    project = await ops.lookup(ROOT_INODE, slug.encode(), CTX)
    assert await fuse_errno(ops.lookup(project.st_ino, b"MEMORY.md", CTX)) == 2
    # A file written empty on purpose (`touch`) still lands, as any file would.
    await create_and_write(ops, CTX, "MEMORY.md", b"", slug)
    assert (own / "MEMORY.md").read_bytes() == b""
