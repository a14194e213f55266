"""`memfs sync`: memory on every machine, carried by the user's Syncthing (§12).

Role: the four commands. `init` shares every local memory source send-only (the README
recipe's `.stignore`, a 1 s watcher delay, a machine file at its top: disk/machines.py);
`add` pairs a machine and accepts its folders receive-only under
``$XDG_DATA_HOME/memfs/machines/<NAME>/``, which a running mount serves as they arrive
(adapter/machines.py); `status` says, per machine, connected or last seen, what is left to
sync and the conflict copies; `remove` undoes `add`. Each also accepts the folders a known
machine offered since (it shares them only once it has added this one).

memfs moves no bytes itself: everything here is Syncthing configuration through its REST API
(disk/syncthing.py). A folder is ``memfs-<this device's first 7>-<kind>-<source>``, so the
receiving side knows where each goes before its first file arrives. Plain synchronous
code; no trio, no pyfuse3.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfs.disk import config as configs
from memfs.disk import machines
from memfs.disk.syncthing import Api, SyncthingError, device_id
from memfs.rules import names

FOLDER_PREFIX = "memfs-"
WATCHER_DELAY_S = 1  # the default of 10 s made a handoff take 8-14 s to cross
STAGE_IGNORE = ".memfs-stage.*"
# What each kind of folder shares (first match wins): memfs's stage files stay home, and
# of Claude Code's projects/ only the memory folders (not its session transcripts), of
# Gemini CLI's tmp/ the memory folders and the marker naming each project's root.
IGNORES = {
    "claude": [STAGE_IGNORE, "!/*/memory", "/*/*"],
    "gemini": [STAGE_IGNORE, "!/*/memory", "!/*/.project_root", "/*/*"],
    "pi": [STAGE_IGNORE],
    "codex": [STAGE_IGNORE],
}
ACCEPT_WAIT_S = 5.0  # how long `add` waits for a connected machine's folders


class SyncError(Exception):
    """A user error of `memfs sync`: one line, the cause and the fix."""


@dataclass(frozen=True)
class Share:
    """One local memory source, shared send-only."""

    source: str
    kind: str  # a key of IGNORES
    folder: Path

    def folder_id(self, me: str) -> str:
        return f"{FOLDER_PREFIX}{me[:7].lower()}-{self.kind}-{self.source}"


def local_shares(config: configs.Config) -> list[Share]:
    """Every memory source of this machine, never one received from another (§12)."""
    found = []
    for s in config.sources:
        if s.their_home:
            continue
        if s.kind == configs.GEMINI:
            found.append(Share(s.name, "gemini", s.root))
        elif s.kind == configs.CODEX:
            found.append(Share(s.name, "codex", s.root / "memories"))
        elif s.tail == ("memory",):
            found.append(Share(s.name, "claude", s.root))
        elif s.tail == ():
            found.append(Share(s.name, "pi", s.root))
    return found


def parse_folder_id(fid: str) -> tuple[str, str] | None:
    """(kind, source) of a memfs folder id, None for any other folder."""
    parts = fid.split("-", 3)
    if len(parts) != 4 or parts[0] + "-" != FOLDER_PREFIX or parts[2] not in IGNORES:
        return None
    return parts[2], parts[3]


@dataclass
class Sync:
    """`memfs sync` against one Syncthing, for one user's configuration."""

    api: Api
    config: configs.Config
    env: Mapping[str, str]
    out: list[str] = field(default_factory=list)  # what the command prints

    @property
    def machines(self) -> Path:
        return machines.machines_dir(self.env)

    def my_id(self) -> str:
        return str(self.api.get("/rest/system/status")["myID"])

    def _folders(self) -> dict[str, dict[str, Any]]:
        return {f["id"]: f for f in self.api.get("/rest/config/folders")}

    def _devices(self) -> dict[str, dict[str, Any]]:
        return {d["deviceID"]: d for d in self.api.get("/rest/config/devices")}

    def _put_folder(self, folder: dict[str, Any]) -> None:
        self.api.call("PUT", f"/rest/config/folders/{_q(folder['id'])}", folder)

    def _new_folder(self, fid: str, label: str, path: Path, kind: str) -> dict[str, Any]:
        """A folder from Syncthing's own defaults, so every other option keeps its value."""
        folder: dict[str, Any] = dict(self.api.get("/rest/config/defaults/folder"))
        folder.update(id=fid, label=label, path=str(path), type=kind, devices=[])
        return folder

    # --- init ---------------------------------------------------------------------

    def init(self, name: str | None = None) -> str:
        """Share every local source send-only; idempotent. Returns this device's id.
        ``name``: what the other machine should call this one (default: the hostname)."""
        me, hostname, shared = self.share()
        self.accept_pending()
        self.out.append(f"this machine: {me} ({hostname})")
        for share in shared:
            self.out.append(f"  shared send-only: {share.source} ({share.kind}) {share.folder}")
        address = self._address_hint(hostname)
        self.out.append("on the other machine, run:")
        name = _machine_name(name or hostname.split(".")[0])
        self.out.append(f"  memfs sync add {me} --name {name}{address}")
        return me

    def share(self) -> tuple[str, str, list[Share]]:
        """Each local source shared send-only, as `init` says; a folder already so is left
        alone (a PUT restarts it). Returns this device's id, the hostname, what is shared."""
        me = self.my_id()
        hostname = socket.gethostname()
        home = str(self.config.home)
        existing = self._folders()
        own = self.config.own
        shared = []
        for share in local_shares(self.config):
            if own is not None and share.folder == own.root:
                share.folder.mkdir(parents=True, exist_ok=True)  # a fresh account's
            if not share.folder.is_dir():
                continue  # a tool not used yet: `memfs sync init` again once it is
            machines.publish(
                share.folder, machines.Published(hostname, home, share.source, share.kind)
            )
            fid = share.folder_id(me)
            before = existing.get(fid)
            folder = dict(before) if before is not None else None
            folder = folder or self._new_folder(
                fid, f"memfs {hostname} {share.source}", share.folder, "sendonly"
            )
            folder.update(
                path=str(share.folder),
                type="sendonly",
                fsWatcherEnabled=True,
                fsWatcherDelayS=WATCHER_DELAY_S,
            )
            if folder != before:
                self._put_folder(folder)
            query = f"/rest/db/ignores?folder={_q(fid)}"
            if (self.api.get(query) or {}).get("ignore") != IGNORES[share.kind]:
                self.api.call("POST", query, {"ignore": IGNORES[share.kind]})
            shared.append(share)
        return me, hostname, shared

    def _address_hint(self, hostname: str) -> str:
        """`--address` for the other machine when this one listens at a fixed address
        (with Syncthing's default, discovery finds it)."""
        options = self.api.get("/rest/config/options")
        for listen in options.get("listenAddresses", []):
            if listen.startswith("tcp://"):
                host, _, port = listen[len("tcp://") :].rpartition(":")
                if host in ("", "0.0.0.0", "[::]"):
                    host = hostname
                return f" --address tcp://{host}:{port}"
        return ""

    # --- add ----------------------------------------------------------------------

    def add(self, text: str, name: str | None, address: str | None, wait: float) -> None:
        """Pair the machine of device id ``text``: share this machine's folders with it and
        receive its own (now, or within ``wait`` seconds, or at a later command)."""
        dev = device_id(text)
        me = self.my_id()
        if dev == me:
            raise SyncError(f"{dev} is this machine's own id; give the other machine's")
        if address is not None and not address.startswith(("tcp://", "quic://")):
            raise SyncError(f"--address {address!r} must look like tcp://HOST:PORT")
        name = self._pair(dev, name, address)
        self.share()  # this machine's folders shared (again: idempotent), then with it
        self._share_with(dev, me)
        # The consent `accept_pending` looks for, before any offer is taken.
        (self.machines / name).mkdir(parents=True, exist_ok=True)
        accepted = self._wait_for_offers(dev, wait)
        self.out.append(f"added {name} ({dev}): this machine's folders are shared with it")
        if accepted:
            self.out.append(f"  receiving {accepted} of its folders in {self.machines / name}")
        else:
            self.out.append(
                f"  its folders arrive once it adds this machine (memfs sync add {me}); "
                "then 'memfs sync status' here accepts them"
            )

    def _pair(self, dev: str, name: str | None, address: str | None) -> str:
        """The device added (or updated) under its machine name; returns the name."""
        devices = self._devices()
        device = devices.get(dev)
        name = _machine_name(name or (device or {}).get("name") or f"machine-{dev[:7].lower()}")
        for other in devices.values():
            if other["deviceID"] != dev and other.get("name") == name and self._is_machine(other):
                raise SyncError(f"another machine is named {name!r} already; pick --name")
        if device is None:
            device = dict(self.api.get("/rest/config/defaults/device"))
            device.update(deviceID=dev, addresses=["dynamic"])
        # Its folders are accepted by memfs, receive-only, never by Syncthing's auto-accept
        # (which would make them send-receive folders in the home).
        device.update(name=name, autoAcceptFolders=False)
        if address:
            device["addresses"] = [address]
        self.api.call("PUT", f"/rest/config/devices/{dev}", device)
        return name

    def _share_with(self, dev: str, me: str) -> None:
        """Each of this machine's memfs folders shared with device ``dev``."""
        mine = f"{FOLDER_PREFIX}{me[:7].lower()}-"
        for fid, folder in self._folders().items():
            if not fid.startswith(mine) or folder["type"] != "sendonly":
                continue
            if not _shares_with(folder, dev):
                folder["devices"].append({"deviceID": dev})
                self._put_folder(folder)

    def _wait_for_offers(self, dev: str, wait: float) -> int:
        deadline = time.monotonic() + wait
        accepted = self.accept_pending()
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.25)
            accepted = self.accept_pending()
        received = [f for f in self._folders().values() if self._received_from(f, dev)]
        return len(received)

    def _is_machine(self, device: dict[str, Any]) -> bool:
        dev = device["deviceID"]
        return any(
            self._received_from(f, dev) or _shares_with(f, dev)
            for f in self._folders().values()
            if f["id"].startswith(FOLDER_PREFIX)
        )

    def _received_from(self, folder: dict[str, Any], dev: str) -> bool:
        return (
            folder["id"].startswith(FOLDER_PREFIX)
            and folder["type"] == "receiveonly"
            and _shares_with(folder, dev)
        )

    # --- accepting what known machines offer --------------------------------------

    def accept_pending(self) -> int:
        """Accept, receive-only, every memfs folder a machine paired by `add` offers (its
        folder under machines/ says so); returns how many were accepted."""
        pending = self.api.get("/rest/cluster/pending/folders") or {}
        devices = self._devices()
        count = 0
        for fid, offer in sorted(pending.items()):
            parsed = parse_folder_id(fid)
            if parsed is None:
                continue
            kind, source = parsed
            for dev in sorted(offer.get("offeredBy", {})):
                device = devices.get(dev)
                if device is None or not device.get("name"):
                    continue
                name = _machine_name(device["name"])
                if not (self.machines / name).is_dir():
                    continue  # a device paired outside `memfs sync add`: not asked for
                path = machines.received_folder(self.machines, name, source, kind)
                path.mkdir(parents=True, exist_ok=True)
                folder = self._new_folder(fid, f"memfs {name} {source}", path, "receiveonly")
                folder.update(
                    devices=[{"deviceID": dev}],
                    fsWatcherEnabled=True,
                    fsWatcherDelayS=WATCHER_DELAY_S,
                )
                self._put_folder(folder)
                count += 1
                break
        return count

    # --- status -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """This device, what it shares, and each paired machine (`_machine`)."""
        self.accept_pending()
        me = self.my_id()
        folders = [f for f in self._folders().values() if f["id"].startswith(FOLDER_PREFIX)]
        connections = self.api.get("/rest/system/connections").get("connections", {})
        seen = self.api.get("/rest/stats/device") or {}
        found = []
        for dev, device in sorted(self._devices().items(), key=lambda d: d[1].get("name", "")):
            shared = [f for f in folders if _shares_with(f, dev)]
            if dev == me or not shared:
                continue
            machine = self._machine(dev, shared)
            machine.update(
                name=device.get("name", ""),
                connected=bool(connections.get(dev, {}).get("connected")),
                last_seen=_seen((seen.get(dev) or {}).get("lastSeen", "")),
            )
            found.append(machine)
        shared_here = [f["path"] for f in folders if f["type"] == "sendonly"]
        return {"device": me, "shared": shared_here, "machines": found}

    def _machine(self, dev: str, folders: list[dict[str, Any]]) -> dict[str, Any]:
        """What is left to sync with device ``dev`` both ways (what it still needs of this
        machine's folders, what this one still needs of its), and its conflict copies."""
        left_files = left_bytes = conflicts = 0
        receiving = []
        for f in folders:
            if f["type"] == "receiveonly":
                st = self.api.get(f"/rest/db/status?folder={_q(f['id'])}")
                left_files += int(st.get("needFiles", 0)) + int(st.get("needDeletes", 0))
                left_bytes += int(st.get("needBytes", 0))
                conflicts += _conflict_copies(Path(f["path"]))
                receiving.append(f["path"])
            else:
                done = self.api.get(f"/rest/db/completion?folder={_q(f['id'])}&device={dev}")
                left_files += int(done.get("needItems", 0)) + int(done.get("needDeletes", 0))
                left_bytes += int(done.get("needBytes", 0))
        return {
            "device": dev,
            "left_files": left_files,
            "left_bytes": left_bytes,
            "conflicts": conflicts,
            "receiving": receiving,
        }

    # --- remove -------------------------------------------------------------------

    def remove(self, name: str) -> None:
        devices = [
            d for d in self._devices().values() if d.get("name") == name and self._is_machine(d)
        ]
        if not devices:
            raise SyncError(f"no machine named {name!r}; 'memfs sync status' lists them")
        dev = devices[0]["deviceID"]
        for fid, folder in self._folders().items():
            if not fid.startswith(FOLDER_PREFIX) or not _shares_with(folder, dev):
                continue
            if folder["type"] == "receiveonly":
                self.api.call("DELETE", f"/rest/config/folders/{_q(fid)}")
            else:
                folder["devices"] = [d for d in folder["devices"] if d["deviceID"] != dev]
                self._put_folder(folder)
        self.api.call("DELETE", f"/rest/config/devices/{dev}")
        _remove_tree(self.machines / _machine_name(name))
        self.out.append(f"removed {name} ({dev}): nothing is shared with it any more")


def format_status(status: Mapping[str, Any]) -> list[str]:
    lines = [f"this machine: {status['device']}, sharing {len(status['shared'])} folders"]
    if not status["machines"]:
        lines.append("no other machine yet: 'memfs sync add DEVICE_ID --name NAME'")
    for m in status["machines"]:
        state = "connected" if m["connected"] else f"last seen {m['last_seen'] or 'never'}"
        lines.append(
            f"  {m['name']:<16} {state:<28} left to sync: {m['left_files']} files, "
            f"{m['left_bytes']} bytes; conflicts: {m['conflicts']}; "
            f"receiving {len(m['receiving'])} folders"
        )
    return lines


def _seen(when: str) -> str:
    """Syncthing's last-seen time; "" for never (it says year 1 or 1970 then)."""
    return "" if when.startswith(("0001-", "1970-")) else when


def _shares_with(folder: Mapping[str, Any], dev: str) -> bool:
    return any(d["deviceID"] == dev for d in folder.get("devices", []))


def _machine_name(text: str) -> str:
    """A machine name fit for folder and source names (disk/machines.py `NAME_RE`)."""
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in text)
    cleaned = cleaned.strip("-_.")[:24] or "machine"
    if not machines.NAME_RE.match(cleaned):
        raise SyncError(f"--name {text!r} must be letters, digits, '_', '.' or '-'")
    return cleaned


def _conflict_copies(folder: Path) -> int:
    count = 0
    for _, _, files in os.walk(folder):
        count += sum(1 for f in files if names.conflict_original(f) is not None)
    return count


def _remove_tree(folder: Path) -> None:
    """The machine's received folders (Syncthing's own markers included)."""
    shutil.rmtree(folder, ignore_errors=True)


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


__all__ = ["Sync", "SyncError", "SyncthingError", "format_status", "local_shares"]
