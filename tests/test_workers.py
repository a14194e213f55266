"""Tier 1: the worker threads that take the request thread's blocking calls (workers.py)."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing
from helpers import eventually

from memfs.adapter.workers import Workers


async def test_a_call_runs_in_another_thread_and_returns_its_result() -> None:
    pool = Workers()
    here = threading.get_ident()
    assert await pool.run(threading.get_ident) != here
    assert await pool.run(divmod, 7, 2) == (3, 1)


async def test_a_call_s_exception_is_raised_to_its_caller() -> None:
    with pytest.raises(ZeroDivisionError):
        await Workers().run(divmod, 1, 0)


async def test_calls_at_once_run_at_once_and_idle_threads_are_reused() -> None:
    pool = Workers()
    met = threading.Barrier(3, timeout=5)  # each call returns only once all three run
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(pool.run, met.wait)
    assert pool.threads == 3
    for _ in range(5):
        await pool.run(int)  # one after another: one idle thread takes each
    assert pool.threads == 3


async def test_past_the_limit_calls_wait_for_a_thread() -> None:
    pool = Workers(max_threads=1)
    running, release = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        running.set()
        release.wait(5)
        order.append("first")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.run, first)
        await eventually(running.is_set, "the first call runs")
        nursery.start_soon(pool.run, order.append, "second")
        await eventually(lambda: pool._calls.qsize() == 1, "the second call is queued")
        assert order == []  # the one thread is busy: the second call waits
        release.set()
    assert order == ["first", "second"]
    assert pool.threads == 1


async def test_cancelled_a_caller_waits_for_its_call_unless_it_abandons_it() -> None:
    pool = Workers()
    done: list[str] = []

    def slow(name: str, release: threading.Event) -> None:
        release.wait(5)
        done.append(name)

    first = threading.Event()
    with trio.move_on_after(0.05):
        await pool.run(slow, "abandoned", first, abandon_on_cancel=True)
    assert done == []  # returned at once, the thread still runs it
    first.set()
    second = threading.Event()
    threading.Timer(0.3, second.set).start()  # well after the cancellation
    with trio.move_on_after(0.05) as scope:
        await pool.run(slow, "waited", second)
        assert "waited" in done  # waited for, past the deadline
        await trio.lowlevel.checkpoint()  # where the cancellation comes
    assert scope.cancelled_caught


async def test_quiet_waits_for_the_calls_in_flight_and_no_longer() -> None:
    pool = Workers()
    await pool.quiet()  # nothing in flight: at once
    release = threading.Event()
    done: list[str] = []

    async def quiet_then_note() -> None:
        await pool.quiet()
        done.append("quiet")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.run, release.wait, 5)
        await eventually(lambda: pool.busy == 1, "the call is in flight")
        nursery.start_soon(quiet_then_note)
        nursery.start_soon(quiet_then_note)  # two waiters share one event
        await trio.testing.wait_all_tasks_blocked()
        assert done == []
        release.set()
    assert done == ["quiet", "quiet"]
    assert pool.busy == 0


async def test_a_failed_or_abandoned_call_is_no_longer_in_flight() -> None:
    pool = Workers()
    with pytest.raises(ZeroDivisionError):
        await pool.run(divmod, 1, 0)
    assert pool.busy == 0
    release = threading.Event()
    with trio.move_on_after(0.05):
        await pool.run(release.wait, 5, abandon_on_cancel=True)
    assert pool.busy == 0  # its thread still waits, but nobody waits for it
    with trio.fail_after(1):
        await pool.quiet()
    release.set()
