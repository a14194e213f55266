"""Kilo Code's, goose's and Codex's memory folders, made the way each tool makes them
(/work/shared/AGENTS-NOTES.md; none is installed here).

- Kilo Code (Kilo Memory, 7.7.9): ``$XDG_DATA_HOME/kilo/memory/<display>-<sha1>[:12]/``,
  0700, its ``manifest.json`` naming the canonical root; every file written as
  ``.<name>.<pid>.<ms>.<rand>.tmp`` (0600) then renamed; ``state.json``, ``index.kmem``,
  ``.lock/owner``, ``.gitignore`` and a ``*.bad-<ms>`` beside the memory.
- goose: ``<root>/.goose/memory/<category>.txt`` per project and
  ``$XDG_CONFIG_HOME/goose/memory/`` for the user; ``remember`` appends an entry (an
  optional ``# tags`` line, then text, a blank line between entries).
- Codex (0.169): ``$CODEX_HOME/memories/`` with its summary, handbook, skills and
  extensions, the files it regenerates, and its own ``.git/`` and workspace diff.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
import unicodedata
from pathlib import Path


def kilo_name(canonical: str) -> str:
    """The folder Kilo gives a root (its display name rule, then the hash)."""
    base = unicodedata.normalize("NFKC", os.path.basename(canonical.rstrip("/")))
    display = re.sub(r"[^\w.-]+", "_", base).strip("_")[:96] or "project"
    return f"{display}-{hashlib.sha1(canonical.encode()).hexdigest()[:12]}"


class KiloCode:
    """One user's Kilo Memory as Kilo Code keeps it."""

    def __init__(self, data_home: Path) -> None:
        self.dir = data_home / "kilo" / "memory"

    def folder(self, root: Path) -> Path:
        """The memory folder of project ``root``, made with its manifest and state."""
        canonical = os.path.realpath(root)
        folder = self.dir / kilo_name(canonical)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        manifest = {"kind": "kilo-memory", "version": 1, "canonical": canonical}
        self.save(folder, "manifest.json", json.dumps(manifest))
        self.save(folder, "state.json", json.dumps({"sessions": 1}))
        self.save(folder, ".gitignore", "*\n")
        self.save(folder, "index.kmem", "KMEM\x00\x01")
        (folder / ".lock").mkdir(mode=0o700, exist_ok=True)
        (folder / ".lock" / "owner").write_text(str(os.getpid()))
        return folder

    def save(self, folder: Path, name: str, body: str) -> Path:
        """Kilo's write: a 0600 temp file beside the target, then a rename over it."""
        target = folder / name
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        ms = int(time.time() * 1000)
        temp = target.parent / f".{target.name}.{os.getpid()}.{ms}.{secrets.token_hex(3)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, body.encode())
        finally:
            os.close(fd)
        os.replace(temp, target)
        return target


def goose_remember(memory: Path, category: str, text: str, tags: str = "") -> Path:
    """goose's ``remember``: append one entry to ``<category>.txt``."""
    memory.mkdir(parents=True, exist_ok=True)
    path = memory / f"{category}.txt"
    entry = (f"# {tags}\n" if tags else "") + text + "\n"
    with path.open("a", encoding="utf-8") as f:
        if path.stat().st_size:
            f.write("\n")
        f.write(entry)
    return path


def codex_memories(codex_home: Path) -> Path:
    """``$CODEX_HOME/memories`` after a consolidation, every kind of file in it."""
    memories = codex_home / "memories"
    files = {
        "memory_summary.md": "v1\nCODEX SUMMARY: the user prefers small commits\n",
        "MEMORY.md": "# Handbook\n- run the linters first\n",
        "skills/release/SKILL.md": "---\nname: release\n---\nCut a release.\n",
        "extensions/ad_hoc/instructions.md": "Ad hoc notes.\n",
        "extensions/ad_hoc/notes/n1.md": "AD HOC NOTE\n",
        "rollout_summaries/2026-12-01-shop.md": "ROLLOUT SUMMARY\n",
        "raw_memories.md": "RAW MEMORIES\n",
        "phase2_workspace_diff.md": "WORKSPACE DIFF\n",
        ".git/HEAD": "ref: refs/heads/main\n",
    }
    for name, body in files.items():
        path = memories / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return memories
