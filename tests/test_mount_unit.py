"""Tier 3: memfs as a service (§8, §9), with real mounts in subprocesses.

sd_notify is checked with a real ``AF_UNIX``/``SOCK_DGRAM`` socket bound by the test, with
``SO_PASSCRED`` on, so every datagram carries the sender's pid: the unit says
``NotifyAccess=main``, and systemd drops a READY=1 sent by any other process. The installed
unit is read back with systemd's own quoting and specifier rules and its Exec lines are
run by hand, as the user manager would run them, with HOME in the sandbox. Also here: a
crashed daemon fails visibly (ENOTCONN), the demo in both modes, SIGUSR1 tracebacks,
``memfs status`` and ``memfs umount``.

Nothing sleeps a fixed time: every wait is a condition polled under a deadline.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import selectors
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mounting import (
    MEMFS_SCRIPT,
    MOUNT_DEADLINE,
    MOUNT_MARKS,
    POLL,
    STOP_DEADLINE,
    TOOL_DEADLINE,
    UNIT_PATH_VAR,
    Mount,
    Mounts,
    NormalUser,
    Sandbox,
    alive,
    errno_of,
    in_mountinfo,
    mount_entries,
    normal_user,
    release_mountpoint,
    require_fuse,
    slug_of,
    wait_until,
)

from memfs.app.service import UNIT_NAME, install, memfs_command

pytestmark = MOUNT_MARKS

SHOP = "/home/u/src/shop"
SLUG = slug_of(Path(SHOP))
NOTES = b"Deploys happen on Tuesdays.\n"
READY = "READY=1"
STOPPING = "STOPPING=1"
UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
EXEC_PREFIXES = "-@:+!"


def read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def shop(box: Sandbox) -> None:
    """One project in two sources; notes.md only in the work account."""
    box.write("personal", SLUG, "MEMORY.md", "# Memory\n\n- [Notes](notes.md)\n", 2)
    box.write("work", SLUG, "notes.md", NOTES, 1)


# --- sd_notify: a real receiving socket ----------------------------------------------


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


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request: pytest.FixtureRequest, sandbox: Sandbox) -> Iterator[NotifySocket]:
    """A bound notify socket, named in the sandbox's NOTIFY_SOCKET."""
    sock = NotifySocket.path(sandbox.base) if request.param == "path" else NotifySocket.abstract()
    sandbox.env["NOTIFY_SOCKET"] = sock.address
    try:
        yield sock
    finally:
        sock.close()


# --- a memfs from any command line -----------------------------------------------------


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


def unit_env(box: Sandbox, **extra: str) -> dict[str, str]:
    """The environment a user manager gives a service, with HOME in the sandbox."""
    env = {
        "HOME": box.env["HOME"],
        "PATH": UNIT_PATH_VAR,
        "XDG_RUNTIME_DIR": box.env["XDG_RUNTIME_DIR"],
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


# --- the unit, read back as systemd reads it --------------------------------------------

C_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", " ": " "}


def unit_values(text: str, key: str) -> list[str]:
    """Every value of ``key`` in [Service], in order (ExecStartPre repeats)."""
    section, found = "", []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip().strip("[]")
            continue
        name, _, value = line.partition("=")
        if section == "Service" and name.strip() == key:
            found.append(value.strip())
    return found


def systemd_words(line: str) -> list[str]:
    """Split an Exec line as systemd does: quotes anywhere in a word, C escapes."""
    words: list[str] = []
    word: list[str] | None = None
    quote = ""
    chars = iter(line)
    for c in chars:
        if c == "\\":
            escaped = next(chars, "")
            if escaped not in C_ESCAPES:
                pytest.fail(f"unexpected escape \\{escaped} in {line!r}")
            word = (word or []) + [C_ESCAPES[escaped]]
        elif quote:
            if c == quote:
                quote = ""
            else:
                word = (word or []) + [c]
        elif c in "\"'":
            quote, word = c, word or []
        elif c.isspace():
            if word is not None:
                words.append("".join(word))
            word = None
        else:
            word = (word or []) + [c]
    assert not quote, f"unbalanced quote in {line!r}"
    if word is not None:
        words.append("".join(word))
    return words


def expand_specifiers(word: str, home: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in ("h", "%"):
            pytest.fail(f"specifier %{m.group(1)} in {word!r}: this test knows only %h and %%")
        return home if m.group(1) == "h" else "%"

    return re.sub(r"%(.)", one, word)


def expand_dollars(word: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) != "$":
            pytest.fail(f"environment variable ${m.group(1)} in {word!r}")
        return "$"

    return re.sub(r"\$(\$|\{[^}]*\}|\w+)", one, word)


@dataclass(frozen=True)
class ExecLine:
    argv: list[str]
    ignore_failure: bool  # the '-' prefix


def exec_line(value: str, home: str) -> ExecLine:
    """An Exec*= value as the command it runs: prefixes, unquoting, %h, then $$."""
    prefixes = value[: len(value) - len(value.lstrip(EXEC_PREFIXES))]
    words = [expand_specifiers(w, home) for w in systemd_words(value[len(prefixes) :])]
    # systemd substitutes $VAR in the arguments only; the program path is taken as is.
    return ExecLine([words[0], *map(expand_dollars, words[1:])], "-" in prefixes)


def install_unit(box: Sandbox, *args: str | Path) -> str:
    """`memfs service install ARGS` in the sandbox; returns the installed unit's text."""
    done = box.memfs("service", "install", *args)
    assert done.returncode == 0, done.stderr
    path = Path(box.env["XDG_CONFIG_HOME"]) / "systemd" / "user" / UNIT_NAME
    assert str(path) in done.stdout
    return path.read_text(encoding="utf-8")


def run_exec_start_pre(text: str, env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """Run every ExecStartPre= by hand, in order, failing where systemd would stop."""
    results = []
    for value in unit_values(text, "ExecStartPre"):
        line = exec_line(value, env["HOME"])
        assert Path(line.argv[0]).is_absolute(), value
        done = subprocess.run(
            line.argv,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TOOL_DEADLINE,
            check=False,
        )
        if done.returncode != 0 and not line.ignore_failure:
            pytest.fail(f"ExecStartPre={value} exited {done.returncode}: {done.stderr}")
        results.append(done)
    return results


def require_systemd_analyze() -> str:
    program = shutil.which("systemd-analyze")
    if program is None:
        if os.environ.get("CI") == "true":
            pytest.fail("systemd-analyze is missing in CI: install the systemd package")
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd)")
    return program


# --- sd_notify from `memfs mount --foreground` -------------------------------------------


def test_ready_only_once_files_are_served_and_stopping_on_sigterm(
    sandbox: Sandbox, mounts: Mounts, notify_socket: NotifySocket
) -> None:
    shop(sandbox)
    mount = mounts(wait=False)
    assert mount.proc is not None

    ready = notify_socket.expect(READY, mount.proc, freeze=True)
    try:
        # The daemon is stopped as READY=1 is read, so a mount it had not made yet cannot
        # appear now; mountinfo asks nothing of the stopped daemon.
        assert in_mountinfo(mount.mountpoint), "READY=1 before the mount exists"
    finally:
        mount.signal(signal.SIGCONT)
    # Checked at once, in this order: READY=1 promises a mount that already serves files.
    assert os.path.ismount(mount.mountpoint)
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES
    assert ready.pid == mount.pid  # NotifyAccess=main: the main process itself sends it
    assert notify_socket.received == [ready], "nothing before READY=1"
    status = [line for line in ready.lines if line.startswith("STATUS=")]
    assert len(status) == 1, ready.text
    assert "3 sources" in status[0]
    assert "own: personal" in status[0]
    assert str(mount.mountpoint) in status[0]

    mount.signal(signal.SIGTERM)
    stopping = notify_socket.expect(STOPPING, mount.proc, STOP_DEADLINE)
    assert stopping.pid == mount.pid
    assert mount.wait_exit() == 0, mount.log_text()
    later = notify_socket.drain()
    assert all(d.text == STOPPING for d in later), [d.text for d in later]
    assert not in_mountinfo(mount.mountpoint)
    assert os.listdir(sandbox.mountpoint) == []
    assert "Traceback" not in mount.log_text()


def test_outside_unmount_sends_stopping_and_exits_zero(
    sandbox: Sandbox, mounts: Mounts, notify_socket: NotifySocket
) -> None:
    shop(sandbox)
    mount = mounts(wait=False)
    assert mount.proc is not None
    notify_socket.expect(READY, mount.proc)
    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert notify_socket.expect(STOPPING, mount.proc, STOP_DEADLINE).pid == mount.pid
    assert mount.wait_exit() == 0, mount.log_text()
    assert not in_mountinfo(mount.mountpoint)


def test_a_mount_that_cannot_start_sends_no_ready(
    sandbox: Sandbox, mounts: Mounts, notify_socket: NotifySocket
) -> None:
    inside = sandbox.source("work").root / "mnt"  # a mountpoint inside a source: refused
    done = sandbox.memfs(
        "mount", "--foreground", inside, "--config", sandbox.config_path, timeout=TOOL_DEADLINE
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert notify_socket.drain() == []
    assert not in_mountinfo(inside)


# --- the installed unit, run by hand -----------------------------------------------------


def test_installed_unit_verifies_clean(sandbox: Sandbox) -> None:
    program = require_systemd_analyze()
    install_unit(sandbox, "--mountpoint", sandbox.mountpoint)
    unit = Path(sandbox.env["XDG_CONFIG_HOME"]) / "systemd" / "user" / UNIT_NAME
    # A short private runtime folder: the user manager's own sockets (gpg-agent's, ...)
    # must fit in sun_path, which the sandbox's deep tmp_path does not.
    with tempfile.TemporaryDirectory(prefix="memfs-rt-") as runtime:
        done = subprocess.run(
            [program, "--user", "verify", str(unit)],
            env=dict(sandbox.env, XDG_RUNTIME_DIR=runtime),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    # It exits 0 on many mistakes and only warns: nothing at all on stderr.
    assert done.stderr == ""
    assert done.returncode == 0, done.stdout


def discovered_names(box: Sandbox) -> list[str]:
    done = box.memfs("sources")
    assert done.returncode == 0, done.stderr
    names = re.findall(r"^  (?:own |    )(\S+)", done.stdout, re.MULTILINE)
    assert len(names) == 3, done.stdout
    return names


@pytest.mark.parametrize("config", ["discovered", "python_m", "xdg_config_home"])
def test_installed_exec_start_run_by_hand_mounts(
    sandbox: Sandbox, mounts: Mounts, config: str
) -> None:
    shop(sandbox)
    home = sandbox.env["HOME"]
    exec_start = memfs_command()
    if config == "discovered":
        # The default mountpoint, %h/memfs; sources found in the sandbox home.
        text = install_unit(sandbox)
        env = unit_env(sandbox)
        mountpoint = Path(home) / "memfs"
    elif config == "python_m":
        # The unit for an interpreter with no memfs script beside it. It runs in the home
        # folder, next to the empty ~/memfs: without -P, Python would import that.
        exec_start = [sys.executable, "-P", "-m", "memfs"]
        install(None, now=False, env=sandbox.env, exec_start=exec_start)
        text = (Path(sandbox.env["XDG_CONFIG_HOME"]) / "systemd" / "user" / UNIT_NAME).read_text()
        env = unit_env(sandbox)
        mountpoint = Path(home) / "memfs"
    else:
        text = install_unit(sandbox, "--mountpoint", sandbox.mountpoint)
        config_home = Path(sandbox.env["XDG_CONFIG_HOME"])
        (config_home / "memfs").mkdir()
        shutil.copy(sandbox.config_path, config_home / "memfs" / "config.toml")
        env = unit_env(sandbox, XDG_CONFIG_HOME=str(config_home))
        mountpoint = sandbox.mountpoint

    (start,) = unit_values(text, "ExecStart")
    if config != "xdg_config_home":
        assert start.endswith(" --foreground %h/memfs"), start  # expanded below
    command = exec_line(start, home)
    assert command.argv == [*exec_start, "mount", "--foreground", str(mountpoint)]
    pre = run_exec_start_pre(text, env)
    # Nothing to clear on a clean start: the '-' prefix is what keeps that from failing.
    assert pre[0].returncode != 0
    assert mountpoint.is_dir()
    if config != "xdg_config_home":  # made by `memfs service install`, without write permission
        assert stat.S_IMODE(mountpoint.stat().st_mode) == 0o555

    with contextlib.closing(NotifySocket.path(sandbox.base)) as sock:
        # A user manager runs a unit without WorkingDirectory= in the user's home.
        daemon = Daemon(
            sandbox,
            command.argv,
            mountpoint,
            env=dict(env, NOTIFY_SOCKET=sock.address),
            cwd=Path(home),
        )
        start_daemon(mounts, daemon, wait=False)
        assert daemon.proc is not None
        ready = sock.expect(READY, daemon.proc)
        assert os.path.ismount(mountpoint)
        assert read(mountpoint / SLUG / "notes.md") == NOTES
        assert ready.pid == daemon.pid, "systemd would drop READY=1 from another process"
        assert sorted(s["name"] for s in daemon.status()["sources"]) == sorted(
            ["personal", "work", "pi"] if config == "xdg_config_home" else discovered_names(sandbox)
        )

        daemon.signal(signal.SIGTERM)
        assert sock.expect(STOPPING, daemon.proc, STOP_DEADLINE).pid == daemon.pid
        assert daemon.wait_exit() == 0, daemon.log_text()
    assert not in_mountinfo(daemon.mountpoint)
    assert os.listdir(mountpoint) == []


def test_exec_start_pre_clears_a_stale_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    shop(sandbox)
    home = sandbox.env["HOME"]
    text = install_unit(sandbox, "--mountpoint", sandbox.mountpoint)
    crashed = mounts()
    crashed.signal(signal.SIGKILL)
    assert crashed.wait_exit() == -signal.SIGKILL
    assert errno_of(os.statvfs, sandbox.mountpoint) == errno.ENOTCONN

    pre = run_exec_start_pre(text, unit_env(sandbox))
    assert [p.returncode for p in pre] == [0]
    assert [p.args[0] for p in pre] == ["/usr/bin/fusermount3"]
    # Cleared before memfs runs: a plain, empty folder again, still without write permission.
    assert not in_mountinfo(crashed.mountpoint)
    assert os.listdir(sandbox.mountpoint) == []
    assert stat.S_IMODE(sandbox.mountpoint.stat().st_mode) & 0o222 == 0

    (start,) = unit_values(text, "ExecStart")
    daemon = start_daemon(
        mounts,
        Daemon(sandbox, exec_line(start, home).argv, sandbox.mountpoint, env=unit_env(sandbox)),
    )
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES
    assert len(mount_entries(daemon.mountpoint)) == 1
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_text()
    assert not in_mountinfo(daemon.mountpoint)


# --- a crash fails visibly ---------------------------------------------------------------


def assert_dead_not_empty(box: Sandbox, mountpoint: Path) -> None:
    """ENOTCONN on every call that reaches the connection: never an empty folder."""
    assert in_mountinfo(mountpoint)
    assert errno_of(os.statvfs, mountpoint) == errno.ENOTCONN
    assert errno_of(os.listdir, mountpoint) == errno.ENOTCONN
    assert errno_of(read, mountpoint / SLUG / "notes.md") == errno.ENOTCONN
    assert errno_of(os.mkdir, mountpoint / "new") == errno.ENOTCONN
    ls = box.run("ls", mountpoint, check=False)
    assert ls.returncode != 0
    assert b"Transport endpoint is not connected" in ls.stderr
    status = box.memfs("status", mountpoint)
    assert status.returncode == 2
    assert "no running memfs" in status.stderr


def test_sigkilled_daemon_leaves_enotconn(sandbox: Sandbox, mounts: Mounts) -> None:
    shop(sandbox)
    mount = mounts()
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES  # warm the kernel's caches
    mount.signal(signal.SIGKILL)
    assert mount.wait_exit() == -signal.SIGKILL
    assert_dead_not_empty(sandbox, mount.mountpoint)
    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert not in_mountinfo(mount.mountpoint)


CRASH_AFTER_READY = """\
import sys
import memfs.app.mount
from memfs.app.cli import main

announce = memfs.app.mount._announce_ready

async def crash_after_ready(ops, mountpoint):
    await announce(ops, mountpoint)
    raise RuntimeError("injected crash after READY=1")

memfs.app.mount._announce_ready = crash_after_ready
raise SystemExit(main(sys.argv[1:]))
"""


def test_internal_crash_leaves_enotconn_and_fails(sandbox: Sandbox, mounts: Mounts) -> None:
    """An exception inside the serving loop: exit non-zero (Restart=on-failure), mount dead."""
    shop(sandbox)
    argv = [sys.executable, "-c", CRASH_AFTER_READY, "mount", "--foreground"]
    argv += [str(sandbox.mountpoint), "--config", str(sandbox.config_path)]
    with contextlib.closing(NotifySocket.path(sandbox.base)) as sock:
        env = dict(sandbox.env, NOTIFY_SOCKET=sock.address)
        daemon = start_daemon(
            mounts, Daemon(sandbox, argv, sandbox.mountpoint, env=env), wait=False
        )
        assert daemon.proc is not None
        sock.expect(READY, daemon.proc)
        code = daemon.wait_exit()
        assert STOPPING not in [line for d in sock.drain() for line in d.lines]
    assert code == 1, daemon.log_text()
    log = daemon.log_text()
    assert "injected crash after READY=1" in log
    assert "memfs: internal error" in log
    assert_dead_not_empty(sandbox, daemon.mountpoint)


# --- the demo ------------------------------------------------------------------------------

DEMO_SLUG = slug_of(Path("/home/demo/src/webshop"))
BLOG_SLUG = slug_of(Path("/home/demo/src/blog"))
DEMO_LINE = re.compile(r"memfs demo mounted at (\S+) \(pid (\d+)\)")


def demo_env(box: Sandbox) -> dict[str, str]:
    tmp = box.base / "tmp"
    tmp.mkdir(exist_ok=True)
    return dict(box.env, TMPDIR=str(tmp))


def check_demo_mount(box: Sandbox, mnt: Path) -> None:
    base = mnt.parent
    assert base.parent == box.base / "tmp"
    assert os.path.ismount(mnt)
    assert sorted(os.listdir(mnt)) == sorted([DEMO_SLUG, BLOG_SLUG, "here"])
    preamble = box.out("cat", mnt / DEMO_SLUG / "PREAMBLE.md")
    assert b"Deploy pipeline migrated" in preamble  # the latest handoff, from the work account
    target = mnt / DEMO_SLUG / "handoff-me_20261130.md"
    box.run("sh", "-c", f"echo 'Next: canary checks' > '{target}'")
    own = base / "home" / ".claude" / "projects" / DEMO_SLUG / "memory" / target.name
    assert own.read_bytes() == b"Next: canary checks\n"
    assert not (
        base / "home" / ".claude-work" / "projects" / DEMO_SLUG / "memory" / target.name
    ).exists()


def test_demo_background_mounts_serves_and_umounts(sandbox: Sandbox) -> None:
    require_fuse()
    done = subprocess.run(
        [sys.executable, "-m", "memfs", "demo", "--background"],
        env=demo_env(sandbox),
        capture_output=True,
        text=True,
        timeout=MOUNT_DEADLINE + 10,
        check=False,
    )
    found = DEMO_LINE.search(done.stdout)
    assert found is not None, (done.stdout, done.stderr)
    mnt, pid = Path(found[1]), int(found[2])
    try:
        assert done.returncode == 0, done.stderr
        check_demo_mount(sandbox, mnt)
        assert f"Stop it with: memfs umount {mnt}" in done.stdout
        umount = sandbox.memfs("umount", mnt)
        assert umount.returncode == 0, umount.stderr
        # `memfs umount` returns once the daemon is gone and the sample folder with it.
        assert not in_mountinfo(mnt)
        assert not alive(pid)
        assert not mnt.parent.exists(), f"the demo's {mnt.parent} outlived its umount"
        assert umount.stdout == f"removed the demo's sample folder {mnt.parent}\n"
    finally:
        release_mountpoint(mnt, [pid])
        shutil.rmtree(mnt.parent, ignore_errors=True)


def read_until(proc: subprocess.Popen[bytes], marker: bytes, timeout: float) -> bytes:
    """Read ``proc``'s stdout until ``marker`` shows, under a deadline."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while marker not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {marker!r} within {timeout}s; output so far: {seen!r}")
            if selector.select(left):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    pytest.fail(f"output ended (exit {proc.wait(5)}) before {marker!r}: {seen!r}")
                seen += chunk
    return seen


def test_demo_foreground_cleans_up_on_ctrl_c(sandbox: Sandbox) -> None:
    require_fuse()
    with open(sandbox.base / "demo.err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memfs", "demo"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=demo_env(sandbox),
            start_new_session=True,
        )
    mnt: Path | None = None
    pid = None
    try:
        said = read_until(proc, b"Press Ctrl-C", MOUNT_DEADLINE).decode()
        found = DEMO_LINE.search(said)
        assert found is not None, said
        mnt, pid = Path(found[1]), int(found[2])
        check_demo_mount(sandbox, mnt)

        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=STOP_DEADLINE + 5)
        assert proc.returncode == 0, (sandbox.base / "demo.err").read_text()
        assert f"unmounted and removed {mnt.parent}" in rest.decode()
        assert not in_mountinfo(mnt)
        assert not mnt.parent.exists()
        wait_until(lambda: not alive(pid), STOP_DEADLINE, "the demo daemon exits")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=STOP_DEADLINE)
        if mnt is not None:
            release_mountpoint(mnt, [pid] if pid else [])
            shutil.rmtree(mnt.parent, ignore_errors=True)


# --- SIGUSR1, status, umount ---------------------------------------------------------------

DUMP = "(most recent call first)"  # one per thread of each dump


@dataclass
class Reader:
    """What a background reader of one file saw."""

    reads: int = 0
    errors: list[BaseException] = field(default_factory=list)


@contextlib.contextmanager
def reading(path: Path, expected: bytes) -> Iterator[Reader]:
    """A thread reading ``path`` in a loop while the body runs."""
    seen = Reader()
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                assert read(path) == expected
            except BaseException as exc:
                seen.errors.append(exc)
                return
            seen.reads += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(TOOL_DEADLINE)


def dumps_in(log: Path) -> int:
    return log.read_text(encoding="utf-8", errors="replace").count(DUMP)


def send_sigusr1(pid: int, log: Path, times: int = 3) -> None:
    """SIGUSR1 ``times`` times, each time waiting for a new traceback dump in ``log``.

    A signal is sent again when no dump follows within a second, at most three times:
    the count grows as soon as a dump starts, so the next signal can arrive while that
    dump is still being written, and CPython's faulthandler drops a signal that arrives
    during a dump (another thread takes it and finds the handler busy).
    """
    for n in range(times):
        before = dumps_in(log)

        def dumped(before: int = before) -> bool:
            if not alive(pid):
                pytest.fail(f"SIGUSR1 killed memfs:\n{log.read_text(errors='replace')}")
            return dumps_in(log) > before

        for attempt in range(3):
            os.kill(pid, signal.SIGUSR1)
            if wait_until(dumped, 1.0, f"dump {n + 1}", must=attempt == 2)[0]:
                break


def test_sigusr1_dumps_tracebacks_and_the_mount_keeps_serving(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    shop(sandbox)
    mount = mounts()
    with reading(sandbox.mnt(SLUG, "notes.md"), NOTES) as reader:
        send_sigusr1(mount.pid, mount.log_path)
    assert reader.errors == []
    assert reader.reads > 0
    log = mount.log_text()
    assert DUMP in log
    assert "trio" in log  # the main thread's stack, in the serving loop
    assert alive(mount.pid)
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES
    assert mount.status()["pid"] == mount.pid
    mount.signal(signal.SIGTERM)
    assert mount.wait_exit() == 0, log


def test_background_mount_status_sigusr1_and_umount(sandbox: Sandbox, mounts: Mounts) -> None:
    shop(sandbox)
    done = sandbox.memfs("mount", sandbox.mountpoint, "--config", sandbox.config_path)
    pid = mounts.adopt_output(done.stdout)
    assert done.returncode == 0, done.stderr
    assert pid is not None, done.stdout
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES

    text = sandbox.memfs("status", sandbox.mountpoint)
    assert text.returncode == 0, text.stderr
    assert f"mountpoint: {sandbox.mountpoint} (pid {pid})" in text.stdout
    for source in sandbox.sources:
        own = "own " if source.own else ""
        assert f"  source {own}{source.name}: {source.template}" in text.stdout
    assert re.search(r"^projects: 1 listed, 1 loaded$", text.stdout, re.MULTILINE), text.stdout
    assert re.search(r"^requests: [1-9]\d* \{", text.stdout, re.MULTILINE), text.stdout

    as_json = sandbox.memfs("status", sandbox.mountpoint, "--json")
    assert as_json.returncode == 0, as_json.stderr
    status = json.loads(as_json.stdout)
    assert status["pid"] == pid
    assert status["mountpoint"] == str(sandbox.mountpoint)
    assert [(s["name"], s["own"]) for s in status["sources"]] == [
        ("personal", True),
        ("work", False),
        ("pi", False),
    ]
    assert status["projects_listed"] == 1
    assert status["requests"]["read"] >= 1
    assert status["requests_total"] == sum(status["requests"].values())

    # A background daemon logs to the state folder: SIGUSR1 dumps land there.
    log = sandbox.state_dir / "memfs.log"
    with reading(sandbox.mnt(SLUG, "notes.md"), NOTES) as reader:
        send_sigusr1(pid, log)
    assert reader.errors == []
    assert DUMP in log.read_text(encoding="utf-8", errors="replace")
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES

    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert not in_mountinfo(sandbox.mountpoint)
    wait_until(lambda: not alive(pid), STOP_DEADLINE, "the daemon exits after umount")
    assert os.listdir(sandbox.mountpoint) == []
    gone = sandbox.memfs("status", sandbox.mountpoint)
    assert gone.returncode == 2
    assert len(gone.stderr.strip().splitlines()) == 1, gone.stderr


# --- a normal user: the bare mountpoint, fusermount3's refusals (§9) -----------------


@pytest.fixture
def user() -> Iterator[NormalUser]:
    """A normal user whose home holds a discovered Claude Code account with one project."""
    yield from normal_user(SLUG, NOTES)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("memfs: "), done.stderr
    return lines[0]


def test_mount_in_the_home_folder_umount_then_the_folder_refuses_writes(
    user: NormalUser,
) -> None:
    """The issue's must-show, as a normal user in the home folder: `memfs mount ~/memfs`
    works (though ~/memfs, empty, looks like a package to `python -m`); after
    `memfs umount ~/memfs`, `mkdir -p ~/memfs/x` fails; a file left there is named."""
    mnt = user.home / "memfs"
    mnt.mkdir()  # as an older memfs or a `mkdir -p` left it: empty and writable
    os.chown(mnt, user.uid, user.gid)

    done = user.memfs("mount", mnt)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    (pid,) = user.pids
    assert os.readlink(f"/proc/{pid}/cwd") == "/", "the daemon holds the user's folder busy"
    assert user.read(mnt / SLUG / "notes.md") == NOTES

    done = user.memfs("umount", mnt)
    assert done.returncode == 0, done.stderr
    assert not in_mountinfo(mnt)
    assert not alive(pid), "`memfs umount` returned before the daemon exited"

    mkdir = user.run("mkdir", "-p", mnt / "x")
    assert mkdir.returncode != 0
    assert "Permission denied" in mkdir.stderr
    write = user.run("sh", "-c", f"echo lost > {mnt}/{SLUG}.md")
    assert write.returncode != 0
    assert os.listdir(mnt) == []
    assert stat.S_IMODE(mnt.stat().st_mode) & 0o222 == 0

    # Something written there anyway (by root, or before this memfs sealed it).
    os.chmod(mnt, 0o755)
    (mnt / SLUG).mkdir()
    (mnt / SLUG / "left.md").write_bytes(b"written while unmounted\n")
    for path in (mnt / SLUG, mnt / SLUG / "left.md"):
        os.chown(path, user.uid, user.gid)
    line = one_line_error(user.memfs("mount", mnt))
    assert f"mountpoint {mnt} is not empty" in line
    assert f"{SLUG}/ (1 file)" in line
    assert not in_mountinfo(mnt)
    assert (mnt / SLUG / "left.md").exists()
    assert stat.S_IMODE(mnt.stat().st_mode) & 0o222 == 0, "refused, but sealed"

    # The command it names moves the file into the own source, and then the mount works.
    command = line.split("move it first: ", 1)[1]
    moved = user.run("sh", "-c", command)
    assert moved.returncode == 0, moved.stderr
    own = user.home / ".claude" / "projects" / SLUG / "memory" / "left.md"
    assert own.read_bytes() == b"written while unmounted\n"
    done = user.memfs("mount", mnt)
    assert done.returncode == 0, done.stderr
    assert user.read(mnt / SLUG / "left.md") == b"written while unmounted\n"
    assert user.read(mnt / SLUG / "notes.md") == NOTES
    assert user.memfs("umount", mnt).returncode == 0
    assert os.listdir(mnt) == []


@pytest.mark.parametrize("mode", ["background", "foreground"])
def test_a_refused_mount_says_fusermount3s_reason_and_the_fix(user: NormalUser, mode: str) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run as root: the test needs a folder its user cannot write")
        pytest.skip("a folder this user cannot write can only be made by root")
    theirs = user.base / "not-yours"
    theirs.mkdir(mode=0o755)  # root's: the user may look in, not write nor chmod
    args = ["mount", theirs] if mode == "background" else ["mount", "--foreground", theirs]
    line = one_line_error(user.memfs(*args))
    assert f"memfs: cannot mount {theirs}: " in line, line
    assert f"fusermount3: user has no write access to mountpoint {theirs}" in line
    assert "choose a mountpoint folder you own" in line
    assert "fuse_session_mount" not in line
    assert not in_mountinfo(theirs)


def test_a_refused_option_says_fusermount3s_reason_and_the_fix(user: NormalUser) -> None:
    with open("/etc/fuse.conf", encoding="utf-8", errors="replace") as f:
        allowed = any(line.strip() == "user_allow_other" for line in f)
    if allowed:
        pytest.fail("/etc/fuse.conf has user_allow_other: this test needs Debian's default")
    mnt = user.home / "memfs"
    line = one_line_error(user.memfs("mount", mnt, "-o", "allow_other"))
    assert "fusermount3: option allow_other only allowed if 'user_allow_other'" in line
    assert "add the line user_allow_other to /etc/fuse.conf" in line
    assert not in_mountinfo(mnt)
    assert stat.S_IMODE(mnt.stat().st_mode) & 0o222 == 0


def test_background_mount_from_a_folder_holding_an_empty_memfs_folder(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """`memfs mount` typed where an empty memfs/ folder lies (the home, with the default
    mountpoint): the background daemon must not import that folder as the package."""
    shop(sandbox)
    (sandbox.base / "memfs").mkdir()
    done = subprocess.run(
        [MEMFS_SCRIPT, "mount", sandbox.mountpoint, "--config", sandbox.config_path],
        cwd=sandbox.base,
        env=sandbox.env,
        capture_output=True,
        text=True,
        timeout=40,
        check=False,
    )
    pid = mounts.adopt_output(done.stdout)
    assert done.returncode == 0, done.stderr
    assert pid is not None
    assert read(sandbox.mnt(SLUG, "notes.md")) == NOTES
    assert sandbox.memfs("umount", sandbox.mountpoint).returncode == 0
    assert not alive(pid)


WRITE_DURING_MOUNT = """\
import sys
from pathlib import Path
import memfs.app.mount
from memfs.app.cli import main

real_init = memfs.app.mount.pyfuse3.init

def init_after_a_write(ops, mountpoint, options):
    # An agent's write that lands in the moment the bare folder is writable for the mount.
    (Path(mountpoint) / "raced.md").write_text("written while mounting\\n")
    real_init(ops, mountpoint, options)

memfs.app.mount.pyfuse3.init = init_after_a_write
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_write_while_mounting_undoes_the_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    """The bare folder is writable for the moment of the mount: anything that lands in it
    then is found under the new mount, through a descriptor, and the mount is undone."""
    shop(sandbox)
    argv = [sys.executable, "-c", WRITE_DURING_MOUNT, "mount", "--foreground"]
    argv += [str(sandbox.mountpoint), "--config", str(sandbox.config_path)]
    daemon = start_daemon(mounts, Daemon(sandbox, argv, sandbox.mountpoint), wait=False)
    assert daemon.wait_exit(MOUNT_DEADLINE) == 2, daemon.log_text()
    (line,) = [ln for ln in daemon.log_text().splitlines() if ln.startswith("memfs: ")]
    assert f"mountpoint {daemon.mountpoint} is not empty: it holds raced.md" in line
    assert not in_mountinfo(daemon.mountpoint)
    assert os.listdir(sandbox.mountpoint) == ["raced.md"]
    assert stat.S_IMODE(sandbox.mountpoint.stat().st_mode) & 0o222 == 0
