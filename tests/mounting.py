"""Tier-3 harness: a real memfs FUSE mount in a subprocess, and a sandboxed fake home.

Everything lives under the test's ``tmp_path``: the home, every XDG folder, the sources,
the mountpoint, the config file and the daemon's log. Nothing here sleeps a fixed time:
`wait_until` polls a condition under a deadline.

Teardown always unmounts, in order of gentleness: SIGTERM the daemon and wait, then
``fusermount3 -u``, then ``fusermount3 -uz``. A mount whose daemon is stuck (a deadlock in a
handler, or a stopped process) is aborted through fusectl. The device is read from
``/proc/self/mountinfo``, because a ``stat`` of a stuck mount would hang the test too. When
fusectl is not mounted on the machine, it is mounted in a private mount namespace
(``unshare -m``) just long enough to write ``abort``; the machine's own mounts are untouched.

A watchdog thread per mount aborts and kills the daemon shortly before the test's timeout:
a test blocked in a syscall on a hung mount cannot run pytest-timeout's signal handler, but
it gets ``ENOTCONN`` once the connection is gone, and then fails with the log attached.

The service tests (test_mount_notify, _unit, _crash, _lifecycle, _mountpoint) share the
end of this file: the ``shop`` project, a real sd_notify socket (`NotifySocket`) and a
memfs started from any command line (`Daemon`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

import memfs
from memfs.rules.slug import claude_slug

FUSERMOUNT = "fusermount3"
STATUS_XATTR = "user.memfs.status"
FUSECTL = Path("/sys/fs/fuse/connections")
POLL = 0.01  # seconds between two looks at a condition
MOUNT_DEADLINE = 20.0  # seconds for a daemon to come up
STOP_DEADLINE = 10.0  # seconds for a daemon to exit after SIGTERM
TOOL_DEADLINE = 15.0  # seconds for one ls/cat/stat run against the mount
WATCHDOG = 50.0  # seconds after mounting; below the 60 s timeout of the mount tests

# Each mount test module sets ``pytestmark = MOUNT_MARKS``.
MOUNT_MARKS = [pytest.mark.mount, pytest.mark.timeout(60)]

ENV_FOLDERS = (
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "HYPOTHESIS_STORAGE_DIRECTORY",
)
# Variables of the outer environment that would leak a real account or a real systemd.
ENV_DROPPED = ("NOTIFY_SOCKET", "CLAUDE_CONFIG_DIR", "LISTEN_FDS", "LISTEN_PID")

DAY = 86_400.0

T = TypeVar("T")


# --- skipping and waiting ------------------------------------------------------------


def unavailable(why: str) -> NoReturn:
    """A test that cannot run on this machine: it fails under ``CI=true`` (where everything
    it needs is installed, and a skip would hide a gap) and skips elsewhere, saying ``why``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: this test must run in CI)")
    pytest.skip(why)


def require_fuse(device: str | Path = "/dev/fuse") -> None:
    """Skip without /dev/fuse, saying so; with CI=true, fail instead (STYLE: tier 3)."""
    if os.path.exists(device):
        if shutil.which(FUSERMOUNT) is None:
            pytest.fail(f"{FUSERMOUNT} is not installed; install the fuse3 package")
        return
    unavailable(f"{device} is missing on this machine: no FUSE mount tests")


def wait_until(
    condition: Callable[[], T], timeout: float, what: str = "condition", *, must: bool = True
) -> tuple[T, float]:
    """Poll ``condition`` until it returns something true; returns (value, seconds taken).

    An ``OSError`` from the condition counts as not yet. With ``must``, a missed deadline
    fails the test naming ``what`` and the last value or error seen.
    """
    start = time.monotonic()
    deadline = start + timeout
    last: object = None
    while True:
        try:
            value = condition()
        except OSError as exc:
            value, last = None, exc  # type: ignore[assignment]
        else:
            last = value
        now = time.monotonic()
        if value:
            return value, now - start
        if now >= deadline:
            if must:
                pytest.fail(f"{what}: not met within {timeout:.2f}s (last: {last!r})")
            return value, now - start
        time.sleep(POLL)


# --- /proc/self/mountinfo and fusectl -----------------------------------------------


def _unescape(field_text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_text)


def mount_entries(mountpoint: str | Path) -> list[tuple[int, int, str]]:
    """(major, minor, fstype) of every mount at ``mountpoint``, read without touching it."""
    target = str(mountpoint)
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 5 or _unescape(fields[4]) != target:
                continue
            major, minor = fields[2].split(":")
            fstype = fields[fields.index("-") + 1] if "-" in fields else ""
            found.append((int(major), int(minor), fstype))
    return found


def in_mountinfo(mountpoint: str | Path) -> bool:
    return bool(mount_entries(mountpoint))


def abort_connection(minor: int) -> bool:
    """Abort FUSE connection ``minor``: every pending and later request gets ENOTCONN."""
    path = FUSECTL / str(minor) / "abort"
    if path.exists():
        with contextlib.suppress(OSError):
            path.write_text("1")
            return True
        return False
    if shutil.which("unshare") is None:
        return False
    # fusectl is one superblock for the whole kernel: mounting it in a private namespace
    # shows the same connections without adding a mount to the machine.
    script = f"mount -t fusectl fusectl {FUSECTL} && echo 1 > {path}"
    try:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def abort_mount(mountpoint: str | Path) -> bool:
    """Abort every FUSE connection mounted at ``mountpoint`` (none: False)."""
    aborted = False
    for _, minor, fstype in mount_entries(mountpoint):
        if fstype.startswith("fuse"):
            aborted = abort_connection(minor) or aborted
    return aborted


def fusermount(mountpoint: str | Path, *flags: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            [FUSERMOUNT, *flags, str(mountpoint)],
            capture_output=True,
            text=True,
            timeout=TOOL_DEADLINE,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie of a process we did not start still answers kill(0): look at its state.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
    return True


def release_mountpoint(
    mountpoint: str | Path, pids: Iterable[int] = (), deadline: float = STOP_DEADLINE
) -> list[str]:
    """Leave nothing mounted at ``mountpoint`` and no daemon of ``pids`` alive.

    SIGTERM each daemon and wait; abort and SIGKILL one that stays; then ``fusermount3 -u``,
    then ``-uz``, then abort. Returns what had to be forced (empty when all went well).
    """
    forced: list[str] = []
    pids = [p for p in pids if alive(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        if _gone(pid, deadline):
            continue
        forced.append(f"pid {pid} ignored SIGTERM: aborted and killed")
        abort_mount(mountpoint)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _gone(pid, deadline)
    if in_mountinfo(mountpoint):
        forced.append("still mounted after the daemon stopped: fusermount3 -u")
        fusermount(mountpoint, "-u")
    if in_mountinfo(mountpoint):
        forced.append("fusermount3 -u failed: aborted, then fusermount3 -uz")
        abort_mount(mountpoint)
        fusermount(mountpoint, "-uz")
    if in_mountinfo(mountpoint):
        forced.append("still mounted after fusermount3 -uz")
    return forced


# --- the sandbox: a fake home, sources and a config ----------------------------------


@dataclass(frozen=True)
class SourceDef:
    name: str
    template: str  # with {slug}, as in the config file
    own: bool = False

    def folder(self, slug: str) -> Path:
        return Path(self.template.replace("{slug}", slug))

    @property
    def root(self) -> Path:
        return Path(self.template.split("{slug}", 1)[0])


def sandbox_env(base: Path) -> dict[str, str]:
    """The outer environment with HOME and every XDG folder moved under ``base``; the
    benchmark (tests/bench) builds its sandbox with it too."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROPPED}
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    for var in ENV_FOLDERS:
        folder = base / "env" / var.lower()
        folder.mkdir(parents=True, exist_ok=True)
        if var == "XDG_RUNTIME_DIR":
            folder.chmod(0o700)
        env[var] = str(folder)
    env["LC_ALL"] = "C"  # ls sorts bytewise; tools' messages are stable
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@dataclass
class Sandbox:
    """A fake home with three sources (personal: own, work, pi), a mountpoint and a config."""

    base: Path
    env: dict[str, str]
    sources: list[SourceDef] = field(default_factory=list)

    @classmethod
    def create(cls, base: Path) -> Sandbox:
        env = sandbox_env(base)
        home = env["HOME"]
        sandbox = cls(base, env)
        sandbox.sources = [
            SourceDef("personal", f"{home}/.claude/projects/{{slug}}/memory", own=True),
            SourceDef("work", f"{home}/.claude-work/projects/{{slug}}/memory"),
            SourceDef("pi", f"{home}/.pi/agent/memory/{{slug}}"),
        ]
        for source in sandbox.sources:
            source.root.mkdir(parents=True, exist_ok=True)
        sandbox.mountpoint.mkdir()
        sandbox.write_config()
        return sandbox

    @property
    def home(self) -> Path:
        return Path(self.env["HOME"])

    @property
    def mountpoint(self) -> Path:
        return self.base / "mnt"

    @property
    def config_path(self) -> Path:
        return self.base / "config.toml"

    @property
    def state_dir(self) -> Path:
        return Path(self.env["XDG_STATE_HOME"]) / "memfs"

    def source(self, name: str) -> SourceDef:
        return next(s for s in self.sources if s.name == name)

    def write_config(self, **sections: Mapping[str, int]) -> Path:
        """Write config.toml listing every source explicitly; ``preamble={"budget": 2048}``."""
        lines = []
        for s in self.sources:
            lines += ["[[source]]", f'name = "{s.name}"', f'path = "{s.template}"']
            if s.own:
                lines.append("own = true")
            lines.append("")
        for section, values in sections.items():
            lines.append(f"[{section}]")
            lines += [f"{key} = {value}" for key, value in values.items()]
            lines.append("")
        self.config_path.write_text("\n".join(lines), encoding="utf-8")
        return self.config_path

    def folder(self, source: str, slug: str) -> Path:
        """The source's folder for ``slug``, created."""
        folder = self.source(source).folder(slug)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def write(
        self,
        source: str,
        slug: str,
        path: str,
        body: str | bytes,
        age_days: float | None = None,
    ) -> Path:
        """Write ``path`` in ``source``'s folder of ``slug``; ``age_days`` back-dates it."""
        target = self.folder(source, slug) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body.encode() if isinstance(body, str) else body)
        if age_days is not None:
            set_age(target, age_days)
        return target

    def mnt(self, *parts: str) -> Path:
        return self.mountpoint.joinpath(*parts)

    def project_dir(self, name: str) -> Path:
        """A real project folder on disk (outside the home), for cwd -> project tests."""
        folder = self.base / "work" / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # --- tools -----------------------------------------------------------------------

    def run(
        self, *cmd: str | bytes | Path, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run a tool (ls, cat, stat, ...) with the sandbox's environment and a deadline."""
        done = subprocess.run(
            [c if isinstance(c, bytes) else str(c) for c in cmd],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            timeout=TOOL_DEADLINE,
            check=False,
        )
        if check and done.returncode != 0:
            pytest.fail(
                f"{' '.join(map(str, cmd))} exited {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done

    def out(self, *cmd: str | bytes | Path, cwd: Path | None = None) -> bytes:
        return self.run(*cmd, cwd=cwd).stdout

    def memfs(self, *args: str | Path, timeout: float = 40.0) -> subprocess.CompletedProcess[str]:
        """The `memfs` command line, run as `python -m memfs` in the sandbox."""
        return subprocess.run(
            [sys.executable, "-m", "memfs", *map(str, args)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def set_age(path: Path, age_days: float) -> None:
    mtime = time.time_ns() - int(age_days * DAY * 1e9)
    os.utime(path, ns=(mtime, mtime), follow_symlinks=False)


def slug_of(path: Path) -> str:
    return claude_slug(str(path))


# --- the mount -------------------------------------------------------------------------


class Mount:
    """`memfs mount --foreground MNT --config CFG` in a subprocess, logged to a file."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        args: Sequence[str] = (),
        watchdog: float = WATCHDOG,
        name: str = "memfs",
        nofile: int | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.mountpoint = Path(os.path.realpath(sandbox.mountpoint))
        self.args = list(args)
        self.nofile = nofile  # the daemon's soft and hard RLIMIT_NOFILE, if given
        self.watchdog_after = watchdog
        self.log_path = sandbox.base / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.forced: list[str] = []
        self._watchdog: threading.Timer | None = None
        self.watchdog_fired = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, *, wait: bool = True) -> Mount:
        cmd = [
            sys.executable,
            "-m",
            "memfs",
            "mount",
            "--foreground",
            str(self.mountpoint),
            "--config",
            str(self.sandbox.config_path),
            *self.args,
        ]
        if self.nofile is not None:
            cmd = ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--", *cmd]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.sandbox.env,
                start_new_session=True,
            )
        self._watchdog = threading.Timer(self.watchdog_after, self._fire_watchdog)
        self._watchdog.daemon = True
        self._watchdog.start()
        if wait:
            self.wait_live()
        return self

    def _fire_watchdog(self) -> None:
        self.watchdog_fired = True
        with contextlib.suppress(Exception):
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(f"\n[harness] watchdog after {self.watchdog_after}s: aborting\n")
            abort_mount(self.mountpoint)
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()

    def live(self) -> bool:
        return os.path.ismount(self.mountpoint) and bool(os.getxattr(self.mountpoint, STATUS_XATTR))

    def wait_live(self, timeout: float = MOUNT_DEADLINE) -> None:
        assert self.proc is not None
        start = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"memfs exited with {self.proc.returncode} before the mount was live:\n"
                    f"{self.log_text()}"
                )
            with contextlib.suppress(OSError):
                if self.live():
                    return
            if time.monotonic() - start > timeout:
                pytest.fail(f"memfs not live within {timeout}s:\n{self.log_text()}")
            time.sleep(POLL)

    def status(self) -> dict[str, Any]:
        """The daemon's figures (requests per op, invalidations, left-out files, ...)."""
        data: dict[str, Any] = json.loads(os.getxattr(self.mountpoint, STATUS_XATTR))
        return data

    def requests(self) -> dict[str, int]:
        counts: dict[str, int] = self.status()["requests"]
        return counts

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait_exit(self, timeout: float = STOP_DEADLINE) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"memfs still running {timeout}s after a signal:\n{self.log_text()}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"

    def close(self, deadline: float = STOP_DEADLINE) -> list[str]:
        """Always leave nothing mounted and no daemon running; returns what was forced."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        pids = [self.proc.pid] if self.proc is not None and self.proc.poll() is None else []
        self.forced += release_mountpoint(self.mountpoint, pids, deadline)
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_DEADLINE)
        return self.forced


class Mounts:
    """Starts foreground daemons for one test; `close` leaves nothing mounted."""

    def __init__(self, sandbox: Sandbox, logs: list[Path]) -> None:
        self.sandbox = sandbox
        self.started: list[Mount] = []
        self.pids: list[int] = []  # daemons started some other way (memfs mount)
        self._logs = logs

    def __call__(
        self, *, args: Sequence[str] = (), wait: bool = True, nofile: int | None = None
    ) -> Mount:
        mount = Mount(self.sandbox, args=args, name=f"memfs-{len(self.started)}", nofile=nofile)
        self.started.append(mount)
        self._logs.append(mount.log_path)
        return mount.start(wait=wait)

    def adopt_output(self, stdout: str) -> int | None:
        """Track the daemon `memfs mount` reports as '(pid N)', so teardown stops it."""
        found = re.search(r"\(pid (\d+)\)", stdout)
        if found is None:
            return None
        pid = int(found.group(1))
        self.pids.append(pid)
        return pid

    def close(self) -> list[str]:
        forced = []
        for mount in reversed(self.started):
            forced += mount.close()
        forced += release_mountpoint(self.sandbox.mountpoint, self.pids)
        return forced


def errno_of(call: Callable[..., object], *args: object) -> int | None:
    """The errno ``call`` fails with; None when it succeeds."""
    try:
        call(*args)
    except OSError as exc:
        return exc.errno
    return None


def is_enoent(call: Callable[..., object], *args: object) -> bool:
    return errno_of(call, *args) == errno.ENOENT


# --- a normal user ----------------------------------------------------------------------

# What a systemd user manager hands a service: no venv on PATH, no working folder of ours.
UNIT_PATH_VAR = "/usr/local/bin:/usr/bin:/bin"
TEST_USER = "memfs-test"  # made by .ci/setup-tests; made here when missing
MEMFS_SCRIPT = Path(sys.executable).parent / "memfs"  # the console script a user types
# As .ci/setup-tests makes it: no home (the tests give it one under /tmp), no login.
USERADD = ("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent")
USERADD += ("--shell", "/usr/sbin/nologin")


@dataclass
class NormalUser:
    """A normal user with a home of its own under /tmp, running commands as itself.

    Root ignores permission bits, so a sealed mountpoint can only be seen refusing writes by
    someone else. As root the commands run through ``setpriv`` as TEST_USER; as a normal user
    they run as that user directly.
    """

    uid: int
    gid: int
    base: Path
    env: dict[str, str]
    pids: list[int] = field(default_factory=list)
    mountpoints: list[Path] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return Path(self.env["HOME"])

    def run(
        self, *cmd: str | Path, cwd: Path | None = None, timeout: float = 40.0
    ) -> subprocess.CompletedProcess[str]:
        prefix: list[str] = []
        if os.geteuid() == 0:
            ids = [f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
            prefix = ["setpriv", *ids, "--"]
        return subprocess.run(
            [*prefix, *map(str, cmd)],
            cwd=cwd or self.home,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    script: Path = MEMFS_SCRIPT

    def memfs(self, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`memfs ARGS` as typed, in the home folder unless told otherwise."""
        done = self.run(self.script, *args, cwd=cwd)
        found = re.search(r"\(pid (\d+)\)", done.stdout)
        if found:
            self.pids.append(int(found[1]))
        return done

    def read(self, path: Path) -> bytes:
        """``cat PATH`` as the user: without allow_other, not even root sees into its mount."""
        done = self.run("cat", path)
        assert done.returncode == 0, done.stderr
        return done.stdout.encode()


def _test_user() -> tuple[int, int]:
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    import pwd

    try:
        entry = pwd.getpwnam(TEST_USER)
    except KeyError:
        # fusermount3 needs the user in the password database (it names it in mtab).
        subprocess.run(
            [*USERADD, TEST_USER],
            capture_output=True,
            timeout=TOOL_DEADLINE,
            check=False,
        )
        try:
            entry = pwd.getpwnam(TEST_USER)
        except KeyError:
            pytest.fail(f"no user {TEST_USER} and useradd could not make one; run .ci/setup-tests")
    mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    if mode & 0o006 != 0o006:
        pytest.fail(
            f"/dev/fuse has mode {mode:o}: a normal user cannot mount; run .ci/setup-tests "
            "(sudo chmod 0666 /dev/fuse, Debian's default)"
        )
    return entry.pw_uid, entry.pw_gid


SHIM = """\
#!{python}
import sys
from memfs.app.cli import main
if __name__ == "__main__":
    sys.exit(main())
"""


def _shim_script(person: NormalUser) -> Path:
    """A `memfs` console script the user can run, when this interpreter is out of its reach
    (a pyenv Python under /root, say): a venv of the system's Python of the same version
    that sees this venv's packages through a .pth file, or, when the user cannot read them
    either (a clone in a folder of `mktemp -d`, mode 0700), a copy of memfs and of what it
    needs to run."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = Path(f"/usr/bin/python{version}")
    if not system.is_file():
        pytest.fail(f"{sys.executable} is out of reach of {TEST_USER} and {system} is missing")
    venv = person.base / "venv"
    made = person.run(system, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    ours = Path(__import__("sysconfig").get_paths()["purelib"])
    site = venv / "lib" / f"python{version}" / "site-packages"
    package = Path(memfs.__file__).parent
    if all(person.run("test", "-r", p, "-a", "-x", p).returncode == 0 for p in (ours, package)):
        (site / "memfs-tests.pth").write_text(f"import site; site.addsitedir({str(ours)!r})\n")
    else:
        _copy_runtime(site)
    script = venv / "bin" / "memfs"
    script.write_text(SHIM.format(python=venv / "bin" / "python"))
    script.chmod(0o755)
    return script


def _copy_runtime(site: Path) -> None:
    """memfs's package and the files of every distribution it needs at run time (its
    requirements, theirs, and so on, markers evaluated here) into ``site``."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    shutil.copytree(
        Path(memfs.__file__).parent, site / "memfs", ignore=shutil.ignore_patterns("__pycache__")
    )
    seen: set[str] = set()
    todo = [Requirement(r) for r in metadata.requires("memfs") or []]
    while todo:
        wanted = todo.pop()
        if wanted.marker is not None and not wanted.marker.evaluate({"extra": ""}):
            continue
        name = wanted.name.lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        todo += [Requirement(r) for r in dist.requires or []]
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if ".." in file.parts or not source.is_file():
                continue  # scripts and data outside site-packages are not needed
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, site / file)


def _user_mounts(base: Path) -> list[Path]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        points = [Path(line.split()[4]) for line in f]
    return [p for p in points if p.is_relative_to(base)]


def _pids_of(base: Path) -> list[int]:
    """memfs daemons whose command line names a path under ``base``."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and os.fsencode(base) in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def normal_user(slug: str, notes: bytes) -> Iterator[NormalUser]:
    """A normal user whose home holds a discovered Claude Code account with one project,
    ``slug``, holding ``notes.md``; everything it mounted is released at the end."""
    require_fuse()
    uid, gid = _test_user()
    # Not under tmp_path: pytest's base folder is private to root.
    base = Path(tempfile.mkdtemp(prefix="memfs-user-"))
    try:
        home = base / "home"
        memory = home / ".claude" / "projects" / slug / "memory"
        memory.mkdir(parents=True)
        (memory / "notes.md").write_bytes(notes)
        env = {"HOME": str(home), "PATH": UNIT_PATH_VAR, "LC_ALL": "C"}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME"):
            (base / var.lower()).mkdir(mode=0o700)
            env[var] = str(base / var.lower())
        for path in [base, *base.rglob("*")]:
            os.chown(path, uid, gid)
        person = NormalUser(uid, gid, base, env)
        # Through every symlink: memfs's daemon is started as sys.executable again.
        if person.run("test", "-x", os.path.realpath(sys.executable)).returncode != 0:
            person.script = _shim_script(person)
        yield person
    finally:
        for mountpoint in {*(home / "memfs" for home in [base / "home"]), *_user_mounts(base)}:
            release_mountpoint(mountpoint, [p for p in _pids_of(base) if alive(p)])
        for folder, _, _ in os.walk(base):
            with contextlib.suppress(OSError):
                os.chmod(folder, 0o700)  # sealed folders, as a non-root runner
        shutil.rmtree(base, ignore_errors=True)


# --- memfs as a service: the shop project, sd_notify, any command line --------------------

SHOP = "/home/u/src/shop"
SLUG = slug_of(Path(SHOP))
NOTES = b"Deploys happen on Tuesdays.\n"
READY = "READY=1"
STOPPING = "STOPPING=1"
UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def shop(box: Sandbox) -> None:
    """One project in two sources; notes.md only in the work account."""
    box.write("personal", SLUG, "MEMORY.md", "# Memory\n\n- [Notes](notes.md)\n", 2)
    box.write("work", SLUG, "notes.md", NOTES, 1)


@dataclass(frozen=True)
class Datagram:
    text: str
    pid: int  # the sender's, from SCM_CREDENTIALS

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")


class NotifySocket:
    """What systemd binds for a Type=notify service: one datagram per notification."""

    def __init__(self, address: str) -> None:
        self.address = address  # as NOTIFY_SOCKET spells it: a path or '@name'
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        raw = os.fsencode(address)
        self.sock.bind(b"\0" + raw[1:] if raw.startswith(b"@") else raw)
        self.received: list[Datagram] = []

    @classmethod
    def path(cls, folder: Path) -> NotifySocket:
        return cls(str(folder / "notify.sock"))

    @classmethod
    def abstract(cls) -> NotifySocket:
        return cls(f"@memfs-test-{os.getpid()}-{uuid.uuid4().hex}")

    def close(self) -> None:
        self.sock.close()

    def _receive(self, timeout: float) -> Datagram | None:
        self.sock.settimeout(timeout)
        try:
            data, ancillary, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(UCRED.size))
        except (TimeoutError, BlockingIOError):
            return None
        pid = next(
            UCRED.unpack(payload[: UCRED.size])[0]
            for level, kind, payload in ancillary
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
        )
        datagram = Datagram(data.decode("utf-8", "replace"), pid)
        self.received.append(datagram)
        return datagram

    def drain(self) -> list[Datagram]:
        """Every datagram already queued; none is waited for."""
        found = []
        while (datagram := self._receive(0)) is not None:
            found.append(datagram)
        return found

    def expect(
        self,
        assignment: str,
        proc: subprocess.Popen[bytes],
        timeout: float = MOUNT_DEADLINE,
        *,
        freeze: bool = False,
    ) -> Datagram:
        """The first datagram holding ``assignment`` as one of its lines; fails if ``proc``
        exits without sending it or the deadline passes. With ``freeze``, ``proc`` is
        stopped (SIGSTOP) the moment the datagram is read: whatever it had not done before
        sending, it cannot do before the caller looks."""
        deadline = time.monotonic() + timeout
        while True:
            datagram = self._receive(POLL * 5)
            if datagram is not None:
                if assignment in datagram.lines:
                    if freeze:
                        proc.send_signal(signal.SIGSTOP)
                    return datagram
                continue
            if proc.poll() is not None:
                # A datagram sent before the exit is queued already.
                for late in self.drain():
                    if assignment in late.lines:
                        return late
                pytest.fail(
                    f"memfs exited with {proc.returncode} without sending {assignment}; "
                    f"received {[d.text for d in self.received]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"no {assignment} within {timeout}s; received {self.received}")


class Daemon(Mount):
    """A memfs started from an arbitrary command line (a unit's ExecStart, a patched entry
    point), with the harness's log, watchdog, wait_live and always-unmounting close."""

    def __init__(
        self,
        sandbox: Sandbox,
        argv: list[str],
        mountpoint: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path = Path("/"),
        name: str = "daemon",
    ) -> None:
        super().__init__(sandbox, name=name)
        self.argv = argv
        self.mountpoint = Path(os.path.realpath(mountpoint))
        self.env = dict(sandbox.env if env is None else env)
        self.cwd = cwd

    def start(self, *, wait: bool = True) -> Daemon:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        self._watchdog = threading.Timer(self.watchdog_after, self._fire_watchdog)
        self._watchdog.daemon = True
        self._watchdog.start()
        if wait:
            self.wait_live()
        return self


def start_daemon(mounts: Mounts, daemon: Daemon, *, wait: bool = True) -> Daemon:
    """Start ``daemon`` under the ``mounts`` fixture: unmounted at teardown, log attached."""
    mounts.started.append(daemon)
    mounts._logs.append(daemon.log_path)  # the same list mounts() feeds
    return daemon.start(wait=wait)
