"""What the agents' own files on disk say, read as plain values (issue 38).

Layer rules: pure, no I/O; disk/kilo.py and disk/goose.py read the files and ask here.

- Kilo Code names a project's memory folder ``<display>-<sha1(canonical)[:12]>`` and writes
  ``manifest.json`` (``{"kind": "kilo-memory", "canonical": "/abs/root"}``) in it: the
  manifest names the root, and the name must be the one Kilo would give that root.
- goose keeps ``<category>.txt`` files of entries: an optional ``# tag tag`` line, then
  text, entries separated by a blank line.
- Codex's memories folder: ``memory_summary.md`` is what Codex injects into every prompt,
  so a preamble shows it first.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass

KILO_MANIFEST = "manifest.json"
KILO_KIND = "kilo-memory"
KILO_DISPLAY_MAX = 96
_KILO_OUTSIDE = re.compile(r"[^\w.-]+")  # runs of what is not a letter, digit, _ . -

GOOSE_FOLDER = (".goose", "memory")  # below a project's root
CODEX_SUMMARY = "memory_summary.md"
# Codex's files regenerated from its SQLite state, shown but not drawn into a preamble: a
# handful of recent rollouts would crowd out the handbook.
CODEX_GENERATED = ("raw_memories.md", "rollout_summaries/")


def kilo_folder(canonical: str) -> str:
    """The folder name Kilo Code gives the project whose canonical root is ``canonical``."""
    base = canonical.rstrip("/").rsplit("/", 1)[-1]
    display = _KILO_OUTSIDE.sub("_", unicodedata.normalize("NFKC", base)).strip("_")
    display = display[:KILO_DISPLAY_MAX] or "project"
    digest = hashlib.sha1(canonical.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{display}-{digest[:12]}"


def kilo_manifest(data: bytes) -> str:
    """The canonical root a Kilo manifest names.

    Raises:
        ValueError: not a Kilo Memory manifest naming an absolute path.
    """
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KILO_KIND:
        raise ValueError(f"not a {KILO_KIND} manifest")
    canonical = manifest.get("canonical")
    if not isinstance(canonical, str) or not canonical.startswith("/") or "\0" in canonical:
        raise ValueError(f"names no absolute path: {canonical!r}")
    return canonical


@dataclass(frozen=True)
class GooseEntry:
    tags: tuple[str, ...]
    text: str


def goose_entries(body: str) -> list[GooseEntry]:
    """The entries of one goose ``<category>.txt``, in file order."""
    found = []
    for block in re.split(r"\n[ \t]*\n", body.strip("\n")):
        lines = block.strip("\n").split("\n")
        tags: tuple[str, ...] = ()
        if lines and lines[0].startswith("#"):
            tags = tuple(lines[0][1:].split())
            lines = lines[1:]
        text = "\n".join(lines).strip()
        if text or tags:
            found.append(GooseEntry(tags, text))
    return found


def codex_generated(path: str) -> bool:
    """Whether ``path`` in Codex's memories folder is regenerated from its state."""
    return path == CODEX_GENERATED[0] or path.startswith(CODEX_GENERATED[1])
