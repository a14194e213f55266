"""Tier 3: more agents' memory through a real mount, from their own folders with no config
(issue 38): Kilo Code's Kilo Memory, goose's per project and global memory, Codex's current
``memories/`` layout; and source folders that are links (§3, §4.1, §5.1, §10).

Each tool's folder is laid out as that tool writes it (agent_layouts.py, gemini_layout.py)
in the sandbox's home and XDG folders; memfs discovers every source (a config file with no
[[source]]). Every tool's memory is read-only: a write lands in the own Claude Code
account, and the tool's folder stays byte for byte as it was.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from agent_layouts import KiloCode, codex_memories, goose_remember
from gemini_layout import GeminiCli
from helpers import digest
from mounting import MOUNT_MARKS, Mounts, Sandbox, errno_of, set_age, slug_of, wait_until

pytestmark = MOUNT_MARKS

SOON = 1.0  # §5.4: a change in a source shows within a second


def discovering(box: Sandbox) -> None:
    """A config file with no [[source]]: every source is discovered in the sandbox."""
    box.config_path.write_text("[preamble]\nbudget = 8192\n", encoding="utf-8")


def checkout(box: Sandbox, *parts: str, git: bool = False) -> Path:
    root = box.home.joinpath(*parts)
    root.mkdir(parents=True, exist_ok=True)
    if git:
        (root / ".git").mkdir(exist_ok=True)
    return Path(os.path.realpath(root))


def claude_notes(box: Sandbox, root: Path, body: str = "CLAUDE NOTES\n") -> Path:
    """The own account's memory of project ``root``, holding notes.md."""
    memory = box.home / ".claude" / "projects" / slug_of(root) / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "notes.md").write_text(body, encoding="utf-8")
    set_age(memory / "notes.md", 1)
    return memory


def listing(box: Sandbox, folder: Path) -> list[str]:
    return box.out("ls", "-A", folder).decode().split()


def test_kilo_memory_joins_its_project_read_only(sandbox: Sandbox, mounts: Mounts) -> None:
    discovering(sandbox)
    root = checkout(sandbox, "u", "src", "shop", git=True)
    slug = slug_of(root)
    own = claude_notes(sandbox, root)
    kilo = KiloCode(Path(sandbox.env["XDG_DATA_HOME"]))
    folder = kilo.folder(root)
    kilo.save(folder, "project.md", "## Facts\n- KILO FACT: deploys go through CI\n")
    kilo.save(folder, "corrections.md", "- style :: KILO tabs, not spaces\n")
    kilo.save(folder, "sessions/20261201T100000_s1_id_ab12.md", "KILO SESSION\n")
    (folder / "state.json.bad-1765000000000").write_text("{")  # set aside, unreadable
    (folder / "decisions.jsonl").write_text("{}\n")  # legacy
    (folder / ".project.md.77.1765000000000.a1b2c3.tmp").write_text("IN FLIGHT")
    (folder / "sessions" / ".x.md.77.1765000000000.a1b2c3.tmp").write_text("IN FLIGHT")
    listed = sandbox.memfs("sources", "--config", sandbox.config_path)
    assert f"{folder.name} -> {root} -> {slug} (from manifest.json)" in listed.stdout, listed
    kilo_before = digest(kilo.dir)
    mounts()
    mnt = sandbox.mnt(slug)
    # Its memory, in the project Claude Code's slug names; none of Kilo's own files.
    assert listing(sandbox, mnt) == [
        "PREAMBLE.md", "corrections.md", "notes.md", "project.md", "sessions",
    ]  # fmt: skip
    assert listing(sandbox, mnt / "sessions") == ["20261201T100000_s1_id_ab12.md"]
    assert b"KILO FACT" in sandbox.out("cat", mnt / "project.md")
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    assert b"KILO FACT" in preamble
    assert b"notes.md" in preamble  # the own account's, older: indexed
    for internal in (b"state.json", b"manifest.json", b"index.kmem", b"IN FLIGHT"):
        assert internal not in preamble
    # Read-only: an edit through the mount lands in the own account; Kilo's folder stays.
    sandbox.run("sh", "-c", f"echo EDITED >> {mnt / 'project.md'}")
    assert (own / "project.md").read_bytes().endswith(b"EDITED\n")
    assert digest(kilo.dir) == kilo_before
    # A project Kilo starts remembering while mounted shows without a remount.
    tool = checkout(sandbox, "u", "src", "tool", git=True)
    kilo.save(kilo.folder(tool), "project.md", "## Facts\n- TOOL FACT\n")
    shown = sandbox.mnt(slug_of(tool), "project.md")
    wait_until(shown.exists, SOON, "a Kilo project made while mounted")
    assert b"TOOL FACT" in sandbox.out("cat", shown)


def test_goose_memory_per_project_and_global(sandbox: Sandbox, mounts: Mounts) -> None:
    discovering(sandbox)
    root = checkout(sandbox, "u", "src", "shop", git=True)
    slug = slug_of(root)
    own = claude_notes(sandbox, root)
    goose = root / ".goose" / "memory"
    goose_remember(goose, "preferences", "GOOSE: use uv, not pip", tags="python tooling")
    goose_remember(goose, "preferences", "GOOSE: run the tests with -x")
    user = Path(sandbox.env["XDG_CONFIG_HOME"]) / "goose" / "memory"
    goose_remember(user, "style", "GOOSE USER: answer briefly")
    # Another project Claude Code knows, where goose has not run yet.
    later_root = checkout(sandbox, "u", "src", "tool", git=True)
    claude_notes(sandbox, later_root, "TOOL NOTES\n")
    listed = sandbox.memfs("sources", "--config", sandbox.config_path)
    assert f"-> {root} -> {slug} (from claude's folder {slug})" in listed.stdout, listed
    assert f"global/goose     goose: {user}" in listed.stdout, listed
    goose_before, user_before = digest(root / ".goose"), digest(user)
    mounts()
    mnt = sandbox.mnt(slug)
    assert listing(sandbox, mnt) == ["PREAMBLE.md", "notes.md", "preferences.txt"]
    body = sandbox.out("cat", mnt / "preferences.txt")
    assert body == (goose / "preferences.txt").read_bytes()
    assert b"GOOSE: use uv" in sandbox.out("cat", mnt / "PREAMBLE.md")  # plain text feeds it
    # User-level: global/goose, read-only, and in global/PREAMBLE.md.
    glob = sandbox.mnt("global")
    assert "goose" in listing(sandbox, glob)
    assert sandbox.out("cat", glob / "goose" / "style.txt") == (user / "style.txt").read_bytes()
    assert b"GOOSE USER: answer briefly" in sandbox.out("cat", glob / "PREAMBLE.md")
    assert errno_of((glob / "goose" / "new.txt").write_text, "x") == errno.EROFS
    # A project's goose memory is read-only too: an edit lands in the own account.
    sandbox.run("sh", "-c", f"echo EDITED >> {mnt / 'preferences.txt'}")
    assert (own / "preferences.txt").read_bytes().endswith(b"EDITED\n")
    assert (digest(root / ".goose"), digest(user)) == (goose_before, user_before)
    # goose's first `remember` in a project memfs knows shows without a remount.
    goose_remember(later_root / ".goose" / "memory", "notes", "GOOSE LATER")
    shown = sandbox.mnt(slug_of(later_root), "notes.txt")
    wait_until(shown.exists, SOON, "goose's memory made while mounted")
    assert b"GOOSE LATER" in sandbox.out("cat", shown)


def test_codex_current_layout_is_global_and_its_summary_first(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    discovering(sandbox)
    codex_home = sandbox.base / "codex-home"
    codex_home.mkdir()
    sandbox.env["CODEX_HOME"] = str(codex_home)
    memories = codex_memories(codex_home)
    before = digest(memories)
    mounts()
    codex = sandbox.mnt("global", "codex")
    # Its memory, not its baseline repository nor its workspace diff.
    assert listing(sandbox, codex) == [
        "MEMORY.md", "PREAMBLE.md", "extensions", "memory_summary.md", "raw_memories.md",
        "rollout_summaries", "skills",
    ]  # fmt: skip
    for gone in (".git", "phase2_workspace_diff.md"):
        assert errno_of(os.stat, codex / gone) == errno.ENOENT
    # memory_summary.md is what Codex injects into every prompt: shown first, before the
    # handbook; the files Codex regenerates from its state are not drawn in.
    for preamble in (
        sandbox.out("cat", codex / "PREAMBLE.md"),
        sandbox.out("cat", sandbox.mnt("global", "PREAMBLE.md")),
    ):
        assert b"CODEX SUMMARY" in preamble, preamble
        assert preamble.index(b"CODEX SUMMARY") < preamble.index(b"# Handbook")
        for regenerated in (b"ROLLOUT SUMMARY", b"RAW MEMORIES", b"WORKSPACE DIFF"):
            assert regenerated not in preamble
    assert b"## Summary: memory_summary.md" in sandbox.out("cat", codex / "PREAMBLE.md")
    assert errno_of((codex / "new.md").write_text, "x") == errno.EROFS
    assert digest(memories) == before


def test_linked_memory_folders_are_followed(sandbox: Sandbox, mounts: Mounts) -> None:
    """Memory folders linked to a synced place: Claude Code's ``projects/<slug>/memory`` (the
    own account's) and a whole account folder, Gemini CLI's ``tmp/<id>`` and ``memory/``."""
    discovering(sandbox)
    home, synced = sandbox.home, sandbox.base / "synced"
    root = checkout(sandbox, "u", "src", "shop", git=True)
    slug = slug_of(root)
    # The own account's memory folder of shop: a link.
    own_real = synced / "claude-shop"
    own_real.mkdir(parents=True)
    (own_real / "notes.md").write_text("LINKED OWN NOTES\n")
    (home / ".claude" / "projects" / slug).mkdir(parents=True)
    (home / ".claude" / "projects" / slug / "memory").symlink_to(own_real)
    # Another account's whole config folder: a link.
    shutil.rmtree(home / ".claude-work")
    account = synced / "claude-work"
    (account / "projects" / slug / "memory").mkdir(parents=True)
    (account / "projects" / slug / "memory" / "work.md").write_text("LINKED ACCOUNT\n")
    (home / ".claude-work").symlink_to(account)
    # Gemini CLI: shop's memory/ is a link; tool's whole tmp/<id> is one.
    cli = GeminiCli(home)
    gemini_memory = cli.memory(root)
    gemini_memory.rmdir()
    gemini_real = synced / "gemini-shop"
    gemini_real.mkdir()
    (gemini_real / "gemini.md").write_text("LINKED GEMINI MEMORY\n")
    gemini_memory.symlink_to(gemini_real)
    tool = checkout(sandbox, "u", "src", "tool", git=True)
    id_real = synced / "gemini-tool"
    (id_real / "memory").mkdir(parents=True)
    (id_real / ".project_root").write_text(str(tool))
    (id_real / "memory" / "tool.md").write_text("LINKED GEMINI FOLDER\n")
    (cli.tmp / "tool").symlink_to(id_real)
    listed = sandbox.memfs("sources", "--config", sandbox.config_path)
    assert f"no project folders in {cli.tmp} yet" not in listed.stdout, listed
    assert f"tool -> {tool} -> {slug_of(tool)} (from .project_root)" in listed.stdout, listed
    mounts()
    mnt = sandbox.mnt(slug)
    assert listing(sandbox, mnt) == ["PREAMBLE.md", "gemini.md", "notes.md", "work.md"]
    assert sandbox.out("cat", mnt / "notes.md") == b"LINKED OWN NOTES\n"
    assert sandbox.out("cat", mnt / "work.md") == b"LINKED ACCOUNT\n"
    assert sandbox.out("cat", mnt / "gemini.md") == b"LINKED GEMINI MEMORY\n"
    assert sandbox.out("cat", sandbox.mnt(slug_of(tool), "tool.md")) == b"LINKED GEMINI FOLDER\n"
    # A write lands where the own account's link leads.
    sandbox.run("sh", "-c", f"echo WRITTEN > {mnt / 'new.md'}")
    assert (own_real / "new.md").read_bytes() == b"WRITTEN\n"
    assert (home / ".claude" / "projects" / slug / "memory").is_symlink()
    # Changes in the linked folders show, watched where the links lead.
    (gemini_real / "later.md").write_text("LATER\n")
    (id_real / "memory" / "later-tool.md").write_text("LATER TOOL\n")
    wait_until((mnt / "later.md").exists, SOON, "a file in a linked memory/")
    wait_until(sandbox.mnt(slug_of(tool), "later-tool.md").exists, SOON, "in a linked tmp/<id>")
    # Links made while mounted: a project folder that is a link at the root, and the memory
    # folder of a project already shown (its memory missing) made as a link.
    projects = home / ".claude" / "projects"
    linked_root = checkout(sandbox, "u", "src", "linked", git=True)
    linked_real = synced / "linked-slug"
    (linked_real / "memory").mkdir(parents=True)
    (linked_real / "memory" / "l.md").write_text("LINKED WHILE MOUNTED\n")
    (projects / slug_of(linked_root)).symlink_to(linked_real)
    shown = sandbox.mnt(slug_of(linked_root), "l.md")
    wait_until(shown.exists, SOON, "a project folder linked while mounted")
    assert sandbox.out("cat", shown) == b"LINKED WHILE MOUNTED\n"
    waiting = checkout(sandbox, "u", "src", "waiting", git=True)
    (projects / slug_of(waiting)).mkdir()
    wait_until(sandbox.mnt(slug_of(waiting)).exists, SOON, "a project with no memory yet")
    assert listing(sandbox, sandbox.mnt(slug_of(waiting))) == ["PREAMBLE.md"]
    waiting_real = synced / "waiting-memory"
    waiting_real.mkdir()
    (waiting_real / "w.md").write_text("MEMORY LINKED LATER\n")
    (projects / slug_of(waiting) / "memory").symlink_to(waiting_real)
    shown = sandbox.mnt(slug_of(waiting), "w.md")
    wait_until(shown.exists, SOON, "a memory folder linked while mounted")
    assert sandbox.out("cat", shown) == b"MEMORY LINKED LATER\n"


def test_a_link_inside_a_source_is_never_followed(sandbox: Sandbox, mounts: Mounts) -> None:
    """Only a source's root and a project's memory folder may be links: a file or folder
    link inside one, even inside a linked memory folder, is left out (§5.1, §10)."""
    discovering(sandbox)
    root = checkout(sandbox, "u", "src", "shop", git=True)
    slug = slug_of(root)
    outside = sandbox.base / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.md").write_text("SECRET\n")
    (outside / "dir" / "x.md").write_text("SECRET TOO\n")
    own = claude_notes(sandbox, root)
    (own / "secret.md").symlink_to(outside / "secret.md")
    (own / "sub").symlink_to(outside / "dir")
    synced = sandbox.base / "synced"
    synced.mkdir()
    (synced / "gemini.md").write_text("GEMINI\n")
    (synced / "inner.md").symlink_to(outside / "secret.md")
    memory = GeminiCli(sandbox.home).memory(root)
    memory.rmdir()
    memory.symlink_to(synced)
    mounts()
    mnt = sandbox.mnt(slug)
    assert listing(sandbox, mnt) == ["PREAMBLE.md", "gemini.md", "notes.md"]
    # Nothing where a link leads is served. (The own account's links may be looked up by
    # name, as a 0-byte file of mode 0 that cannot be read, so that they can be removed.)
    assert errno_of(os.stat, mnt / "inner.md") == errno.ENOENT
    assert errno_of(os.stat, mnt / "sub" / "x.md") in (errno.ENOENT, errno.ENOTDIR)
    for name in ("secret.md", "sub"):
        assert errno_of((mnt / name).read_bytes) is not None, name
    assert b"SECRET" not in sandbox.out("cat", mnt / "PREAMBLE.md")
    # One made while mounted is left out too.
    (own / "late.md").symlink_to(outside / "secret.md")
    (own / "real.md").write_text("REAL\n")
    wait_until((mnt / "real.md").exists, SOON, "a real file beside a new link")
    assert "late.md" not in listing(sandbox, mnt)
    assert errno_of((mnt / "late.md").read_bytes) is not None
