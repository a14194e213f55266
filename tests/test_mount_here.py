"""Tier 3: `here` from an agent's first session on (§4), and Claude Code through it.

`here` names the calling process's project whether or not any source holds memory for it,
so an agent with no integration can read and write there from its very first session. The
Claude Code test does, step by step, what its 2.1.197 binary does with
``"autoMemoryDirectory": "~/memfs/here"`` (FUSE-NOTES): from the project folder, mkdir
the memory folder, read MEMORY.md, write ``<file>.tmp.<pid>.<12 hex>`` with
``O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW``, fchmod, fsync, close, rename over the target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox

from memfs.rules.slug import claude_slug

pytestmark = MOUNT_MARKS

# What Claude Code does with its memory folder, run as a separate process from the
# project's folder (its main process keeps the project root as its working folder).
CLAUDE_CODE = r"""
import json, os, secrets, sys
memory = os.path.expanduser(sys.argv[1])
name, body = sys.argv[2], sys.argv[3].encode()
try:
    os.mkdir(memory)  # at start; EEXIST is fine
except FileExistsError:
    pass
index = os.path.join(memory, "MEMORY.md")
try:
    with open(index, "rb") as f:
        loaded = f.read()
except FileNotFoundError:
    loaded = b""
target = os.path.join(memory, name)
temp = f"{target}.tmp.{os.getpid()}.{secrets.token_hex(6)}"
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
os.write(fd, body)
os.fchmod(fd, 0o644)
os.fsync(fd)
os.close(fd)
os.rename(temp, target)
with open(target, "rb") as f:
    seen = f.read()
listing = sorted(os.listdir(memory))
print(json.dumps({"loaded": loaded.decode(), "seen": seen.decode(), "listing": listing}))
"""


def new_git_project(sandbox: Sandbox, name: str) -> tuple[Path, str]:
    folder = Path(os.path.realpath(sandbox.project_dir(name)))
    (folder / ".git").mkdir()
    return folder, claude_slug(str(folder))


def test_here_in_a_project_with_no_memory_anywhere(sandbox: Sandbox, mounts: Mounts) -> None:
    project, slug = new_git_project(sandbox, "brand-new")
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    mounts()
    here = sandbox.mnt("here")
    # The agent's first look: a folder, holding only a preamble that says so.
    preamble = sandbox.out("cat", here / "PREAMBLE.md", cwd=deep)
    assert b"No memory for this project yet" in preamble
    assert b"lands in" in preamble  # and where a write goes
    # It draws on no file: it shows the mount's start, as the root does, not 1970 (issue 36).
    shown = sandbox.out("stat", "-c", "%Y", here / "PREAMBLE.md", cwd=deep)
    assert int(shown) == os.stat(sandbox.mountpoint).st_mtime_ns // 10**9 > 0
    assert sandbox.out("ls", "-A", here / ".", cwd=deep).split() == [b"PREAMBLE.md"]
    sandbox.out("mkdir", "-p", here / ".", cwd=deep)
    assert slug.encode() not in sandbox.out("ls", sandbox.mountpoint)
    # Its first handoff lands in the own source, atomically; the project is listed then.
    sandbox.run("sh", "-c", f"echo X > {here}/handoff-a_20261201.md", cwd=deep)
    own = sandbox.source("personal").folder(slug) / "handoff-a_20261201.md"
    assert own.read_bytes() == b"X\n"
    assert slug.encode() in sandbox.out("ls", sandbox.mountpoint).split()
    assert b"handoff-a_20261201.md" in sandbox.out("cat", here / "PREAMBLE.md", cwd=deep)
    # A walk of the whole mount that stats everything meets no error, from / as from a
    # folder that is no project at all.
    walk = (
        "import os, sys\n"
        "errors = []\n"
        "for top, dirs, files in os.walk(sys.argv[1], onerror=errors.append):\n"
        "    for name in dirs + files:\n"
        "        try:\n"
        "            os.stat(os.path.join(top, name))\n"
        "        except OSError as exc:\n"
        "            errors.append(exc)\n"
        "print(len(errors), errors[:3])\n"
    )
    for cwd in (Path("/"), deep):
        done = sandbox.run(sys.executable, "-c", walk, sandbox.mountpoint, cwd=cwd)
        assert done.stdout.startswith(b"0 "), done.stdout
    assert sandbox.run("find", "-L", sandbox.mountpoint, cwd=Path("/")).returncode == 0


@pytest.mark.parametrize("has_memory", [True, False], ids=["with-memory", "brand-new"])
def test_claude_code_with_its_memory_folder_at_here(
    sandbox: Sandbox, mounts: Mounts, has_memory: bool
) -> None:
    project, slug = new_git_project(sandbox, f"agent-{has_memory}")
    if has_memory:
        sandbox.write("work", slug, "MEMORY.md", "- [Deploys](deploys.md)\n")
        sandbox.write("work", slug, "deploys.md", "work's deploy notes\n")
        sandbox.write("personal", slug, "MEMORY.md", "- [Style](style.md)\n")
    mounts()
    memory = f"{sandbox.mountpoint}/here"
    done = subprocess.run(
        [sys.executable, "-c", CLAUDE_CODE, memory, "style.md", "tabs, never spaces\n"],
        cwd=project,
        env=sandbox.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    if has_memory:
        # It loads every account's lines, the own account's first.
        assert seen["loaded"] == "- [Style](style.md)\n- [Deploys](deploys.md)\n"
        assert "deploys.md" in seen["listing"]
    else:
        assert seen["loaded"] == ""
    assert seen["seen"] == "tabs, never spaces\n"
    assert "style.md" in seen["listing"]
    assert not [n for n in seen["listing"] if ".tmp." in n]
    # The write landed in the own account only, and no temp file is left anywhere.
    own = sandbox.source("personal").folder(slug)
    assert (own / "style.md").read_text() == "tabs, never spaces\n"
    assert not [p for p in own.rglob("*") if ".tmp." in p.name or ".memfs-stage" in p.name]
    if has_memory:
        work = sandbox.source("work").folder(slug)
        assert sorted(os.listdir(work)) == ["MEMORY.md", "deploys.md"]
