"""The responsiveness phase (§7a, issue 10): one client's warm ``cat`` while another works.

The first client is a separate process (so no GIL is shared with the second): it reads one
4 KiB file of an already loaded project in a loop, as ``cat`` does (open, fstat, read to
the end, close), one millisecond apart, and records when each read started and how long it
took (CLOCK_MONOTONIC, the same clock in both processes). The second client, this process,
works through the same mount in turns, each a window of time:

- *idle*: nothing, for a second;
- *list*: lists a project of 10,000 files for the first time (``os.listdir``; the project
  is loaded then);
- *append*: appends a line to 1 MiB heads held only by a read-only source (each a copy-up
  and a commit);
- *edit*: rewrites 6 bytes in the middle of a 1 MiB own file, in place (``O_RDWR``, no
  truncate: the stage starts as a copy of the head), several times;
- *unlink*: unlinks 30 files held only by a read-only source (each a whiteout).

Every read that overlaps a window counts for it, so the read a blocked request held up is
in. The windows run in ``rounds``, each round on fresh targets. The phase reports p50, p99
and the worst read per window kind, with how long the second client's work took.

``tests/bench/run.py`` runs it among the other phases. Alone, on its own fixture only
(seconds instead of minutes; the same memfs snapshot, sandbox and teardown as run.py)::

    .venv/bin/python -m tests.bench.responsive [--rounds N] [--profile] [--memfs-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tests.bench import fixture, measure
from tests.bench.fixture import UNLINKED, Responsive
from tests.bench.mounts import PROFILE_ENV, Mounts

IDLE_S = 1.0
PAUSE_S = 0.2  # between two windows: the reads of one never spill into the next
EDITS = 5
READY_DEADLINE = 20.0

# The first client. It stops when its stdin closes, then prints its samples as JSON.
READER = r"""
import json, os, select, sys, time
path = sys.argv[1]
flags = os.O_RDONLY | os.O_CLOEXEC
poll = select.poll()
poll.register(sys.stdin.fileno(), select.POLLIN)
samples = []
sys.stdout.write("ready\n")
sys.stdout.flush()
while not poll.poll(1):
    start = time.monotonic_ns()
    fd = os.open(path, flags)
    os.fstat(fd)
    while os.read(fd, 131072):
        pass
    os.close(fd)
    samples.append((start, time.monotonic_ns() - start))
json.dump(samples, sys.stdout)
"""

CASES = {
    "idle": "nothing (idle)",
    "list": "lists a project of {big:,} files, first time",
    "append": "appends to a 1 MiB read-only head (copy-up)",
    "edit": "edits a 1 MiB own file in place",
    "unlink": "unlinks 30 read-only files (whiteouts)",
}
# The cases issue 10 sets a target for, named short for the targets' lines.
LOADED = {
    "list": "lists {big:,} files first",
    "append": "appends to 1 MiB read-only",
    "edit": "edits 1 MiB own in place",
    "unlink": "unlinks 30 read-only",
}


def append(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        os.write(fd, b"appended by the responsiveness phase\n")
    finally:
        os.close(fd)


def edit(path: Path, n: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.pwrite(fd, b"edit%02d" % (n % 100), 512 * 1024)
    finally:
        os.close(fd)


def start_reader(path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", READER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the reader's first read happens right after this
    if line.strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the reader did not start: {line!r}")
    return proc


def stop_reader(proc: subprocess.Popen[str]) -> list[tuple[int, int]]:
    try:
        out, _ = proc.communicate(timeout=60)  # closes stdin: the reader stops and reports
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return [(int(a), int(b)) for a, b in json.loads(out)]


def run(mnt: Path, rs: Responsive, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    """Measure every case ``rounds`` times through the memfs mounted at ``mnt``."""
    target = mnt / rs.reader_slug / "note-0.md"
    work = mnt / rs.work_slug
    for _ in range(3):  # loaded, and the kernel holds its entry, attributes and pages
        measure.read_file(target)
    os.listdir(work)  # the work project is loaded too: only the case's own work remains
    windows: dict[str, list[tuple[int, int]]] = {case: [] for case in CASES}

    def window(case: str, work_fn: Callable[[], object]) -> None:
        start = time.monotonic_ns()
        work_fn()
        windows[case].append((start, time.monotonic_ns()))
        time.sleep(PAUSE_S)

    def appends(r: int) -> None:
        for k in range(rs.appends):
            append(work / rs.read_only_head(r, k))

    def edits() -> None:
        for n in range(EDITS):
            edit(work / "big-own.md", n)

    def unlinks(r: int) -> None:
        for i in range(UNLINKED):
            os.unlink(work / rs.unlinked(r, i))

    reader = start_reader(target, env)
    try:
        for r in range(rounds):
            window("idle", partial(time.sleep, IDLE_S))
            window("list", partial(os.listdir, mnt / rs.big_slugs[r]))
            window("append", partial(appends, r))
            window("edit", edits)
            window("unlink", partial(unlinks, r))
    finally:
        samples = stop_reader(reader)
    return {"windows_ns": windows, "samples_ns": samples}


def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    """Per case: the reads overlapping its windows (p50, p99, worst) and the work's time."""
    samples: list[tuple[int, int]] = [(int(a), int(b)) for a, b in raw["samples_ns"]]
    out: dict[str, Any] = {}
    for case, windows in raw["windows_ns"].items():
        lat = [
            d for start, d in samples if any(start <= w1 and start + d >= w0 for w0, w1 in windows)
        ]
        out[case] = {
            "cats": len(lat),
            "p50_ms": measure.median(lat) / 1e6,
            "p99_ms": measure.percentile(lat, 99) / 1e6,
            "max_ms": max(lat, default=float("nan")) / 1e6,
            "work_ms": measure.median([(w1 - w0) / 1e6 for w0, w1 in windows]),
        }
    return out


def render(summary: dict[str, Any], big: int) -> list[str]:
    lines = [
        "responsiveness: one client's warm cat of a 4 KiB file of a loaded project while "
        "another client ...",
        f"{'':<46}{'cats':>7}{'p50 ms':>9}{'p99 ms':>9}{'worst ms':>10}{'its work ms':>13}",
    ]
    for case, label in CASES.items():
        v = summary.get(case)
        if v is None:
            continue
        lines.append(
            f"  {label.format(big=big):<44}{v['cats']:>7,}{v['p50_ms']:>9.2f}"
            f"{v['p99_ms']:>9.2f}{v['max_ms']:>10.1f}{v['work_ms']:>13.1f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """This phase alone: its fixture, one memfs, the table of run.py's responsiveness lines."""
    from tests.bench import run as bench  # run.py imports this module: import it late

    parser = argparse.ArgumentParser(prog="python -m tests.bench.responsive", description=__doc__)
    parser.add_argument("--rounds", type=int, default=bench.FULL.responsive_rounds)
    parser.add_argument("--out", type=Path, default=bench.REPO / "tests" / "bench" / "out")
    parser.add_argument("--profile", action="store_true", help="run memfs under cProfile")
    parser.add_argument("--memfs-src", type=Path, help="another memfs package to measure")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.profile:
        os.environ[PROFILE_ENV] = str(out / "profiles")
        shutil.rmtree(out / "profiles", ignore_errors=True)
    base = Path(tempfile.mkdtemp(prefix="memfs-bench-responsive-"))
    src = args.memfs_src.resolve() if args.memfs_src else bench.snapshot_memfs(base)
    os.environ["PYTHONPATH"] = str(src)
    os.environ.update(fixture.sandbox_env(base / "self"))

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)  # unmounts on the way out

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    mounts = Mounts(sys.executable, out / "logs")
    try:
        rs = fixture.build_responsive(
            base / "responsive",
            seed=bench.SEED + 3,
            rounds=args.rounds,
            big_files=bench.BIG_PROJECT,
            appends=bench.READ_ONLY_APPENDS,
        )
        mnt = base / "mnt" / "responsive"
        mount = mounts.memfs(rs.fixture.env, rs.fixture.config, mnt, "responsive")
        mount.wait_ready(mnt / rs.reader_slug)
        try:
            raw = run(mnt, rs, args.rounds, rs.fixture.env)
        finally:
            mounts.close(mount)
    finally:
        mounts.close_all()
        shutil.rmtree(base, ignore_errors=True)
    summary = summarise(raw)
    (out / "responsive.json").write_text(json.dumps({"raw": raw, "summary": summary}) + "\n")
    print("\n".join(render(summary, bench.BIG_PROJECT)))
    print(f"memfs {bench.memfs_source(args.memfs_src)}; {args.rounds} rounds")
    if args.profile:
        bench.print_profiles(out / "profiles")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted ({exc or 'Ctrl-C'}); everything it mounted is unmounted")
        sys.exit(130)
