"""The worker threads that take the request thread's blocking calls (§7a).

Every scan, copy, fsync, mkdir and kernel notification runs here, and the request that
needs it waits while the trio thread answers others. A handoff is what a write pays most
often (a create, a commit and a rename each make one), so it does the least one needs: a
queue the idle threads wait on, and the waiting task rescheduled from the worker through
the trio token. ``trio.to_thread.run_sync`` also takes a capacity limiter, copies the
context, and renames the thread (two syscalls) per call: on this project's 2-core virtual
machine one of its round trips cost 205-210 µs of CPU, this one 120 µs (the rest is the
two cross-thread wake-ups, which no handoff avoids).

Threads are started as calls need them, up to `MAX_THREADS`, and then wait for the next
call; past that many calls at once the others queue. Daemon threads: one stuck in a
kernel notification (`run(..., abandon_on_cancel=True)`) must not hold up the exit.
Signals: a thread inherits the mask of the thread that starts it, the trio thread
(mount.py blocks the stop signals there).

Not thread-safe itself: `run` is called from trio threads only.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

MAX_THREADS = 32  # trio's own default allows 40 at once


class _Call:
    __slots__ = ("abandoned", "args", "fn", "task", "token")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], token: trio.lowlevel.TrioToken
    ) -> None:
        self.fn = fn
        self.args = args
        self.token = token
        self.task = trio.lowlevel.current_task()
        self.abandoned = False

    def deliver(self, result: outcome.Outcome[Any]) -> None:
        """Trio thread: hand the result to the waiting task, unless it gave up on it."""
        if not self.abandoned:
            trio.lowlevel.reschedule(self.task, result)


class Workers:
    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self.max_threads = max_threads
        self.threads = 0
        self._idle = 0  # threads done with their call and not claimed by another yet
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.busy = 0  # calls in flight (trio thread)
        self._quiet: trio.Event | None = None  # set when the last of them is done

    async def run(self, fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
        """``fn(*args)`` in a worker thread; its result or exception, here.

        Cancelled meanwhile, the caller still waits for ``fn`` and gets what it returned
        (the cancellation comes at its next checkpoint, as with ``trio.to_thread``), unless
        ``abandon_on_cancel``: then Cancelled is raised at once, and the thread finishes
        ``fn`` on its own.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        call = _Call(fn, args, trio.lowlevel.current_trio_token())
        self._submit(call)

        def abort(_: object) -> trio.lowlevel.Abort:
            if abandon_on_cancel:
                call.abandoned = True
                return trio.lowlevel.Abort.SUCCEEDED
            return trio.lowlevel.Abort.FAILED

        self.busy += 1
        try:
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            self.busy -= 1
            if not self.busy and self._quiet is not None:
                self._quiet.set()
                self._quiet = None
        return result

    async def quiet(self) -> None:
        """Return once no call is in flight (the watcher reads the events of a commit once
        its worker is done: watch.read_events)."""
        while self.busy:
            if self._quiet is None:
                self._quiet = trio.Event()
            await self._quiet.wait()

    def _submit(self, call: _Call) -> None:
        """Queue ``call`` for a thread that is idle (claimed here, so two calls in a row
        never count on the same one), or for a new one."""
        with self._lock:
            start = not self._idle and self.threads < self.max_threads
            if self._idle:
                self._idle -= 1
            elif start:
                self.threads += 1
        self._calls.put(call)
        if start:
            name = f"memfs worker {self.threads}"
            threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            result = outcome.capture(call.fn, *call.args)
            del call.fn, call.args  # nothing of the call outlives it here
            # Its trio run may have ended (an unmount abandoned the call): nobody waits.
            with contextlib.suppress(trio.RunFinishedError):
                call.token.run_sync_soon(call.deliver, result)
            with self._lock:
                self._idle += 1


_POOL = Workers()


async def run(fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
    """`Workers.run` on the process's one pool."""
    return await _POOL.run(fn, *args, abandon_on_cancel=abandon_on_cancel)


async def quiet(at_most: float) -> None:
    """Once no call of the pool is in flight, or after ``at_most`` seconds."""
    with trio.move_on_after(at_most):
        await _POOL.quiet()
