"""Tier 3: the installed systemd user unit (§8, §9), with real mounts in subprocesses.

`memfs service install` writes the unit; it is read back with systemd's own quoting and
specifier rules, and its Exec lines are run by hand, as the user manager would run them,
with HOME in the sandbox: ExecStartPre clears a stale mount, ExecStart mounts and sends
READY=1 from the main process. `systemd-analyze verify` finds nothing to say about it.

Nothing sleeps a fixed time: every wait is a condition polled under a deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from mounting import (
    MOUNT_MARKS,
    NOTES,
    READY,
    SLUG,
    STOP_DEADLINE,
    STOPPING,
    TOOL_DEADLINE,
    UNIT_PATH_VAR,
    Daemon,
    Mounts,
    NotifySocket,
    Sandbox,
    errno_of,
    in_mountinfo,
    mount_entries,
    read,
    shop,
    start_daemon,
)

from memfs.app.service import UNIT_NAME, install, memfs_command

pytestmark = MOUNT_MARKS

EXEC_PREFIXES = "-@:+!"


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


# --- the installed unit, run by hand -----------------------------------------------------


def test_installed_unit_verifies_clean(sandbox: Sandbox, systemd_analyze: str) -> None:
    program = systemd_analyze
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
    assert names == ["claude", "work", "pi", "gemini", "codex", "kilo", "goose"], done.stdout
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
