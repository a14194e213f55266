"""SIGUSR1: every thread's traceback, written to the log, while the mount keeps serving.

Layer app. ``faulthandler.register`` was the obvious tool, but its dump runs inside the
signal handler, without the interpreter lock, and reads the other threads' frames while
they run: CPython promises only a best effort there, and once (in CI) the daemon died in
the middle of a dump, at a worker's frame. Here one thread of its own waits for the signal
(``sigwait``; every other thread blocks it) and reads the frames holding the lock, as any
Python code does: the dump may show a thread a few steps on, and it never crashes.

What this cannot dump is a thread that holds the lock and never lets go (the one case
faulthandler could). For that, faulthandler stays on for fatal signals: ``kill -ABRT``
writes every thread's traceback as the process ends.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import TextIO

DUMP_SIGNAL = signal.SIGUSR1

log = logging.getLogger(__name__)


def answer_dump_signal(stream: TextIO | None = None) -> None:
    """From now on, SIGUSR1 writes every thread's traceback to ``stream`` (standard error:
    the log of a background daemon). Call on the main thread, before any other thread
    starts: a thread inherits the mask of the thread that starts it, so they all block the
    signal and the answering thread is the only one that takes it."""
    # The answering thread starts with every signal blocked, so that it takes no other
    # (a stop signal must reach the thread that handles it, or its default action).
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    answering = threading.Thread(
        target=_answer, args=(stream,), name="memfs-tracebacks", daemon=True
    )
    try:
        answering.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask | {DUMP_SIGNAL})
    ident = answering.ident
    assert ident is not None

    def forward(signum: int, frame: FrameType | None) -> None:
        # Only if a thread started before the mask took the signal: without a handler its
        # default action would end memfs. The answering thread has it blocked, so it
        # waits there for its sigwait.
        signal.pthread_kill(ident, signum)

    signal.signal(DUMP_SIGNAL, forward)
    faulthandler.enable(file=stream or sys.stderr, all_threads=True)


def _answer(stream: TextIO | None) -> None:
    while True:
        signal.sigwait({DUMP_SIGNAL})
        out = stream or sys.stderr
        try:
            out.write(dump())
            out.flush()
        except (OSError, ValueError):  # the log is gone or closed: nothing to write to
            pass
        except Exception:  # a dump gone wrong must not end the thread that answers
            log.exception("%s: no traceback dump", DUMP_SIGNAL.name)


def dump() -> str:
    """Every other thread's stack, most recent call first, in faulthandler's words."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    me = threading.get_ident()
    # Frames first, then words: a thread that runs on in between keeps the frames it had.
    stacks = [
        (ident, traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False))
        for ident, frame in sys._current_frames().items()
        if ident != me
    ]
    lines = [f"memfs: the tracebacks of {len(stacks)} threads ({DUMP_SIGNAL.name})\n"]
    for ident, stack in stacks:
        name = names.get(ident, "?")
        lines.append(f'Thread 0x{ident:016x} "{name}" (most recent call first):\n')
        lines += [f'  File "{f.filename}", line {f.lineno} in {f.name}\n' for f in stack]
    return "".join(lines) + "\n"
