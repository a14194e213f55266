"""Tier 3: memory follows a moved project (issue 38, §4.2).

A git project with memory in two Claude Code accounts is used through `here/` (as an agent
with ``autoMemoryDirectory: ~/memfs/here`` does), then renamed with `mv`: from the new
folder, `here/` shows the old memory from both accounts with a "moved from" line in
PREAMBLE.md's frame, a write lands in the own account under the new slug, the old folders
stay as they were, a second clone of the repository shows none of it, `memfs status` lists
the move and `memfs adopt take` makes it permanent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from mounting import MOUNT_MARKS, Mounts, Sandbox, wait_until

from memfs.rules.slug import claude_slug

pytestmark = MOUNT_MARKS


def _git(sandbox: Sandbox, folder: Path, *args: str) -> None:
    env = {
        **{k: v for k, v in sandbox.env.items() if not k.startswith("GIT_")},
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, env=env)


def _repo(sandbox: Sandbox, name: str) -> Path:
    folder = Path(os.path.realpath(sandbox.project_dir(name)))
    _git(sandbox, folder, "init", "-q")
    (folder / "README").write_text("shop\n")
    _git(sandbox, folder, "add", "README")
    _git(sandbox, folder, "commit", "-q", "-m", "first")
    return folder


def _memfs(sandbox: Sandbox, *args: str | Path, cwd: Path, check: bool = True) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memfs", *map(str, args)],
        cwd=cwd,
        env=sandbox.env,
        capture_output=True,
        text=True,
        timeout=40,
        check=False,
    )
    assert done.returncode == 0 or not check, done.stderr
    return done.stdout + done.stderr


def test_memory_follows_a_moved_project(sandbox: Sandbox, mounts: Mounts) -> None:
    shop = _repo(sandbox, "shop")
    old = claude_slug(str(shop))
    sandbox.write("personal", old, "MEMORY.md", "- [Style](style.md)\n")
    sandbox.write("personal", old, "style.md", "tabs, never spaces\n")
    sandbox.write("work", old, "deploys.md", "work's deploy notes\n")
    before = {s: sorted(os.listdir(sandbox.folder(s, old))) for s in ("personal", "work")}
    # A second clone of the same repository, elsewhere, while the original is there.
    clone = Path(os.path.realpath(sandbox.base / "clones" / "shop"))
    clone.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(shop), str(clone)], check=True, timeout=30)
    mounts()
    here = sandbox.mnt("here")

    # An agent's session in the project: memfs sees its root while it has memory.
    assert b"tabs, never spaces" in sandbox.out("cat", here / "PREAMBLE.md", cwd=shop)
    # A second copy of a live project is another project: nothing of it.
    assert b"tabs" not in sandbox.out("cat", here / "PREAMBLE.md", cwd=clone)

    shop2 = shop.parent / "shop2"
    sandbox.run("mv", shop, shop2)
    new = claude_slug(str(shop2))

    # From the new folder, here/ shows the old memory of both accounts, and says so.
    preamble = sandbox.out("cat", here / "PREAMBLE.md", cwd=shop2)
    assert f"# Project memory: {new}\n".encode() in preamble
    assert f"moved from {shop}".encode() in preamble
    assert b"tabs, never spaces" in preamble
    assert b"work's deploy notes" in preamble
    listing = sandbox.out("ls", "-A", here / ".", cwd=shop2).split()
    assert listing == [b"MEMORY.md", b"PREAMBLE.md", b"deploys.md", b"style.md"]
    assert sandbox.out("cat", sandbox.mnt(new, "deploys.md")) == b"work's deploy notes\n"

    # A write through the new project lands in the own account, under the new slug.
    sandbox.run("sh", "-c", f"echo done > {here}/handoff-a_20261207.md", cwd=shop2)
    sandbox.run("sh", "-c", f"echo 'and no tabs in YAML' >> {here}/style.md", cwd=shop2)
    own_new = sandbox.source("personal").folder(new)
    assert (own_new / "handoff-a_20261207.md").read_bytes() == b"done\n"
    assert (own_new / "style.md").read_bytes() == b"tabs, never spaces\nand no tabs in YAML\n"
    # The old slug's folders stay where they were, as they were.
    after = {s: sorted(os.listdir(sandbox.source(s).folder(old))) for s in ("personal", "work")}
    assert after == before
    assert (sandbox.source("personal").folder(old) / "style.md").read_bytes() == (
        b"tabs, never spaces\n"
    )
    root = sandbox.out("ls", sandbox.mountpoint).split()
    assert new.encode() in root
    assert old.encode() not in root  # its folders show under the new slug

    # The second clone is another folder: none of it, whether the original is gone or not.
    cloned = sandbox.out("cat", here / "PREAMBLE.md", cwd=clone)
    assert b"No memory for this project yet" in cloned
    assert b"tabs" not in cloned
    offered = _memfs(
        sandbox, "adopt", "list", "--config", sandbox.config_path, cwd=clone, check=False
    )
    assert "moved from" not in offered
    assert "same repository" not in offered

    # memfs status lists the move it follows.
    status = _memfs(sandbox, "status", sandbox.mountpoint, cwd=shop2)
    assert f"{shop} ({old}) -> {new}" in status

    # memfs adopt take makes it permanent: every account's old memory in the own account's
    # folder of the new slug.
    listed = _memfs(sandbox, "adopt", "list", "--config", sandbox.config_path, cwd=shop2)
    line = next(ln for ln in listed.splitlines() if f"moved from {shop}" in ln)
    take = re.search(r"memfs adopt take (\S+) (\d+) (\S+)", line)
    assert take is not None, listed
    _memfs(sandbox, "adopt", "take", *take.groups(), "--config", sandbox.config_path, cwd=shop2)
    assert (own_new / "deploys.md").read_bytes() == b"work's deploy notes\n"
    assert (own_new / "MEMORY.md").read_bytes() == b"- [Style](style.md)\n"
    assert (own_new / "style.md").read_bytes() == b"tabs, never spaces\nand no tabs in YAML\n"
    kept = list((own_new / ".history" / "style.md").iterdir())
    assert any(p.read_bytes() == b"tabs, never spaces\n" for p in kept)
    assert after == {
        s: sorted(os.listdir(sandbox.source(s).folder(old))) for s in ("personal", "work")
    }
    wait_until(
        lambda: sandbox.out("cat", sandbox.mnt(new, "deploys.md")) == b"work's deploy notes\n",
        5.0,
        "the adopted file shows",
    )
    # Taken: the next mount no longer follows the move; the memory is the new slug's own.
    for mount in mounts.started:
        mount.close()
    mounts()
    status = _memfs(sandbox, "status", sandbox.mountpoint, cwd=shop2)
    assert "moved projects followed" not in status
    preamble = sandbox.out("cat", here / "PREAMBLE.md", cwd=shop2)
    assert b"moved from" not in preamble
    assert b"work's deploy notes" in preamble
    assert old.encode() in sandbox.out("ls", sandbox.mountpoint).split()


def test_a_moved_project_learnt_from_transcripts_and_asked_for_by_its_slug(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    # No agent used here/ before the move: memfs learns the root from Claude Code's
    # session transcript, and an orchestrator reads the new slug's folder by name.
    from memfs.disk import moves, store

    shop = _repo(sandbox, "shop")
    old = claude_slug(str(shop))
    sandbox.write("work", old, "handoff-ci_20261206.md", "ran the nightly build\n")
    transcript = sandbox.source("work").root / old / "0b7e.jsonl"
    transcript.write_text(json.dumps({"type": "user", "cwd": str(shop)}) + "\n")
    mounts()
    try:
        wait_until(lambda: moves.recorded(sandbox.state_dir), 10.0, "the root learnt")
    finally:
        store.close_all()
    shop2 = shop.parent / "shop2"
    sandbox.run("mv", shop, shop2)
    new = claude_slug(str(shop2))
    preamble = sandbox.out("cat", sandbox.mnt(new, "PREAMBLE-1200.md"), cwd=Path("/"))
    assert f"moved from {shop}".encode() in preamble
    assert b"ran the nightly build" in preamble
    # a slug no folder is named by stays an empty project
    nothing = claude_slug(str(shop.parent / "nothing"))
    assert b"No memory" in sandbox.out("cat", sandbox.mnt(nothing, "PREAMBLE.md"), cwd=Path("/"))
