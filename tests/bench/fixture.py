"""Deterministic benchmark fixtures: Claude Code accounts, a pi folder, a memfs config.

Everything is drawn from one seeded `random.Random`, and every mtime is an offset from a
fixed instant, so two runs with the same seed write byte-identical trees with identical
mtimes. Nothing here imports memfs's mount code; it only needs the slug rule.

Layout below ``base`` (HOME and the XDG folders are moved there too)::

    home/.claude/projects/<slug>/memory/*.md        account 0 (own)
    home/.claude-acct1/projects/<slug>/memory/*.md  account 1, ...
    home/.pi/agent/memory/<pi slug>/*.md            pi, for a quarter of the projects
    config.toml                                     lists every source explicitly
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from memfs.rules.slug import claude_slug
from tests.mounting import sandbox_env  # the tests' sandbox: HOME and XDG_* under base

# 2026-01-01T00:00:00Z: every fixture file is dated before it, so none is "in the future"
# (the preamble leaves those out) on any machine whose clock is sane.
EPOCH_NS = 1_767_225_600 * 1_000_000_000
DAY_NS = 86_400 * 1_000_000_000
MIN_BYTES, MAX_BYTES = 200, 6 * 1024
SHARED_FRACTION = 0.3  # of each account's topic names, shared with the other accounts
PI_FILES = 16

WORDS = (
    "cache",
    "invalidation",
    "merge",
    "account",
    "project",
    "memory",
    "handoff",
    "deploy",
    "pipeline",
    "canary",
    "queue",
    "service",
    "gateway",
    "checkout",
    "retry",
    "flaky",
    "test",
    "suite",
    "release",
    "train",
    "database",
    "migration",
    "schema",
    "index",
    "review",
    "branch",
    "worktree",
    "agent",
    "session",
    "context",
    "budget",
    "preamble",
    "history",
    "source",
    "mount",
    "kernel",
    "inode",
    "lookup",
    "readdir",
    "rename",
    "fsync",
    "commit",
    "staging",
    "whiteout",
    "union",
    "frontmatter",
    "description",
    "latency",
    "throughput",
    "benchmark",
)


@dataclass
class Fixture:
    """One generated tree with its sandboxed environment and memfs config."""

    base: Path
    env: dict[str, str]
    accounts: list[Path]  # Claude Code config folders; accounts[0] is own
    pi_root: Path | None
    config: Path
    slugs: list[str] = field(default_factory=list)
    source_files: int = 0
    # Every distinct (slug, name) of the Claude accounts, with the first account holding it
    # (the one memfs shows as head for a shared name, and mergerfs's first-found branch).
    merged: list[tuple[str, str, int]] = field(default_factory=list)
    # Files written only by this benchmark (unique per account): (slug, name, account).
    unique: list[tuple[str, str, int]] = field(default_factory=list)
    plain: list[tuple[str, str]] = field(default_factory=list)  # (slug, name) of 8 KiB files

    @property
    def home(self) -> Path:
        return Path(self.env["HOME"])

    def projects_dir(self, account: int) -> Path:
        return self.accounts[account] / "projects"

    def source_path(self, account: int, slug: str, name: str) -> Path:
        return self.projects_dir(account) / slug / "memory" / name


def _body(rng: random.Random, size: int, title: str) -> bytes:
    """Markdown of exactly ``size`` bytes with frontmatter naming a description."""
    desc = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
    head = f"---\nname: {title}\ndescription: {desc}\ntype: project\n---\n\n# {title}\n\n"
    lines = [head]
    length = len(head)
    while length < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + "\n"
        lines.append(line)
        length += len(line)
    data = "".join(lines).encode()[: size - 1] + b"\n"
    return data


def _size(rng: random.Random) -> int:
    # Log-uniform between 200 B and 6 KiB: many small notes, a few long ones.
    lo, hi = MIN_BYTES, MAX_BYTES
    return int(lo * (hi / lo) ** rng.random())


def _write(path: Path, data: bytes, mtime_ns: int) -> None:
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _mtime(rng: random.Random, max_days: float = 200.0) -> int:
    return EPOCH_NS - int(rng.random() * max_days * DAY_NS) - DAY_NS


def _date_of(mtime_ns: int) -> str:
    import time

    return time.strftime("%Y%m%d", time.gmtime(mtime_ns // 1_000_000_000))


def _config_text(accounts: list[Path], pi_root: Path | None) -> str:
    lines = []
    for i, acct in enumerate(accounts):
        lines += ["[[source]]", f'name = "acct{i}"', f'path = "{acct}/projects/{{slug}}/memory"']
        if i == 0:
            lines.append("own = true")
        lines.append("")
    if pi_root is not None:
        lines += ["[[source]]", 'name = "pi"', f'path = "{pi_root}/{{slug}}"', ""]
    return "\n".join(lines)


def _project_path(i: int) -> str:
    # '_' and '.' make the pi slug differ from Claude Code's: memfs must canonicalise it.
    return f"/home/bench/src/proj_{i:05d}.v2"


def _new(base: Path, n_accounts: int, with_pi: bool) -> Fixture:
    base.mkdir(parents=True, exist_ok=True)
    env = sandbox_env(base)
    home = Path(env["HOME"])
    accounts = [home / (".claude" if i == 0 else f".claude-acct{i}") for i in range(n_accounts)]
    for acct in accounts:
        (acct / "projects").mkdir(parents=True, exist_ok=True)
    pi_root = home / ".pi" / "agent" / "memory" if with_pi else None
    if pi_root is not None:
        pi_root.mkdir(parents=True, exist_ok=True)
    config = base / "config.toml"
    config.write_text(_config_text(accounts, pi_root), encoding="utf-8")
    return Fixture(base, env, accounts, pi_root, config)


def _fill_project(
    fx: Fixture,
    rng: random.Random,
    i: int,
    topics: list[int],
    pi_files: int,
    seen: dict[str, int],
) -> None:
    """One project: per account ``topics[a]`` topic files, a MEMORY.md and a dated handoff."""
    path = _project_path(i)
    slug = claude_slug(path)
    fx.slugs.append(slug)
    for a, n_topics in enumerate(topics):
        if n_topics < 0:
            continue  # this account does not have the project
        folder = fx.projects_dir(a) / slug / "memory"
        folder.mkdir(parents=True, exist_ok=True)
        n_shared = round(n_topics * SHARED_FRACTION)
        names = [f"topic-{k:04d}.md" for k in range(n_shared)]
        names += [f"a{a}-note-{k:04d}.md" for k in range(n_topics - n_shared)]
        index = ["# Memory", ""]
        for name in names:
            title = name[:-3]
            data = _body(rng, _size(rng), title)
            _write(folder / name, data, _mtime(rng))
            index.append(f"- [{title}]({name}) - {title.replace('-', ' ')}")
        memory = ("\n".join(index) + "\n").encode()
        _write(folder / "MEMORY.md", memory, _mtime(rng, 30))
        stamp = _mtime(rng, 60)
        handoff = f"handoff-acct{a}_{_date_of(stamp)}.md"
        _write(folder / handoff, _body(rng, _size(rng), "handoff"), stamp)
        written = [*names, "MEMORY.md", handoff]
        fx.source_files += len(written)
        for name in written:
            seen.setdefault(name, a)
            if not name.startswith("topic-") and name != "MEMORY.md":
                fx.unique.append((slug, name, a))
    for name in sorted(seen):
        fx.merged.append((slug, name, seen[name]))
    if pi_files and fx.pi_root is not None:
        folder = fx.pi_root / path.replace("/", "-")  # pi's slug keeps '_' and '.'
        folder.mkdir(parents=True, exist_ok=True)
        n_shared = round(pi_files * SHARED_FRACTION)
        names = [f"topic-{k:04d}.md" for k in range(n_shared)]
        names += [f"pi-note-{k:04d}.md" for k in range(pi_files - n_shared)]
        for name in names:
            _write(folder / name, _body(rng, _size(rng), name[:-3]), _mtime(rng))
        fx.source_files += len(names)


def build_accounts(
    base: Path,
    *,
    seed: int,
    accounts: int,
    projects: int,
    files: int,
    plain_projects: int = 0,
    plain_bytes: int = 8192,
) -> Fixture:
    """``accounts`` x ``projects`` x (``files`` topics + MEMORY.md + a handoff), pi for 1/4.

    The first ``plain_projects`` projects also get ``bench-plain.md`` of ``plain_bytes``
    in the own account: a plain file the size of a full PREAMBLE.md, read for comparison.
    """
    rng = random.Random(seed)
    fx = _new(base, accounts, with_pi=True)
    for i in range(projects):
        seen: dict[str, int] = {}
        pi = PI_FILES if i % 4 == 0 else 0
        _fill_project(fx, rng, i, [files] * accounts, pi, seen)
        if i < plain_projects:
            slug = fx.slugs[-1]
            data = _body(rng, plain_bytes, "bench-plain")
            _write(fx.source_path(0, slug, "bench-plain.md"), data, EPOCH_NS - 300 * DAY_NS)
            fx.plain.append((slug, "bench-plain.md"))
            fx.source_files += 1
    return fx


def build_one_project(base: Path, *, seed: int, accounts: int, total_files: int) -> Fixture:
    """One project of about ``total_files`` files spread over the accounts (pi: none)."""
    rng = random.Random(seed)
    fx = _new(base, accounts, with_pi=False)
    per = [total_files // accounts + (a < total_files % accounts) for a in range(accounts)]
    topics = [max(1, n - 2) for n in per]  # each account also has MEMORY.md and a handoff
    _fill_project(fx, rng, 0, topics, 0, {})
    return fx


def build_many_projects(base: Path, *, seed: int, accounts: int, projects: int) -> Fixture:
    """``projects`` small projects, each in one account (every tenth in two)."""
    rng = random.Random(seed)
    fx = _new(base, accounts, with_pi=False)
    for i in range(projects):
        topics = [-1] * accounts
        topics[i % accounts] = 1
        if i % 10 == 0:
            topics[(i + 1) % accounts] = 1
        _fill_project(fx, rng, i, topics, 0, {})
    return fx


# --- the responsiveness phase ------------------------------------------------------------

MIB = 1 << 20
READER_PROJECT = "/home/bench/src/reader"
WORK_PROJECT = "/home/bench/src/work"
UNLINKED = 30  # read-only files unlinked per round (whiteouts)


@dataclass
class Responsive:
    """One mount's worth of targets for the responsiveness phase, ``rounds`` of each."""

    fixture: Fixture
    reader_slug: str  # a small project the first client reads from, loaded before
    work_slug: str  # where the second client appends, edits and unlinks
    big_slugs: list[str]  # one never-listed project of ``big_files`` files per round
    appends: int  # 1 MiB read-only heads per round, each appended to once (a copy-up each)

    def read_only_head(self, r: int, k: int) -> str:
        return f"big-ro-{r}-{k}.md"

    def unlinked(self, r: int, i: int) -> str:
        return f"gone-{r}-{i:02d}.md"


def build_responsive(
    base: Path, *, seed: int, rounds: int, big_files: int, appends: int
) -> Responsive:
    """Two accounts (the first own): a reader's project, a work project holding 1 MiB
    read-only heads, a 1 MiB own file and files to unlink, and ``rounds`` projects of
    ``big_files`` files each, never listed before the phase lists them. The size cap is
    2 MiB, so a 1 MiB head stays served after an append."""
    rng = random.Random(seed)
    fx = _new(base, 2, with_pi=False)
    with open(fx.config, "a", encoding="utf-8") as f:
        f.write(f"\n[limits]\nmax_file_bytes = {2 * MIB}\n")
    reader = claude_slug(READER_PROJECT)
    work = claude_slug(WORK_PROJECT)
    folder = fx.source_path(0, reader, "")
    folder.mkdir(parents=True)
    for k in range(10):
        _write(folder / f"note-{k}.md", _body(rng, 4096, f"note-{k}"), _mtime(rng))
    own, ro = fx.source_path(0, work, ""), fx.source_path(1, work, "")
    own.mkdir(parents=True)
    ro.mkdir(parents=True)
    big = (b"x" * 127 + b"\n") * (MIB // 128)
    _write(own / "big-own.md", big, _mtime(rng))
    out = Responsive(fx, reader, work, [], appends)
    for r in range(rounds):
        for k in range(appends):
            _write(ro / out.read_only_head(r, k), big, _mtime(rng))
        for i in range(UNLINKED):
            _write(ro / out.unlinked(r, i), _body(rng, 300, "gone"), _mtime(rng))
        slug = claude_slug(f"/home/bench/src/big-{r}")
        out.big_slugs.append(slug)
        for a in range(2):
            folder = fx.source_path(a, slug, "")
            folder.mkdir(parents=True)
            for i in range(a, big_files, 2):
                _write(folder / f"file-{i:05d}.md", b"a small note\n", _mtime(rng))
    fx.source_files = sum(1 for _ in base.rglob("*.md"))
    return out
