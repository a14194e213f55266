"""Syncthing instances in a network namespace of their own, for the tests that run real
Syncthing (test_syncthing.py: the manual recipe; test_sync_machines.py: `memfs sync`).

The namespace has only loopback, so nothing the instances do leaves the machine, and the
options below keep them from announcing or phoning home. Every process started in it is
stopped, and the namespace deleted, when the fixture ends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mounting import ENV_DROPPED, Mount, Sandbox, unavailable

STOP_DEADLINE = 10.0
# Options set before the first start: nothing may leave loopback, nothing may phone home.
OPTIONS = {
    "globalAnnounceEnabled": "false",
    "localAnnounceEnabled": "false",
    "relaysEnabled": "false",
    "natEnabled": "false",
    "stunKeepaliveStartS": "0",  # 0 turns STUN off
    "announceLANAddresses": "false",
    "urAccepted": "-1",  # usage reporting declined
    "crashReportingEnabled": "false",
    "autoUpgradeIntervalH": "0",
    "startBrowser": "false",
}


@dataclass
class Machine:
    """One test machine: its sandbox (HOME, XDG_*), its Syncthing and its mount. Where its
    Syncthing keeps its config (`st_home`) is each test's."""

    name: str
    box: Sandbox
    port: int
    device_id: str = ""
    proc: subprocess.Popen[bytes] | None = None
    mount: Mount | None = None

    @property
    def st_home(self) -> Path:
        return self.box.base / "syncthing"

    @property
    def sock(self) -> Path:
        return self.box.base / "st.sock"

    @property
    def log(self) -> Path:
        return self.box.base / "syncthing.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in self.box.env.items() if k not in ENV_DROPPED}
        env.update(STNODEFAULTFOLDER="1", STNOUPGRADE="1", STNORESTART="1", STMONITORED="1")
        return env


@dataclass
class Namespace:
    name: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], capture_output=True, timeout=10, check=True)

    def start(self, machine: Machine) -> None:
        cmd = ["ip", "netns", "exec", self.name, "syncthing", "serve"]
        cmd += [f"--home={machine.st_home}", "--no-browser", "--no-restart", "--no-upgrade"]
        cmd += ["--logflags=0"]
        with open(machine.log, "ab") as log:
            # `ip netns exec` execs syncthing: the pid is syncthing's, and its group ours.
            machine.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=machine.env(),
                start_new_session=True,
            )
        self.procs.append(machine.proc)

    def close(self) -> list[str]:
        """Stop every process this test started in the namespace, then delete it."""
        forced = []
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                forced.append(f"syncthing {proc.pid} ignored SIGTERM: killed")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(STOP_DEADLINE)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.ip("netns", "del", self.name)
        return forced


def require_tools() -> None:
    """Skip without syncthing or ip, saying so; with CI=true, fail instead."""
    missing = [tool for tool in ("syncthing", "ip") if shutil.which(tool) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (.ci/setup-tests installs them)")


@contextlib.contextmanager
def namespace(prefix: str) -> Iterator[Namespace]:
    """A network namespace with only loopback, up; deleted with its processes afterwards."""
    require_tools()
    ns = Namespace(f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        ns.ip("netns", "add", ns.name)
    except subprocess.CalledProcessError as exc:
        unavailable(f"cannot create a network namespace: {exc.stderr.decode().strip()}")
    try:
        ns.ip("netns", "exec", ns.name, "ip", "link", "set", "lo", "up")
        yield ns
    finally:
        forced = ns.close()
        if forced:
            print("syncthing teardown had to force:", *forced, sep="\n  ")


def set_text(parent: ET.Element, tag: str, text: str) -> None:
    """``parent``'s child ``tag`` (made if missing) holds ``text``: a config.xml setting."""
    child = parent.find(tag)
    if child is None:
        child = ET.SubElement(parent, tag)
    child.text = text


def read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()
