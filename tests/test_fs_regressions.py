"""Tier 2: regressions for adapter bugs found in review; each failed before its fix."""
# ruff: noqa: F811 (the sample fixture is imported from test_fs)

from __future__ import annotations

import os
from pathlib import Path

import pyfuse3
import pytest
from fakes import FakeContext
from helpers import CLAUDE_SLUG
from test_fs import (
    CTX,
    Sample,
    build,
    rescan,
    sample,  # noqa: F401 (the fixture)
    walk,
)

from memfs.adapter.fs import HERE_INODE
from memfs.disk.sources import STAGE_PREFIX


async def test_a_reader_opening_a_file_being_written_commits_no_part(sample: Sample) -> None:
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


async def test_here_inside_a_mount_reached_through_a_symlink(
    sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
