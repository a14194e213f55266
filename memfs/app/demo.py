"""A ready sample of several accounts, for `memfs demo` and for tests (§8).

Its role: build the sample (two Claude Code accounts and a pi folder sharing a project, one
more project) in a folder of its own, and recognise and remove that folder when the demo's
mount ends. Layer app, but plain: imports neither pyfuse3, trio nor the mount modules, so a test can
build the sample without FUSE. Plain synchronous code, called from the command's one
thread. Writes only below the folder it is given, and removes only a folder it marked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from memfs.rules.slug import claude_slug

DAY_NS = 86_400 * 1_000_000_000
PREFIX = "memfs-demo-"
# Marks a folder as a demo's, so that `memfs umount` of its mount removes it and nothing else.
MARKER = ".memfs-demo"
MOUNT_NAME = "mnt"


def make_base() -> Path:
    """A new temporary folder for one demo: ``home/``, ``state/``, ``config.toml``, ``mnt/``."""
    base = Path(tempfile.mkdtemp(prefix=PREFIX))
    (base / MARKER).write_text("memfs demo: removed by 'memfs umount' of mnt/\n", "utf-8")
    return base


def sample_base(mountpoint: Path) -> Path | None:
    """The demo folder whose mount is ``mountpoint``, or None for any other mountpoint."""
    base = mountpoint.parent
    if mountpoint.name == MOUNT_NAME and base.name.startswith(PREFIX) and (base / MARKER).is_file():
        return base
    return None


def remove_if_sample(mountpoint: Path) -> Path | None:
    """Remove the demo folder of an unmounted demo mount; returns it, or None if not a demo."""
    base = sample_base(mountpoint)
    if base is None or os.path.ismount(mountpoint):
        return None
    shutil.rmtree(base, ignore_errors=True)
    return base


def _write(path: Path, text: str, age_days: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    mtime = time.time_ns() - int(age_days * DAY_NS)
    os.utime(path, ns=(mtime, mtime))


def build(home: Path, project_path: str = "/home/demo/src/webshop") -> dict[str, Path]:
    """Two Claude Code accounts and a pi folder sharing one project; returns the places."""
    slug = claude_slug(project_path)
    pi_slug = project_path.replace("/", "-")  # pi keeps '.' and '_': memfs canonicalises
    personal = home / ".claude" / "projects" / slug / "memory"
    work = home / ".claude-work" / "projects" / slug / "memory"
    pi = home / ".pi" / "agent" / "memory" / pi_slug
    other = home / ".claude" / "projects" / claude_slug("/home/demo/src/blog") / "memory"

    _write(
        personal / "MEMORY.md",
        "# Memory\n\n- [Architecture](architecture.md) - services and queues\n"
        "- [Testing](testing.md) - how to run the suite\n",
        3,
    )
    _write(
        personal / "architecture.md",
        "---\nname: architecture\ndescription: services, queues and the checkout flow\n"
        "type: project\n---\n\nThe shop is three services behind one gateway.\n",
        3,
    )
    _write(personal / "testing.md", "---\ndescription: how to run the suite\n---\nmake test\n", 6)
    _write(
        personal / "handoff-claude_20261101.md",
        "# Handoff 2026-11-01\n\nCheckout retries are flaky; see testing.md.\n",
        20,
    )
    _write(
        work / "MEMORY.md",
        "# Memory\n\n- [Architecture](architecture.md) - services\n"
        "- [Deploys](deploys.md) - the release train\n",
        1,
    )
    _write(
        work / "architecture.md",
        "---\ndescription: the work account's older view\n---\nTwo services.\n",
        10,
    )
    _write(work / "deploys.md", "---\ndescription: the release train\n---\nFridays, never.\n", 1)
    _write(
        work / "handoff-cyberine_20261125.md",
        "# Handoff 2026-11-25\n\nDeploy pipeline migrated; next: canary checks.\n",
        2,
    )
    _write(
        pi / "notes.md",
        "<!-- pi copy: imported from Claude Code -->\n---\ndescription: pi's notes\n---\n"
        "Use the staging database for experiments.\n",
        4,
    )
    _write(other / "MEMORY.md", "# Blog\n\n- [Style](style.md)\n", 5)
    _write(other / "style.md", "Short sentences.\n", 5)
    return {"personal": personal, "work": work, "pi": pi, "slug": Path(slug)}


def config_text(home: Path) -> str:
    return (
        f'[[source]]\nname = "personal"\npath = "{home}/.claude/projects/{{slug}}/memory"\n'
        "own = true\n\n"
        f'[[source]]\nname = "work"\npath = "{home}/.claude-work/projects/{{slug}}/memory"\n\n'
        f'[[source]]\nname = "pi"\npath = "{home}/.pi/agent/memory/{{slug}}"\n'
    )
