"""A ready sample of several accounts, for `memfs demo` and for tests.

Pure core: imports neither pyfuse3 nor trio. Writes only below the folder it is given.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from memfs.slug import claude_slug

DAY_NS = 86_400 * 1_000_000_000


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
