"""Tier 3: two machines keep memory in sync with Syncthing, each with its own memfs (§12).

The manual recipe of docs/SYNC.md (the README's before `memfs sync`), run as a test. Two
Syncthing instances ("machines" a and b, each with its own HOME and its own memfs mount)
talk over loopback in a network namespace that has nothing else: no discovery, relays,
NAT, global announce, STUN, usage or crash reports, or upgrades, all turned off in
config.xml before the first start. Each machine shares its own source (Claude Code's
``projects/`` folder) send-only with ``fsWatcherDelayS=1`` and
``.memfs-stage.*`` in ``.stignore``; the other machine receives it receive-only into a folder
that its memfs lists as a read-only source. The REST API listens on a Unix socket, which the
test reaches from outside the namespace; the memfs daemons run outside it too, as they only
read folders.

Checked: a handoff written through a's mount shows in b's mount and b's PREAMBLE.md (the
delay is printed); a file both machines have keeps each machine's own head; no temp, marker
or conflict file ever shows as a head or a project, and no stage file reaches the other
machine (a background poller watches throughout); writing through b's mount to a file only
a has copies it into b's own folder; the received folders stay byte-identical to the sent
ones. Bounded by the timeout below; Syncthing and the namespace are always cleaned up.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import socket
import subprocess
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import syncthing_lab as lab
from mounting import (
    Mount,
    Sandbox,
    SourceDef,
    require_fuse,
    slug_of,
    wait_until,
)
from syncthing_lab import Namespace, read, set_text

from memfs.rules import names

pytestmark = [pytest.mark.mount, pytest.mark.timeout(90)]

SLUG = slug_of(Path("/home/u/src/shared_app"))
MEMORY = Path(SLUG) / "memory"  # a project's folder below a projects/ root
# The recipe's .stignore for a shared ~/.claude/projects, in this order (first match wins).
STIGNORE = """\
// memfs's stage files stay on the machine that writes them
.memfs-stage.*
// Claude Code's memory folders only, not its session transcripts
!/*/memory
/*/*
"""
WATCHER_DELAY_S = 1
SYNC_DEADLINE = 20.0  # seconds for one change to cross
RECV_KIB_S = 256  # each machine's limit on what it receives, in KiB/s
BIG = 640 * 1024  # bytes: under memfs's 1 MiB cap, in flight for a second and more
START_DEADLINE = 20.0  # seconds for both instances to start and connect
API_KEY = "memfs-test-" + secrets.token_hex(8)
# The lab's options, and a limit that applies on loopback too (loopback is LAN).
OPTIONS = {**lab.OPTIONS, "limitBandwidthInLan": "true"}


# --- the REST API over a Unix socket ----------------------------------------------------


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=5)
        self.socket_path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5)
            sock.connect(self.socket_path)
        except OSError:
            sock.close()  # not listening yet: the caller polls again
            raise
        self.sock = sock


def rest(sock: Path, path: str, method: str = "GET", data: Any = None) -> Any:
    """One API call; any failure is an OSError, so `wait_until` takes it as "not yet"."""
    conn = _UnixHTTP(sock)
    body = None if data is None else json.dumps(data).encode()
    try:
        conn.request(method, path, body=body, headers={"X-API-Key": API_KEY})
        resp = conn.getresponse()
        body = resp.read()
    except http.client.HTTPException as exc:
        raise OSError(f"{path}: {exc!r}") from exc
    finally:
        conn.close()
    if resp.status != 200:
        raise OSError(f"{path}: HTTP {resp.status} {body[:200]!r}")
    return json.loads(body) if body.strip() else None


# --- one machine -------------------------------------------------------------------------


@dataclass
class Machine(lab.Machine):
    @property
    def own(self) -> Path:
        """Claude Code's projects/ folder: the own source's root, shared send-only."""
        return self.box.home / ".claude" / "projects"

    def received(self, other: Machine) -> Path:
        """Where this machine receives the other's own folder (receive-only)."""
        return self.box.home / "sync" / other.name

    def mnt(self, *parts: str) -> Path:
        return self.box.mnt(SLUG, *parts)


def make_machine(base: Path, name: str, other: str, port: int) -> Machine:
    box = Sandbox.create(base)
    home = box.home
    box.sources = [
        SourceDef(name, f"{home}/.claude/projects/{{slug}}/memory", own=True),
        SourceDef(other, f"{home}/sync/{other}/{{slug}}/memory"),
    ]
    box.write_config()
    machine = Machine(name, box, port)
    assert len(os.fsencode(machine.sock)) < 100, f"socket path too long: {machine.sock}"
    return machine


def generate(machine: Machine) -> None:
    done = subprocess.run(
        ["syncthing", "generate", f"--home={machine.st_home}", "--no-default-folder"],
        env=machine.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = subprocess.run(
        ["syncthing", "serve", f"--home={machine.st_home}", "--device-id"],
        env=machine.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    machine.device_id = found.stdout.strip()
    assert len(machine.device_id) == 63, found.stdout


def _folder(
    template: ET.Element, fid: str, path: Path, kind: str, devices: list[str]
) -> ET.Element:
    """A folder made from config.xml's own defaults, so every option has Syncthing's value."""
    folder = ET.fromstring(ET.tostring(template))
    folder.attrib.update(
        id=fid,
        label=fid,
        path=str(path),
        type=kind,
        fsWatcherEnabled="true",
        fsWatcherDelayS=str(WATCHER_DELAY_S),
    )
    for old in folder.findall("device"):
        folder.remove(old)
    for device in devices:
        ET.SubElement(folder, "device", id=device, introducedBy="")
    return folder


def configure(me: Machine, peer: Machine) -> None:
    """Edit config.xml before the first start: loopback only, the two folders, the peer."""
    path = me.st_home / "config.xml"
    tree = ET.parse(path)
    root = tree.getroot()
    gui = root.find("gui")
    assert gui is not None
    set_text(gui, "address", str(me.sock))  # a path: Syncthing listens on a Unix socket
    set_text(gui, "apikey", API_KEY)
    options = root.find("options")
    assert options is not None
    set_text(options, "listenAddress", f"tcp://127.0.0.1:{me.port}")
    for key, value in OPTIONS.items():
        set_text(options, key, value)
    template = root.find("defaults/folder")
    assert template is not None
    ids = [me.device_id, peer.device_id]
    own = _folder(template, f"memory-{me.name}", me.own, "sendonly", ids)
    received = _folder(template, f"memory-{peer.name}", me.received(peer), "receiveonly", ids)
    device = ET.Element("device", id=peer.device_id, name=peer.name, compression="metadata")
    # Only a dials (b has no address for a, and no discovery): two machines dialling each
    # other at once left a TLS hello waiting for Syncthing's 20 s timeout now and then.
    set_text(device, "address", f"tcp://127.0.0.1:{peer.port}" if me.name == "a" else "dynamic")
    set_text(device, "autoAcceptFolders", "false")
    # Slow enough that a transfer stays in flight for a look, fast enough for the test.
    set_text(device, "maxRecvKbps", str(RECV_KIB_S))
    position = list(root).index(gui)
    for n, element in enumerate((own, received, device)):
        root.insert(position + n, element)
    tree.write(path)
    # What adding a folder in Syncthing's GUI does: the folder and its marker exist.
    for folder in (me.own, me.received(peer)):
        (folder / ".stfolder").mkdir(parents=True, exist_ok=True)
    (me.own / ".stignore").write_text(STIGNORE)


# --- the network namespace and the processes in it --------------------------------------


@pytest.fixture
def netns() -> Iterator[Namespace]:
    with lab.namespace("memfs-sync") as ns:
        yield ns


# --- what the test looks at --------------------------------------------------------------


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) below ``folder``, Syncthing's own left out."""
    found: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in (".stfolder", ".stversions")]
            filenames = [f for f in filenames if f != ".stignore"]
        for d in dirnames:
            found[os.path.normpath(os.path.join(rel, d))] = None
        for f in filenames:
            path = os.path.join(dirpath, f)
            with contextlib.suppress(FileNotFoundError):
                found[os.path.normpath(os.path.join(rel, f))] = Path(path).read_bytes()
    return found


def not_memory(name: str) -> bool:
    return bool(names.path_reason(name) or names.conflict_original(name) is not None)


class Poller(threading.Thread):
    """Looks at both mounts and both received folders until stopped; records violations."""

    def __init__(self, machines: list[Machine]) -> None:
        super().__init__(daemon=True)
        self.machines = machines
        self.seen: set[str] = set()
        self.looks = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.005):
            for m in self.machines:
                with contextlib.suppress(OSError):
                    self._look(m)
            self.looks += 1

    def _look(self, m: Machine) -> None:
        for name in os.listdir(m.box.mountpoint):
            if name not in ("global", "here", SLUG):
                self.seen.add(f"{m.name}: project {name}")
        for name in os.listdir(m.mnt()):
            if not_memory(name):
                self.seen.add(f"{m.name}: head {name}")
        for peer in self.machines:
            if peer is not m:
                for _, _, files in os.walk(m.received(peer)):
                    for name in files:
                        if names.is_stage(name):
                            self.seen.add(f"{m.name}: received stage file {name}")

    def stop(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join(5)


def connected(m: Machine, peer: Machine) -> bool:
    assert m.proc is not None
    if m.proc.poll() is not None:
        pytest.fail(f"syncthing {m.name} exited {m.proc.returncode}: see {m.log}")
    state = rest(m.sock, "/rest/system/connections")["connections"][peer.device_id]
    return bool(state["connected"])


def shared(path: str) -> bool:
    """Whether STIGNORE lets ``path`` (relative to projects/) travel."""
    parts = path.split("/")
    return (len(parts) == 1 or parts[1] == "memory") and not names.is_stage(parts[-1])


def synced(sender: Machine, receiver: Machine) -> bool:
    """The receiver's copy of the sender's own folder is what it shares, byte for byte."""
    sent = {path: body for path, body in tree(sender.own).items() if shared(path)}
    return sent == tree(receiver.received(sender))


def history(machine: Machine, path: str) -> dict[str, bytes]:
    folder = machine.mnt(".history", path)
    return {name: read(folder / name) for name in sorted(os.listdir(folder))}


# --- the test ------------------------------------------------------------------------------


def test_two_machines_share_memory_through_syncthing(
    tmp_path: Path, netns: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_fuse()
    a = make_machine(tmp_path / "a", "a", "b", 22001)
    b = make_machine(tmp_path / "b", "b", "a", 22002)
    monkeypatch.setenv("HOME", str(a.box.home))  # nothing here may reach the real home
    machines = [a, b]
    for m in machines:
        generate(m)
    configure(a, b)
    configure(b, a)
    # Both machines know the project; each has its own notes.md, and a a file b has not.
    for m in machines:
        (m.own / MEMORY).mkdir(parents=True)
        (m.own / MEMORY / "notes.md").write_text(f"{m.name.upper()} notes\n")
        index = f"- [Notes](notes.md)\n- [Topic {m.name}](topic-{m.name}.md)\n"
        (m.own / MEMORY / "MEMORY.md").write_text(index)
    (a.own / MEMORY / "only-a.md").write_text("written on a\n")
    # Claude Code keeps session transcripts beside memory/: they must not travel.
    transcript = a.own / SLUG / "0b5e-session.jsonl"
    transcript.write_text('{"type":"user","message":"private"}\n')

    poller = Poller(machines)
    try:
        for m in machines:
            m.mount = Mount(m.box, watchdog=85, name=f"memfs-{m.name}").start()
        poller.start()  # from before the first byte crosses
        for m in machines:
            netns.start(m)
        for m, peer in ((a, b), (b, a)):
            wait_until(
                lambda m=m, peer=peer: connected(m, peer),
                START_DEADLINE,
                f"{m.name} connected to {peer.name}",
            )
        _, first = wait_until(lambda: synced(a, b) and synced(b, a), SYNC_DEADLINE, "first sync")
        print(f"first sync after connecting: {first:.2f}s")
        check_each_machine_keeps_its_own_head(a, b)
        check_a_handoff_crosses(a, b)
        check_a_transfer_in_flight(a, b)
        check_edits_stay_local(a, b)
        wait_until(lambda: synced(a, b) and synced(b, a), SYNC_DEADLINE, "the final sync")
    except BaseException:
        for m in machines:
            for log in (m.log, m.mount.log_path if m.mount else None):
                if log is not None and log.exists():
                    print(
                        f"--- {log} (last 40 lines)", *log.read_text().splitlines()[-40:], sep="\n"
                    )
        raise
    finally:
        poller.stop()
        for m in machines:
            if m.mount is not None:
                forced = m.mount.close()
                if forced:
                    print(f"memfs {m.name} teardown had to force:", *forced, sep="\n  ")
    assert poller.looks > 0
    assert poller.seen == set()
    assert not (b.received(a) / SLUG / transcript.name).exists()
    for m in machines:
        for path in (m.box.home / "sync").rglob("*"):
            assert not names.is_stage(path.name), path


def check_each_machine_keeps_its_own_head(a: Machine, b: Machine) -> None:
    for me, peer in ((a, b), (b, a)):

        def shown(me: Machine = me, peer: Machine = peer) -> bool:
            return list(history(me, "notes.md").values()) == [
                f"{peer.name.upper()} notes\n".encode()
            ]

        wait_until(shown, SYNC_DEADLINE, f"{peer.name}'s notes.md as history on {me.name}")
        assert read(me.mnt("notes.md")) == f"{me.name.upper()} notes\n".encode()
        [name] = history(me, "notes.md")
        assert name.startswith(f"{peer.name}@"), name
        # MEMORY.md is the union: the own index, then the other's topics it lacks.
        own_index = f"- [Notes](notes.md)\n- [Topic {me.name}](topic-{me.name}.md)\n"
        theirs = f"- [Topic {peer.name}](topic-{peer.name}.md)\n"
        assert read(me.mnt("MEMORY.md")) == (own_index + theirs).encode()
    # b has only a's copy of only-a.md: a's is its head there.
    assert read(b.mnt("only-a.md")) == b"written on a\n"


def check_a_handoff_crosses(a: Machine, b: Machine) -> None:
    name = f"handoff-claude_{SLUG}-20261201.md"
    text = b"# Handoff from a\n\nNext: ship the sync recipe.\n"
    own_folder = a.own / MEMORY
    with open(a.mnt(name), "wb") as f:
        f.write(text[:10])
        f.flush()  # the bytes reach memfs: it stages them next to the target
        wait_until(
            lambda: [n for n in os.listdir(own_folder) if names.is_stage(n)],
            5,
            "a stage file in a's own folder",
        )
        # A file written on disk now crosses only after Syncthing scanned the folder with
        # the stage file in it: the stage file had every chance to travel with it.
        (own_folder / "probe.md").write_text("probe\n")
        wait_until(
            lambda: (b.received(a) / MEMORY / "probe.md").exists(), SYNC_DEADLINE, "probe on b"
        )
        assert not [n for n in os.listdir(b.received(a) / MEMORY) if names.is_stage(n)]
        f.write(text[10:])
    disk = b.received(a) / MEMORY / name

    def on_b() -> bool:
        return name in os.listdir(b.mnt()) and text in read(b.mnt("PREAMBLE.md"))

    # Two figures for the README: Syncthing's part (close on a -> the file on b's disk),
    # then memfs's (b's disk -> b's mount and PREAMBLE.md).
    _, crossing = wait_until(lambda: read(disk) == text, SYNC_DEADLINE, "a's handoff on b's disk")
    _, showing = wait_until(on_b, SYNC_DEADLINE, "a's handoff in b's mount and PREAMBLE.md")
    print(f"handoff: close() on a -> b's disk {crossing:.3f}s, -> b's PREAMBLE.md +{showing:.3f}s")
    assert read(b.mnt(name)) == text
    preamble = read(b.mnt("PREAMBLE.md"))
    assert b"\0" not in preamble
    assert b"memfs-stage" not in preamble
    assert b".syncthing." not in preamble


def check_edits_stay_local(a: Machine, b: Machine) -> None:
    # Writing through b's mount to a file only a has copies it into b's own folder.
    with open(b.mnt("only-a.md"), "ab") as f:
        f.write(b"appended on b\n")
    edited = b"written on a\nappended on b\n"
    assert read(b.own / MEMORY / "only-a.md") == edited
    assert read(b.mnt("only-a.md")) == edited
    assert read(b.received(a) / MEMORY / "only-a.md") == b"written on a\n"
    # It reaches a as b's version: a keeps its own head and sees b's under .history.
    wait_until(lambda: edited in history(a, "only-a.md").values(), SYNC_DEADLINE, "b's edit on a")
    assert read(a.mnt("only-a.md")) == b"written on a\n"
    assert read(a.own / MEMORY / "only-a.md") == b"written on a\n"


def check_a_transfer_in_flight(a: Machine, b: Machine) -> None:
    # A big file written on a's disk: b's Syncthing pulls it into a sparse temp file.
    body = b"".join(b"line %06d of a big topic file\n" % n for n in range(BIG // 30))
    (a.own / MEMORY / "big.md").write_bytes(body)
    folder = b.received(a) / MEMORY

    def in_flight() -> list[str]:
        return [n for n in os.listdir(folder) if n.startswith(".syncthing.big.md")]

    [temp], _ = wait_until(in_flight, SYNC_DEADLINE, "syncthing's temp file on b")
    # While it is there: not in b's mount, not in its PREAMBLE.md, counted as left out.
    listing = set(os.listdir(b.mnt()))
    preamble = read(b.mnt("PREAMBLE.md"))
    still = in_flight()
    assert temp not in listing
    assert "big.md" not in listing
    assert b"\0" not in preamble
    assert temp.encode() not in preamble
    assert still == [temp], "the transfer ended before the look: raise BIG or lower the limit"
    _, rest_of_it = wait_until(
        lambda: read(b.mnt("big.md")) == body, SYNC_DEADLINE, "big.md arrived whole on b"
    )
    print(f"big.md: in flight on b for {rest_of_it:.2f}s more after the look")
    assert not in_flight()
