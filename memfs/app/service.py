"""The systemd user unit: render it, install it, uninstall it (§9).

This module is the one source of the unit's text. The repository's
``systemd/memfs.service`` is ``render_unit(list(PLACEHOLDER_EXEC))``, and a
test keeps the two equal; ``install()`` writes the same text with the real
path of the memfs command in place of the placeholder.

Plain synchronous code: imports neither trio nor pyfuse3 (nor mount.py). The only
processes it starts are ``systemctl --user ...``, and only when asked (``now=True``).
``install`` also creates the mountpoint without write permission (memfs.app.mountpoint), so
the unit keeps §9's promise before its first start too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import string
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from memfs.app import mountpoint as bare
from memfs.disk import config

log = logging.getLogger(__name__)

UNIT_NAME = "memfs.service"
SERVICE = "memfs"
DEFAULT_MOUNTPOINT = "%h/memfs"
# Where `pip install --user` and pipx put console scripts. The shipped unit
# names it; `memfs service install` rewrites it to the command actually in use.
PLACEHOLDER_EXEC = ("%h/.local/bin/memfs",)
# Units get no PATH worth trusting: every executable is spelled out. These are
# the Debian (merged /usr) locations, which the major distributions share.
FUSERMOUNT = "/usr/bin/fusermount3"
# memfs has no web home yet; an https URL because `man:` links make
# `systemd-analyze verify` run man(1), which slim images lack.
# `enable --now` waits for READY=1 (Type=notify); systemd's own start timeout
# is 90 s, so this only trips when systemctl itself hangs.
SYSTEMCTL_TIMEOUT = 180.0

HOME_SPECIFIER = "%h"
# Words made only of these need no quoting in an Exec line.
_PLAIN = frozenset(string.ascii_letters + string.digits + "_-+=.,:/@%$")
# systemd refuses an executable path holding any of these, quoted or not
# ("Executable name contains special characters"; measured with systemd 252).
_UNSAFE_IN_EXECUTABLE = frozenset("'\"\\")

_TEMPLATE = """\
# memfs user unit (§9). `memfs service install` writes it with the path of the
# memfs command in use; edits to an installed copy are lost on the next install.
[Unit]
Description=memfs: every coding agent's project memory, merged in one FUSE mount
# A crash loop ends failed and visible instead of retrying for ever.
StartLimitIntervalSec=60
StartLimitBurst=5

[Service]
Type=notify
# READY=1 and STOPPING=1 come from the memfs process itself, never a child.
NotifyAccess=main
# A crash leaves the mountpoint failing with ENOTCONN: clear it so the next
# start can mount. '-': nothing to clear is the usual case and no error.
ExecStartPre=-{fusermount} -uz {mountpoint}
# memfs creates the mountpoint itself, without write permission, and refuses
# one that is not empty: nothing written while it is not mounted is hidden.
ExecStart={exec_start} mount --foreground {mountpoint}
# Stopping sends SIGTERM, on which memfs unmounts and exits: no ExecStop. And no
# ExecStopPost unmount: after a crash the mountpoint must fail visibly (ENOTCONN)
# rather than show an empty folder that an agent might fill.
TimeoutStopSec=30
Restart=on-failure
RestartSec=2

[Install]
WantedBy=default.target
"""


class ServiceError(Exception):
    """A user-facing failure: one line naming the cause and the fix."""


def render_unit(exec_start: list[str], mountpoint: str = DEFAULT_MOUNTPOINT) -> str:
    """The text of ``memfs.service``.

    Args:
        exec_start: the memfs command, e.g. ``["/venv/bin/memfs"]`` or
            ``[python, "-m", "memfs"]``; ``mount --foreground MOUNTPOINT`` is appended.
            Its first word must be an absolute path.
        mountpoint: an absolute path, or one starting with ``%h`` (the user's home).

    Each word is written so that systemd reads back exactly that word: ``%`` and
    ``$`` are escaped, and words with spaces or quotes are quoted. A word that
    starts with ``%h/`` keeps that specifier (no absolute path starts with ``%``).

    Raises:
        ValueError: a path is not absolute, contains a control character, or the
            executable contains a character systemd refuses there.
    """
    if not exec_start:
        raise ValueError("exec_start must name the memfs command, got an empty list")
    _require_absolute("mountpoint", mountpoint)
    executable, *arguments = exec_start
    words = [_executable_word(executable), *map(_argument_word, arguments)]
    return _TEMPLATE.format(
        fusermount=FUSERMOUNT,
        mountpoint=_argument_word(mountpoint),
        exec_start=" ".join(words),
    )


def memfs_command() -> list[str]:
    """The command that runs this interpreter's memfs, as absolute words.

    The console script beside ``sys.executable`` when there is one (a venv or
    ``pip install``), else ``python -P -m memfs``: a user unit runs in the home
    folder, where plain ``-m`` would import the empty mountpoint ``~/memfs`` as
    the package. The interpreter path is not resolved: a venv's python is a
    symlink whose target knows nothing of the venv.
    """
    if not sys.executable:
        raise ServiceError(
            "cannot tell which Python runs memfs (sys.executable is empty); "
            "run `memfs service install` from an installed memfs"
        )
    python = Path(os.path.abspath(sys.executable))
    script = python.parent / "memfs"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(python), "-P", "-m", "memfs"]


def home_dir(env: Mapping[str, str] = os.environ) -> Path:
    """``$HOME`` when it is absolute, else the password database's home."""
    home = env.get("HOME", "")
    if os.path.isabs(home):
        return Path(home)
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def unit_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where the user manager reads user units: ``$XDG_CONFIG_HOME/systemd/user``."""
    # The XDG base-dir spec says a relative XDG_CONFIG_HOME is invalid and ignored.
    config = env.get("XDG_CONFIG_HOME", "")
    base = Path(config) if os.path.isabs(config) else home_dir(env) / ".config"
    return base / "systemd" / "user"


def unit_path(env: Mapping[str, str] = os.environ) -> Path:
    return unit_dir(env) / UNIT_NAME


def resolve_mountpoint(mountpoint: str | None, env: Mapping[str, str] = os.environ) -> str:
    """A mountpoint as the unit spells it: ``%h/...`` kept, anything else made absolute.

    ``~`` means ``$HOME`` from ``env``; a relative path is taken from the current
    folder, because the unit runs from elsewhere. Symlinks are not resolved:
    the unit mounts where the user said.
    """
    if mountpoint is None:
        return DEFAULT_MOUNTPOINT
    if _has_home_specifier(mountpoint):
        return mountpoint
    if mountpoint == "~" or mountpoint.startswith("~/"):
        mountpoint = str(home_dir(env)) + mountpoint[1:]
    return os.path.abspath(mountpoint)


def install(
    mountpoint: str | None,
    now: bool,
    env: Mapping[str, str] = os.environ,
    *,
    exec_start: Sequence[str] | None = None,
) -> list[str]:
    """Write the user unit; with ``now``, also enable and start it.

    Args:
        mountpoint: where to mount; None means ``%h/memfs``.
        now: run ``systemctl --user daemon-reload`` and ``enable --now memfs``.
        env: HOME, XDG_CONFIG_HOME and, for systemctl, PATH and the session's bus.
        exec_start: the memfs command; default ``memfs_command()``.

    Returns:
        Lines to print: what was written and what to run next.

    Raises:
        ServiceError: the command is not executable, a path cannot be written
            into a unit, the unit cannot be written, or systemctl failed.
    """
    command = list(exec_start) if exec_start is not None else memfs_command()
    if not command:
        raise ServiceError("no memfs command to run; pass the path of the memfs executable")
    _require_executable(command[0], env)
    where = resolve_mountpoint(mountpoint, env)
    try:
        text = render_unit(command, where)
    except ValueError as exc:
        raise ServiceError(f"cannot write the unit: {exc}") from exc

    path = unit_path(env)
    previous = _read_or_none(path)
    _write_unit(path, text)
    log.info("wrote %s", path)
    lines = [f"wrote {path}: mounts {_expand_home(where, env)} with {' '.join(command)}"]
    lines += seal_mountpoint(Path(_expand_home(where, env)), env)
    if now:
        _systemctl(["daemon-reload"], env)
        _systemctl(["enable", "--now", SERVICE], env)
        lines.append(f"enabled and started {SERVICE}: mounted at {_expand_home(where, env)}")
        if previous is not None and previous != text:
            lines.append(
                f"if {SERVICE} was already running, apply the new unit with: "
                f"systemctl --user restart {SERVICE}"
            )
    else:
        lines += [
            "next, to mount now and at every login:",
            "  systemctl --user daemon-reload",
            f"  systemctl --user enable --now {SERVICE}",
        ]
        if previous is not None and previous != text:
            lines.append(f"  systemctl --user restart {SERVICE}   # if it was already running")
    lines += [
        "to keep it mounted without a login session (from boot):",
        "  loginctl enable-linger $USER",
    ]
    return lines


def seal_mountpoint(folder: Path, env: Mapping[str, str]) -> list[str]:
    """Create the unit's mountpoint, or take write permission from it, before any start.

    So that from the install on, nothing an agent writes there while memfs is not mounted
    lands on the bare disk. Returns lines to print: a note when the folder is not empty
    (the service would refuse to mount onto it).
    """
    if bare.fuse_connection(folder) is not None:
        return []  # mounted (memfs running already): its bare folder was sealed at mount
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(folder, 0o555)
    except FileExistsError:
        pass
    except OSError as exc:
        return [f"note: cannot create the mountpoint {folder}: {exc.strerror}; memfs will try"]
    bare.seal(folder)
    try:
        names = bare.entries(folder)
    except OSError:
        return []
    if not names:
        return []
    try:
        cfg = config.load(env)
    except config.ConfigError:
        return [f"note: {folder} is not empty; the service refuses to mount onto it until moved"]
    return [f"note: the service refuses to mount: {bare.not_empty_message(cfg, folder, names)}"]


def uninstall(env: Mapping[str, str] = os.environ, *, now: bool = False) -> list[str]:
    """Remove the user unit; with ``now``, first ``systemctl --user disable --now memfs``.

    Without ``now`` an enabled unit is refused: removing the file would leave
    a dangling ``.wants`` link and a running mount nobody can stop by name.

    Returns:
        Lines to print.

    Raises:
        ServiceError: the unit is still enabled (without ``now``), systemctl
            failed, or the file cannot be removed.
    """
    path = unit_path(env)
    if not os.path.lexists(path):
        return [f"no unit at {path}: nothing to remove"]
    if now:
        _systemctl(["disable", "--now", SERVICE], env)
    else:
        links = enabled_links(env)
        if links:
            raise ServiceError(
                f"{UNIT_NAME} is still enabled ({links[0]}); "
                f"run `systemctl --user disable --now {SERVICE}` first"
            )
    try:
        path.unlink()
    except OSError as exc:
        raise ServiceError(f"cannot remove {path}: {exc.strerror}; remove it by hand") from exc
    log.info("removed %s", path)
    lines = [f"removed {path}"]
    if now:
        _systemctl(["daemon-reload"], env)
        lines.append(f"stopped and disabled {SERVICE}")
    else:
        lines += [
            "next:",
            f"  systemctl --user stop {SERVICE}   # if it is still running",
            "  systemctl --user daemon-reload",
        ]
    return lines


def enabled_links(env: Mapping[str, str] = os.environ) -> list[Path]:
    """The ``*.wants`` / ``*.requires`` links that enable the unit, sorted."""
    folder = unit_dir(env)
    found = [*folder.glob(f"*.wants/{UNIT_NAME}"), *folder.glob(f"*.requires/{UNIT_NAME}")]
    return sorted(found)


def _has_home_specifier(word: str) -> bool:
    return word == HOME_SPECIFIER or word.startswith(HOME_SPECIFIER + "/")


def _require_absolute(name: str, path: str) -> None:
    if not (path.startswith("/") or _has_home_specifier(path)):
        raise ValueError(f"{name} must be an absolute path or start with %h/, got {path!r}")


def _require_no_control(path: str) -> None:
    # A newline would end the Exec line and start a new setting of someone's choosing.
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ValueError(f"a unit cannot hold a control character, got {path!r}")


def _escape_specifiers(word: str) -> str:
    """Double every ``%`` except the leading ``%h`` of a home-relative path."""
    if _has_home_specifier(word):
        return HOME_SPECIFIER + word[len(HOME_SPECIFIER) :].replace("%", "%%")
    return word.replace("%", "%%")


def _executable_word(path: str) -> str:
    """The first word of an Exec line.

    systemd expands ``%`` specifiers here but not ``$`` variables, and it undoes
    quoting but then refuses quotes and backslashes in the result; so the only
    escaping is ``%%`` and double quotes around spaces.
    """
    _require_absolute("exec_start[0]", path)
    _require_no_control(path)
    if _UNSAFE_IN_EXECUTABLE & set(path):
        raise ValueError(
            "systemd refuses an executable path holding a quote or a backslash, "
            f"got {path!r}; install memfs under a path without them"
        )
    word = _escape_specifiers(path)
    return word if set(path) <= _PLAIN else f'"{word}"'


def _argument_word(argument: str) -> str:
    """A later word of an Exec line: ``%``, ``$``, ``\\`` and ``"`` escaped, quoted if needed."""
    _require_no_control(argument)
    word = _escape_specifiers(argument).replace("$", "$$")
    if argument and set(argument) <= _PLAIN:
        return word
    word = word.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{word}"'


def _require_executable(program: str, env: Mapping[str, str]) -> None:
    path = _expand_home(program, env)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ServiceError(
            f"{path} is not an executable file; install memfs there "
            "or run `memfs service install` from the memfs you want the service to use"
        )


def _expand_home(word: str, env: Mapping[str, str]) -> str:
    if _has_home_specifier(word):
        return str(home_dir(env)) + word[len(HOME_SPECIFIER) :]
    return word


def _read_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        # Unreadable or garbled: treat it as different, so the restart hint shows.
        return ""


def _write_unit(path: Path, text: str) -> None:
    """Replace ``path`` atomically: systemd never reads half a unit."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{UNIT_NAME}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fchmod(out.fileno(), 0o644)
                os.fsync(out.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        _fsync_dir(path.parent)
    except OSError as exc:
        raise ServiceError(
            f"cannot write {path}: {exc.strerror or exc}; check that {path.parent} is writable"
        ) from exc


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _systemctl(args: list[str], env: Mapping[str, str]) -> None:
    """Run ``systemctl --user ARGS`` with ``env``; a failure becomes one ServiceError line."""
    shown = " ".join(["systemctl", "--user", *args])
    program = shutil.which("systemctl", path=env.get("PATH", os.defpath))
    if program is None:
        raise ServiceError(
            f"cannot run `{shown}`: systemctl is not on PATH; "
            "without systemd, run `memfs mount --foreground MOUNTPOINT` yourself"
        )
    try:
        done = subprocess.run(
            [program, "--user", *args],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=SYSTEMCTL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(
            f"`{shown}` did not finish in {SYSTEMCTL_TIMEOUT:g} s; "
            f"see `systemctl --user status {SERVICE}`"
        ) from exc
    except OSError as exc:
        raise ServiceError(f"cannot run `{shown}`: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        reason = _last_line(done.stderr) or _last_line(done.stdout)
        reason = reason or f"exit status {done.returncode}"
        raise ServiceError(f"`{shown}` failed: {reason}; {_fix_for(reason)}")
    log.info("ran %s", shown)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _fix_for(reason: str) -> str:
    if "bus" in reason.lower():
        return (
            "no systemd user manager is reachable: run this from a login session "
            "(XDG_RUNTIME_DIR and DBUS_SESSION_BUS_ADDRESS set), or the commands by hand there"
        )
    return f"see `systemctl --user status {SERVICE}` and `journalctl --user -u {SERVICE}`"
