"""Tier 2: global/, user-level memory beside the projects (§4.1), through the adapter's
handlers awaited directly on the ``sample`` home: two Claude Code accounts (``claude``,
own; ``work``), to which each test adds user memory, Codex's and Gemini CLI's folders.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from fakes import FakeContext
from helpers import (
    CTX,
    Sample,
    at,
    build,
    cat,
    fuse_errno,
    listing,
    read_all,
    walk,
    write,
    write_through,
)

from memfs.adapter.fs import ROOT_INODE, MemFS
from memfs.disk import config as cfg
from memfs.disk import sources, state

pytestmark = [pytest.mark.trio, pytest.mark.usefixtures("readdir_reply")]

KINDS = ("claude", "codex", "gemini", "goose")


def _with_tools(sample: Sample) -> Sample:
    """The sample with user memory in both accounts, Codex's and Gemini CLI's; a new MemFS
    over it (discovery reads the folders present)."""
    home = sample.home.home
    write(home / ".claude" / "CLAUDE.md", "own user memory\n", 10**18)
    write(home / ".claude-work" / "CLAUDE.md", "work user memory\n", 2 * 10**18)
    write(home / ".claude" / "agent-memory" / "rev" / "MEMORY.md", "- [a](a.md)\n")
    write(home / ".claude-work" / "agent-memory" / "rev" / "MEMORY.md", "- [b](b.md)\n")
    write(home / ".claude-work" / "settings.json", "{}\n")  # not memory: never shown
    write(home / ".codex" / "memories" / "memory_summary.md", "codex summary\n")
    write(home / ".gemini" / "GEMINI.md", "gemini user memory\n")
    write(home / ".gemini" / "settings.json", "{}\n")
    config = cfg.load(sample.home.env)
    names = ["claude", "work", "pi", "gemini", "codex", "kilo", "goose"]
    assert [s.name for s in config.sources] == names
    return Sample(
        sample.home, sample.own, sample.work, sample.pi, sample.mnt,
        build(sample.home, sample.mnt, config),
    )  # fmt: skip


async def test_root_lists_global_beside_here(sample: Sample) -> None:
    sample = _with_tools(sample)
    names = await listing(sample.ops, ROOT_INODE)
    assert names[:2] == ["global", "here"]
    assert all(n.startswith("-") for n in names[2:])
    ino = (await walk(sample.ops, "global")).st_ino
    assert await listing(sample.ops, ino) == ["claude", "codex", "gemini", "goose", "PREAMBLE.md"]


async def test_claude_heads_the_own_account_and_keeps_the_other_in_history(
    sample: Sample,
) -> None:
    sample = _with_tools(sample)
    ops = sample.ops
    claude = (await walk(ops, "global/claude")).st_ino
    names = await listing(ops, claude)
    assert "CLAUDE.md" in names
    assert "agent-memory" in names
    assert "settings.json" not in names
    assert "projects" not in names
    assert await cat(ops, (await walk(ops, "global/claude/CLAUDE.md")).st_ino) == (
        b"own user memory\n"
    )
    history = (await walk(ops, "global/claude/.history/CLAUDE.md")).st_ino
    (kept,) = await listing(ops, history)
    assert kept.startswith("work@")
    # A subagent's index is §5.3's union, the own account's lines first; the other
    # account's version is under .history/ as well.
    rev = await walk(ops, "global/claude/agent-memory/rev/MEMORY.md")
    assert await cat(ops, rev.st_ino) == b"- [a](a.md)\n- [b](b.md)\n"
    assert rev.st_size == len(b"- [a](a.md)\n- [b](b.md)\n")
    kept = (await walk(ops, "global/claude/.history/agent-memory/rev/MEMORY.md")).st_ino
    assert [n.split("@")[0] for n in await listing(ops, kept)] == ["work"]


async def test_a_write_lands_in_the_own_account_and_keeps_the_replaced_version(
    sample: Sample,
) -> None:
    sample = _with_tools(sample)
    ops = sample.ops
    home = sample.home.home
    ino = (await walk(ops, "global/claude/CLAUDE.md")).st_ino
    await write_through(ops, ino, b"new\n", os.O_WRONLY | os.O_TRUNC)
    assert (home / ".claude" / "CLAUDE.md").read_bytes() == b"new\n"
    assert (home / ".claude-work" / "CLAUDE.md").read_bytes() == b"work user memory\n"
    kept = list((home / ".claude" / ".history" / "CLAUDE.md").iterdir())
    assert [p.read_bytes() for p in kept] == [b"own user memory\n"]
    # Anything but user memory would land in the config folder and never show.
    claude = (await walk(ops, "global/claude")).st_ino
    assert await fuse_errno(ops.create(claude, b"settings.json", 0o644, os.O_WRONLY, CTX)) == (
        errno.EACCES
    )


async def test_codex_and_gemini_are_read_only(sample: Sample) -> None:
    sample = _with_tools(sample)
    ops = sample.ops
    codex = (await walk(ops, "global/codex/memory_summary.md")).st_ino
    assert await cat(ops, codex) == b"codex summary\n"
    gemini = (await walk(ops, "global/gemini")).st_ino
    assert await listing(ops, gemini) == ["GEMINI.md", "PREAMBLE.md"]
    for ino in (codex, (await walk(ops, "global/gemini/GEMINI.md")).st_ino):
        assert await fuse_errno(ops.open(ino, os.O_WRONLY, CTX)) == errno.EROFS
    assert await fuse_errno(ops.create(gemini, b"x.md", 0o644, os.O_WRONLY, CTX)) == errno.EROFS
    top = (await walk(ops, "global")).st_ino
    assert await fuse_errno(ops.create(top, b"x.md", 0o644, os.O_WRONLY, CTX)) == errno.EACCES
    assert await fuse_errno(ops.mkdir(ROOT_INODE, b"global", 0o755, CTX)) == errno.EEXIST


async def test_tools_not_installed_list_empty_and_cost_no_bytes(sample: Sample) -> None:
    """The sample's accounts have no user memory yet, and Codex and Gemini CLI are not
    installed: discovery names them all the same (so they show once installed), each kind
    lists empty, and global/PREAMBLE.md spends no byte on any."""
    ino = (await walk(sample.ops, "global")).st_ino
    assert await listing(sample.ops, ino) == ["claude", "codex", "gemini", "goose", "PREAMBLE.md"]
    for kind in ("claude", "codex", "gemini", "goose"):
        folder = (await walk(sample.ops, f"global/{kind}")).st_ino
        assert await listing(sample.ops, folder) == ["PREAMBLE.md"]
    body = await cat(sample.ops, (await walk(sample.ops, "global/PREAMBLE.md")).st_ino)
    assert b"(none yet)" in body
    assert b"global/codex\n" not in body


async def test_preambles_of_kinds_with_no_memory_show_the_mounts_start(sample: Sample) -> None:
    # Issue 36: a kind's PREAMBLE.md drew on nothing and showed 1970.
    ops = sample.ops
    for path in ("global/PREAMBLE.md", *(f"global/{k}/PREAMBLE.md" for k in KINDS)):
        assert (await walk(ops, path)).st_mtime_ns == ops.started_ns, path


async def test_global_preamble_shows_the_newest_mtime_it_draws_on(sample: Sample) -> None:
    """As a project's PREAMBLE.md (§4): the newest of the kinds', not the mount's start when
    every file is older."""
    home = sample.home.home
    write(home / ".claude" / "CLAUDE.md", "own user memory\n", at(9))
    write(home / ".gemini" / "GEMINI.md", "gemini user memory\n", at(8))
    ops = build(sample.home, sample.mnt)
    assert (await walk(ops, "global/claude/PREAMBLE.md")).st_mtime_ns == at(9)
    assert (await walk(ops, "global/gemini/PREAMBLE.md")).st_mtime_ns == at(8)
    assert (await walk(ops, "global/PREAMBLE.md")).st_mtime_ns == at(9) < ops.started_ns
    assert (await walk(ops, "global/codex/PREAMBLE.md")).st_mtime_ns == ops.started_ns


@pytest.mark.parametrize(("name", "budget"), [("PREAMBLE.md", 8192), ("PREAMBLE-600.md", 600)])
async def test_global_preamble_holds_every_kind_within_budget(
    sample: Sample, name: str, budget: int
) -> None:
    sample = _with_tools(sample)
    ops = sample.ops
    attrs = await walk(ops, f"global/{name}")
    body = await cat(ops, attrs.st_ino)
    assert attrs.st_size == len(body)
    assert len(body) <= budget
    assert body.startswith(b"# User-level memory\n")
    body.decode("utf-8")
    if budget == 8192:
        for text in (b"own user memory", b"codex summary", b"gemini user memory"):
            assert text in body
    assert await fuse_errno(ops.open(attrs.st_ino, os.O_WRONLY, CTX)) == errno.EACCES


async def test_global_preamble_shows_a_change_at_once(sample: Sample) -> None:
    """global/PREAMBLE.md is kept per state of the kinds' projects: read, then a write to
    global/claude/CLAUDE.md, then read again: the new text, never the kept rendering."""
    sample = _with_tools(sample)
    ops = sample.ops
    before = await cat(ops, (await walk(ops, "global/PREAMBLE.md")).st_ino)
    assert b"own user memory" in before
    assert await cat(ops, (await walk(ops, "global/PREAMBLE.md")).st_ino) == before
    ino = (await walk(ops, "global/claude/CLAUDE.md")).st_ino
    await write_through(ops, ino, b"changed user memory\n", os.O_WRONLY | os.O_TRUNC)
    attrs = await walk(ops, "global/PREAMBLE.md")
    after = await cat(ops, attrs.st_ino)
    assert b"changed user memory" in after
    assert b"own user memory" not in after
    assert attrs.st_size == len(after)
    sized = await cat(ops, (await walk(ops, "global/PREAMBLE-4096.md")).st_ino)
    assert b"changed user memory" in sized


async def test_global_preamble_reads_no_file_on_the_request_thread(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§7a: the bodies global/PREAMBLE.md draws on are read in worker threads; the trio
    thread renders from them."""
    sample = _with_tools(sample)
    ops = sample.ops
    for kind in ("claude", "codex", "gemini", "goose"):
        await listing(ops, (await walk(ops, f"global/{kind}")).st_ino)  # loaded
    on_trio: list[str] = []
    read_file = sources.read_file

    def spy(root: Path, parts: tuple[str, ...], path: str, limit: int) -> bytes:
        if threading.current_thread() is threading.main_thread():
            on_trio.append(path)
        return read_file(root, parts, path, limit)

    monkeypatch.setattr(sources, "read_file", spy)
    for name in ("PREAMBLE.md", "PREAMBLE-600.md"):
        body = await cat(ops, (await walk(ops, f"global/{name}")).st_ino)
        assert b"User-level memory" in body
    assert on_trio == []


AGENT_INDEX = "global/claude/agent-memory/rev/MEMORY.md"


async def _read_index(ops: MemFS, ctx: FakeContext = CTX) -> bytes:
    info = await ops.open((await walk(ops, AGENT_INDEX)).st_ino, os.O_RDONLY, ctx)
    try:
        return await read_all(ops, info.fh)
    finally:
        await ops.release(info.fh)


async def test_a_subagents_index_saved_is_a_change_of_the_own_accounts(sample: Sample) -> None:
    """§5.3 for agent-memory/<agent>/MEMORY.md (§4.1): a line added lands in the own
    account's index alone, a line of the other account's removed is hidden from the union
    (kept in the state folder under a key of its own), the other account untouched."""
    sample = _with_tools(sample)
    ops = sample.ops
    home = sample.home.home
    own = home / ".claude" / "agent-memory" / "rev" / "MEMORY.md"
    work = home / ".claude-work" / "agent-memory" / "rev" / "MEMORY.md"
    read = await _read_index(ops)
    assert read == b"- [a](a.md)\n- [b](b.md)\n"
    # Claude Code's save: its temp name in the folder, renamed over the index.
    folder = (await walk(ops, "global/claude/agent-memory/rev")).st_ino
    temp = f"MEMORY.md.tmp.{CTX.pid}.0123456789ab"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    info, _ = await ops.create(folder, temp.encode(), 0o100644, flags, CTX)
    new = read + b"- [c](c.md)\n"
    assert await ops.write(info.fh, 0, new) == len(new)
    await ops.flush(info.fh)
    await ops.release(info.fh)
    await ops.rename(folder, temp.encode(), folder, b"MEMORY.md", 0, CTX)
    ops._check()
    assert own.read_bytes() == b"- [a](a.md)\n- [c](c.md)\n"
    assert work.read_bytes() == b"- [b](b.md)\n"
    assert await _read_index(ops) == b"- [a](a.md)\n- [c](c.md)\n- [b](b.md)\n"
    # A rewrite leaving out the other account's line hides it, for this index only.
    ino = (await walk(ops, AGENT_INDEX)).st_ino
    await write_through(ops, ino, b"- [a](a.md)\n- [c](c.md)\n", os.O_WRONLY | os.O_TRUNC)
    ops._check()
    assert own.read_bytes() == b"- [a](a.md)\n- [c](c.md)\n"
    assert work.read_bytes() == b"- [b](b.md)\n"
    assert await _read_index(ops) == b"- [a](a.md)\n- [c](c.md)\n"
    state_dir = ops.config.state_dir
    path = "agent-memory/rev/MEMORY.md"
    assert state.load_hidden_lines(state_dir, "global/claude", path) == {"- [b](b.md)"}
    assert state.load_hidden_lines(state_dir, "global/claude") == frozenset()
    names = os.listdir(state_dir / state.HIDDEN_LINES)
    assert names == ["global.claude.agent-memory.rev.json"]
    # A new mount reads the hidden line back.
    again = build(sample.home, sample.mnt, ops.config)
    assert await cat(again, (await walk(again, AGENT_INDEX)).st_ino) == (
        b"- [a](a.md)\n- [c](c.md)\n"
    )


async def test_only_a_subagents_top_index_is_a_union(sample: Sample) -> None:
    """A MEMORY.md deeper in agent-memory/, or in global/codex, is a file as any (§5.2)."""
    sample = _with_tools(sample)
    home = sample.home.home
    write(home / ".claude" / "agent-memory" / "rev" / "sub" / "MEMORY.md", "- [x](x.md)\n")
    write(home / ".claude-work" / "agent-memory" / "rev" / "sub" / "MEMORY.md", "- [y](y.md)\n")
    ops = build(sample.home, sample.mnt, sample.ops.config)
    deep = (await walk(ops, "global/claude/agent-memory/rev/sub/MEMORY.md")).st_ino
    assert await cat(ops, deep) == b"- [x](x.md)\n"


async def test_a_subagents_index_in_the_preamble_is_its_union(sample: Sample) -> None:
    """global/claude/PREAMBLE.md inlines a subagent's MEMORY.md among the newest files as
    the view shows it, the union of every account's (§5.3, §6), not the own one alone."""
    sample = _with_tools(sample)
    ops = sample.ops
    preamble = await cat(ops, (await walk(ops, "global/claude/PREAMBLE.md")).st_ino)
    assert b"agent-memory/rev/MEMORY.md" in preamble
    assert b"- [a](a.md)" in preamble  # the own account's line
    assert b"- [b](b.md)" in preamble  # the other account's
