"""Tier 3: Gemini CLI's per-project memory through a real mount (§1, §3, §5.1, §5.4, §6, §7).

With no source listed, memfs discovers ``~/.gemini`` as a read-only source: each
``tmp/<id>/memory/`` joins the project its ``.project_root`` names, under Claude Code's
slug of that root. The Gemini folders are made as Gemini CLI makes them (gemini_layout.py),
in the sandbox's home.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gemini_layout import GeminiCli
from helpers import digest
from mounting import MOUNT_MARKS, Mounts, Sandbox, errno_of, set_age, slug_of, wait_until

from memfs.view.project import history_stamp

pytestmark = MOUNT_MARKS

SOON = 1.0  # §5.4: a change in a source shows within a second


def discovering(box: Sandbox) -> None:
    """A config file with no [[source]]: the sources are discovered in the sandbox's home
    (~/.claude own, ~/.claude-work, ~/.pi and, once it exists, ~/.gemini)."""
    box.config_path.write_text("[preamble]\nbudget = 8192\n", encoding="utf-8")


def checkout(box: Sandbox, *parts: str) -> Path:
    """A project root in the sandbox: ``/home/u/src/shop`` becomes ``<home>/u/src/shop``."""
    root = box.home.joinpath(*parts)
    root.mkdir(parents=True, exist_ok=True)
    return Path(os.path.realpath(root))


def put(folder: Path, name: str, body: str, age_days: float) -> Path:
    path = folder / name
    path.write_text(body, encoding="utf-8")
    set_age(path, age_days)
    return path


def shop_with_claude_notes(sandbox: Sandbox) -> tuple[Path, str]:
    """A checkout at ~/u/src/shop whose Claude Code project holds notes.md: its root, slug."""
    root = checkout(sandbox, "u", "src", "shop")
    slug = slug_of(root)
    claude = sandbox.home / ".claude" / "projects" / slug / "memory"
    claude.mkdir(parents=True)
    put(claude, "notes.md", "CLAUDE NOTES\n", 1)
    return root, slug


def test_both_tools_memory_is_one_project(sandbox: Sandbox, mounts: Mounts) -> None:
    discovering(sandbox)
    root = checkout(sandbox, "u", "src", "shop")
    slug = slug_of(root)
    claude = sandbox.home / ".claude" / "projects" / slug / "memory"
    claude.mkdir(parents=True)
    put(claude, "MEMORY.md", "- [Architecture](architecture.md)\n- [Shared](shared.md)\n", 5)
    put(claude, "architecture.md", "CLAUDE ARCHITECTURE\n", 4)
    put(claude, "shared.md", "CLAUDE SHARED\n", 3)
    memory = GeminiCli(sandbox.home).memory(root)
    assert memory == sandbox.home / ".gemini" / "tmp" / "shop" / "memory"
    put(memory, "MEMORY.md", "- [Deploys](deploys.md)\n- [Shared](shared.md)\n", 2)
    put(memory, "deploys.md", "GEMINI DEPLOYS\n", 1.5)
    shared = put(memory, "shared.md", "GEMINI SHARED, NEWER\n", 1)
    listed = sandbox.memfs("sources", "--config", sandbox.config_path)
    assert f"shop -> {root} -> {slug} (from .project_root)" in listed.stdout, listed
    gemini_before = digest(sandbox.home / ".gemini")
    mounts()
    mnt = sandbox.mnt(slug)
    assert sandbox.out("ls", sandbox.mountpoint).split() == [slug.encode(), b"global", b"here"]
    # Both tools' topics, in the project Claude Code's slug names.
    names = sandbox.out("ls", "-A", mnt).decode().split()
    assert names == [
        ".history",
        "MEMORY.md",
        "PREAMBLE.md",
        "architecture.md",
        "deploys.md",
        "shared.md",
    ]
    assert sandbox.out("cat", mnt / "deploys.md") == b"GEMINI DEPLOYS\n"
    # MEMORY.md: the union of both indexes, the own one first.
    assert sandbox.out("cat", mnt / "MEMORY.md") == (
        b"- [Architecture](architecture.md)\n- [Shared](shared.md)\n- [Deploys](deploys.md)\n"
    )
    # The own version is the head; Gemini's, newer, is history under its source's name.
    assert sandbox.out("cat", mnt / "shared.md") == b"CLAUDE SHARED\n"
    kept = mnt / ".history" / "shared.md" / f"gemini@{history_stamp(shared.stat().st_mtime_ns)}.md"
    assert sandbox.out("cat", kept) == b"GEMINI SHARED, NEWER\n"
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    assert b"deploys.md" in preamble
    assert b"own copy older than .history/shared.md/gemini@" in preamble
    # From the project's folder, `here` is that project.
    assert sandbox.out("cat", sandbox.mnt("here", "deploys.md"), cwd=root) == b"GEMINI DEPLOYS\n"
    # Read-only: an edit of Gemini's topic through the mount lands in the own source.
    sandbox.run("sh", "-c", f"echo EDITED >> {mnt / 'deploys.md'}")
    assert (claude / "deploys.md").read_bytes() == b"GEMINI DEPLOYS\nEDITED\n"
    assert digest(sandbox.home / ".gemini") == gemini_before


def test_gemini_projects_show_without_a_remount(sandbox: Sandbox, mounts: Mounts) -> None:
    discovering(sandbox)
    (sandbox.home / ".gemini").mkdir()  # Gemini CLI installed, never run in a project
    root, slug = shop_with_claude_notes(sandbox)
    mounts()
    mnt = sandbox.mnt(slug)
    assert sandbox.out("ls", mnt).split() == [b"PREAMBLE.md", b"notes.md"]  # loaded, watched
    cli = GeminiCli(sandbox.home)
    # Gemini's first session here: tmp/, tmp/shop/ and its marker, then memory.
    put(cli.memory(root), "gemini-topic.md", "FROM GEMINI\n", 0)
    wait_until(lambda: (mnt / "gemini-topic.md").exists(), SOON, "Gemini's topic")
    assert sandbox.out("cat", mnt / "gemini-topic.md") == b"FROM GEMINI\n"
    # A project only Gemini knows, in a git repository's subfolder: the repository's.
    repo = checkout(sandbox, "u", "src", "tool")
    (repo / ".git").mkdir()
    put(cli.memory(checkout(sandbox, "u", "src", "tool", "cli")), "t.md", "TOOL\n", 0)
    tool = sandbox.mnt(slug_of(repo))
    wait_until(lambda: (tool / "t.md").exists(), SOON, "a project only Gemini has")
    assert slug_of(repo).encode() in sandbox.out("ls", sandbox.mountpoint).split()
    # A folder whose marker is written later maps once it is; a second folder of one name
    # (Gemini's -1) is another project.
    late = cli.tmp / "late" / "memory"
    late.mkdir(parents=True)
    put(late, "l.md", "LATE\n", 0)
    other = checkout(sandbox, "u", "other", "shop")
    (cli.tmp / "late" / ".project_root").write_text(str(other))
    wait_until(lambda: (sandbox.mnt(slug_of(other)) / "l.md").exists(), SOON, "a late marker")
    assert cli.register(other) == "late"  # Gemini reads the marker back as its own
    second = checkout(sandbox, "u", "more", "shop")
    assert cli.register(second) == "shop-1"
    put(cli.memory(second), "s.md", "SECOND SHOP\n", 0)
    wait_until(lambda: (sandbox.mnt(slug_of(second)) / "s.md").exists(), SOON, "shop-1")
    assert sandbox.out("cat", mnt / "gemini-topic.md") == b"FROM GEMINI\n"
    assert not (mnt / "s.md").exists()


def test_gemini_installed_after_the_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    """Discovery with no ~/.gemini at the mount: Gemini CLI's first session in a project
    after it (the folder, tmp/<id>/ and its marker, then memory/) joins that project."""
    discovering(sandbox)
    root, slug = shop_with_claude_notes(sandbox)
    mounts()
    mnt = sandbox.mnt(slug)
    assert sandbox.out("ls", mnt).split() == [b"PREAMBLE.md", b"notes.md"]
    put(GeminiCli(sandbox.home).memory(root), "gemini-topic.md", "FROM GEMINI\n", 0)
    wait_until(lambda: (mnt / "gemini-topic.md").exists(), SOON, "Gemini's topic")
    assert sandbox.out("cat", mnt / "gemini-topic.md") == b"FROM GEMINI\n"


def test_gemini_projects_show_once_global_gemini_is_read(sandbox: Sandbox, mounts: Mounts) -> None:
    """~/.gemini is global/gemini's folder and, while tmp/ is missing, where Gemini's root
    waits: reading global/ first (which watches that folder for GEMINI.md) must not lose
    the wait, so the first project session still shows (§3, §4.1)."""
    discovering(sandbox)
    (sandbox.home / ".gemini").mkdir()
    put(sandbox.home / ".gemini", "GEMINI.md", "GEMINI USER MEMORY\n", 1)
    root = checkout(sandbox, "u", "src", "shop")
    mounts()
    assert b"GEMINI USER MEMORY" in sandbox.mnt("global", "PREAMBLE.md").read_bytes()
    put(GeminiCli(sandbox.home).memory(root), "topic.md", "FROM GEMINI\n", 0)
    topic = sandbox.mnt(slug_of(root), "topic.md")
    wait_until(lambda: topic.exists(), SOON, "Gemini's first project")
    assert sandbox.out("cat", topic) == b"FROM GEMINI\n"


# Gemini CLI 0.61 with ``"context": {"includeDirectories": ["~/memfs/here"]}`` (README):
# it resolves the folder once, at start, from its working folder (the project root) and
# keeps its realpath; read_file reads PREAMBLE.md there; write_file is Node's
# fs.writeFile: open O_WRONLY|O_CREAT|O_TRUNC (0666 less the umask), write, close; no
# temp file, no rename, no fsync. Each save of the handoff does the same again.
GEMINI_CLI = r"""
import json, os, sys
here, name = sys.argv[1], sys.argv[2]
workspace = os.path.realpath(here)
with open(os.path.join(here, "PREAMBLE.md"), "rb") as f:
    preamble = f.read().decode()
for body in sys.argv[3:]:
    fd = os.open(os.path.join(here, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.write(fd, body.encode())
    os.close(fd)
with open(os.path.join(here, name), "rb") as f:
    seen = f.read().decode()
print(json.dumps({"workspace": workspace, "preamble": preamble, "seen": seen}))
"""


@pytest.mark.parametrize("registered", [True, False], ids=["gemini-has-run-there", "unknown"])
def test_gemini_cli_writes_its_handoff_through_here(
    sandbox: Sandbox, mounts: Mounts, registered: bool
) -> None:
    """The README's recipe for Gemini CLI, in a project with no memory yet (Gemini has
    run there, its id folder and marker made but no memory, or no source knows it): its
    handoff lands in the own Claude Code account, its second save replaces the first in
    place, the first is kept, and PREAMBLE.md shows the handoff first (§4, §6.2, §7.1,
    §7.2)."""
    discovering(sandbox)
    root = checkout(sandbox, "u", "src", "shop")
    (root / ".git").mkdir()
    slug = slug_of(root)
    cli = GeminiCli(sandbox.home)
    if registered:
        assert cli.register(root) == "shop"
    mounts()
    name = f"handoff-gemini_{time.strftime('%Y%m%d', time.gmtime())}.md"
    first, second = "# Handoff\nfirst save\n", "# Handoff\nsecond save, in place\n"
    done = subprocess.run(
        [sys.executable, "-c", GEMINI_CLI, str(sandbox.mnt("here")), name, first, second],
        cwd=root,
        env=sandbox.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["workspace"] == str(sandbox.mnt(slug))  # what includeDirectories keeps
    # No memory anywhere yet: a frame, no section. Gemini's id folder makes the project
    # one a source holds: the plain frame then, not the one of a project no source knows.
    assert seen["preamble"].startswith(f"# Project memory: {slug}\n"), seen["preamble"]
    assert "\n## " not in seen["preamble"]
    assert ("No memory for this project yet" in seen["preamble"]) is not registered
    assert seen["seen"] == second
    # In the own source (a Claude Code account), the folder made by the first save.
    own = sandbox.home / ".claude" / "projects" / slug / "memory"
    assert (own / name).read_text() == second
    assert not (cli.tmp / "shop" / "memory").exists()  # nothing in Gemini's folder
    # The first save, replaced in place by the second, is kept.
    kept = sandbox.mnt(slug, ".history", name)
    versions = sorted(os.listdir(kept))
    assert len(versions) == 1, versions
    assert versions[0].startswith("claude@")
    assert (kept / versions[0]).read_text() == first
    # PREAMBLE.md: the handoff first, from the own account, as its second save.
    preamble = sandbox.out("cat", sandbox.mnt("here", "PREAMBLE.md"), cwd=root).decode()
    sections = preamble.split("\n## ")[1:]
    assert sections[0].startswith(f"Handoff: {name} (from claude, "), preamble
    assert "second save, in place" in sections[0]
    assert "first save" not in preamble


def test_gemini_bookkeeping_is_no_memory(sandbox: Sandbox, mounts: Mounts) -> None:
    """Gemini CLI's own files in its memory folder (issue 38): its inbox of proposed
    patches and its run lock are left out of the view and refused through the mount; its
    state file is shown; PREAMBLE.md inlines and indexes none of them (§5.1, §6)."""
    discovering(sandbox)
    root, slug = shop_with_claude_notes(sandbox)
    memory = GeminiCli(sandbox.home).memory(root)
    put(memory, "MEMORY.md", "- [Deploys](deploys.md)\n", 3)
    put(memory, "deploys.md", "GEMINI DEPLOYS\n", 2)
    (memory / ".inbox" / "private").mkdir(parents=True)
    put(memory / ".inbox" / "private", "x.patch", "+PROPOSED BY EXTRACTION\n", 0.1)
    put(memory, ".extraction.lock", '{"pid": 4242}', 0.05)
    put(memory, ".extraction-state.json", '{"runs": ["STATE"]}', 0.02)
    mounts()
    mnt = sandbox.mnt(slug)
    names = sandbox.out("ls", "-A", mnt).decode().split()
    assert names == [".extraction-state.json", "MEMORY.md", "PREAMBLE.md", "deploys.md", "notes.md"]
    assert sandbox.out("cat", mnt / ".extraction-state.json") == b'{"runs": ["STATE"]}'
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    for word in (b"inbox", b"x.patch", b"PROPOSED", b"extraction", b"STATE", b"4242"):
        assert word not in preamble, word
    assert b"## Recent: deploys.md" in preamble
    assert b"## Recent: notes.md" in preamble
    # Refused through the mount: created, they would never show.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    assert errno_of(os.open, mnt / ".extraction.lock", flags) == errno.EINVAL
    assert errno_of(os.mkdir, mnt / ".inbox") == errno.EINVAL
    # Live: a new run's lock and patch stay out; a new topic shows.
    put(memory / ".inbox" / "private", "y.patch", "+PROPOSED AGAIN\n", 0)
    put(memory, "late.md", "LATE TOPIC\n", 0)
    wait_until(lambda: (mnt / "late.md").exists(), SOON, "Gemini's new topic")
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    assert b"LATE TOPIC" in preamble
    assert b"PROPOSED" not in preamble
    assert b".inbox" not in sandbox.out("ls", "-A", mnt)
