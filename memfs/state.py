"""memfs's own state under ``$XDG_STATE_HOME/memfs``: whiteouts per project.

Role: the one reader and writer of the state folder (SPEC 3), never a source. Written only
through staging.replace, so a crash never leaves a half-written state file.
Pure core: must not import pyfuse3, trio, memfs.fs or memfs.project. Threading: every call
does disk I/O (a save fsyncs twice), so while serving it runs in a worker thread: saves as
the `SaveWhiteouts` step of a plan (staging.apply), loads with the project's first load.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memfs import staging

log = logging.getLogger(__name__)

Whiteout = tuple[str, str, int]  # (path in the project, source name, mtime_ns; -1: a folder)


def _name(slug: str) -> str:
    # Slugs are single path components already (only [A-Za-z0-9-]); the suffix keeps the
    # folder free for other state kinds.
    return f"{slug}.json"


def load_whiteouts(state_dir: Path, slug: str) -> set[Whiteout]:
    path = state_dir / "whiteouts" / _name(slug)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return set()
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable whiteouts %s: %s", path, exc)
        return set()
    found: set[Whiteout] = set()
    for item in raw if isinstance(raw, list) else []:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and isinstance(item[2], int)
        ):
            found.add((item[0], item[1], item[2]))
    return found


def save_whiteouts(state_dir: Path, slug: str, records: Iterable[Whiteout]) -> None:
    folder = state_dir / "whiteouts"
    folder.mkdir(parents=True, exist_ok=True)
    data = json.dumps(sorted([list(r) for r in records]), indent=0).encode()
    staging.replace(staging.Place(folder, ()), _name(slug), data)


@dataclass
class SaveWhiteouts:
    """A plan's step (staging.Step): the project's whole whiteout set, saved atomically."""

    state_dir: Path
    slug: str
    records: set[Whiteout]

    def run(self) -> list[str]:
        save_whiteouts(self.state_dir, self.slug, self.records)
        return []
