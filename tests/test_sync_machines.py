"""Tier 3: `memfs sync` pairs machines through their own Syncthing, nothing else (§12).

Three "machines" (a, b, later c), each with its own HOME at a different path, its own
Syncthing and its own memfs mount. Syncthing runs in a network namespace with loopback only,
every way out turned off before its first start (as tests/test_syncthing.py does); it
starts with no folder and no device: the test configures nothing in it but through
`memfs sync init`, `memfs sync add` and `memfs sync status`, run as a user would (config
folder found at $XDG_STATE_HOME/syncthing; the GUI on a Unix socket, reached from outside
the namespace).

Checked: a project with the same path below each home is one project on both; a handoff
written through a's mount is in b's PREAMBLE.md within seconds (printed), and its version
on b is named after machine a; status says connected with nothing left; a third machine
joins the same way; `remove` stops it and takes its folders out of the view.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import syncthing_lab as lab
from mounting import Mount, Sandbox, SourceDef, require_fuse, wait_until
from syncthing_lab import Namespace, read, set_text

from memfs.rules.slug import claude_slug

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240)]

PROJECT = "src/shop"  # the same path below each machine's home
START_DEADLINE = 30.0
SYNC_DEADLINE = 30.0
OPTIONS = lab.OPTIONS  # nothing may leave loopback, nothing may phone home


@dataclass
class Machine(lab.Machine):
    @property
    def st_home(self) -> Path:
        """Where `memfs sync` looks first: $XDG_STATE_HOME/syncthing."""
        return Path(self.box.env["XDG_STATE_HOME"]) / "syncthing"

    @property
    def slug(self) -> str:
        return claude_slug(str(self.box.home / PROJECT))

    @property
    def own(self) -> Path:
        return self.box.home / ".claude" / "projects" / self.slug / "memory"

    def mnt(self, *parts: str) -> Path:
        return self.box.mnt(self.slug, *parts)

    def sync(self, *args: str) -> str:
        """`memfs sync ...` as the user runs it; fails the test on a non-zero exit."""
        done = self.box.memfs("sync", *args, "--config", str(self.box.config_path))
        assert done.returncode == 0, f"memfs sync {' '.join(args)} on {self.name}: {done.stderr}"
        print(f"[{self.name}] $ memfs sync {' '.join(args)}\n{done.stdout}")
        return done.stdout

    def status(self) -> dict[str, dict[str, object]]:
        found = json.loads(self.sync("status", "--json"))
        return {m["name"]: m for m in found["machines"]}


def make_machine(base: Path, name: str, port: int) -> Machine:
    box = Sandbox.create(base)
    home = box.home
    # This machine's own Claude Code account and pi: what `sync init` shares.
    box.sources = [
        SourceDef("claude", f"{home}/.claude/projects/{{slug}}/memory", own=True),
        SourceDef("pi", f"{home}/.pi/agent/memory/{{slug}}"),
    ]
    box.write_config()
    machine = Machine(name, box, port)
    assert len(os.fsencode(machine.sock)) < 100, f"socket path too long: {machine.sock}"
    machine.own.mkdir(parents=True)
    (machine.own / "notes.md").write_text(f"{name} notes\n")
    (machine.own / "MEMORY.md").write_text(f"- [Notes](notes.md)\n- [On {name}](on-{name}.md)\n")
    return machine


def prepare_syncthing(m: Machine) -> None:
    """`syncthing generate`, then loopback only: the GUI on a Unix socket, one listen
    address, no discovery. No folder, no device: that is `memfs sync`'s job."""
    done = subprocess.run(
        ["syncthing", "generate", f"--home={m.st_home}", "--no-default-folder"],
        env=m.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    path = m.st_home / "config.xml"
    tree = ET.parse(path)
    root = tree.getroot()
    gui, options = root.find("gui"), root.find("options")
    assert gui is not None
    assert options is not None
    set_text(gui, "address", str(m.sock))
    set_text(gui, "apikey", "memfs-test-" + secrets.token_hex(8))
    set_text(options, "listenAddress", f"tcp://127.0.0.1:{m.port}")
    for key, value in OPTIONS.items():
        set_text(options, key, value)
    tree.write(path)


@pytest.fixture
def netns() -> Iterator[Namespace]:
    with lab.namespace("memfs-sync39") as ns:
        yield ns


def device_of(init_output: str) -> str:
    """The device id `memfs sync init` printed."""
    line = next(s for s in init_output.splitlines() if s.startswith("this machine: "))
    return line.split()[2]


def start(m: Machine, netns: Namespace) -> None:
    prepare_syncthing(m)
    netns.start(m)
    m.mount = Mount(m.box, watchdog=230, name=f"memfs-{m.name}").start()
    wait_until(lambda: m.sock.exists(), START_DEADLINE, f"{m.name}'s Syncthing listening")


def pair(me: Machine, other: Machine) -> None:
    me.sync(
        "add", other.device_id, "--name", other.name, "--address", f"tcp://127.0.0.1:{other.port}"
    )


def test_machines_pair_with_memfs_sync_alone(tmp_path: Path, netns: Namespace) -> None:
    require_fuse()
    a = make_machine(tmp_path / "a", "a", 22101)
    b = make_machine(tmp_path / "b", "b", 22102)
    assert a.box.home != b.box.home
    assert a.slug != b.slug
    machines = [a, b]
    c: Machine | None = None
    try:
        for m in machines:
            start(m, netns)
        # Each machine: init (twice: nothing is duplicated), then add the other.
        for m in machines:
            wait_until(lambda m=m: _init(m), START_DEADLINE, f"memfs sync init on {m.name}")
            again = device_of(m.sync("init"))
            assert again == m.device_id
        for m in machines:  # one folder per local source (claude, pi), however often run
            ids = [f.get("id", "") for f in ET.parse(m.st_home / "config.xml").iter("folder")]
            assert sorted(i.split("-")[2] for i in ids if i.startswith("memfs-")) == [
                "claude",
                "pi",
            ]
        pair(a, b)
        pair(b, a)
        # a added b first: b's folders, offered since, are accepted by any memfs sync.
        wait_until(lambda: _connected(a, b) and _connected(b, a), SYNC_DEADLINE, "a <-> b")
        # Each machine's project shows the other's version, whatever the home.
        for me, other in ((a, b), (b, a)):
            wait_until(
                lambda me=me, other=other: _history_from(me, other, "notes.md"),
                SYNC_DEADLINE,
                f"{other.name}'s notes.md on {me.name}",
            )
            assert read(me.mnt("notes.md")) == f"{me.name} notes\n".encode()
            index = read(me.mnt("MEMORY.md")).decode()
            assert f"(on-{me.name}.md)" in index
            assert f"(on-{other.name}.md)" in index
            sources = me.box.memfs("sources", "--config", str(me.box.config_path)).stdout
            assert f"{other.name}-claude" in sources
        check_handoff(a, b)
        check_handoff(b, a)
        for me, other in ((a, b), (b, a)):
            wait_until(lambda me=me, other=other: _settled(me, other), SYNC_DEADLINE, "0 left")

        # A third machine joins the same way.
        c = make_machine(tmp_path / "c", "c", 22103)
        machines.append(c)
        start(c, netns)
        wait_until(lambda: _init(c), START_DEADLINE, "memfs sync init on c")
        for other in (a, b):
            pair(c, other)
            pair(other, c)
        for other in (a, b):
            wait_until(lambda other=other: _connected(c, other), SYNC_DEADLINE, "c connected")
        check_handoff(c, a)
        check_handoff(a, c)

        # a stops sharing with c: c's folders leave a's view, and nothing more arrives.
        a.sync("remove", "c")
        assert not (Path(a.box.env["XDG_DATA_HOME"]) / "memfs" / "machines" / "c").exists()
        assert "c" not in a.status()
        wait_until(
            lambda: (
                not os.path.exists(a.mnt(".history", "notes.md"))
                or not any(n.startswith("c-") for n in os.listdir(a.mnt(".history", "notes.md")))
            ),
            SYNC_DEADLINE,
            "c's versions gone from a's view",
        )
        name = check_handoff(c, b)  # b still receives from c; a does not
        assert not os.path.exists(a.mnt(name))
        # By the time b has it, a would have too, were c still shared with it.
        assert not list(Path(a.box.env["XDG_DATA_HOME"]).rglob(name))
    except BaseException:
        for m in machines:
            for log in (m.log, m.mount.log_path if m.mount else None):
                if log is not None and log.exists():
                    tail = log.read_text(errors="replace").splitlines()[-30:]
                    print(f"--- {log} (last 30 lines)", *tail, sep="\n")
        raise
    finally:
        for m in machines:
            if m.mount is not None:
                m.mount.close()


def _init(m: Machine) -> bool:
    """`memfs sync init`, once its Syncthing answers (exit 2 until then)."""
    done = m.box.memfs("sync", "init", "--config", str(m.box.config_path))
    if done.returncode != 0:
        return False
    print(f"[{m.name}] $ memfs sync init\n{done.stdout}")
    m.device_id = device_of(done.stdout)
    return True


def _connected(me: Machine, other: Machine) -> bool:
    found = me.status().get(other.name)
    return bool(found and found["connected"])


def _settled(me: Machine, other: Machine) -> bool:
    found = me.status().get(other.name)
    return bool(found and found["connected"] and found["left_files"] == 0)


def _history_from(me: Machine, other: Machine, path: str) -> bool:
    folder = me.mnt(".history", path)
    return any(n.startswith(f"{other.name}-claude@") for n in os.listdir(folder))


DAYS = itertools.count(20270101)  # each handoff dated after the one before: the latest


def check_handoff(sender: Machine, receiver: Machine) -> str:
    """A handoff written through the sender's mount reaches the receiver's PREAMBLE.md."""
    name = f"handoff-claude_{sender.name}_{next(DAYS)}.md"
    text = f"# Handoff from {sender.name}\n\nNext: {secrets.token_hex(4)}.\n".encode()
    with open(sender.mnt(name), "wb") as f:
        f.write(text)
    _, delay = wait_until(
        lambda: text in read(receiver.mnt("PREAMBLE.md")), SYNC_DEADLINE, "handoff crossed"
    )
    print(f"handoff {sender.name} -> {receiver.name}: in its PREAMBLE.md after {delay:.2f}s")
    assert read(receiver.mnt(name)) == text
    return name
