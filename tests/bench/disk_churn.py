"""Reads while tools rewrite memory on disk (§7.2, issue 37): the keeper's cost to a reader.

One client, a separate process, reads a 4 KiB file of a loaded project through the mount in
a loop, as ``cat`` does (open, fstat, read to the end, close), a millisecond apart, and
counts every read that fails. Meanwhile this process rewrites 50 files of another project
**on disk**, not through the mount, 20 a second for 10 seconds: half in the own account,
half in a read-only one; each rewrite alternates between Gemini CLI's way (in place,
``O_TRUNC``) and Claude Code's (a temp file renamed over), so the keeper reads, compares
and keeps a version for each one that stood still. An idle window of the same length
first gives the reader's floor on the same mount.

It prints the reader's p50, p99 and worst in each window, the ratio of the churn's to the
idle's, the read errors, the daemon's peak RSS, and how many versions the keeper kept
(``memfs status``). Issue 37's targets: worst <= 50 ms, no error, RSS <= 64 MiB.

    .venv/bin/python -m tests.bench.disk_churn [--seconds 10] [--rate 20] [--memfs-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.bench import fixture, measure
from tests.bench.mounts import Mount, Mounts

FILES = 50
READER_SLUG = "-home-bench-src-reader"
WORK_SLUG = "-home-bench-src-work"

# The reader: stops when its stdin closes, then prints its samples and errors as JSON.
READER = r"""
import json, os, select, sys, time
path = sys.argv[1]
poll = select.poll()
poll.register(sys.stdin.fileno(), select.POLLIN)
samples, errors = [], []
sys.stdout.write("ready\n")
sys.stdout.flush()
while not poll.poll(1):
    start = time.monotonic_ns()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fstat(fd)
            while os.read(fd, 131072):
                pass
        finally:
            os.close(fd)
    except OSError as e:
        errors.append(f"{start}: {e}")
        continue
    samples.append((start, time.monotonic_ns() - start))
json.dump({"samples": samples, "errors": errors}, sys.stdout)
"""


def _build(base: Path) -> tuple[fixture.Fixture, list[Path]]:
    fx = fixture._new(base, n_accounts=2, with_pi=False)
    reader = fx.source_path(0, READER_SLUG, "note-0.md")
    reader.parent.mkdir(parents=True)
    reader.write_bytes(b"x" * 4095 + b"\n")
    files = []
    for i in range(FILES):
        path = fx.source_path(i % 2, WORK_SLUG, f"topic-{i:02d}.md")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"# topic {i}\n\nversion 0\n".encode() * 40)
        os.utime(path, ns=(fixture.EPOCH_NS, fixture.EPOCH_NS))
        files.append(path)
    return fx, files


def _rewrite(path: Path, n: int) -> None:
    body = f"# {path.stem}\n\nversion {n}\n".encode() * 40
    if n % 2:
        with open(path, "r+b") as f:  # Gemini CLI: in place
            f.truncate(0)
            f.write(body)
    else:  # Claude Code: a temp file renamed over
        temp = path.with_name(f"{path.name}.tmp.{os.getpid()}.{n:012x}")
        temp.write_bytes(body)
        os.rename(temp, path)


def _churn(files: list[Path], seconds: float, rate: float) -> int:
    n = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        n += 1
        _rewrite(files[n % len(files)], n // len(files) + 1)
        time.sleep(max(0.0, n / rate - elapsed))
    return n


def _window(samples: list[tuple[int, int]], w0: int, w1: int) -> list[int]:
    return [d for s, d in samples if s <= w1 and s + d >= w0]


def _line(label: str, lat: list[int]) -> str:
    return (
        f"  {label:<28}{len(lat):>7,}{measure.median(lat) / 1e6:>9.3f}"
        f"{measure.percentile(lat, 99) / 1e6:>9.3f}{max(lat, default=0) / 1e6:>10.2f}"
    )


def run(mount: Mount, mnt: Path, files: list[Path], seconds: float, rate: float) -> dict:
    target = mnt / READER_SLUG / "note-0.md"
    for _ in range(3):
        measure.read_file(target)
    os.listdir(mnt / WORK_SLUG)  # loaded: only the churn's own work remains
    proc = subprocess.Popen(
        [sys.executable, "-c", READER, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the reader did not start")
    rss: list[int] = []
    stop = threading.Event()

    def sample_rss() -> None:
        while not stop.wait(0.2):
            rss.append(mount.rss_kib())

    sampler = threading.Thread(target=sample_rss)
    sampler.start()
    try:
        idle0 = time.monotonic_ns()
        time.sleep(seconds)
        idle1 = churn0 = time.monotonic_ns()
        rewrites = _churn(files, seconds, rate)
        churn1 = time.monotonic_ns()
        time.sleep(2.0)  # the last rewrites stand still and are kept
    finally:
        stop.set()
        sampler.join()
        out, _ = proc.communicate(timeout=60)
    got = json.loads(out)
    samples = [(int(a), int(b)) for a, b in got["samples"]]
    return {
        "idle": _window(samples, idle0, idle1),
        "churn": _window(samples, churn0, churn1),
        "errors": got["errors"],
        "rewrites": rewrites,
        "rss_peak_kib": max(rss, default=0),
        "status": mount.status(),
    }


def main(argv: list[str] | None = None) -> int:
    from tests.bench import run as bench  # run.py's snapshot and sandbox helpers

    parser = argparse.ArgumentParser(prog="python -m tests.bench.disk_churn", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="rewrites a second")
    parser.add_argument("--memfs-src", type=Path, help="another memfs package to measure")
    parser.add_argument("--out", type=Path, default=bench.REPO / "tests" / "bench" / "out")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="memfs-bench-churn-"))
    src = args.memfs_src.resolve() if args.memfs_src else bench.snapshot_memfs(base)
    os.environ["PYTHONPATH"] = str(src)
    mounts = Mounts(sys.executable, out / "logs")
    try:
        fx, files = _build(base / "tree")
        os.environ.update(fx.env)
        mnt = base / "mnt"
        mount = mounts.memfs(fx.env, fx.config, mnt, "churn")
        mount.wait_ready(mnt / READER_SLUG)
        try:
            got = run(mount, mnt, files, args.seconds, args.rate)
        finally:
            mounts.close(mount)
    finally:
        mounts.close_all()
        shutil.rmtree(base, ignore_errors=True)
    idle, churn = got["idle"], got["churn"]
    st = got["status"].get("counters", got["status"])
    print(f"disk churn: a warm cat of 4 KiB while {FILES} files are rewritten on disk")
    print(f"{'':<30}{'cats':>7}{'p50 ms':>9}{'p99 ms':>9}{'worst ms':>10}")
    print(_line("idle", idle))
    print(_line(f"{got['rewrites']} rewrites at {args.rate:g}/s", churn))
    print(
        f"  ratio churn/idle: p50 {measure.median(churn) / measure.median(idle):.2f}x, "
        f"p99 {measure.percentile(churn, 99) / measure.percentile(idle, 99):.2f}x"
    )
    print(f"  read errors: {len(got['errors'])}  {got['errors'][:3]}")
    print(f"  daemon RSS peak: {got['rss_peak_kib'] / 1024:.1f} MiB")
    print(
        "  keeper: "
        + ", ".join(f"{k} {st.get(k)}" for k in ("disk_swept", "disk_changes", "disk_versions"))
    )
    print(f"memfs {bench.memfs_source(args.memfs_src)}")
    return 0 if not got["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
