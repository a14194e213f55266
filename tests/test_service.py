"""Tier 1: the systemd user unit, its rendering, install and uninstall (§9).

Every unit text is checked by systemd itself: ``systemd-analyze --user verify``
must print nothing on stderr, since it exits 0 on many mistakes and only warns
(FUSE-NOTES). HOME and XDG_* point into tmp_path in every test; systemctl is a
fake script on a private PATH.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from memfs.app import service
from memfs.app.service import (
    PLACEHOLDER_EXEC,
    UNIT_NAME,
    ServiceError,
    install,
    memfs_command,
    render_unit,
    uninstall,
)

REPO = Path(__file__).resolve().parents[1]
SHIPPED_UNIT = REPO / "systemd" / UNIT_NAME
XDG_NAMES = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME and XDG tree: no test may touch the real home."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in XDG_NAMES:
        folder = tmp_path / "xdg" / name.lower()
        folder.mkdir(parents=True)
        monkeypatch.setenv(name, str(folder))
    runtime = tmp_path / "xdg" / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    # A real session's bus must never be reached from a test.
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    return home


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """An empty folder to stand as the whole PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    return folder


@pytest.fixture
def env(fake_bin: Path) -> dict[str, str]:
    """The environment handed to install/uninstall: tmp HOME/XDG, PATH = fake_bin only."""
    return {**os.environ, "PATH": str(fake_bin)}


def _executable(path: Path, body: str = "exit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def _fake_systemctl(fake_bin: Path, log: Path, status: int = 0, stderr: str = "") -> None:
    """A systemctl that appends its arguments to ``log`` and exits with ``status``."""
    body = f"printf '%s\\n' \"$*\" >> '{log}'\n"
    if stderr:
        body += f"printf '%s\\n' '{stderr}' >&2\n"
    body += f"exit {status}\n"
    _executable(fake_bin / "systemctl", body)


def _verify(program: str, text: str, home: Path, where: Path) -> subprocess.CompletedProcess[str]:
    """Run ``systemd-analyze --user verify`` on ``text`` saved as memfs.service."""
    folder = where / "verify"
    folder.mkdir(exist_ok=True)
    unit = folder / UNIT_NAME
    unit.write_text(text, encoding="utf-8")
    runtime = where / "verify-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        [program, "--user", "verify", str(unit)],
        env={**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _assert_verifies_clean(program: str, text: str, home: Path, where: Path) -> None:
    done = _verify(program, text, home, where)
    assert done.stderr == "", done.stderr
    assert done.returncode == 0, done.stdout


def _settings(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for every setting line; keys may repeat (ExecStartPre)."""
    section = ""
    found = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.append((section, key, value))
    return found


def _values(text: str, key: str) -> list[str]:
    return [value for _, k, value in _settings(text) if k == key]


# -- the unit text, checked by systemd ---------------------------------------


def test_rendered_unit_verifies_clean(systemd_analyze: str, home: Path, tmp_path: Path) -> None:
    text = render_unit([sys.executable, "-m", "memfs"])
    _assert_verifies_clean(systemd_analyze, text, home, tmp_path)


def test_unit_for_this_interpreter_verifies_clean(
    systemd_analyze: str, home: Path, tmp_path: Path
) -> None:
    text = render_unit(memfs_command(), str(tmp_path / "mnt"))
    _assert_verifies_clean(systemd_analyze, text, home, tmp_path)


def test_shipped_unit_is_the_rendered_placeholder() -> None:
    # service.py owns the text; the repository copy must not drift from it.
    assert SHIPPED_UNIT.read_text(encoding="utf-8") == render_unit(list(PLACEHOLDER_EXEC))


def test_shipped_unit_verifies_clean(systemd_analyze: str, home: Path, tmp_path: Path) -> None:
    # The placeholder ExecStart is %h/.local/bin/memfs: give the temp HOME one.
    _executable(home / ".local" / "bin" / "memfs")
    text = SHIPPED_UNIT.read_text(encoding="utf-8")
    _assert_verifies_clean(systemd_analyze, text, home, tmp_path)


def test_verify_sees_a_missing_executable(systemd_analyze: str, home: Path, tmp_path: Path) -> None:
    # Proves the check above is real: %h follows HOME, and a missing binary is caught.
    done = _verify(systemd_analyze, SHIPPED_UNIT.read_text(encoding="utf-8"), home, tmp_path)
    assert done.returncode != 0
    assert str(home / ".local" / "bin" / "memfs") in done.stderr


def test_verify_sees_a_misspelled_value(systemd_analyze: str, home: Path, tmp_path: Path) -> None:
    # systemd-analyze exits 0 here and only warns: hence "nothing on stderr".
    text = render_unit(["/bin/true"]).replace("Type=notify", "Type=notfy")
    done = _verify(systemd_analyze, text, home, tmp_path)
    assert "notfy" in done.stderr


def test_awkward_executable_path_round_trips(
    systemd_analyze: str, home: Path, tmp_path: Path
) -> None:
    # verify fails unless systemd reads back exactly this path: spaces, %, $.
    program = _executable(tmp_path / "a dir 100% $HOME %h" / "memfs")
    text = render_unit([str(program)], str(tmp_path / "mount point 5%"))
    _assert_verifies_clean(systemd_analyze, text, home, tmp_path)


def test_awkward_mountpoint_verifies_clean(
    systemd_analyze: str, home: Path, tmp_path: Path
) -> None:
    text = render_unit(["/bin/true"], '/m n/it\'s "5%" $x \\y')
    _assert_verifies_clean(systemd_analyze, text, home, tmp_path)


# -- the unit text, checked by reading it ------------------------------------


def test_unit_settings() -> None:
    text = render_unit(["/opt/memfs/bin/memfs"])
    settings = {(section, key): value for section, key, value in _settings(text)}
    assert settings[("Service", "Type")] == "notify"
    assert settings[("Service", "NotifyAccess")] == "main"
    assert settings[("Service", "Restart")] == "on-failure"
    assert settings[("Service", "RestartSec")] == "2"
    assert settings[("Install", "WantedBy")] == "default.target"
    assert ("Unit", "Description") in settings
    assert not any(key == "KillMode" for _, key, _ in _settings(text))
    # No mkdir: it would make the mountpoint writable; memfs creates it sealed (§9).
    assert _values(text, "ExecStartPre") == ["-/usr/bin/fusermount3 -uz %h/memfs"]
    assert _values(text, "ExecStart") == ["/opt/memfs/bin/memfs mount --foreground %h/memfs"]


def test_every_executable_is_absolute() -> None:
    text = SHIPPED_UNIT.read_text(encoding="utf-8")
    for key in ("ExecStartPre", "ExecStart", "ExecStop", "ExecStopPost"):
        for value in _values(text, key):
            program = value.lstrip("-@:+!").split()[0]
            assert program.startswith(("/", "%h/")), (key, value)


def test_words_are_escaped_for_systemd() -> None:
    text = render_unit(["/x y/100%/memfs", "-m", "a$b"], '/m n/it\'s "5%" $x \\y')
    mount = '"/m n/it\'s \\"5%%\\" $$x \\\\y"'
    assert _values(text, "ExecStart") == [
        f'"/x y/100%%/memfs" -m a$$b mount --foreground {mount}',
    ]
    assert _values(text, "ExecStartPre") == [f"-/usr/bin/fusermount3 -uz {mount}"]


def test_home_specifier_is_kept_only_in_front() -> None:
    text = render_unit(["%h/bin/memfs"], "%h/mem%hfs")
    assert _values(text, "ExecStart") == ["%h/bin/memfs mount --foreground %h/mem%%hfs"]


@pytest.mark.parametrize(
    ("exec_start", "mountpoint", "message"),
    [
        ([], "%h/memfs", "empty"),
        (["memfs"], "%h/memfs", "exec_start\\[0\\] must be an absolute path"),
        (["/bin/true"], "memfs", "mountpoint must be an absolute path"),
        (["/bin/true"], "~/memfs", "mountpoint must be an absolute path"),
        (["/o'brien/memfs"], "%h/memfs", "quote or a backslash"),
        (["/back\\slash/memfs"], "%h/memfs", "quote or a backslash"),
        (["/bin/true"], "/m\nExecStartPost=/bin/evil", "control character"),
        (["/bin/true", "a\tb"], "%h/memfs", "control character"),
    ],
)
def test_render_refuses_what_systemd_would_misread(
    exec_start: list[str], mountpoint: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        render_unit(exec_start, mountpoint)


# -- the memfs command -------------------------------------------------------


def test_memfs_command_is_absolute_and_executable() -> None:
    command = memfs_command()
    program = Path(command[0])
    assert program.is_absolute()
    assert program.is_file()
    assert os.access(program, os.X_OK)
    assert command[1:] in ([], ["-P", "-m", "memfs"])


def test_memfs_command_falls_back_to_python_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An interpreter with no memfs script beside it: run the package instead, with -P, so
    # that the unit's working folder (the home, holding the empty ~/memfs) is not imported.
    python = _executable(tmp_path / "env" / "bin" / "python3")
    monkeypatch.setattr(sys, "executable", str(python))
    assert memfs_command() == [str(python), "-P", "-m", "memfs"]


def test_memfs_command_prefers_the_script_beside_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _executable(tmp_path / "env" / "bin" / "python3")
    script = _executable(tmp_path / "env" / "bin" / "memfs")
    monkeypatch.setattr(sys, "executable", str(python))
    assert memfs_command() == [str(script)]


# -- install ---------------------------------------------------------------


def _installed_exec_start(text: str) -> list[str]:
    return _values(text, "ExecStart")[0].split()


def test_install_writes_the_unit_under_xdg_config_home(
    env: dict[str, str], systemd_analyze: str, home: Path, tmp_path: Path
) -> None:
    lines = install(None, now=False, env=env)

    path = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user" / UNIT_NAME
    text = path.read_text(encoding="utf-8")
    assert text == render_unit(memfs_command())
    program = Path(_installed_exec_start(text)[0])
    assert program.is_absolute()
    assert os.access(program, os.X_OK)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == [UNIT_NAME]  # no temp file left
    _assert_verifies_clean(systemd_analyze, text, home, tmp_path)

    said = "\n".join(lines)
    assert str(path) in said
    assert "systemctl --user daemon-reload" in said
    assert "systemctl --user enable --now memfs" in said
    assert "loginctl enable-linger $USER" in said


def test_install_defaults_to_dot_config(env: dict[str, str], home: Path) -> None:
    del env["XDG_CONFIG_HOME"]
    install(None, now=False, env=env)
    assert (home / ".config" / "systemd" / "user" / UNIT_NAME).is_file()


def test_install_ignores_a_relative_xdg_config_home(env: dict[str, str], home: Path) -> None:
    # The XDG spec: a relative value is invalid and must be ignored.
    env["XDG_CONFIG_HOME"] = "relative/config"
    install(None, now=False, env=env)
    assert (home / ".config" / "systemd" / "user" / UNIT_NAME).is_file()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "%h/memfs"),
        ("%h/agents/memory", "%h/agents/memory"),
        ("~/mnt/memfs", "{home}/mnt/memfs"),
        ("rel/mnt/../memfs", "{cwd}/rel/memfs"),
        ("{cwd}/srv/memfs/", "{cwd}/srv/memfs"),
    ],
)
def test_install_makes_the_mountpoint_absolute(
    env: dict[str, str],
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    given: str | None,
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    # Inside tmp_path: install creates the mountpoint folder.
    install(given and given.format(cwd=tmp_path), now=False, env=env)
    text = service.unit_path(env).read_text(encoding="utf-8")
    mountpoint = expected.format(home=home, cwd=tmp_path)
    assert _installed_exec_start(text)[-1] == mountpoint
    assert _values(text, "ExecStartPre") == [f"-/usr/bin/fusermount3 -uz {mountpoint}"]


def test_install_now_runs_systemctl(env: dict[str, str], fake_bin: Path, tmp_path: Path) -> None:
    calls = tmp_path / "systemctl.log"
    _fake_systemctl(fake_bin, calls)
    lines = install(None, now=True, env=env)
    assert calls.read_text(encoding="utf-8").splitlines() == [
        "--user daemon-reload",
        "--user enable --now memfs",
    ]
    assert service.unit_path(env).is_file()
    assert any("enable-linger" in line for line in lines)


def test_install_now_reports_a_systemctl_failure_in_one_line(
    env: dict[str, str], fake_bin: Path, tmp_path: Path
) -> None:
    _fake_systemctl(
        fake_bin, tmp_path / "systemctl.log", status=1, stderr="Failed to connect to bus"
    )
    with pytest.raises(ServiceError) as raised:
        install(None, now=True, env=env)
    message = str(raised.value)
    assert "\n" not in message
    assert "systemctl --user daemon-reload" in message
    assert "Failed to connect to bus" in message
    assert "login session" in message


def test_install_now_without_systemctl(env: dict[str, str]) -> None:
    with pytest.raises(ServiceError, match="systemctl is not on PATH"):
        install(None, now=True, env=env)


def test_install_refuses_a_command_that_is_not_executable(
    env: dict[str, str], tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "memfs"
    with pytest.raises(ServiceError, match="not an executable file"):
        install(None, now=False, env=env, exec_start=[str(missing)])
    assert not service.unit_path(env).exists()


def test_install_refuses_a_path_systemd_cannot_start(env: dict[str, str], tmp_path: Path) -> None:
    program = _executable(tmp_path / "o'brien" / "memfs")
    with pytest.raises(ServiceError, match="quote or a backslash"):
        install(None, now=False, env=env, exec_start=[str(program)])
    assert not service.unit_path(env).exists()


def test_reinstall_replaces_and_says_to_restart(env: dict[str, str], tmp_path: Path) -> None:
    install(None, now=False, env=env)
    lines = install(str(tmp_path / "elsewhere"), now=False, env=env)
    assert str(tmp_path / "elsewhere") in service.unit_path(env).read_text(encoding="utf-8")
    assert any("systemctl --user restart memfs" in line for line in lines)


# -- uninstall -------------------------------------------------------------


def test_uninstall_removes_the_unit(env: dict[str, str]) -> None:
    install(None, now=False, env=env)
    lines = uninstall(env)
    assert not service.unit_path(env).exists()
    assert any("removed" in line for line in lines)
    assert any("systemctl --user daemon-reload" in line for line in lines)


def test_uninstall_without_a_unit(env: dict[str, str]) -> None:
    assert "nothing to remove" in uninstall(env)[0]


def test_uninstall_refuses_an_enabled_unit(env: dict[str, str]) -> None:
    install(None, now=False, env=env)
    path = service.unit_path(env)
    wants = path.parent / "default.target.wants"
    wants.mkdir()
    (wants / UNIT_NAME).symlink_to(path)
    with pytest.raises(ServiceError, match="systemctl --user disable --now memfs"):
        uninstall(env)
    assert path.is_file()


def test_uninstall_now_disables_first(env: dict[str, str], fake_bin: Path, tmp_path: Path) -> None:
    calls = tmp_path / "systemctl.log"
    _fake_systemctl(fake_bin, calls)
    install(None, now=False, env=env)
    uninstall(env, now=True)
    assert calls.read_text(encoding="utf-8").splitlines() == [
        "--user disable --now memfs",
        "--user daemon-reload",
    ]
    assert not service.unit_path(env).exists()


def test_uninstall_now_keeps_the_unit_when_disable_fails(
    env: dict[str, str], fake_bin: Path, tmp_path: Path
) -> None:
    _fake_systemctl(fake_bin, tmp_path / "systemctl.log", status=1, stderr="Access denied")
    install(None, now=False, env=env)
    with pytest.raises(ServiceError, match="Access denied"):
        uninstall(env, now=True)
    assert service.unit_path(env).is_file()


# -- install keeps the mountpoint from eating writes (§9) ---------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_install_creates_the_mountpoint_without_write_permission(
    env: dict[str, str], home: Path
) -> None:
    lines = install(None, now=False, env=env)
    assert (home / "memfs").is_dir()
    assert _mode(home / "memfs") & 0o222 == 0
    assert not any(line.startswith("note:") for line in lines), lines


def test_install_seals_an_existing_writable_mountpoint(env: dict[str, str], home: Path) -> None:
    (home / "memfs").mkdir(mode=0o755)
    install(None, now=False, env=env)
    assert _mode(home / "memfs") == 0o555


def test_install_names_what_a_mount_would_hide(env: dict[str, str], home: Path) -> None:
    slug = "-home-u-shop"
    (home / ".claude" / "projects").mkdir(parents=True)  # a discovered own source
    (home / "memfs" / slug).mkdir(parents=True)
    (home / "memfs" / slug / "notes.md").write_text("written while unmounted\n")
    lines = install(None, now=False, env=env)
    (note,) = [line for line in lines if line.startswith("note:")]
    assert "refuses to mount" in note
    assert f"{slug}/ (1 file)" in note
    own = home / ".claude" / "projects" / slug / "memory"
    assert f"mv {home}/memfs/{slug} {own}" in note
    assert (home / "memfs" / slug / "notes.md").exists(), "install moves nothing itself"
