"""`global/`: user-level memory, tied to no project (§4.1).

Layer view: plain values, no I/O. `global/claude`, `global/codex` and `global/gemini` are
projects like any other to the catalog and everything above it (merge, history, writes,
kept versions, the watcher, the kernel's invalidations), under reserved names that are no
slug (slugs begin with ``-``, §4), so they never collide with a project nor list at the
root. Each is made of origins the configured sources point at:

- claude: every Claude Code account's config folder (`SourceSpec.claude_config`), for its
  ``CLAUDE.md`` and ``agent-memory/`` only (`Origin.only`); the own account's is the own
  source there too, so it heads and takes the writes, and ``.history/`` in it keeps what a
  write replaces (§7.2).
- codex: each codex source's ``memories/`` (read-only), for its memory only: its
  summary, handbook, skills, extensions and regenerated notes, not its ``.git/`` nor
  ``phase2_workspace_diff.md`` (the tool's own, issue 38).
- gemini: each gemini source's folder, for ``GEMINI.md`` and ``MEMORY.md`` (read-only).
- goose: each goose source's ``memory/`` in goose's config folder (read-only).
"""

from __future__ import annotations

from memfs.disk.config import CODEX, GEMINI, GOOSE, Config
from memfs.rules.history import HISTORY
from memfs.rules.index import AGENT_MEMORY
from memfs.view.versions import Origin

GLOBAL = "global"
CLAUDE, CODEX_KIND, GEMINI_KIND, GOOSE_KIND = "claude", "codex", "gemini", "goose"
KINDS = (CLAUDE, CODEX_KIND, GEMINI_KIND, GOOSE_KIND)
PREFIX = GLOBAL + "/"
# What each tool keeps as user memory in its folder (README: which tool reads what where).
CLAUDE_NAMES = frozenset({"CLAUDE.md", AGENT_MEMORY, HISTORY})
GEMINI_NAMES = frozenset({"GEMINI.md", "MEMORY.md"})
CODEX_NAMES = frozenset(
    {
        "memory_summary.md",  # injected into every prompt: PREAMBLE.md shows it first
        "MEMORY.md",  # the handbook its agent greps
        "skills",
        "extensions",
        "raw_memories.md",  # regenerated from its state ("temporary")
        "rollout_summaries",  # regenerated from its state
    }
)


def slug_of(kind: str) -> str:
    """The catalog's name of ``global/<kind>``: its path in the mount."""
    return PREFIX + kind


def kind_of(slug: str) -> str | None:
    """``claude`` for ``global/claude``; None for a project's slug."""
    if slug.startswith(PREFIX) and slug[len(PREFIX) :] in KINDS:
        return slug[len(PREFIX) :]
    return None


def origins(config: Config, slug: str) -> list[Origin]:
    """The source folders of ``global/<kind>``, the own account's first (as the sources)."""
    kind = kind_of(slug)
    found: list[Origin] = []
    for i, source in enumerate(config.sources):
        if kind == CLAUDE and source.claude_config is not None:
            folder = source.claude_config
            found.append(Origin(i, folder.parent, (folder.name,), CLAUDE_NAMES))
        elif kind == CODEX_KIND and source.kind == CODEX:
            found.append(Origin(i, source.root, source.tail, CODEX_NAMES))
        elif kind == GEMINI_KIND and source.kind == GEMINI:
            folder = source.gemini_dir
            found.append(Origin(i, folder.parent, (folder.name,), GEMINI_NAMES))
        elif kind == GOOSE_KIND and source.kind == GOOSE:
            found.append(Origin(i, source.root, source.tail))
    return found


def own_origin(config: Config, slug: str) -> Origin | None:
    """Where writes to ``global/<kind>`` land: the own account's config folder for claude;
    None for codex, gemini and goose (their tools rewrite them) or with no own Claude source."""
    if kind_of(slug) != CLAUDE:
        return None
    return next((o for o in origins(config, slug) if o.source == config.own_index), None)


def kinds(config: Config) -> list[str]:
    """The kinds ``global/`` lists: those with any source."""
    return [k for k in KINDS if origins(config, slug_of(k))]
