"""Tier 1 (app, no mount): SIGUSR1's traceback dump (memfs.app.tracebacks).

The dump's signal handling changes the whole process (a signal mask, a handler), so it
runs in a child interpreter; the words of a dump are checked in this one. The mount test
(test_mount_lifecycle) sends SIGUSR1 to a serving memfs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from memfs.app import tracebacks

REPO = Path(__file__).resolve().parent.parent
DEADLINE = 60.0

# Two threads make and drop frames as fast as they can while the parent of them asks for
# dumps one after the other (each waited for, with a deadline), then asks once through a
# thread started before the dump thread, which does not block the signal.
CHILD = """\
import os, signal, sys, threading, time
stop = threading.Event()
before = threading.Thread(target=stop.wait, name="started-before")
before.start()

from memfs.app import tracebacks
log = open(sys.argv[1], "w")
tracebacks.answer_dump_signal(log)

def churn(n):
    return 0 if n == 0 else churn(n - 1) + len(os.path.join("a", str(n)))

def spin():
    while not stop.is_set():
        sum(churn(i % 30) for i in range(40))

workers = [threading.Thread(target=spin, name=f"churn-{i}") for i in range(2)]
for worker in workers:
    worker.start()

def dumps():
    with open(sys.argv[1]) as f:
        return f.read().count("memfs: the tracebacks of")

def ask(send):
    before_count = dumps()
    send()
    deadline = time.monotonic() + 20
    while dumps() == before_count:
        if time.monotonic() > deadline:
            sys.exit("no dump within 20 s")
        time.sleep(0.005)

for _ in range(int(sys.argv[2])):
    ask(lambda: os.kill(os.getpid(), signal.SIGUSR1))
ask(lambda: signal.pthread_kill(before.ident, signal.SIGUSR1))
stop.set()
print("served", dumps())
"""


def test_sigusr1_dumps_every_thread_each_time_while_threads_run(tmp_path: Path) -> None:
    log = tmp_path / "memfs.log"
    asks = 20
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), str(asks)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["served", str(asks + 1)]
    text = log.read_text()
    dumps = text.split("memfs: the tracebacks of")[1:]
    assert len(dumps) == asks + 1
    for one in dumps:
        assert '"MainThread" (most recent call first)' in one
        assert '"started-before" (most recent call first)' in one
        assert '"churn-0" (most recent call first)' in one
        assert '"memfs-tracebacks"' not in one  # the dumping thread leaves itself out
    assert " in churn\n" in text  # the workers' own frames, not only their thread's name


def test_a_dump_names_each_thread_and_its_calls_most_recent_first() -> None:
    waiting = threading.Event()
    release = threading.Event()

    def inner_call() -> None:
        waiting.set()
        release.wait(DEADLINE)

    def outer_call() -> None:
        inner_call()

    thread = threading.Thread(target=outer_call, name="the-waiter")
    thread.start()
    try:
        assert waiting.wait(DEADLINE)
        text = tracebacks.dump()
    finally:
        release.set()
        thread.join(DEADLINE)
    block = text.split('"the-waiter" (most recent call first):\n')[1].split("Thread 0x")[0]
    calls = [line.rsplit(" in ", 1)[1] for line in block.splitlines() if line.startswith("  ")]
    assert calls.index("inner_call") < calls.index("outer_call")
    assert f'File "{__file__}"' in block
    # the calling thread is the one thread a dump leaves out
    here = f"Thread 0x{threading.get_ident():016x}"
    assert here not in text
    assert text.startswith("memfs: the tracebacks of ")
