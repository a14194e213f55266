"""The user's Syncthing, reached through its REST API (§12): found, asked, configured.

Layer disk: the only module that talks to Syncthing; standard library only (``http.client``,
``xml.etree``), no other memfs module. Blocking, used by commands (app/sync.py), never by a
mount. Every failure a user can fix is a `SyncthingError` of one line: the cause and the
fix (not installed, not running, a wrong key, an answer Syncthing refused).

Where Syncthing keeps its config folder (its ``config.xml`` names the GUI address and the
API key): ``$XDG_STATE_HOME/syncthing`` (Syncthing 1.27+'s default), else
``~/.config/syncthing``; or a folder or GUI URL the user names.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT_S = 10.0  # one REST call; Syncthing answers config calls in milliseconds
START_HINT = "start it with 'systemctl --user enable --now syncthing' (or run 'syncthing')"
INSTALL_HINT = (
    "install it with 'sudo apt install syncthing', then 'systemctl --user enable --now syncthing'"
)
# Syncthing's device ids: base32, 52 characters of a SHA-256 plus a Luhn check character
# per 13, shown in 8 groups of 7 joined by '-'.
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


class SyncthingError(Exception):
    """Syncthing missing, stopped or refusing: one line naming the cause and the fix."""


def _luhn32(chars: str) -> str:
    """Syncthing's Luhn mod 32 check character of ``chars`` (lib/protocol/luhn.go)."""
    factor, total = 1, 0
    for c in chars:
        addend = factor * _B32.index(c)
        factor = 1 if factor == 2 else 2
        total += addend // 32 + addend % 32
    return _B32[(32 - total % 32) % 32]


def device_id(text: str) -> str:
    """``text`` as Syncthing writes a device id (upper case, 8 groups of 7), checked.

    Raises:
        SyncthingError: not a device id (wrong length, letters or check characters).
    """
    raw = text.strip().upper().replace("-", "").replace(" ", "")
    valid = len(raw) == 56 and all(c in _B32 for c in raw)
    for n in range(4) if valid else ():
        group = raw[n * 14 : n * 14 + 14]
        valid = valid and _luhn32(group[:13]) == group[13]
    if not valid:
        raise SyncthingError(
            f"{text!r} is not a Syncthing device id; copy the id 'memfs sync init' printed on "
            "the other machine (8 groups of 7 letters and digits joined by '-')"
        )
    return "-".join(raw[i : i + 7] for i in range(0, 56, 7))


@dataclass(frozen=True)
class Api:
    """Where Syncthing's REST API answers: an http(s) URL or a Unix socket, and its key."""

    address: str  # "http://127.0.0.1:8384", "https://...", or a socket path "/run/st.sock"
    key: str

    def _connection(self) -> http.client.HTTPConnection:
        if self.address.startswith("/"):
            return _UnixConnection(self.address)
        url = urllib.parse.urlsplit(self.address)
        host = url.hostname or "127.0.0.1"
        if url.scheme == "https":
            # Syncthing's GUI certificate is its own, self-signed: there is nothing to check
            # it against, and the key in the request is what Syncthing checks.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection(
                host, url.port or 8384, timeout=TIMEOUT_S, context=context
            )
        return http.client.HTTPConnection(host, url.port or 8384, timeout=TIMEOUT_S)

    def call(self, method: str, path: str, data: Any = None) -> Any:
        """One REST call; its JSON answer (None when empty).

        Raises:
            SyncthingError: not running there, the key refused, or an error answer.
        """
        conn = self._connection()
        body = None if data is None else json.dumps(data).encode()
        headers = {"X-API-Key": self.key, "Content-Type": "application/json"}
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise SyncthingError(
                f"Syncthing is not running at {self.address} ({_reason(exc)}); {START_HINT}"
            ) from None
        finally:
            conn.close()
        if resp.status in (401, 403):
            raise SyncthingError(
                f"Syncthing at {self.address} refused the API key; give the key its GUI shows "
                "(Actions > Settings > API Key) with --api-key, or name its config folder"
            )
        if resp.status >= 300:
            text = answer.decode(errors="replace").strip().splitlines()
            raise SyncthingError(
                f"Syncthing refused {method} {path}: HTTP {resp.status} "
                f"{text[0] if text else ''}; check Syncthing's log"
            )
        return json.loads(answer) if answer.strip() else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: a GUI address that is a path (Syncthing listens there)."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=TIMEOUT_S)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(TIMEOUT_S)
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def config_folders(env: Mapping[str, str], home: Path) -> list[Path]:
    """Where Syncthing keeps its config folder, in the order it looks itself."""
    found = []
    state = env.get("XDG_STATE_HOME")
    found.append(Path(state) / "syncthing" if state and os.path.isabs(state) else None)
    found.append(home / ".local" / "state" / "syncthing")
    config = env.get("XDG_CONFIG_HOME")
    found.append(Path(config) / "syncthing" if config and os.path.isabs(config) else None)
    found.append(home / ".config" / "syncthing")
    return list(dict.fromkeys(p for p in found if p is not None))


def locate(
    env: Mapping[str, str], home: Path, given: str | None = None, key: str | None = None
) -> Api:
    """The REST API of the user's Syncthing: ``given`` a GUI URL (with ``key``) or a config
    folder, else the first config folder found (`config_folders`).

    Raises:
        SyncthingError: no config folder (Syncthing not installed or never started), a
            URL without a key, or a config.xml without a GUI address or key.
    """
    if given and "://" in given:
        if not key:
            raise SyncthingError(
                f"--syncthing {given} is a URL: give its API key with --api-key (the GUI's "
                "Actions > Settings > API Key), or name Syncthing's config folder instead"
            )
        return Api(given.rstrip("/"), key)
    folders = [Path(given).expanduser()] if given else config_folders(env, home)
    for folder in folders:
        if (folder / "config.xml").is_file():
            return _from_config(folder / "config.xml", key)
    if given:
        raise SyncthingError(
            f"{given} holds no Syncthing config.xml; name Syncthing's config folder "
            "(e.g. ~/.local/state/syncthing) or its GUI URL with --api-key"
        )
    if shutil.which("syncthing", path=env.get("PATH")) is None:
        raise SyncthingError(f"Syncthing is not installed; {INSTALL_HINT}")
    raise SyncthingError(
        f"Syncthing has never run for this user (no config.xml in "
        f"{' or '.join(str(f) for f in folders)}); {START_HINT}"
    )


def _from_config(path: Path, key: str | None) -> Api:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SyncthingError(f"cannot read {path}: {exc}; check the file") from None
    gui = root.find("gui")
    address = (gui.findtext("address") or "").strip() if gui is not None else ""
    found_key = (gui.findtext("apikey") or "").strip() if gui is not None else ""
    if not address or not (key or found_key):
        raise SyncthingError(
            f"{path} names no GUI address or API key; set one in Syncthing's GUI "
            "(Actions > Settings > API Key)"
        )
    if address.startswith("unix://"):
        address = address[len("unix://") :]
    if not address.startswith("/"):
        tls = gui is not None and gui.get("tls", "false").lower() == "true"
        host, _, port = address.rpartition(":")
        if host in ("", "0.0.0.0", "[::]", "::"):
            host = "127.0.0.1"  # listening everywhere: this machine answers on loopback
        address = f"{'https' if tls else 'http'}://{host}:{port}"
    return Api(address, key or found_key)
