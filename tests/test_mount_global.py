"""Tier 3: global/, user-level memory beside the projects, through a real mount (§4.1).

The sandbox's two Claude Code accounts (``~/.claude``, own; ``~/.claude-work``) get a
``CLAUDE.md`` and a subagent's memory each; Codex's and Gemini CLI's folders are listed in
the config as the README says.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from gemini_layout import GeminiCli
from mounting import MOUNT_MARKS, Mounts, Sandbox, errno_of, set_age, slug_of, wait_until

pytestmark = MOUNT_MARKS

SOON = 1.0  # §5.4: a change in a source shows within a second


def put(path: Path, body: str, age_days: float = 1.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    set_age(path, age_days)
    return path


def with_tools(box: Sandbox) -> None:
    """User memory in both accounts, Codex's and Gemini CLI's folders listed in the config."""
    home = box.home
    put(home / ".claude" / "CLAUDE.md", "OWN USER MEMORY\n", 2)
    put(home / ".claude-work" / "CLAUDE.md", "WORK USER MEMORY, NEWER\n", 1)
    put(home / ".claude" / "agent-memory" / "rev" / "MEMORY.md", "- [a](a.md)\n")
    put(home / ".claude-work" / "agent-memory" / "rev" / "notes.md", "WORK REVIEWER NOTES\n")
    put(home / ".claude-work" / "settings.json", "{}\n")
    put(home / ".codex" / "memories" / "memory_summary.md", "CODEX SUMMARY\n")
    put(home / ".gemini" / "GEMINI.md", "GEMINI USER MEMORY\n")
    box.write_config()
    with box.config_path.open("a", encoding="utf-8") as out:
        out.write(
            f'[[source]]\nname = "codex"\nkind = "codex"\npath = "{home}/.codex"\n\n'
            f'[[source]]\nname = "gemini"\nkind = "gemini"\npath = "{home}/.gemini"\n'
        )


def config_with_codex_and_gemini(sandbox: Sandbox) -> None:
    """The sandbox's config, and Codex's and Gemini CLI's folders as sources of their own."""
    home = sandbox.home
    sandbox.write_config()
    with sandbox.config_path.open("a", encoding="utf-8") as out:
        out.write(
            f'[[source]]\nname = "codex"\nkind = "codex"\npath = "{home}/.codex"\n\n'
            f'[[source]]\nname = "gemini"\nkind = "gemini"\npath = "{home}/.gemini"\n'
        )


def test_global_merges_user_memory(sandbox: Sandbox, mounts: Mounts) -> None:
    with_tools(sandbox)
    listed = sandbox.memfs("sources", "--config", sandbox.config_path)
    assert f"global/codex     codex: {sandbox.home}/.codex/memories" in listed.stdout, listed
    assert f"global/claude    personal: {sandbox.home}/.claude (" in listed.stdout, listed
    mounts()
    mnt = sandbox.mnt("global")
    assert sandbox.out("ls", sandbox.mountpoint).split() == [b"global", b"here"]
    assert sandbox.out("ls", mnt).split() == [b"PREAMBLE.md", b"claude", b"codex", b"gemini"]
    # One cat: what every tool knows about the user, within the budget (and under N).
    for name, budget in (("PREAMBLE.md", 8192), ("PREAMBLE-1200.md", 1200)):
        body = (mnt / name).read_bytes()
        assert len(body) <= budget
        assert os.stat(mnt / name).st_size == len(body)
        assert body.startswith(b"# User-level memory\n")
    body = (mnt / "PREAMBLE.md").read_bytes()
    for text in (b"OWN USER MEMORY", b"CODEX SUMMARY", b"GEMINI USER MEMORY"):
        assert text in body
    for kind in ("claude", "codex", "gemini"):  # each kind's part, and its own PREAMBLE.md
        assert f"# User-level memory: global/{kind}\n".encode() in body
        assert b"Project memory" not in (mnt / kind / "PREAMBLE.md").read_bytes()
    claude = mnt / "claude"
    assert sandbox.out("ls", "-A", claude).split() == [
        b".history", b"CLAUDE.md", b"PREAMBLE.md", b"agent-memory",
    ]  # fmt: skip
    # The own account's CLAUDE.md is the head though the other's is newer.
    assert sandbox.out("cat", claude / "CLAUDE.md") == b"OWN USER MEMORY\n"
    (kept,) = os.listdir(claude / ".history" / "CLAUDE.md")
    assert kept.startswith("work@")
    assert sandbox.out("cat", claude / ".history" / "CLAUDE.md" / kept) == (
        b"WORK USER MEMORY, NEWER\n"
    )
    # Subagents' memory from both accounts, in one folder.
    assert sandbox.out("ls", claude / "agent-memory" / "rev").split() == [b"MEMORY.md", b"notes.md"]
    # A write lands in the own account's config folder, as an atomic replace, and keeps the
    # version it replaced there.
    own = sandbox.home / ".claude" / "CLAUDE.md"
    before = os.stat(own).st_ino
    (claude / "CLAUDE.md").write_text("EDITED THROUGH THE MOUNT\n", encoding="utf-8")
    assert own.read_text(encoding="utf-8") == "EDITED THROUGH THE MOUNT\n"
    assert os.stat(own).st_ino != before  # renamed over it: never a partial file
    kept_own = list((sandbox.home / ".claude" / ".history" / "CLAUDE.md").iterdir())
    assert [p.read_text(encoding="utf-8") for p in kept_own] == ["OWN USER MEMORY\n"]
    assert (sandbox.home / ".claude-work" / "CLAUDE.md").read_text(encoding="utf-8") == (
        "WORK USER MEMORY, NEWER\n"
    )
    assert errno_of((claude / "settings.json").write_text, "{}") == errno.EACCES
    # The journal names it, and `memfs restore` puts the kept version back (§7.2).
    logged = sandbox.memfs("log", claude / "CLAUDE.md")
    assert logged.returncode == 0, logged.stderr
    assert "CLAUDE.md" in logged.stdout, logged.stdout
    done = sandbox.memfs("restore", claude / "CLAUDE.md")
    assert done.returncode == 0, done.stderr
    # The own version kept last, never the work account's (issue 36: "as it was").
    assert own.read_text(encoding="utf-8") == "OWN USER MEMORY\n"
    (claude / "CLAUDE.md").write_text("EDITED THROUGH THE MOUNT\n", encoding="utf-8")
    # Codex and Gemini CLI: read-only, and live.
    assert sandbox.out("cat", mnt / "codex" / "memory_summary.md") == b"CODEX SUMMARY\n"
    assert sandbox.out("cat", mnt / "gemini" / "GEMINI.md") == b"GEMINI USER MEMORY\n"
    for path in (mnt / "codex" / "memory_summary.md", mnt / "gemini" / "GEMINI.md"):
        assert errno_of(path.write_text, "x") == errno.EROFS
    assert errno_of((mnt / "codex" / "new.md").write_text, "x") == errno.EROFS
    put(sandbox.home / ".codex" / "memories" / "memory_summary.md", "CODEX, CHANGED\n", 0)
    put(sandbox.home / ".gemini" / "GEMINI.md", "GEMINI, CHANGED\n", 0)
    wait_until(
        lambda: (mnt / "codex" / "memory_summary.md").read_bytes() == b"CODEX, CHANGED\n",
        SOON, "codex's change shows",
    )  # fmt: skip
    wait_until(
        lambda: (mnt / "gemini" / "GEMINI.md").read_bytes() == b"GEMINI, CHANGED\n",
        SOON, "gemini's change shows",
    )  # fmt: skip
    wait_until(
        lambda: b"CODEX, CHANGED" in (mnt / "PREAMBLE.md").read_bytes(),
        SOON, "global/PREAMBLE.md follows",
    )  # fmt: skip
    # Inside global/claude, `here` is global/claude; in global/ itself it names nothing.
    link = sandbox.run("readlink", sandbox.mnt("here"), cwd=claude / "agent-memory")
    assert link.stdout == b"global/claude\n"
    inside = sandbox.run("readlink", sandbox.mnt("here"), cwd=mnt, check=False)
    assert inside.returncode != 0
    # A walk never errors (find -L follows `here` too).
    walked = sandbox.run("find", "-L", sandbox.mountpoint)
    assert b"global/claude/CLAUDE.md" in walked.stdout


def test_accounts_share_one_claude_md_by_a_link(sandbox: Sandbox, mounts: Mounts) -> None:
    """The README's recipe: every other account's CLAUDE.md is a link to the mount's."""
    with_tools(sandbox)
    mounts()
    shared = sandbox.mnt("global", "claude", "CLAUDE.md")
    link = sandbox.home / ".claude-work" / "CLAUDE.md"
    link.unlink()
    link.symlink_to(shared)
    # What that account's Claude Code reads: the own account's user memory.
    assert link.read_text(encoding="utf-8") == "OWN USER MEMORY\n"
    wait_until(
        lambda: not (sandbox.mnt("global", "claude", ".history", "CLAUDE.md")).exists(),
        SOON, "the link is no version (links are never served)",
    )  # fmt: skip
    # An edit through the link lands in the own account, the version it replaced kept.
    with link.open("a", encoding="utf-8") as out:
        out.write("ADDED FROM THE WORK ACCOUNT\n")
    assert (sandbox.home / ".claude" / "CLAUDE.md").read_text(encoding="utf-8") == (
        "OWN USER MEMORY\nADDED FROM THE WORK ACCOUNT\n"
    )
    assert link.is_symlink()
    assert len(list((sandbox.home / ".claude" / ".history" / "CLAUDE.md").iterdir())) == 1
    # A tool that renames a new file over the link makes that account's own copy again:
    # a version of its own, under .history/ (the own account's stays the head).
    fresh = link.with_name("CLAUDE.md.tmp")
    fresh.write_text("WORK'S OWN AGAIN\n", encoding="utf-8")
    fresh.replace(link)
    history = sandbox.mnt("global", "claude", ".history", "CLAUDE.md")
    wait_until(lambda: any(n.startswith("work@") for n in os.listdir(history)), SOON, "work's copy")
    (name,) = [n for n in os.listdir(history) if n.startswith("work@")]
    assert (history / name).read_text(encoding="utf-8") == "WORK'S OWN AGAIN\n"
    assert sandbox.mnt("global", "claude", "CLAUDE.md").read_text(encoding="utf-8") == (
        "OWN USER MEMORY\nADDED FROM THE WORK ACCOUNT\n"
    )


def test_user_memory_made_after_the_mount_shows_without_a_remount(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """Configured tools whose user memory comes later: Codex's folder with no memories/
    yet, Gemini CLI's folder with no GEMINI.md, accounts with no CLAUDE.md nor
    agent-memory/. Each shows in global/ once written (§4.1, §5.4)."""
    home = sandbox.home
    (home / ".codex").mkdir()
    (home / ".gemini").mkdir()
    config_with_codex_and_gemini(sandbox)
    mounts()
    mnt = sandbox.mnt("global")
    assert b"OWN LATE" not in (mnt / "PREAMBLE.md").read_bytes()
    assert sandbox.out("ls", mnt / "claude").split() == [b"PREAMBLE.md"]  # loaded, watched
    put(home / ".codex" / "memories" / "memory_summary.md", "CODEX LATE\n", 0)
    put(home / ".gemini" / "GEMINI.md", "GEMINI LATE\n", 0)
    put(home / ".claude" / "CLAUDE.md", "OWN LATE\n", 0)
    put(home / ".claude-work" / "agent-memory" / "rev" / "notes.md", "WORK REVIEWER LATE\n", 0)
    for path, body in (
        (mnt / "codex" / "memory_summary.md", b"CODEX LATE\n"),
        (mnt / "gemini" / "GEMINI.md", b"GEMINI LATE\n"),
        (mnt / "claude" / "CLAUDE.md", b"OWN LATE\n"),
        (mnt / "claude" / "agent-memory" / "rev" / "notes.md", b"WORK REVIEWER LATE\n"),
    ):
        wait_until(lambda p=path, b=body: p.exists() and p.read_bytes() == b, SOON, str(path))
    body = (mnt / "PREAMBLE.md").read_bytes()
    for text in (b"CODEX LATE", b"GEMINI LATE", b"OWN LATE"):
        assert text in body


def test_tools_installed_after_the_mount_show_without_a_remount(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """Discovery (no [[source]]): Codex and Gemini CLI are sources before they are
    installed, their folders listed empty and left out of global/PREAMBLE.md; folders made
    after the mount show like those found at the start (§3, §4.1, §5.4)."""
    sandbox.config_path.write_text("[preamble]\nbudget = 8192\n", encoding="utf-8")
    home = sandbox.home
    mounts()
    mnt = sandbox.mnt("global")
    assert sandbox.out("ls", mnt).split() == [
        b"PREAMBLE.md", b"claude", b"codex", b"gemini", b"goose",
    ]  # fmt: skip
    assert sandbox.out("ls", mnt / "codex").split() == [b"PREAMBLE.md"]
    assert b"codex" not in (mnt / "PREAMBLE.md").read_bytes()  # no bytes for no memory
    assert b"(none yet)" in (mnt / "PREAMBLE.md").read_bytes()
    put(home / ".codex" / "memories" / "memory_summary.md", "CODEX INSTALLED LATE\n", 0)
    put(home / ".gemini" / "GEMINI.md", "GEMINI INSTALLED LATE\n", 0)
    for path, body in (
        (mnt / "codex" / "memory_summary.md", b"CODEX INSTALLED LATE\n"),
        (mnt / "gemini" / "GEMINI.md", b"GEMINI INSTALLED LATE\n"),
    ):
        wait_until(lambda p=path, b=body: p.exists() and p.read_bytes() == b, SOON, str(path))
    body = (mnt / "PREAMBLE.md").read_bytes()
    assert b"CODEX INSTALLED LATE" in body
    assert b"GEMINI INSTALLED LATE" in body
    assert b"(codex, gemini)" in body


def test_a_subagents_index_is_the_union_and_a_save_a_change(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """agent-memory/<agent>/MEMORY.md is §5.3's union of every account's, and a save of it
    lands in the own account's as the change the writer made."""
    with_tools(sandbox)
    work = put(
        sandbox.home / ".claude-work" / "agent-memory" / "rev" / "MEMORY.md", "- [b](b.md)\n"
    )
    own = sandbox.home / ".claude" / "agent-memory" / "rev" / "MEMORY.md"
    mounts()
    index = sandbox.mnt("global", "claude", "agent-memory", "rev", "MEMORY.md")
    assert sandbox.out("cat", index) == b"- [a](a.md)\n- [b](b.md)\n"
    assert os.stat(index).st_size == len(b"- [a](a.md)\n- [b](b.md)\n")
    # An append through the shell: the new line lands in the own account's index alone.
    sandbox.run("sh", "-c", f"echo '- [c](c.md)' >> '{index}'")
    assert own.read_text(encoding="utf-8") == "- [a](a.md)\n- [c](c.md)\n"
    assert work.read_text(encoding="utf-8") == "- [b](b.md)\n"
    assert index.read_bytes() == b"- [a](a.md)\n- [c](c.md)\n- [b](b.md)\n"
    # The other account's index changes on disk: the union follows.
    work.write_text("- [b](b.md)\n- [d](d.md)\n", encoding="utf-8")
    wait_until(lambda: b"- [d](d.md)" in index.read_bytes(), SOON, "the other account's line")


def test_configured_tool_folders_made_after_the_mount_show(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """Listed in the config before Codex and Gemini CLI ever ran: their folders made while
    mounted show in global/codex, global/gemini and Gemini's project (§3, §4.1, §5.4)."""
    home = sandbox.home
    config_with_codex_and_gemini(sandbox)
    mounts()
    mnt = sandbox.mnt("global")
    assert b"User-level memory" in (mnt / "PREAMBLE.md").read_bytes()  # every kind loaded
    put(home / ".codex" / "memories" / "memory_summary.md", "CODEX FIRST RUN\n", 0)
    put(home / ".gemini" / "GEMINI.md", "GEMINI FIRST RUN\n", 0)
    for path, body in (
        (mnt / "codex" / "memory_summary.md", b"CODEX FIRST RUN\n"),
        (mnt / "gemini" / "GEMINI.md", b"GEMINI FIRST RUN\n"),
    ):
        wait_until(lambda p=path, b=body: p.exists() and p.read_bytes() == b, SOON, str(path))
    # Gemini CLI's first session in a project: tmp/<id>/ with its marker, then memory/.
    root = home / "u" / "src" / "shop"
    root.mkdir(parents=True)
    root = Path(os.path.realpath(root))
    put(GeminiCli(home).memory(root) / "topic.md", "GEMINI TOPIC\n", 0)
    topic = sandbox.mnt(slug_of(root), "topic.md")
    wait_until(lambda: topic.exists(), SOON, "Gemini's project")
    assert topic.read_bytes() == b"GEMINI TOPIC\n"
