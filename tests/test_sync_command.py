"""`memfs sync` against a stand-in for Syncthing's REST API, and without any (tiers 1, 2).

The stand-in (`FakeSyncthing`) keeps folders, devices, ignores and pending offers as
Syncthing 1.19 answers them, on loopback; the commands run through `cli.main` with HOME and
the XDG folders in a temporary folder. The real thing runs in test_sync_machines.py.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memfs.app import cli
from memfs.app.sync import IGNORES, WATCHER_DELAY_S, parse_folder_id
from memfs.disk import machines, syncthing

# Device ids as Syncthing 1.19 printed them (`syncthing serve --device-id`).
ME = "R6HC5SI-H376SNF-VECAVN3-UIYQ6TV-YRQ7U56-EPE3VJ3-6Z72VLY-4I4Q4QF"
DESK = "RAUTEFK-G6CADN3-DBLW6DH-JK5VLUC-GJ66XM6-33V35HG-AG3PBFV-Q5IR2QX"
LAPTOP = "I6JDPVX-VOCBWQA-QGREU7C-ORVRMMJ-C6KTACJ-FVVLDXR-MI5IPI5-GSV43A7"
KEY = "fake-key"


class FakeSyncthing(ThreadingHTTPServer):
    """The few REST calls `memfs sync` makes, with Syncthing's shapes."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folders: dict[str, dict[str, Any]] = {}
        self.devices: dict[str, dict[str, Any]] = {ME: {"deviceID": ME, "name": "me"}}
        self.ignores: dict[str, list[str]] = {}
        self.pending: dict[str, Any] = {}
        self.connected: set[str] = set()
        self.calls: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, method: str, path: str, body: Any) -> Any:
        url = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[2:]]
        self.calls.append(f"{method} {url.path}")
        match method, parts:
            case "GET", ["system", "status"]:
                return {"myID": ME}
            case "GET", ["config", "options"]:
                return {"listenAddresses": ["default"]}
            case "GET", ["config", "defaults", "folder"]:
                return {"id": "", "type": "sendreceive", "devices": [], "rescanIntervalS": 3600}
            case "GET", ["config", "defaults", "device"]:
                return {"deviceID": "", "name": "", "addresses": ["dynamic"]}
            case "GET", ["config", "folders"]:
                return list(self.folders.values())
            case "PUT", ["config", "folders", fid]:
                if all(d["deviceID"] != ME for d in body["devices"]):
                    body["devices"].append({"deviceID": ME})  # Syncthing adds itself
                self.folders[fid] = body
                self.pending.pop(fid, None)
            case "DELETE", ["config", "folders", fid]:
                del self.folders[fid]
            case "GET", ["config", "devices"]:
                return list(self.devices.values())
            case "PUT", ["config", "devices", dev]:
                self.devices[dev] = body
            case "DELETE", ["config", "devices", dev]:
                del self.devices[dev]
            case "GET", ["db", "ignores"]:
                return {"ignore": self.ignores.get(query["folder"])}
            case "POST", ["db", "ignores"]:
                self.ignores[query["folder"]] = body["ignore"]
                return {"ignore": body["ignore"]}
            case "GET", ["cluster", "pending", "folders"]:
                return self.pending
            case "GET", ["system", "connections"]:
                return {
                    "connections": {d: {"connected": d in self.connected} for d in self.devices}
                }
            case "GET", ["stats", "device"]:
                return {d: {"lastSeen": "2026-12-07T10:00:00Z"} for d in self.devices}
            case "GET", ["db", "status"]:
                return {"needFiles": 2, "needDeletes": 0, "needBytes": 300}
            case "GET", ["db", "completion"]:
                return {"needItems": 1, "needDeletes": 0, "needBytes": 40}
            case _:
                raise KeyError(path)
        return None


class _Handler(BaseHTTPRequestHandler):
    server: FakeSyncthing

    def _serve(self) -> None:
        if self.headers.get("X-API-Key") != KEY:
            self.send_response(403)
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        try:
            answer = self.server.answer(self.command, self.path, body)
        except KeyError:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(answer).encode() if answer is not None else b""
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[FakeSyncthing]:
    server = FakeSyncthing()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def make_env(tmp_path: Path, gui: str | None = None) -> dict[str, str]:
    """A home with one Claude Code account and pi; Syncthing's config.xml naming ``gui``."""
    home = tmp_path / "home"
    (home / ".claude" / "projects" / "-home-me-shop" / "memory").mkdir(parents=True)
    (home / ".pi" / "agent" / "memory").mkdir(parents=True)
    env = {
        "HOME": str(home),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": str(tmp_path / "bin"),  # no syncthing on it
    }
    if gui is not None:
        folder = tmp_path / "state" / "syncthing"
        folder.mkdir(parents=True)
        (folder / "config.xml").write_text(
            f'<configuration><gui tls="false"><address>{gui}</address>'
            f"<apikey>{KEY}</apikey></gui></configuration>"
        )
    return env


def run(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as mp:
        for k in ("HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "PATH"):
            mp.setenv(k, env[k])
        mp.delenv("CLAUDE_CONFIG_DIR", raising=False)
        mp.delenv("CODEX_HOME", raising=False)
        code = cli.main(["sync", *args])
    out, err = capsys.readouterr()
    return code, out, err


def gui_of(fake: FakeSyncthing) -> str:
    return fake.url.removeprefix("http://")


# --- tier 1 ------------------------------------------------------------------------------


def test_device_ids_are_checked_as_syncthing_does() -> None:
    assert syncthing.device_id(DESK.lower().replace("-", " ")) == DESK
    for bad in (DESK[:-1] + "A", DESK[:-8], "hello", DESK.replace("A", "1", 1)):
        with pytest.raises(syncthing.SyncthingError, match="is not a Syncthing device id"):
            syncthing.device_id(bad)


def test_folder_ids_say_kind_and_source() -> None:
    assert parse_folder_id("memfs-r6hc5si-claude-work-2") == ("claude", "work-2")
    assert parse_folder_id("memfs-r6hc5si-tool-x") is None
    assert parse_folder_id("default") is None


# --- tier 2: the commands ----------------------------------------------------------------


def test_init_shares_each_local_source_send_only_once(
    tmp_path: Path, fake: FakeSyncthing, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path, gui_of(fake))
    # What arrived from another machine is never shared on.
    received = machines.received_folder(machines.machines_dir(env), "desk", "claude", "claude")
    (received / "-home-al-shop" / "memory").mkdir(parents=True)
    machines.publish(received, machines.Published("desk", "/home/al", "claude", "claude"))
    for _ in range(2):
        code, out, err = run(env, capsys, "init")
        assert (code, err) == (0, "")
    # The second run changed nothing: no folder put again (Syncthing would restart it).
    assert fake.calls.count("PUT /rest/config/folders/memfs-r6hc5si-pi-pi") == 1
    assert fake.calls.count("POST /rest/db/ignores") == 2
    assert f"this machine: {ME}" in out
    assert f"memfs sync add {ME} --name " in out
    kinds = sorted(parse_folder_id(fid) or ("", "") for fid in fake.folders)
    assert kinds == [("claude", "claude"), ("pi", "pi")]
    for fid, folder in fake.folders.items():
        assert folder["type"] == "sendonly"
        assert folder["fsWatcherDelayS"] == WATCHER_DELAY_S
        assert folder["rescanIntervalS"] == 3600  # Syncthing's own default kept
        kind = (parse_folder_id(fid) or ("", ""))[0]
        assert fake.ignores[fid] == IGNORES[kind]
        published = machines.read_published(Path(folder["path"]))
        assert published is not None
        assert published.home == env["HOME"]
    assert IGNORES["claude"][0] == ".memfs-stage.*"  # stage files stay home


def test_add_pairs_a_machine_and_receives_its_folders_read_only(
    tmp_path: Path, fake: FakeSyncthing, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path, gui_of(fake))
    offered = "memfs-rautefk-claude-claude"
    fake.pending = {offered: {"offeredBy": {DESK: {"label": "memfs desk claude"}}}}
    code, out, err = run(env, capsys, "add", DESK, "--name", "desk", "--wait", "0")
    assert (code, err) == (0, "")
    assert fake.devices[DESK]["name"] == "desk"
    mine = [f for f in fake.folders.values() if f["type"] == "sendonly"]
    assert len(mine) == 2
    assert all({"deviceID": DESK} in f["devices"] for f in mine)
    folder = fake.folders[offered]
    assert folder["type"] == "receiveonly"
    assert Path(folder["path"]) == Path(env["XDG_DATA_HOME"]) / "memfs/machines/desk/claude"
    assert folder["devices"][0] == {"deviceID": DESK}
    assert "receiving 1 of its folders" in out
    # Twice: nothing duplicated.
    assert run(env, capsys, "add", DESK, "--name", "desk", "--wait", "0")[0] == 0
    assert all(f["devices"].count({"deviceID": DESK}) == 1 for f in mine)

    fake.connected.add(DESK)
    code, out, _ = run(env, capsys, "status", "--json")
    status = json.loads(out)
    [desk] = status["machines"]
    assert desk["name"] == "desk"
    assert desk["connected"] is True
    # One received folder (2 files, 300 bytes to pull) and two sent (1 item, 40 bytes each).
    assert (desk["left_files"], desk["left_bytes"]) == (2 + 2 * 1, 300 + 2 * 40)
    code, out, _ = run(env, capsys, "status")
    assert "desk" in out
    assert "connected" in out

    code, out, err = run(env, capsys, "remove", "desk")
    assert (code, err) == (0, "")
    assert DESK not in fake.devices
    assert offered not in fake.folders
    assert all({"deviceID": DESK} not in f["devices"] for f in fake.folders.values())
    assert not (Path(env["XDG_DATA_HOME"]) / "memfs/machines/desk").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["add", "NOT-AN-ID"], "is not a Syncthing device id"),
        (["add", DESK[:-1] + "A"], "is not a Syncthing device id"),
        (["add", ME], "this machine's own id"),
        (["add", DESK, "--address", "desk:22000"], "must look like tcp://HOST:PORT"),
        (["remove", "nobody"], "no machine named 'nobody'"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(
    tmp_path: Path,
    fake: FakeSyncthing,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    says: str,
) -> None:
    env = make_env(tmp_path, gui_of(fake))
    code, _out, err = run(env, capsys, *args)
    assert code == 2
    assert says in err
    assert len(err.strip().splitlines()) == 1
    assert DESK not in fake.devices


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nobody listens


def test_syncthing_stopped_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path, f"127.0.0.1:{_closed_port()}")
    for args in (["init"], ["add", DESK], ["status"], ["remove", "desk"]):
        code, _out, err = run(env, capsys, *args)
        assert code == 2
        assert "Syncthing is not running" in err
        assert "systemctl --user enable --now syncthing" in err
        assert len(err.strip().splitlines()) == 1


def test_syncthing_missing_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path)  # no config.xml anywhere, no syncthing on PATH
    code, _, err = run(env, capsys, "init")
    assert code == 2
    assert "Syncthing is not installed" in err
    assert "apt install syncthing" in err
    assert len(err.strip().splitlines()) == 1
    # Installed but never started: how to start it.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "syncthing").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "syncthing").chmod(0o755)
    code, _out, err = run(env, capsys, "init")
    assert code == 2
    assert "systemctl --user enable --now syncthing" in err


def test_a_gui_url_needs_its_key_and_a_wrong_key_is_refused(
    tmp_path: Path, fake: FakeSyncthing, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path)
    code, _, err = run(env, capsys, "status", "--syncthing", fake.url)
    assert code == 2
    assert "--api-key" in err
    code, _, err = run(env, capsys, "status", "--syncthing", fake.url, "--api-key", "wrong")
    assert code == 2
    assert "refused the API key" in err
    code, out, err = run(env, capsys, "status", "--syncthing", fake.url, "--api-key", KEY)
    assert (code, err) == (0, "")
    assert f"this machine: {ME}" in out


def test_a_config_folder_named_is_used(
    tmp_path: Path, fake: FakeSyncthing, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path, gui_of(fake))
    moved = tmp_path / "elsewhere"
    (tmp_path / "state" / "syncthing").rename(moved)
    assert run(env, capsys, "status")[0] == 2  # not found where Syncthing keeps it
    code, out, err = run(env, capsys, "status", "--syncthing", str(moved))
    assert (code, err) == (0, "")
    assert f"this machine: {ME}" in out


def test_only_machines_paired_by_add_have_their_folders_accepted(
    tmp_path: Path, fake: FakeSyncthing, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path, gui_of(fake))
    # A device the user shares other folders with, outside memfs, offers a memfs folder.
    fake.devices[LAPTOP] = {"deviceID": LAPTOP, "name": "laptop", "addresses": ["dynamic"]}
    offered = "memfs-i6jdpvx-pi-pi"
    fake.pending = {offered: {"offeredBy": {LAPTOP: {"label": "memfs laptop pi"}}}}
    assert run(env, capsys, "status")[0] == 0
    assert offered not in fake.folders
    # Once paired by `memfs sync add`, it is received (under machines/laptop/pi).
    assert run(env, capsys, "add", LAPTOP, "--wait", "0")[0] == 0
    assert fake.folders[offered]["type"] == "receiveonly"
    assert fake.folders[offered]["path"].endswith("memfs/machines/laptop/pi")


def test_a_bad_device_id_is_told_without_syncthing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path)  # no Syncthing at all
    code, _, err = run(env, capsys, "add", "ABCDEFG-HIJ")
    assert code == 2
    assert "'ABCDEFG-HIJ' is not a Syncthing device id" in err
    assert len(err.strip().splitlines()) == 1
