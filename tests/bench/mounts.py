"""memfs and mergerfs mounts for the benchmark, each in a subprocess this module owns.

Every mount is stopped by `Mount.close`: ``fusermount3 -u``, then ``-uz`` if that fails,
then the process it started is killed by its pid (never by name). `Mounts` keeps every
mount a run started, so one ``finally`` leaves nothing mounted and nothing running.

Profiling hook, for this benchmark only: with ``MEMFS_BENCH_PROFILE=DIR`` in the
environment each memfs runs under cProfile and writes ``DIR/<label>-<n>.prof`` when it is
unmounted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

STATUS_XATTR = "user.memfs.status"
FUSERMOUNT = "fusermount3"
MERGERFS = "/usr/bin/mergerfs"
PROFILE_ENV = "MEMFS_BENCH_PROFILE"
READY_DEADLINE = 120.0
STOP_DEADLINE = 20.0

# mergerfs 2.33 configurations. The default one is what `mergerfs A:B MNT` gives; the fast
# one keeps pages across opens and caches entries, attributes, negative lookups and
# listings for an hour (safe here: nothing changes the branches behind its back).
MERGERFS_CONFIGS = {
    "default": "fsname=mergerfs-default",
    "fast": ",".join(
        [
            "fsname=mergerfs-fast",
            "cache.files=full",
            "dropcacheonclose=false",
            "cache.entry=3600",
            "cache.attr=3600",
            "cache.negative_entry=3600",
            "cache.readdir=true",
            "cache.statfs=3600",
            "cache.symlinks=true",
            "xattr=nosys",
            "security_capability=false",
            "noatime",
        ]
    ),
}


def in_mountinfo(mountpoint: Path) -> bool:
    target = os.path.realpath(mountpoint).encode()
    with open("/proc/self/mountinfo", "rb") as f:
        return any(line.split()[4] == target for line in f if len(line.split()) > 4)


def wait_for(check: Callable[[], bool], deadline: float, what: str, poll: float = 0.001) -> float:
    """Poll ``check`` until true; returns the seconds it took; raises after ``deadline``."""
    start = time.perf_counter()
    while True:
        with contextlib.suppress(OSError):
            if check():
                return time.perf_counter() - start
        if time.perf_counter() - start > deadline:
            raise TimeoutError(f"{what} not within {deadline:.0f}s")
        time.sleep(poll)


class Mount:
    """One FUSE daemon in the foreground, as a subprocess."""

    def __init__(
        self, kind: str, mountpoint: Path, argv: Sequence[str], env: dict[str, str], log: Path
    ) -> None:
        self.kind = kind
        self.mountpoint = Path(os.path.realpath(mountpoint))
        self.argv = list(argv)
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.spawned_at = 0.0
        self.ready_s = 0.0  # spawn until ready, set by wait_ready

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawn(self) -> Mount:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.spawned_at = time.perf_counter()
            self.proc = subprocess.Popen(
                self.argv,
                # Not the repository: `python -m memfs` would import ./memfs from the
                # working folder before any --memfs-src on PYTHONPATH.
                cwd=self.log.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        return self

    def wait_ready(self, probe: Path | None = None) -> float:
        """Seconds from spawn until ``probe`` (default: the mountpoint is mounted) stats."""
        assert self.proc is not None
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited {proc.returncode}; see {self.log}")
            if not in_mountinfo(self.mountpoint):
                return False
            if probe is not None:
                os.stat(probe)
            return True

        wait_for(ready, READY_DEADLINE, f"{self.kind} at {self.mountpoint}")
        self.ready_s = time.perf_counter() - self.spawned_at
        return self.ready_s

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(os.getxattr(self.mountpoint, STATUS_XATTR))
        return data

    def rss_kib(self) -> int:
        text = Path(f"/proc/{self.pid}/status").read_text()
        found = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
        return int(found.group(1)) if found else 0

    def close(self) -> list[str]:
        """Unmount and stop the daemon; returns what had to be forced."""
        forced: list[str] = []
        if in_mountinfo(self.mountpoint):
            done = subprocess.run(
                [FUSERMOUNT, "-u", str(self.mountpoint)], capture_output=True, check=False
            )
            if done.returncode != 0:
                forced.append(f"fusermount3 -uz {self.mountpoint}")
                subprocess.run(
                    [FUSERMOUNT, "-uz", str(self.mountpoint)], capture_output=True, check=False
                )
        if self.proc is not None:
            try:
                self.proc.wait(STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                forced.append(f"kill {self.proc.pid}")
                self.proc.kill()
                self.proc.wait(STOP_DEADLINE)
        self.proc = None
        return forced


class Mounts:
    """Every mount one run starts; `close_all` in a ``finally`` leaves none behind."""

    def __init__(self, python: str, logs: Path) -> None:
        self.python = python
        self.logs = logs
        self.live: list[Mount] = []
        self.forced: list[str] = []
        self._count = 0

    def memfs(
        self,
        fx_env: dict[str, str],
        config: Path,
        mountpoint: Path,
        label: str,
        extra: Sequence[str] = (),
    ) -> Mount:
        self._count += 1
        argv = [self.python]
        profile_dir = os.environ.get(PROFILE_ENV)
        if profile_dir:
            Path(profile_dir).mkdir(parents=True, exist_ok=True)
            out = Path(profile_dir) / f"{label}-{self._count}.prof"
            argv += ["-m", "cProfile", "-o", str(out)]
        argv += [
            "-m",
            "memfs",
            "mount",
            "--foreground",
            str(mountpoint),
            "--config",
            str(config),
            *extra,
        ]
        mount = Mount("memfs", mountpoint, argv, fx_env, self.logs / f"memfs-{label}.log")
        self.live.append(mount)
        return mount.spawn()

    def mergerfs(
        self, branches: Sequence[Path], mountpoint: Path, config: str, env: dict[str, str]
    ) -> Mount:
        argv = [
            MERGERFS,
            "-f",
            "-o",
            MERGERFS_CONFIGS[config],
            ":".join(str(b) for b in branches),
            str(mountpoint),
        ]
        mount = Mount(
            f"mergerfs-{config}", mountpoint, argv, env, self.logs / f"mergerfs-{config}.log"
        )
        self.live.append(mount)
        return mount.spawn()

    def close(self, mount: Mount) -> None:
        self.forced += mount.close()
        if mount in self.live:
            self.live.remove(mount)

    def close_all(self) -> None:
        for mount in reversed(list(self.live)):
            self.close(mount)
