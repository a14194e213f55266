"""Gemini CLI's per-project folders, made the way Gemini CLI 0.61.0 makes them.

Its project registry, step for step as measured: a project root (Gemini's working folder,
resolved) gets a short id from its basename (lower-cased, every character outside [a-z0-9]
a '-', runs of '-' folded, '-' trimmed at both ends, 'project' when nothing is left), and
``-1``, ``-2``, ... on a collision. The id is claimed by making ``tmp/<id>/`` and creating
its ownership marker ``.project_root`` (the root's path, no newline) with O_EXCL; a marker
naming another root is a collision. Then ``projects.json`` (``{"projects": {root: id}}``)
is rewritten under a ``projects.json.lock`` folder through ``projects.json.<uuid>.tmp`` and
a rename. Memory is ``tmp/<id>/memory/MEMORY.md`` and topic files, written in place.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path


def gemini_id(root: str | Path) -> str:
    """The id Gemini gives a root before any collision."""
    base = os.path.basename(str(root).rstrip("/")) or "project"
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", base.lower())).strip("-")
    return slug or "project"


class GeminiCli:
    """One user's ``~/.gemini`` as Gemini CLI keeps it."""

    def __init__(self, home: Path) -> None:
        self.dir = home / ".gemini"
        self.tmp = self.dir / "tmp"
        self.registry_path = self.dir / "projects.json"

    def registry(self) -> dict[str, str]:
        try:
            data: dict[str, str] = json.loads(self.registry_path.read_text())["projects"]
        except FileNotFoundError:
            return {}
        return data

    def register(self, root: Path, *, leave_temp: bool = False) -> str:
        """The id of ``root``, claimed as Gemini claims it on its first session there."""
        normalized = os.path.realpath(root)
        projects = self.registry()
        known = projects.get(normalized)
        if known is not None and self.owner(known) in (None, normalized):
            self._claim(known, normalized)  # heals a missing marker
            return known
        for candidate in sorted(os.listdir(self.tmp)) if self.tmp.is_dir() else []:
            if self.owner(candidate) == normalized:
                projects[normalized] = candidate
                self._save(projects, leave_temp)
                return candidate
        base, taken, n = gemini_id(normalized), set(projects.values()), 0
        while True:
            candidate = base if n == 0 else f"{base}-{n}"
            n += 1
            if candidate not in taken and self._claim(candidate, normalized):
                projects[normalized] = candidate
                self._save(projects, leave_temp)
                return candidate

    def owner(self, folder: str) -> str | None:
        try:
            return (self.tmp / folder / ".project_root").read_text().strip()
        except FileNotFoundError:
            return None

    def _claim(self, folder: str, root: str) -> bool:
        (self.tmp / folder).mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.tmp / folder / ".project_root", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return self.owner(folder) == root
        try:
            os.write(fd, root.encode())
        finally:
            os.close(fd)
        return True

    def _save(self, projects: dict[str, str], leave_temp: bool) -> None:
        lock = self.dir / "projects.json.lock"
        self.dir.mkdir(parents=True, exist_ok=True)
        lock.mkdir()
        try:
            temp = self.dir / f"projects.json.{uuid.uuid4()}.tmp"
            temp.write_text(json.dumps({"projects": projects}, indent=2))
            if leave_temp:  # a crash between write and rename leaves one behind
                (self.dir / f"projects.json.{uuid.uuid4()}.tmp").write_text("{")
            os.rename(temp, self.registry_path)
        finally:
            lock.rmdir()

    def memory(self, root: Path) -> Path:
        """``tmp/<id>/memory`` of ``root``, registered and made."""
        folder = self.tmp / self.register(root) / "memory"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
