"""The memfs benchmark: memfs against the bare source folders, mergerfs and the pyfuse3 floor.

Run from the repository root, with the environment memfs is installed in::

    .venv/bin/python -m tests.bench.run [--quick] [--out DIR]

It generates seeded fixtures in a temporary folder (HOME and XDG_* moved there too), mounts
memfs (``python -m memfs mount --foreground``, from a snapshot of ./memfs taken at the
start), mergerfs (default and fast configurations) and a do-nothing pyfuse3 filesystem
serving memfs's own tree, measures in interleaved rounds, prints a table of medians, ratios
and targets, writes ``results.json`` and ``table.txt`` to the out folder (default
``tests/bench/out``, git-ignored) and, on a full run, the plot ``docs/preamble-latency.png``.
Besides the rounds: PREAMBLE.md by project size, writes keeping a file's first version by
project size, mount time, direct changes, writes (with their request counts), the
responsiveness phase (``responsive.py``: a warm ``cat`` while another client works) and a
short soak (``soak.py``: torn reads and errors under concurrent
writers, readers and out-of-band changes). The targets of the issues are printed as MET or
NOT MET. A full run takes four to seven minutes on two cores; ``--quick`` one to two. It
never asserts on time: it exits 0 when it ran, whatever it measured. Everything it
mounted is unmounted and every process it started is stopped, also on errors, SIGTERM and
Ctrl-C.

Other options: ``--cpu N`` pins the run and every daemon to one CPU (steadier figures on a
virtual machine, where waking a task on the other CPU costs tens of µs); ``--memfs-src DIR``
benchmarks the memfs package in DIR instead (A/B a patch); ``--keep`` keeps the fixtures;
``--profile`` (or ``MEMFS_BENCH_PROFILE=DIR``) runs every memfs under cProfile and prints the
hottest functions afterwards (its timings are then not comparable with a normal run).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import pstats
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tests.bench import fixture, measure, nullfs, png, responsive, soak
from tests.bench.mounts import (
    MERGERFS,
    MERGERFS_CONFIGS,
    PROFILE_ENV,
    Mount,
    Mounts,
    in_mountinfo,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
PLOT = REPO / "docs" / "preamble-latency.png"
SEED = 20261130
KIB4 = bytes(range(256)) * 16  # 4 KiB

BURST = 10
FIRST_KEEPS = 30  # files per project size rewritten once each (`Bench.first_keeps`)
SETTLE_S = 0.5
READ_PIECE = 10  # files each side reads before the other's turn (`Bench._reads_in_turn`)
SYSTEMS = ("memfs", "native", "mergerfs-default", "mergerfs-fast", "pyfuse3-floor")


@dataclass(frozen=True)
class Scale:
    accounts: int
    projects: int
    files: int
    rounds: int
    plain_projects: int
    plain_samples: int  # per round, each of PREAMBLE.md and the plain file
    preamble_sizes: tuple[int, ...]
    preamble_samples: int  # per size
    mount_repeats: int
    many_projects: int
    changes: int
    writes: int  # per write kind
    responsive_rounds: int  # each on a fresh project of BIG_PROJECT files and fresh targets
    soak_s: float
    floor_sessions: int  # fresh memfs and floor daemons mounted side by side, in turn
    floor_pairs: int  # alternated warm passes of the two per session


SIZES = (10, 100, 1_000, 10_000)
FULL = Scale(3, 200, 30, 5, 20, 200, SIZES, 300, 5, 10_000, 50, 40, 3, 30.0, 5, 7)
QUICK = Scale(3, 40, 30, 2, 10, 100, SIZES, 100, 2, 10_000, 20, 15, 1, 10.0, 2, 4)
WRITE_LABELS = {
    "native": "native (temp, fsync, rename)",
    "native_dir_fsync": "native + fsync of the folder",
    "memfs_truncate": "memfs O_TRUNC + write + close",
    "memfs_temp_rename": "memfs Claude Code's temp+fsync+close+rename",
    "floor_truncate": "write floor O_TRUNC + write + close",
    "floor_temp_rename": "write floor temp+fsync+close+rename",
}
# The side-by-side phase's calibration: a floor this many µs heavier a request beside the
# plain one, in this many sessions (`Bench.floor_pairs`). On 588ffe8's machine 1 µs measured
# 1.03x-1.06x on one CPU and 1.15x-1.44x on two.
SPIN_US = 1.0
SPUN_SESSIONS = 2
# Where the side-by-side sessions run: results key, and how the output names it.
PLACEMENTS = (("floor_pairs", "2 CPUs"), ("floor_pairs_one_cpu", "1 CPU"))
BIG_PROJECT = 10_000  # files of the project the responsiveness phase lists first
READ_ONLY_APPENDS = 3  # 1 MiB read-only heads appended to per responsiveness round


class Bench:
    def __init__(self, scale: Scale, base: Path, out: Path) -> None:
        self.scale = scale
        self.base = base
        self.out = out
        self.mounts = Mounts(sys.executable, out / "logs")
        self.background_pids: list[int] = []
        self.results: dict[str, Any] = {"rounds": [], "scale": asdict(scale)}
        self.main: fixture.Fixture | None = None
        self.shape_file = base / "shape.json"  # memfs's tree, served by the floor filesystem

    # --- helpers ------------------------------------------------------------------------

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def memfs(self, fx: fixture.Fixture, mnt: Path, label: str, probe: Path | None) -> Mount:
        mount = self.mounts.memfs(fx.env, fx.config, mnt, label)
        mount.wait_ready(probe)
        return mount

    @staticmethod
    def counters(system: str, mount: Mount | None) -> dict[str, int]:
        if mount is None:
            return {}
        if system == "memfs":
            requests: dict[str, int] = mount.status()["requests"]
            return dict(requests)
        if system in ("pyfuse3-floor", "write-floor"):
            return dict(json.loads(os.getxattr(mount.mountpoint, "user.null.requests")))
        return {}

    @staticmethod
    def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
        return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}

    # --- fixtures -----------------------------------------------------------------------

    def build(self) -> None:
        s = self.scale
        start = time.perf_counter()
        self.main = fixture.build_accounts(
            self.base / "main",
            seed=SEED,
            accounts=s.accounts,
            projects=s.projects,
            files=s.files,
            plain_projects=s.plain_projects,
        )
        self.preamble_fx = {
            n: fixture.build_one_project(
                self.base / f"preamble-{n}", seed=SEED + n, accounts=s.accounts, total_files=n
            )
            for n in s.preamble_sizes
        }
        self.many_fx = {
            n: fixture.build_many_projects(
                self.base / f"many-{n}", seed=SEED + 7 * n, accounts=s.accounts, projects=n
            )
            for n in (10, s.many_projects)
        }
        self.responsive_fx = fixture.build_responsive(
            self.base / "responsive",
            seed=SEED + 3,
            rounds=s.responsive_rounds,
            big_files=BIG_PROJECT,
            appends=READ_ONLY_APPENDS,
        )
        fx = self.main
        self.results["fixture"] = {
            "seed": SEED,
            "accounts": s.accounts,
            "projects": s.projects,
            "files_per_account": s.files,
            "source_files": fx.source_files,
            "merged_claude_files": len(fx.merged),
            "pi_projects": sum(1 for i in range(s.projects) if i % 4 == 0),
            "build_s": round(time.perf_counter() - start, 2),
        }
        self.log(
            f"fixtures built in {time.perf_counter() - start:.1f}s: main {fx.source_files:,} "
            f"source files ({len(fx.merged):,} distinct Claude Code paths), preamble projects "
            f"{', '.join(str(fx2.source_files) for fx2 in self.preamble_fx.values())} files, "
            f"{', '.join(f'{n:,}' for n in self.many_fx)} projects for mount time"
        )

    # --- the interleaved rounds: walk and read ------------------------------------------

    def system_paths(self, system: str, mnt: Path) -> tuple[list[Path], list[Path], Path]:
        """(walk roots, read list, a path that answers once the system is ready)."""
        fx = self.main
        assert fx is not None
        if system == "memfs":
            reads = [mnt / slug / name for slug, name, _ in fx.merged]
            return [mnt], reads, mnt / fx.slugs[0]
        if system.startswith("mergerfs"):
            reads = [mnt / slug / "memory" / name for slug, name, _ in fx.merged]
            return [mnt], reads, mnt / fx.slugs[0]
        if system == "native":
            roots = [fx.projects_dir(a) for a in range(len(fx.accounts))]
            assert fx.pi_root is not None
            roots.append(fx.pi_root)
            reads = [fx.source_path(a, slug, name) for slug, name, a in fx.merged]
            return roots, reads, roots[0]
        # The floor serves memfs's very tree: the same folders, names and sizes.
        reads = [mnt / slug / name for slug, name, _ in fx.merged]
        return [mnt], reads, mnt / fx.slugs[0]

    def record_shape(self) -> None:
        """Mount memfs once and record its tree, for the floor filesystem to serve."""
        fx = self.main
        assert fx is not None
        mnt = self.base / "mnt" / "memfs"
        mount = self.memfs(fx, mnt, "shape", mnt / fx.slugs[0])
        try:
            tree = measure.shape(mnt)
        finally:
            self.stop(mount)
        self.shape_file = self.base / "shape.json"
        self.shape_file.write_text(json.dumps(tree))
        self.log(f"memfs tree: {len(tree['dirs']):,} folders, {len(tree['files']):,} files")

    def start(self, system: str, mnt: Path, probe: Path) -> Mount | None:
        fx = self.main
        assert fx is not None
        if system == "memfs":
            return self.memfs(fx, mnt, "main", probe)
        if system.startswith("mergerfs"):
            branches = [fx.projects_dir(a) for a in range(len(fx.accounts))]
            mount = self.mounts.mergerfs(branches, mnt, system.split("-", 1)[1], fx.env)
            mount.wait_ready(probe)
            return mount
        if system in ("pyfuse3-floor", "pyfuse3-floor-spun"):
            argv = [sys.executable, "-m", "tests.bench.nullfs", str(mnt), str(self.shape_file)]
            env = dict(fx.env, PYTHONPATH=str(REPO))
            if system == "pyfuse3-floor-spun":
                env[nullfs.SPIN_ENV] = str(SPIN_US)
            log = self.out / "logs" / f"nullfs-{mnt.name}.log"
            mount = Mount(system, mnt, argv, env, log)
            self.mounts.live.append(mount)
            mount.spawn().wait_ready(probe)
            return mount
        return None

    def stop(self, mount: Mount | None, settle: bool = False) -> None:
        if mount is not None:
            self.mounts.close(mount)
            if settle:
                # A daemon that just exited still frees memory and the kernel still evicts
                # its inodes: let that pass before the next measurement starts.
                time.sleep(SETTLE_S)

    def phase(
        self,
        system: str,
        mount: Mount | None,
        name: str,
        fn: Callable[[], tuple[int, int]],
        row: dict[str, Any],
    ) -> None:
        """Time ``fn`` (returning items and folders) and the requests it made."""
        before = self.counters(system, mount)
        seconds, (count, folders) = measure.timed(fn)
        after = self.counters(system, mount)
        row[name] = {
            "s": seconds,
            "n": count,
            "folders": folders,
            "requests": self.delta(after, before),
        }

    def system_round(self, system: str, r: int) -> dict[str, Any]:
        mnt = self.base / "mnt" / system
        roots, reads, probe = self.system_paths(system, mnt)
        row: dict[str, Any] = {"system": system, "round": r}
        mount = self.start(system, mnt, probe)
        try:
            if mount is not None and system == "memfs":
                row["ready_s"] = mount.ready_s
            self.phase(system, mount, "walk_cold", lambda: measure.walk(roots), row)
            self.phase(system, mount, "walk_warm1", lambda: measure.walk(roots), row)
            self.phase(system, mount, "walk_warm", lambda: measure.walk(roots), row)
            if system == "memfs" and mount is not None:
                row["rss_after_walk_kib"] = mount.rss_kib()
            if mount is not None:  # cold reads: a fresh mount, its kernel caches empty
                self.stop(mount, settle=True)
                mount = self.start(system, mnt, probe)

            def read() -> tuple[int, int]:
                measure.read_all(reads)
                return len(reads), 0

            self.phase(system, mount, "read_cold", read, row)
            self.phase(system, mount, "read_warm1", read, row)
            self.phase(system, mount, "read_warm", read, row)
            if system == "memfs" and mount is not None:
                row["rss_after_reads_kib"] = mount.rss_kib()
                row["preamble_vs_plain"] = self.preamble_vs_plain(mount)
        finally:
            self.stop(mount, settle=True)
        return row

    def preamble_vs_plain(self, mount: Mount) -> dict[str, Any]:
        """Alternating warm samples of PREAMBLE.md and an 8 KiB plain file, same projects."""
        fx = self.main
        assert fx is not None
        mnt = mount.mountpoint
        pairs = [(mnt / slug / "PREAMBLE.md", mnt / slug / name) for slug, name in fx.plain]
        for pre, plain in pairs:  # warm: the preamble computed, the plain file's pages cached
            measure.read_file(pre)
            measure.read_file(plain)
            measure.read_file(plain)
        pre_ns: list[int] = []
        plain_ns: list[int] = []
        before = self.counters("memfs", mount)
        pre_requests: dict[str, int] = {}
        for i in range(self.scale.plain_samples):
            pre, plain = pairs[i % len(pairs)]
            c0 = self.counters("memfs", mount)
            pre_ns.append(measure.sample_ns(partial(measure.read_file, pre)))
            c1 = self.counters("memfs", mount)
            for k, v in self.delta(c1, c0).items():
                pre_requests[k] = pre_requests.get(k, 0) + v
            plain_ns.append(measure.sample_ns(partial(measure.read_file, plain)))
        total = self.delta(self.counters("memfs", mount), before)
        plain_requests = {k: v - pre_requests.get(k, 0) for k, v in total.items()}
        return {
            "preamble_ns": pre_ns,
            "plain_ns": plain_ns,
            "preamble_bytes": os.stat(pairs[0][0]).st_size,
            "plain_bytes": os.stat(pairs[0][1]).st_size,
            "preamble_requests": pre_requests,
            "plain_requests": plain_requests,
        }

    def rounds(self) -> None:
        systems = [s for s in SYSTEMS if not s.startswith("mergerfs") or os.path.exists(MERGERFS)]
        if len(systems) < len(SYSTEMS):
            self.log(f"{MERGERFS} not found (Debian package mergerfs): no mergerfs rounds")
        n = len(systems)
        for r in range(self.scale.rounds):
            order = systems[r % n :] + systems[: r % n]
            for system in order:
                start = time.perf_counter()
                row = self.system_round(system, r)
                self.results["rounds"].append(row)
                walk = row["walk_warm"]
                read = row["read_warm"]
                self.log(
                    f"round {r + 1}/{self.scale.rounds} {system:<16} warm walk "
                    f"{walk['s'] * 1e6 / walk['n']:7.1f} µs/entry, warm read "
                    f"{read['s'] * 1e6 / read['n']:7.1f} µs/file "
                    f"({time.perf_counter() - start:.1f}s)"
                )

    def floor_pairs(self) -> None:
        """memfs and the floor mounted side by side, their warm passes alternated: each
        pair's ratio is taken under one state of the machine (on a shared virtual machine
        the rounds above, minutes apart, differ by more than the two systems do).

        How one daemon lands on this machine (its CPU, its memory) moves a session's ratio
        by as much as memfs's own work does: two identical daemons side by side have
        measured 0.99x to 1.20x. So the pairs are taken in `Scale.floor_sessions` sessions,
        each with a fresh memfs and a fresh floor, and the ratio is the median of the
        sessions' ratios. One more session mounts the floor beside a second floor (A/A):
        its ratio is the method's own spread, printed beside the others.

        Taken twice: on both CPUs, as a user runs them, and with the client and both
        daemons on one CPU (``floor_pairs_one_cpu``). On two CPUs the scheduler decides
        whether a daemon is woken on the client's CPU (it runs when the client blocks,
        and finds the next request waiting) or on the other one (a cross-CPU wake-up per
        request, 40-80 µs here), and memfs, a few µs heavier a request, came out on the
        other CPU more often than the floor: on 588ffe8 its request thread switched
        19,625 times voluntarily and 753 times preempted over four walks, the floor's
        11,852 and 16,360, and the two-CPU walk measured 1.27x where one CPU gave 1.06x.
        One CPU measures what memfs's own work adds; two CPUs, what this machine's
        scheduler makes of it. Each placement also mounts the floor beside a floor that
        spins `SPIN_US` a request (`nullfs.spin`): what that little work becomes there."""
        (two, _), (one, _) = PLACEMENTS
        self._floor_pairs(two)
        affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(affinity)})  # the daemons started now inherit it
        try:
            self._floor_pairs(one)
        finally:
            os.sched_setaffinity(0, affinity)

    def _floor_pairs(self, key: str) -> None:
        where = dict(PLACEMENTS)[key]
        memfs_floor = (("memfs", "memfs"), ("pyfuse3-floor", "pyfuse3-floor"))
        sessions = [
            self._pair_session(f"{key}-s{i}", _alternated(memfs_floor, i))
            for i in range(self.scale.floor_sessions)
        ]
        aa = self._pair_session(f"{key}-aa", (("pyfuse3-floor", "a"), ("pyfuse3-floor", "b")))
        # What SPIN_US of work a request becomes here: the floor beside a spun floor.
        floor_spun = (("pyfuse3-floor", "a"), ("pyfuse3-floor-spun", "b"))
        spun = [
            self._pair_session(f"{key}-spun{i}", _alternated(floor_spun, i))
            for i in range(SPUN_SESSIONS)
        ]
        self.results[key] = {"sessions": sessions, "aa": aa, "spun": spun}
        for kind in ("read", "walk"):
            ratios = [_session_ratio(s[kind], "memfs", "pyfuse3-floor") for s in sessions]
            spun_ratios = [_session_ratio(s[kind], "b", "a") for s in spun]
            self.log(
                f"side by side on {where}, warm {kind}: memfs/floor {measure.median(ratios):.2f}x, "
                f"median of {len(ratios)} sessions ({_fmt_ratios(ratios)}); floor beside "
                f"floor {_session_ratio(aa[kind], 'a', 'b'):.2f}x; a floor {SPIN_US} µs "
                f"heavier a request {measure.median(spun_ratios):.2f}x"
            )

    def _pair_session(
        self, name: str, sides: Sequence[tuple[str, str]]
    ) -> dict[str, list[dict[str, float]]]:
        """One session of `floor_pairs`: ``sides`` are (system, label) mounted at once,
        in the order given (the sessions alternate it), and ``Scale.floor_pairs`` warm
        passes of each taken in turn, piece by piece (`measure.in_turn`); each pair is the
        µs per item of every label."""
        pairs: dict[str, list[dict[str, float]]] = {"read": [], "walk": []}
        mounts, paths = {}, {}
        try:
            for system, label in sides:
                mnt = self.base / "mnt" / f"pair-{name}-{label}"
                roots, reads, probe = self.system_paths(system, mnt)
                paths[label] = (roots, reads)
                mounts[label] = self.start(system, mnt, probe)
            passes = {
                "read": partial(self._reads_in_turn, paths),
                "walk": partial(self._walks_in_turn, paths),
            }
            for _ in range(2):  # cold, then warm once: the pairs time warm passes only
                for run in passes.values():
                    run()
            for _ in range(self.scale.floor_pairs):
                for kind, run in passes.items():
                    pairs[kind].append(run())
        finally:
            for mount in mounts.values():
                self.stop(mount, settle=True)
        return pairs

    @staticmethod
    def _reads_in_turn(paths: dict[str, tuple[list[Path], list[Path]]]) -> dict[str, float]:
        """One warm read of every file on each side, READ_PIECE files of one, then of the
        other: µs a file."""
        pieces = {
            side: [
                partial(measure.read_all, reads[i : i + READ_PIECE])
                for i in range(0, len(reads), READ_PIECE)
            ]
            for side, (_, reads) in paths.items()
        }
        took = measure.in_turn(pieces)
        return {side: s / len(paths[side][1]) * 1e6 for side, (s, _) in took.items()}

    @staticmethod
    def _walks_in_turn(paths: dict[str, tuple[list[Path], list[Path]]]) -> dict[str, float]:
        """One warm walk of each side's tree, a project folder of one, then of the other: µs
        a folder."""
        took = measure.in_turn(
            {side: measure.walk_pieces(roots[0]) for side, (roots, _) in paths.items()}
        )
        return {
            side: s / max(sum(f for _, f in walked), 1) * 1e6 for side, (s, walked) in took.items()
        }

    # --- PREAMBLE.md latency against project size ---------------------------------------

    def preamble_sizes(self) -> None:
        out: dict[str, Any] = {}
        live: dict[int, Mount] = {}
        # This phase compares daemons with each other: on one CPU (the daemons inherit it),
        # so that none pays cross-CPU wake-ups the others do not (on a virtual machine that
        # alone can double a latency, whatever the project's size).
        affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(affinity)})
        try:
            for n, fx in self.preamble_fx.items():
                mnt = self.base / "mnt" / f"preamble-{n}"
                live[n] = self.memfs(fx, mnt, f"preamble-{n}", None)
            for n, fx in self.preamble_fx.items():
                path = live[n].mountpoint / fx.slugs[0] / "PREAMBLE.md"
                cold = measure.sample_ns(partial(measure.read_file, path))
                out[str(n)] = {
                    "files": fx.source_files,
                    "cold_first_open_ns": cold,
                    "bytes": os.stat(path).st_size,
                    "samples_ns": [],
                }
            # Bursts of BURST samples per size, sizes in turn: each daemon is awake for its
            # burst (one untimed read first), and machine noise spreads over all sizes.
            sizes = list(self.preamble_fx)
            for i in range(self.scale.preamble_samples // BURST):
                for n in sizes[i % len(sizes) :] + sizes[: i % len(sizes)]:
                    path = live[n].mountpoint / self.preamble_fx[n].slugs[0] / "PREAMBLE.md"
                    measure.read_file(path)
                    for _ in range(BURST):
                        ns = measure.sample_ns(partial(measure.read_file, path))
                        out[str(n)]["samples_ns"].append(ns)
            for n in sizes:
                out[str(n)]["rss_kib"] = live[n].rss_kib()
        finally:
            for mount in live.values():
                self.stop(mount)
            os.sched_setaffinity(0, affinity)
        self.results["preamble_sizes"] = out
        self.log(
            "PREAMBLE.md warm p50 by project size: "
            + ", ".join(
                f"{n}: {measure.median(v['samples_ns']) / 1e3:.0f} µs" for n, v in out.items()
            )
        )

    def first_keeps(self) -> None:
        """4 KiB `O_TRUNC` writes that each keep a file's first version (§7.2), by project
        size: the kept version makes a folder under .history/, and what the watcher does
        about a new folder must not grow with the project. Fresh daemons of the smallest
        and the largest `PREAMBLE.md` project, unpinned as users run them (a worker's long
        scan costs the request thread most when the two are on different CPUs). Each of
        FIRST_KEEPS files is made first (untimed), then rewritten once, timed; the sizes
        take turns in bursts."""
        sizes = (min(self.preamble_fx), max(self.preamble_fx))
        live: dict[int, Mount] = {}
        out: dict[str, list[int]] = {str(n): [] for n in sizes}
        try:
            for n in sizes:
                mnt = self.base / "mnt" / f"keeps-{n}"
                live[n] = self.memfs(self.preamble_fx[n], mnt, f"keeps-{n}", None)
            folders = {n: live[n].mountpoint / self.preamble_fx[n].slugs[0] for n in sizes}
            files = [f"bench-keep-{k:03d}.md" for k in range(FIRST_KEEPS)]
            for n in sizes:
                for name in files:
                    measure.write_truncate(folders[n] / name, KIB4)
            for start in range(0, FIRST_KEEPS, BURST):
                for n in sorted(sizes, reverse=bool(start // BURST % 2)):
                    for name in files[start : start + BURST]:
                        write = partial(measure.write_truncate, folders[n] / name, KIB4)
                        out[str(n)].append(measure.sample_ns(write))
        finally:
            for mount in live.values():
                self.stop(mount)
        self.results["first_keeps"] = out
        self.log(
            "first-version writes p50: "
            + ", ".join(f"{n} files {measure.median(v) / 1e6:.2f} ms" for n, v in out.items())
        )

    # --- mount until ready ---------------------------------------------------------------

    def mount_time(self) -> None:
        out: dict[str, Any] = {
            str(n): {"foreground_s": [], "background_s": []} for n in self.many_fx
        }
        sizes = list(self.many_fx)
        for rep in range(self.scale.mount_repeats):
            for n in sizes if rep % 2 == 0 else sizes[::-1]:
                fx = self.many_fx[n]
                mnt = self.base / "mnt" / f"many-{n}"
                probe = mnt / fx.slugs[-1]
                mount = self.mounts.memfs(fx.env, fx.config, mnt, f"many-{n}")
                try:
                    out[str(n)]["foreground_s"].append(mount.wait_ready(probe))
                finally:
                    self.stop(mount)
                out[str(n)]["background_s"].append(self.background_mount(fx, mnt, probe))
        self.results["mount_time"] = out
        self.log(
            "mount until a project stats: "
            + ", ".join(
                f"{n} projects {measure.median(v['foreground_s']) * 1e3:.0f} ms"
                for n, v in out.items()
            )
        )

    def background_mount(self, fx: fixture.Fixture, mnt: Path, probe: Path) -> float:
        """Seconds until `memfs mount` (background mode) returns; then unmount it."""
        argv = [sys.executable, "-m", "memfs", "mount", str(mnt), "--config", str(fx.config)]
        start = time.perf_counter()
        done = subprocess.run(
            argv, cwd=fx.base, env=fx.env, capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - start
        found = re.search(r"\(pid (\d+)\)", done.stdout)
        pid = int(found.group(1)) if found else None
        if pid is not None:
            self.background_pids.append(pid)
        try:
            if done.returncode != 0:
                raise RuntimeError(f"memfs mount failed: {done.stderr.strip()}")
            os.stat(probe)
        finally:
            self.stop_background(mnt, pid)
        return seconds

    def stop_background(self, mnt: Path, pid: int | None) -> None:
        unmounted = (
            not in_mountinfo(mnt)
            or not subprocess.run(
                ["fusermount3", "-u", str(mnt)], capture_output=True, check=False
            ).returncode
        )
        if not unmounted:
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, check=False)
        if pid is None:
            return
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: not _alive(pid), 10.0, f"memfs pid {pid} to exit", poll=0.01)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ValueError):
            self.background_pids.remove(pid)

    # --- direct changes, writes, memory -----------------------------------------------

    def changes_and_writes(self) -> None:
        fx = self.main
        assert fx is not None
        mnt = self.base / "mnt" / "memfs"
        mount = self.memfs(fx, mnt, "changes", mnt / fx.slugs[0])
        try:
            measure.walk([mnt])
            self.results["rss_after_walk_fresh_kib"] = mount.rss_kib()
            rng = random.Random(SEED)
            picks = rng.sample(fx.unique, self.scale.changes)
            latencies = []
            for n, (slug, name, account) in enumerate(picks):
                view = mnt / slug / name
                measure.read_file(view)  # the kernel holds its size and pages now
                suffix = f"\nappended by the benchmark, change {n}\n".encode()
                latencies.append(
                    measure.append_and_wait(fx.source_path(account, slug, name), view, suffix)
                )
            self.results["direct_change_s"] = latencies
            self.log(
                f"direct change visible: p50 {measure.median(latencies) * 1e3:.1f} ms, "
                f"p99 {measure.percentile(latencies, 99) * 1e3:.1f} ms"
            )
            self.results["writes"] = self.writes(mount)
            self.results["rss_end_kib"] = mount.rss_kib()
            self.results["status_end"] = {
                k: v for k, v in mount.status().items() if k not in ("left_out", "sources")
            }
        finally:
            self.stop(mount)

    def writes(self, mount: Mount) -> dict[str, Any]:
        fx = self.main
        assert fx is not None
        mnt = mount.mountpoint
        slugs = fx.slugs[:5]
        floor = self.write_floor()
        fmnt = floor.mountpoint
        kinds: dict[str, Callable[[str], None]] = {
            "native": lambda slug: measure.write_native(
                fx.source_path(0, slug, ""), "bench-native.md", KIB4, dir_fsync=False
            ),
            "native_dir_fsync": lambda slug: measure.write_native(
                fx.source_path(0, slug, ""), "bench-native2.md", KIB4, dir_fsync=True
            ),
            "memfs_truncate": lambda slug: measure.write_truncate(
                mnt / slug / "bench-truncate.md", KIB4
            ),
            "memfs_temp_rename": lambda slug: measure.write_temp_rename(
                mnt / slug, "bench-rename.md", KIB4
            ),
            "floor_truncate": lambda slug: measure.write_truncate(
                fmnt / f"{slug}-truncate.md", KIB4
            ),
            "floor_temp_rename": lambda slug: measure.write_temp_rename(
                fmnt, f"{slug}-rename.md", KIB4
            ),
        }
        # Whose request counters a kind reads (the native ones count nothing).
        counted: dict[str, tuple[str, Mount]] = {
            "memfs_truncate": ("memfs", mount),
            "memfs_temp_rename": ("memfs", mount),
            "floor_truncate": ("write-floor", floor),
            "floor_temp_rename": ("write-floor", floor),
        }
        try:
            for slug in slugs:  # first writes create the files; the measured ones replace them
                for write in kinds.values():
                    write(slug)
            samples: dict[str, list[int]] = {k: [] for k in kinds}
            requests: dict[str, dict[str, int]] = {k: {} for k in kinds}
            names = list(kinds)
            for i in range(self.scale.writes):
                slug = slugs[i % len(slugs)]
                for kind in names[i % len(names) :] + names[: i % len(names)]:
                    system, counter = counted.get(kind, ("native", mount))
                    c0 = self.counters(system, counter)
                    samples[kind].append(measure.sample_ns(partial(kinds[kind], slug)))
                    for op, v in self.delta(self.counters(system, counter), c0).items():
                        requests[kind][op] = requests[kind].get(op, 0) + v
        finally:
            self.stop(floor)
        self.log(
            "4 KiB atomic write p50: "
            + ", ".join(f"{k} {measure.median(v) / 1e6:.2f} ms" for k, v in samples.items())
        )
        return {"samples_ns": samples, "requests": requests}

    def write_floor(self) -> Mount:
        """The pass-through floor (`tests.bench.passfs`) over a folder on the fixture's disk."""
        fx = self.main
        assert fx is not None
        folder, mnt = self.base / "write-floor", self.base / "mnt" / "write-floor"
        folder.mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "tests.bench.passfs", str(mnt), str(folder)]
        env = dict(fx.env, PYTHONPATH=str(REPO))
        mount = Mount("write-floor", mnt, argv, env, self.out / "logs" / "passfs.log")
        self.mounts.live.append(mount)
        mount.spawn().wait_ready()
        return mount

    # --- responsiveness and the soak -----------------------------------------------

    def responsiveness(self) -> None:
        rs = self.responsive_fx
        mnt = self.base / "mnt" / "responsive"
        mount = self.memfs(rs.fixture, mnt, "responsive", mnt / rs.reader_slug)
        try:
            raw = responsive.run(mnt, rs, self.scale.responsive_rounds, rs.fixture.env)
        finally:
            self.stop(mount)
        self.results["responsiveness"] = raw
        summary = responsive.summarise(raw)
        self.log(
            "responsiveness, worst warm cat: "
            + ", ".join(f"{case} {v['max_ms']:.1f} ms" for case, v in summary.items())
        )

    def soak(self) -> None:
        report = soak.soak_mounted(
            self.base / "soak", self.scale.soak_s, logs=self.out / "logs", log=self.log
        )
        self.results["soak"] = report.as_dict()
        self.log(f"soak: {report.torn} torn reads, {report.errors} errors")

    # --- teardown -------------------------------------------------------------------

    def close(self) -> None:
        self.mounts.close_all()
        for pid in list(self.background_pids):
            self.stop_background(self.base / "mnt" / "none", pid)
        leftovers = [p for p in (self.base / "mnt").glob("*") if in_mountinfo(p)]
        for path in leftovers:
            subprocess.run(["fusermount3", "-uz", str(path)], check=False)
        if self.mounts.forced or leftovers:
            self.log(f"teardown had to force: {self.mounts.forced + [str(p) for p in leftovers]}")


def wakeup_us(rounds: int = 2000) -> float:
    """Median µs of a pipe ping-pong with a child process: what a wake-up costs right now.

    Every FUSE request is two wake-ups; on a busy virtual machine this grows several-fold,
    and every figure of the run with it. Printed at the start and end of a run.
    """
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only echoes
        try:
            for _ in range(rounds):
                os.read(r1, 1)
                os.write(w2, b"x")
        finally:
            os._exit(0)
    samples = []
    try:
        for _ in range(rounds):
            start = time.perf_counter_ns()
            os.write(w1, b"x")
            os.read(r2, 1)
            samples.append(time.perf_counter_ns() - start)
    finally:
        os.waitpid(pid, 0)
        for fd in (r1, w1, r2, w2):
            os.close(fd)
    return measure.median(samples) / 1e3


def snapshot_memfs(base: Path) -> Path:
    """Copy the repository's memfs package into ``base``: the run measures one version even
    while someone edits the working tree."""
    target = base / "memfs-src"
    shutil.copytree(REPO / "memfs", target / "memfs", ignore=shutil.ignore_patterns("__pycache__"))
    return target


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine was busy, CPU seconds of this process and its reaped
    children): their difference is what else ran during a measurement."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# --- the report -----------------------------------------------------------------------


def _per(row: dict[str, Any], phase: str) -> float:
    return row[phase]["s"] * 1e6 / row[phase]["n"]


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    rows = results["rounds"]
    summary: dict[str, Any] = {}
    for phase in ("walk_cold", "walk_warm1", "walk_warm", "read_cold", "read_warm1", "read_warm"):
        summary[phase] = {}
        for system in SYSTEMS:
            mine = [r for r in rows if r["system"] == system]
            if not mine:
                continue
            entry: dict[str, Any] = {
                "us_per_item": measure.median([_per(r, phase) for r in mine]),
                "items": mine[0][phase]["n"],
                "folders": mine[0][phase].get("folders", 0),
            }
            # Every system counts every request (memfs its releasedir since e8a7a76).
            total = [sum(r[phase]["requests"].values()) for r in mine]
            if any(total):
                entry["requests_per_item"] = measure.median(
                    [t / r[phase]["n"] for t, r in zip(total, mine, strict=True)]
                )
                entry["us_per_request"] = measure.median(
                    [r[phase]["s"] * 1e6 / t for t, r in zip(total, mine, strict=True) if t]
                )
                entry["requests"] = mine[-1][phase]["requests"]
                if entry["folders"]:
                    entry["requests_per_folder"] = measure.median(
                        [t / r[phase]["folders"] for t, r in zip(total, mine, strict=True)]
                    )
            summary[phase][system] = entry
    memfs_rows = [r for r in rows if r["system"] == "memfs"]
    pvp = [r["preamble_vs_plain"] for r in memfs_rows]
    if pvp:
        pre = [x for p in pvp for x in p["preamble_ns"]]
        plain = [x for p in pvp for x in p["plain_ns"]]
        n = len(pvp[0]["preamble_ns"])
        summary["preamble_vs_plain"] = {
            "preamble_p50_us": measure.median(pre) / 1e3,
            "preamble_p99_us": measure.percentile(pre, 99) / 1e3,
            "plain_p50_us": measure.median(plain) / 1e3,
            "plain_p99_us": measure.percentile(plain, 99) / 1e3,
            "preamble_bytes": pvp[0]["preamble_bytes"],
            "plain_bytes": pvp[0]["plain_bytes"],
            "preamble_requests_per_open": {
                k: v / n for k, v in pvp[-1]["preamble_requests"].items()
            },
            "plain_requests_per_open": {k: v / n for k, v in pvp[-1]["plain_requests"].items()},
        }
        summary["rss_after_walk_mib"] = max(r["rss_after_walk_kib"] for r in memfs_rows) / 1024
        summary["rss_after_reads_mib"] = max(r["rss_after_reads_kib"] for r in memfs_rows) / 1024
        summary["mount_main_s"] = measure.median([r["ready_s"] for r in memfs_rows])
    if "preamble_sizes" in results:
        summary["preamble_sizes"] = {
            n: {
                "files": v["files"],
                "bytes": v["bytes"],
                "cold_ms": v["cold_first_open_ns"] / 1e6,
                "p50_us": measure.median(v["samples_ns"]) / 1e3,
                "p99_us": measure.percentile(v["samples_ns"], 99) / 1e3,
            }
            for n, v in results["preamble_sizes"].items()
        }
    if "first_keeps" in results:
        summary["first_keeps_p50_ms"] = {
            n: measure.median(v) / 1e6 for n, v in results["first_keeps"].items()
        }
    if "mount_time" in results:
        summary["mount_time"] = {
            n: {
                "foreground_ms": measure.median(v["foreground_s"]) * 1e3,
                "background_ms": measure.median(v["background_s"]) * 1e3,
            }
            for n, v in results["mount_time"].items()
        }
    if "direct_change_s" in results:
        lat = results["direct_change_s"]
        summary["direct_change"] = {
            "p50_ms": measure.median(lat) * 1e3,
            "p99_ms": measure.percentile(lat, 99) * 1e3,
            "max_ms": max(lat) * 1e3,
            "n": len(lat),
        }
    if "writes" in results:
        w = results["writes"]
        summary["writes"] = {
            k: {
                "p50_ms": measure.median(v) / 1e6,
                "p99_ms": measure.percentile(v, 99) / 1e6,
                "requests_per_write": {op: c / len(v) for op, c in w["requests"][k].items()},
            }
            for k, v in w["samples_ns"].items()
        }
    for key, _ in PLACEMENTS:
        if key not in results:
            continue
        sessions, aa = results[key]["sessions"], results[key]["aa"]
        spun = results[key].get("spun", [])
        summary[key] = {}
        for kind in ("read", "walk"):
            rows = [r for s in sessions for r in s[kind]]
            ratios = [_session_ratio(s[kind], "memfs", "pyfuse3-floor") for s in sessions]
            summary[key][kind] = {
                "ratio": measure.median(ratios),
                "session_ratios": ratios,
                "aa_ratio": _session_ratio(aa[kind], "a", "b"),
                "spun_ratio": (
                    measure.median([_session_ratio(x[kind], "b", "a") for x in spun])
                    if spun
                    else math.nan
                ),
                "memfs_us": measure.median([r["memfs"] for r in rows]),
                "floor_us": measure.median([r["pyfuse3-floor"] for r in rows]),
                "pairs": len(rows) // max(len(sessions), 1),
            }
    if "rss_end_kib" in results:
        summary["rss_end_mib"] = results["rss_end_kib"] / 1024
        summary["rss_after_walk_fresh_mib"] = results["rss_after_walk_fresh_kib"] / 1024
    if "responsiveness" in results:
        summary["responsiveness"] = responsive.summarise(results["responsiveness"])
    if "soak" in results:
        summary["soak"] = results["soak"]
    return summary


def _session_ratio(rows: Sequence[dict[str, float]], a: str, b: str) -> float:
    """One side-by-side session's ratio: the median of its pairs' ``a`` / ``b``."""
    return measure.median([r[a] / r[b] for r in rows])


def _alternated(sides: Sequence[tuple[str, str]], i: int) -> Sequence[tuple[str, str]]:
    """Session ``i``'s order of mounting ``sides``: flipped every other session."""
    return sides if i % 2 == 0 else sides[::-1]


def _fmt_ratios(ratios: Sequence[float]) -> str:
    return " ".join(f"{r:.2f}x" for r in ratios)


def _per_walk(timed: tuple[float, tuple[int, int]]) -> float:
    """Seconds per folder of one timed `measure.walk`."""
    seconds, (_, folders) = timed
    return seconds / max(folders, 1)


def _per_folder(entry: dict[str, Any]) -> float:
    return float(entry["us_per_item"] * entry["items"] / entry["folders"])


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


def targets(summary: dict[str, Any], many: int) -> list[dict[str, Any]]:
    out = []

    def add(name: str, ratio: float, limit: float, unit: str = "x") -> None:
        out.append(
            {"target": name, "measured": ratio, "limit": limit, "unit": unit, "met": ratio <= limit}
        )

    ww, rw = summary["walk_warm"], summary["read_warm"]
    add(
        "warm walk+stat <= 2x native",
        _ratio(ww["memfs"]["us_per_item"], ww["native"]["us_per_item"]),
        2.0,
    )
    fast = rw.get("mergerfs-fast", {}).get("us_per_item", math.nan)
    add(
        "warm open+read+close <= 1.0x mergerfs (fast config)",
        _ratio(rw["memfs"]["us_per_item"], fast),
        1.0,
    )
    # Against the floor: the pairs taken side by side (`Bench.floor_pairs`), on the
    # machine's CPUs and on one.
    # Issue 24: with no read ever refused for a change on disk, within 1.15x on one CPU
    # (on two, where the scheduler wakes each daemon weighs more than its work, #14).
    for key, where in PLACEMENTS:
        pairs = summary.get(key, {})
        add(
            f"warm open+read+close memfs/floor <= 1.15x, side by side, {where} (#24)",
            pairs.get("read", {}).get("ratio", math.nan),
            1.15,
        )
        add(
            f"warm walk+stat memfs/floor <= 1.15x, side by side, {where} (#24)",
            pairs.get("walk", {}).get("ratio", math.nan),
            1.15,
        )
    pvp = summary["preamble_vs_plain"]
    add(
        "PREAMBLE.md warm open+read <= 1.2x a plain file of its size (#11)",
        _ratio(pvp["preamble_p50_us"], pvp["plain_p50_us"]),
        1.2,
    )
    sizes = summary["preamble_sizes"]
    big, small = max(sizes, key=int), min(sizes, key=int)
    add(
        f"PREAMBLE.md warm p50 at {int(big):,} files <= 2x at {int(small):,} files",
        _ratio(sizes[big]["p50_us"], sizes[small]["p50_us"]),
        2.0,
    )
    mt = summary["mount_time"]
    add(
        f"mount time with {many:,} projects <= 2x with 10",
        _ratio(mt[str(many)]["foreground_ms"], mt["10"]["foreground_ms"]),
        2.0,
    )
    add("direct change visible p99 <= 100 ms", summary["direct_change"]["p99_ms"], 100.0, "ms")
    w = summary["writes"]
    add(
        "Claude Code's 4 KiB write (temp+fsync+close+rename) <= 2x native (#14)",
        _ratio(w["memfs_temp_rename"]["p50_ms"], w["native"]["p50_ms"]),
        2.0,
    )
    add(
        "4 KiB O_TRUNC+write+close <= 1.5x native with folder fsync (#14)",
        _ratio(w["memfs_truncate"]["p50_ms"], w["native_dir_fsync"]["p50_ms"]),
        1.5,
    )
    add(
        "RSS after walking the fixture <= 64 MB (#24)",
        summary["rss_after_walk_mib"] * 1.048576,
        64.0,
        "MB",
    )
    resp = summary.get("responsiveness", {})
    for case, label in responsive.LOADED.items():
        worst = resp.get(case, {}).get("max_ms", math.nan)
        add(
            f"worst warm cat <= 50 ms while another client {label.format(big=BIG_PROJECT)} (#10)",
            worst,
            50.0,
            "ms",
        )
    sk = summary.get("soak")
    torn = math.nan if sk is None else float(sk["torn_reads"])
    add("soak: 0 torn reads (#13)", torn, 0.0, "torn reads")
    bad = math.nan
    if sk is not None:
        bad = float(sk["errors"] + len(sk["end_problems"]) + len(sk["hung_clients"]))
    add("soak: 0 unexpected errors, every head whole, no temp file (#13)", bad, 0.0, "problems")
    return out


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def render(results: dict[str, Any], summary: dict[str, Any], tgts: list[dict[str, Any]]) -> str:
    fx = results["fixture"]
    lines = []
    title = (
        f"memfs benchmark: {fx['accounts']} accounts x {fx['projects']} projects x "
        f"{fx['files_per_account']} files (+ MEMORY.md and a handoff each; pi for "
        f"{fx['pi_projects']} projects): {fx['source_files']:,} source files, "
        f"{fx['merged_claude_files']:,} distinct paths read"
    )
    lines.append(title)
    scale = results["scale"]
    cpus = results["cpus"]
    pinning = f"pinned to CPU {cpus[0]}" if len(cpus) == 1 else f"unpinned ({len(cpus)} CPUs)"
    lines.append(
        f"memfs {results['memfs_source']}; medians of {scale['rounds']} interleaved rounds; "
        f"{pinning}; "
        f"{results['machine']}; other CPU load during the run "
        f"{results.get('other_cpu_cores', 0):.2f} cores; pipe wake-up round trip "
        f"{results.get('wakeup_us_start', 0):.0f} µs at the start, "
        f"{results.get('wakeup_us_end', 0):.0f} µs at the end; "
        f"mergerfs fast = {results['mergerfs_fast']}"
    )
    lines.append("")
    head = (
        f"{'measure':<26}{'memfs':>8}{'native':>8}{'mfs-def':>9}{'mfs-fast':>9}{'floor':>8}"
        f"{'/native':>9}{'/mfs-def':>9}{'/mfs-fast':>10}{'/floor':>8}"
        f"{'memfs req/item':>16}{'µs/req':>8}"
        f"{'floor req/item':>16}{'µs/req':>8}"
    )
    lines.append(head)
    lines.append("-" * len(head))
    labels = {
        "walk_cold": "walk+stat cold  µs/entry",
        "walk_warm": "walk+stat warm  µs/entry",
        "read_cold": "open+read+close cold µs",
        "read_warm1": "open+read+close 2nd pass",
        "read_warm": "open+read+close warm µs",
    }
    for phase, label in labels.items():
        s = summary[phase]

        def us(system: str, s: dict[str, Any] = s) -> float | None:
            return s[system]["us_per_item"] if system in s else None

        memfs = s.get("memfs", {})
        floor = s.get("pyfuse3-floor", {})
        lines.append(
            f"{label:<26}{_fmt(us('memfs')):>8}{_fmt(us('native')):>8}"
            f"{_fmt(us('mergerfs-default')):>9}{_fmt(us('mergerfs-fast')):>9}"
            f"{_fmt(us('pyfuse3-floor')):>8}"
            f"{_fmt(_ratio(us('memfs') or 0, us('native') or 0), 2) + 'x':>9}"
            f"{_fmt(_ratio(us('memfs') or 0, us('mergerfs-default') or 0), 2) + 'x':>9}"
            f"{_fmt(_ratio(us('memfs') or 0, us('mergerfs-fast') or 0), 2) + 'x':>10}"
            f"{_fmt(_ratio(us('memfs') or 0, us('pyfuse3-floor') or 0), 2) + 'x':>8}"
            f"{_fmt(memfs.get('requests_per_item'), 2):>16}{_fmt(memfs.get('us_per_request')):>8}"
            f"{_fmt(floor.get('requests_per_item'), 2):>16}{_fmt(floor.get('us_per_request')):>8}"
        )
    lines.append(
        "cold = first pass after mounting; native has no cold pass (global page and dentry "
        "caches are not dropped); warm = third pass; floor = a do-nothing pyfuse3 "
        "filesystem serving memfs's very tree"
    )
    for (key, where), (kind, label) in itertools.product(
        PLACEMENTS, (("read", "open+read+close µs/file"), ("walk", "walk+stat µs/folder"))
    ):
        pair = summary.get(key, {}).get(kind)
        if pair:
            lines.append(
                f"side by side, {where}, warm {label}: memfs {pair['memfs_us']:.1f}, floor "
                f"{pair['floor_us']:.1f}, memfs/floor {pair['ratio']:.2f}x (median of "
                f"{len(pair['session_ratios'])} sessions of fresh daemons both mounted at "
                f"once, {pair['pairs']} passes each taken in turn, {READ_PIECE} files or a "
                f"project folder at a time: "
                f"{_fmt_ratios(pair['session_ratios'])}); floor beside floor "
                f"{pair['aa_ratio']:.2f}x; a floor {SPIN_US} µs heavier a request "
                f"{pair['spun_ratio']:.2f}x"
            )
    walked = summary["walk_warm"]
    lines.append(
        "entries (folders) walked: "
        + ", ".join(f"{k} {v['items']:,} ({v['folders']:,})" for k, v in walked.items())
        + f"; files read: {summary['read_warm']['memfs']['items']:,} by each"
    )
    for system in ("memfs", "pyfuse3-floor"):
        if "requests_per_folder" in walked.get(system, {}):
            lines.append(
                f"{system} warm walk: {walked[system]['requests_per_folder']:.2f} requests per "
                f"folder (opendir, readdir until empty, releasedir), "
                f"{_per_folder(walked[system]):.0f} µs per folder"
            )
    for phase in ("walk_warm", "read_cold", "read_warm1", "read_warm"):
        reqs = summary[phase].get("memfs", {}).get("requests")
        if reqs:
            lines.append(f"memfs requests, {phase} (last round): {json.dumps(reqs)}")
    lines.append("")
    pvp = summary["preamble_vs_plain"]
    lines.append(
        f"PREAMBLE.md ({pvp['preamble_bytes']:,} B) warm open+read: p50 "
        f"{_fmt(pvp['preamble_p50_us'])} µs, p99 {_fmt(pvp['preamble_p99_us'])} µs; plain file "
        f"({pvp['plain_bytes']:,} B): p50 {_fmt(pvp['plain_p50_us'])} µs, p99 "
        f"{_fmt(pvp['plain_p99_us'])} µs; ratio "
        f"{_ratio(pvp['preamble_p50_us'], pvp['plain_p50_us']):.2f}x"
    )
    lines.append(
        f"  requests per open: PREAMBLE.md {json.dumps(pvp['preamble_requests_per_open'])}; "
        f"plain {json.dumps(pvp['plain_requests_per_open'])}"
    )
    lines.append("")
    lines.append("PREAMBLE.md by project size: one memfs per project, all on one CPU")
    lines.append(f"{'':<30}{'files':>8}{'bytes':>8}{'first open ms':>15}{'p50 µs':>9}{'p99 µs':>9}")
    for n, v in summary["preamble_sizes"].items():
        lines.append(
            f"{int(n):>28,}  {v['files']:>8,}{v['bytes']:>8,}{_fmt(v['cold_ms'], 1):>15}"
            f"{_fmt(v['p50_us']):>9}{_fmt(v['p99_us']):>9}"
        )
    keeps = summary.get("first_keeps_p50_ms")
    if keeps:
        small, big = min(keeps, key=int), max(keeps, key=int)
        lines.append(
            f"a 4 KiB O_TRUNC write keeping a file's first version, p50: {int(small):,} files "
            f"{_fmt(keeps[small], 2)} ms, {int(big):,} files {_fmt(keeps[big], 2)} ms "
            f"({_ratio(keeps[big], keeps[small]):.2f}x)"
        )
    lines.append("")
    mt = summary["mount_time"]
    for n, v in mt.items():
        lines.append(
            f"mount until ready, {int(n):>6,} projects: spawn to first project stat "
            f"{_fmt(v['foreground_ms'])} ms; `memfs mount` (background) returns after "
            f"{_fmt(v['background_ms'])} ms"
        )
    lines.append(
        f"mount of the main fixture (spawn to first project stat): "
        f"{_fmt(summary['mount_main_s'] * 1e3)} ms"
    )
    dc = summary["direct_change"]
    lines.append(
        f"direct change in a source visible through the mount ({dc['n']} appends): p50 "
        f"{_fmt(dc['p50_ms'])} ms, p99 {_fmt(dc['p99_ms'])} ms, max {_fmt(dc['max_ms'])} ms"
    )
    lines.append("")
    w = summary["writes"]
    base, base_dir = w["native"]["p50_ms"], w["native_dir_fsync"]["p50_ms"]
    lines.append(
        f"{'4 KiB atomic write':<44}{'p50 ms':>8}{'p99 ms':>8}{'/native':>9}{'/native+dir':>12}"
        f"{'/floor':>8}  requests a write"
    )
    for kind, v in w.items():
        floor = w.get(kind.replace("memfs_", "floor_")) if kind.startswith("memfs_") else None
        reqs = v["requests_per_write"]
        counted = (
            f"{sum(reqs.values()):.1f}: "
            + ", ".join(f"{op} {c:.1f}" for op, c in sorted(reqs.items(), key=lambda i: -i[1]))
            if reqs
            else "(not through FUSE)"
        )
        lines.append(
            f"{WRITE_LABELS.get(kind, kind):<44}{_fmt(v['p50_ms'], 2):>8}"
            f"{_fmt(v['p99_ms'], 2):>8}{_fmt(_ratio(v['p50_ms'], base), 2) + 'x':>9}"
            f"{_fmt(_ratio(v['p50_ms'], base_dir), 2) + 'x':>12}"
            f"{_fmt(_ratio(v['p50_ms'], floor['p50_ms']), 2) + 'x' if floor else '':>8}  {counted}"
        )
    lines.append("")
    if "responsiveness" in summary:
        lines += responsive.render(summary["responsiveness"], BIG_PROJECT)
        lines.append("")
    if "soak" in summary:
        sk = summary["soak"]
        lines.append(
            f"soak ({sk['mix']}, {sk['seconds']:.0f} s): {sk['reads']:,} reads, "
            f"{sk['torn_reads']:,} torn ({json.dumps(sk['torn_by_kind'])}), "
            f"{sk['errors']:,} unexpected errors ({json.dumps(sk['errors_by_op'])}), "
            f"writes {json.dumps(sk['writes'])}, {len(sk['end_problems'])} problems at the end"
        )
        lines += [f"  torn: {e}" for e in sk["torn_examples"]]
        lines += [f"  error: {e}" for e in sk["error_examples"]]
        lines += [f"  at the end: {e}" for e in sk["end_problems"][:6]]
        lines.append("")
    lines.append(
        f"memfs RSS: {_fmt(summary['rss_after_walk_mib'])} MiB after walking the fixture "
        f"(max over rounds), {_fmt(summary['rss_after_reads_mib'])} MiB after reading every "
        f"file, {_fmt(summary['rss_end_mib'])} MiB at the end of the change/write phase"
    )
    lines.append("")
    lines.append("targets:")
    for t in tgts:
        unit = t["unit"]
        if unit == "x":
            measured = f"{t['measured']:.2f}{unit}"
        elif unit in ("torn reads", "problems") and not math.isnan(t["measured"]):
            measured = f"{int(t['measured']):,} {unit}"
        else:
            measured = f"{t['measured']:.1f} {unit}"
        mark = "MET    " if t["met"] else "NOT MET"
        if math.isnan(t["measured"]):
            mark, measured = "n/a    ", "nothing (not measured)"
        lines.append(f"  {mark} {t['target']:<80} measured {measured}")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path, note: str) -> None:
    sizes = summary["preamble_sizes"]
    keys = sorted(sizes, key=int)
    png.latency_chart(
        path,
        [int(k) for k in keys],
        [
            ("p50", [sizes[k]["p50_us"] for k in keys], png.BLUE),
            ("p99", [sizes[k]["p99_us"] for k in keys], png.ORANGE),
        ],
        "PREAMBLE.md open+read, warm",
        "files in the project (log scale)",
        "latency (µs)",
        note=note,
        refs=[("target: 2x p50 at 10 files", 2 * sizes[keys[0]]["p50_us"], png.GREY_DARK)],
    )


def print_profiles(folder: Path) -> None:
    for prof in sorted(folder.glob("*.prof")):
        print(f"\n--- cProfile {prof.name}: top 25 by own time ---")
        stats = pstats.Stats(str(prof))
        stats.sort_stats("tottime").print_stats(25)


def memfs_source(src: Path | None) -> str:
    """Which memfs is measured: a folder given, or the repository's commit (and if dirty)."""
    if src is not None:
        return str(src.resolve())
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "memfs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"git {head}" + (" + uncommitted changes in memfs/" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a smaller fixture, fewer rounds")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "bench" / "out")
    parser.add_argument("--keep", action="store_true", help="keep the generated fixtures")
    parser.add_argument("--profile", action="store_true", help="run memfs under cProfile")
    parser.add_argument(
        "--cpu",
        type=int,
        help="pin this run and every daemon it starts to one CPU (steadier on a virtual "
        "machine, where waking a task on the other CPU can cost tens of µs)",
    )
    parser.add_argument(
        "--memfs-src",
        type=Path,
        help="a folder holding another memfs package to benchmark (A/B a patch)",
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.profile:
        os.environ[PROFILE_ENV] = str(out / "profiles")
        shutil.rmtree(out / "profiles", ignore_errors=True)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # inherited by every process started below
    source = memfs_source(args.memfs_src)
    base = Path(tempfile.mkdtemp(prefix="memfs-bench-"))
    src = args.memfs_src.resolve() if args.memfs_src else snapshot_memfs(base)
    # Every memfs this run starts imports the package from there (they run outside the
    # repository, so ./memfs does not shadow it).
    os.environ["PYTHONPATH"] = str(src)
    # This process never touches the real home either.
    os.environ.update(fixture.sandbox_env(base / "self"))

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    bench = Bench(scale, base, out)
    machine = (
        f"{os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"
    )
    bench.results["machine"] = machine
    bench.results["memfs_source"] = source
    bench.results["cpus"] = sorted(os.sched_getaffinity(0))
    bench.results["mergerfs_fast"] = "-o " + MERGERFS_CONFIGS["fast"]
    start = time.perf_counter()
    bench.results["wakeup_us_start"] = wakeup_us()
    busy0, own0 = cpu_seconds()
    try:
        bench.log(f"fixtures and mounts under {base}; results to {out}")
        bench.build()
        bench.record_shape()
        bench.rounds()
        bench.floor_pairs()
        bench.preamble_sizes()
        bench.first_keeps()
        bench.mount_time()
        bench.changes_and_writes()
        bench.responsiveness()
        bench.soak()
    finally:
        bench.close()
        if args.keep:
            bench.log(f"fixtures kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    results = bench.results
    results["wakeup_us_end"] = wakeup_us()
    results["elapsed_s"] = time.perf_counter() - start
    busy1, own1 = cpu_seconds()
    results["other_cpu_cores"] = max(0.0, (busy1 - busy0) - (own1 - own0)) / results["elapsed_s"]
    summary = summarise(results)
    tgts = targets(summary, scale.many_projects)
    results["summary"] = summary
    results["targets"] = tgts
    text = render(results, summary, tgts)
    print()
    print(text)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "table.txt").write_text(text + "\n", encoding="utf-8")
    note = f"memfs {source}; {os.cpu_count()} cores; {scale.preamble_samples} opens per size"
    plot(summary, out / "preamble-latency.png", note)
    if not args.quick and not args.profile and not args.memfs_src:
        plot(summary, PLOT, note)
    print(
        f"\nran in {results['elapsed_s']:.0f}s; results in {out}/results.json"
        + (
            ""
            if args.quick or args.profile or args.memfs_src
            else f"; plot in {PLOT.relative_to(REPO)}"
        )
    )
    if args.profile:
        print_profiles(out / "profiles")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        print(
            f"\ninterrupted ({exc or 'Ctrl-C'}); everything it mounted is unmounted",
            file=sys.stderr,
        )
        sys.exit(130)
