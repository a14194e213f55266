"""Other machines' memory, as Syncthing delivers it (§12): where it lands and what it is.

Layer disk: imports no other memfs module. Blocking (a few ``stat`` calls and small reads);
run by commands, by ``config.load`` before a mount serves, and by the mount's machine
watcher in a worker (adapter/machines.py).

Each machine shares every local memory source as one Syncthing folder, with a small file
at its top, `MACHINE_FILE`, saying what it is: the machine's hostname and home folder, the
source's name and kind. Another machine receives it under
``$XDG_DATA_HOME/memfs/machines/<NAME>/<source>/`` (Gemini CLI's ``tmp/`` one level down,
``<source>/tmp``, and Codex's ``memories/`` as ``<source>/memories``, so each lies where its
source kind expects it); a folder is served once its machine file has arrived, since its
slugs mean nothing without the other home.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MACHINE_FILE = ".memfs-machine.json"
# Source kinds a machine shares, and the folder below ``<source>/`` each is received in.
KINDS = {"claude": "", "pi": "", "gemini": "tmp", "codex": "memories"}
MAX_BYTES = 4096  # a machine file is a few lines; anything bigger is not one
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,23}$")  # <NAME>-<source> fits in 32


@dataclass(frozen=True)
class Published:
    """What a machine says of one folder it shares (its `MACHINE_FILE`)."""

    hostname: str
    home: str  # the machine's home folder: its slugs are mapped to ours through it
    source: str  # the source's name on that machine ("claude", "work", "pi", ...)
    kind: str  # one of KINDS


@dataclass(frozen=True)
class Received:
    """One folder another machine shares, as it lies here."""

    machine: str  # the name this machine gave it (`memfs sync add --name`)
    folder: Path  # the folder Syncthing receives into
    published: Published


def data_dir(env: Mapping[str, str]) -> Path:
    value = env.get("XDG_DATA_HOME")
    # As for every XDG folder: a relative value is invalid and ignored.
    if value and os.path.isabs(value):
        return Path(value) / "memfs"
    return Path(env.get("HOME") or "/") / ".local" / "share" / "memfs"


def machines_dir(env: Mapping[str, str]) -> Path:
    return data_dir(env) / "machines"


def received_folder(machines: Path, machine: str, source: str, kind: str) -> Path:
    """Where the folder of ``machine``'s ``source`` (of ``kind``) is received."""
    folder = machines / machine / source
    return folder / KINDS[kind] if KINDS.get(kind) else folder


def publish(folder: Path, published: Published) -> bool:
    """Write ``folder``'s machine file unless it says that already (atomically: Syncthing
    may pick it up at any moment). Returns whether it was written."""
    text = json.dumps(asdict(published), indent=1, sort_keys=True) + "\n"
    path = folder / MACHINE_FILE
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    folder.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".memfs-stage.machine.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return True


def read_published(folder: Path) -> Published | None:
    """``folder``'s machine file, or None when it has not arrived or is not one."""
    try:
        with open(folder / MACHINE_FILE, "rb") as f:
            raw = json.loads(f.read(MAX_BYTES + 1)[:MAX_BYTES])
        found = Published(
            str(raw["hostname"]), str(raw["home"]), str(raw["source"]), str(raw["kind"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if found.kind not in KINDS or not os.path.isabs(found.home):
        return None
    return found


def listed(machines: Path) -> list[str]:
    """The names of the machines whose folders arrive in ``machines``."""
    return [name for name in _dirs(machines) if NAME_RE.match(name)]


def folders_of(machine: Path) -> list[Path]:
    """The folders a machine file of ``machine``'s may arrive in (the mount watches them)."""
    found = []
    for source in _dirs(machine):
        found.append(machine / source)
        found += [
            machine / source / b for b in KINDS.values() if b and (machine / source / b).is_dir()
        ]
    return found


def received(machines: Path) -> list[Received]:
    """Every folder received from another machine whose machine file has arrived, by
    machine name then source name."""
    found: list[Received] = []
    for machine in listed(machines):
        for source in _dirs(machines / machine):
            for kind in KINDS:
                folder = received_folder(machines, machine, source, kind)
                published = read_published(folder)
                if published is not None and published.kind == kind:
                    found.append(Received(machine, folder, published))
                    break
    return found


def _dirs(folder: Path) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            return sorted(
                e.name
                for e in entries
                if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            )
    except OSError:
        return []
