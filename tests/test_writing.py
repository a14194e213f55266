"""Tier 1: the open-for-writing state: a writer's stage changes, and how one that fails
leaves the stage uncommittable (§7.1, §7.6)."""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import CLAUDE_SLUG, errno_of, fake_home

from memfs.adapter.writing import OpenFile
from memfs.disk import config as cfg
from memfs.disk.staging import Place, Stage
from memfs.view.session import State, WriteSession
from memfs.view.writes import Refused


@pytest.fixture
def config(tmp_path: Path) -> cfg.Config:
    loaded = fake_home(tmp_path).config()
    return dataclasses.replace(loaded, limits=cfg.Limits(max_file_bytes=100))


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[OpenFile]:
    """A writer of ``a.md`` with an empty stage in the own account's memory folder."""
    place = Place(tmp_path / "home" / ".claude" / "projects", (CLAUDE_SLUG, "memory"))
    f = OpenFile(2, (CLAUDE_SLUG, "a.md"), session=WriteSession.truncating())
    f.stage = Stage(place, "a.md", initial_fd=None, mode=0o644)
    yield f
    f.stage.abort()


def test_a_change_past_the_limit_changes_nothing_and_is_remembered(
    writer: OpenFile, config: cfg.Config
) -> None:
    writer.change(lambda s: s.write(0, b"x" * 60), 60, config)
    with pytest.raises(Refused) as refused:
        writer.change(lambda s: s.write(60, b"y" * 60), 120, config)
    assert refused.value.errno == errno.EFBIG
    assert writer.session is not None
    assert (writer.session.state, writer.session.errno) == (State.FAILED, errno.EFBIG)
    assert writer.size() == 60  # the refused write never reached the stage


def test_a_failing_change_keeps_the_first_errno(writer: OpenFile, config: cfg.Config) -> None:
    def fails(_: Stage) -> None:
        raise OSError(errno.ENOSPC, "full")

    assert errno_of(writer.change, fails, 10, config) == errno.ENOSPC
    with pytest.raises(Refused):
        writer.change(lambda s: s.truncate(500), 500, config)
    assert writer.session is not None
    assert writer.session.errno == errno.ENOSPC


def test_set_attrs_changes_the_stage_and_keeps_what_is_not_asked(
    writer: OpenFile, config: cfg.Config
) -> None:
    assert writer.stage is not None
    writer.stage.write(0, b"0123456789")
    before = writer.stage.mode
    writer.set_attrs(config, mode=None, size=4, atime_ns=None, mtime_ns=7_000_000_000)
    assert writer.size() == 4
    assert writer.stage.mode == before
    assert os.fstat(writer.stage.fd).st_mtime_ns == 7_000_000_000
    writer.set_attrs(config, mode=0o600, size=None, atime_ns=None, mtime_ns=None)
    assert writer.stage.mode == 0o600
    assert writer.size() == 4
    assert writer.session is not None
    assert writer.session.state is State.STAGED
