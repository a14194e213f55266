"""Tier 1: a write session's state machine (view/session.py): what each request on a
handle open for writing means, and which transitions it refuses (§7.1, §7.2)."""

from __future__ import annotations

import errno

import pytest

from memfs.view.session import Do, InvalidTransition, Need, State, WriteSession


def test_an_untouched_open_stages_at_its_first_change_and_commits_at_its_close() -> None:
    s = WriteSession()
    assert s.close(created=False) is Do.NOTHING  # `touch`, an editor's O_RDWR: nothing
    assert s.change() is Need.COPY
    s.staged()
    s.changed()
    assert s.close(created=False) is Do.COMMIT
    s.committed()
    assert s.state is State.COMMITTED
    assert not s.keeps_history  # a handle keeps what it replaced once
    assert s.close(created=False) is Do.NOTHING
    # A change after a commit must not edit the committed file in place.
    assert s.change() is Need.RESTAGE
    s.staged()
    assert s.fsync() is Do.COMMIT


def test_o_trunc_and_create_commit_even_with_nothing_written() -> None:
    s = WriteSession.truncating()
    assert s.change() is Need.NOTHING
    assert s.close(created=True) is Do.COMMIT
    assert s.release(created=True) is Do.COMMIT


def test_a_failed_change_never_commits_and_its_close_reports_it() -> None:
    s = WriteSession.truncating()
    s.failed(errno.ENOSPC)
    s.failed(errno.EFBIG)  # the first errno is the one returned
    assert (s.state, s.errno) == (State.FAILED, errno.ENOSPC)
    assert s.close(created=False) is Do.FAIL
    assert s.close(created=True) is Do.FAIL_EMPTY  # a created name stays, empty
    assert s.fsync() is Do.FAIL
    assert s.release(created=False) is Do.NOTHING
    with pytest.raises(InvalidTransition):
        s.committed()


def test_an_unlinked_or_killed_writer_never_commits() -> None:
    s = WriteSession.truncating()
    s.discarded()
    assert s.close(created=False) is Do.NOTHING
    assert s.release(created=False) is Do.NOTHING
    assert not s.commits
    s.failed(errno.EIO)  # its later failures change nothing: it commits nothing anyway
    assert s.state is State.DISCARDED


def test_a_replaced_name_still_commits_its_bytes() -> None:
    # Issue 36: the commit of a writer whose name another file replaced lands (as a
    # kept version, or an index's change): replacing never turns a commit into nothing.
    s = WriteSession.truncating()
    s.name_replaced()
    assert s.replaced
    assert s.close(created=False) is Do.COMMIT
    assert s.commits


def test_a_released_session_refuses_everything() -> None:
    s = WriteSession()
    s.released()
    for transition in (s.change, s.changed, s.discarded, s.name_replaced):
        with pytest.raises(InvalidTransition):
            transition()
    with pytest.raises(InvalidTransition):
        s.failed(errno.EIO)
    with pytest.raises(InvalidTransition):
        s.staged()
