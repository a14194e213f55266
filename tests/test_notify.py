"""Tier 1: sd_notify datagrams reach a real AF_UNIX socket (§8, §9)."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.app.notify import READY, STOPPING, notify, socket_address


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME and XDG_* in tmp_path, and no NOTIFY_SOCKET inherited from a real service."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)


def _receiver(address: str | bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    # The datagram is queued before notify() returns: this never waits in a pass.
    sock.settimeout(5)
    return sock


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = tmp_path / "notify.sock"
    with _receiver(str(path)) as sock:
        yield str(path), sock


@pytest.fixture
def abstract_socket() -> Iterator[tuple[str, socket.socket]]:
    name = f"memfs-test-{os.getpid()}-{uuid.uuid4().hex}"
    with _receiver("\0" + name) as sock:
        yield "@" + name, sock


def test_sends_to_a_path_socket(path_socket: tuple[str, socket.socket]) -> None:
    address, sock = path_socket
    assert notify(READY, {"NOTIFY_SOCKET": address}) is True
    assert sock.recv(4096) == b"READY=1"


def test_sends_to_an_abstract_socket(abstract_socket: tuple[str, socket.socket]) -> None:
    address, sock = abstract_socket
    assert notify(STOPPING, {"NOTIFY_SOCKET": address}) is True
    assert sock.recv(4096) == b"STOPPING=1"


def test_reads_os_environ_by_default(
    path_socket: tuple[str, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    address, sock = path_socket
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    assert notify(READY) is True
    assert sock.recv(4096) == b"READY=1"


def test_one_datagram_per_call(path_socket: tuple[str, socket.socket]) -> None:
    address, sock = path_socket
    state = "READY=1\nSTATUS=mounted at /home/u/memfs, 3 sources"
    assert notify(state, {"NOTIFY_SOCKET": address})
    assert notify(STOPPING, {"NOTIFY_SOCKET": address})
    assert sock.recv(4096) == state.encode()
    assert sock.recv(4096) == b"STOPPING=1"


@pytest.mark.parametrize("env", [{}, {"NOTIFY_SOCKET": ""}])
def test_without_notify_socket_returns_false(env: dict[str, str]) -> None:
    assert notify(READY, env) is False


def test_unset_in_os_environ_returns_false() -> None:
    assert notify(READY) is False


def test_a_failed_send_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = str(tmp_path / "gone.sock")
    with caplog.at_level(logging.WARNING, logger="memfs.app.notify"):
        assert notify(READY, {"NOTIFY_SOCKET": missing}) is False
    assert missing in caplog.text


def test_a_socket_of_the_wrong_type_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "stream.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stream:
        stream.bind(str(path))
        with caplog.at_level(logging.WARNING, logger="memfs.app.notify"):
            assert notify(READY, {"NOTIFY_SOCKET": str(path)}) is False
    assert "failed" in caplog.text


def test_a_relative_notify_socket_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memfs.app.notify"):
        assert notify(READY, {"NOTIFY_SOCKET": "relative.sock"}) is False
    assert "relative.sock" in caplog.text


def test_an_empty_state_is_a_bug() -> None:
    with pytest.raises(ValueError, match="state must be"):
        notify("", {})


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("/run/user/1000/systemd/notify", b"/run/user/1000/systemd/notify"),
        ("@/org/freedesktop/systemd1/notify/1", b"\0/org/freedesktop/systemd1/notify/1"),
        ("relative", None),
        ("vsock:2:1234", None),
    ],
)
def test_socket_address(value: str, address: bytes | None) -> None:
    assert socket_address(value) == address
