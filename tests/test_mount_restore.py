"""Tier 3: `memfs restore` means "as it was" (§7.2, issue 36): the own version, never
another account's unless asked; an index's view with the lines hidden then; its mode; a
removed folder made again; a folder refused; the mount up or down.

Claude Code's Edit of MEMORY.md is played as it runs (read, temp file, fsync, rename),
against two accounts' indexes of 60 lines each.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from mounting import MOUNT_MARKS, Mounts, Sandbox, slug_of

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
OWN = "".join(f"- [Own {n}](own-{n}.md)\n" for n in range(60))
WORK = "".join(f"- [Work {n}](work-{n}.md)\n" for n in range(60))

# Claude Code's Edit: read MEMORY.md, write it back edited through a temp file and rename.
EDIT = r"""
import os, sys
path, old, new = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
with open(path, "rb") as f:
    read = f.read()
edited = read.replace(old, new) if old else read + new
temp = f"{path}.tmp.{os.getpid()}.0123456789ab"
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, edited)
os.fsync(fd)
os.close(fd)
os.rename(temp, path)
"""


def edit(sandbox: Sandbox, path: Path, old: str, new: str) -> None:
    sandbox.out(sys.executable, "-c", EDIT, path, old, new)


def restore(sandbox: Sandbox, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return sandbox.memfs("restore", *args)


def test_restoring_the_index_after_an_edit_puts_the_view_back_exactly(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "MEMORY.md", OWN)
    sandbox.write("work", SLUG, "MEMORY.md", WORK)
    mounts()
    index = sandbox.mnt(SLUG, "MEMORY.md")
    own = sandbox.folder("personal", SLUG) / "MEMORY.md"
    before = index.read_bytes()
    assert before == (OWN + WORK).encode()
    # The Edit adds a line and drops one of work's: the own index gets the line, work's
    # line is hidden from the union.
    edit(sandbox, index, "- [Work 7](work-7.md)\n", "- [New](new.md)\n")
    assert b"- [New](new.md)\n" in index.read_bytes()
    assert b"work-7.md" not in index.read_bytes()
    done = restore(sandbox, index)
    assert done.returncode == 0, done.stderr
    assert "restored" in done.stdout
    # The merged view is exactly as before, and so is the own file.
    assert index.read_bytes() == before
    assert own.read_bytes() == OWN.encode()
    # What it replaced is kept in turn: the edited own index.
    kept = sandbox.mnt(SLUG, ".history", "MEMORY.md")
    bodies = [(kept / n).read_bytes() for n in os.listdir(kept) if n.startswith("personal@")]
    assert any(b"- [New](new.md)" in b for b in bodies)


def test_restore_takes_the_own_version_never_another_accounts(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "notes.md", "own v1\n", 3)
    sandbox.write("work", SLUG, "notes.md", "work's, the newest\n", 1)
    mounts()
    target = sandbox.mnt(SLUG, "notes.md")
    target.write_text("own v2\n")
    done = restore(sandbox, target)
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "own v1\n"
    # Another account's version only when asked for: it lands as an own copy.
    done = restore(sandbox, target, "--from", "work")
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "work's, the newest\n"
    assert (sandbox.folder("personal", SLUG) / "notes.md").read_text() == "work's, the newest\n"
    assert (sandbox.folder("work", SLUG) / "notes.md").read_text() == "work's, the newest\n"
    none = restore(sandbox, sandbox.mnt(SLUG, "only-work.md"))
    assert none.returncode == 2


def test_restore_at_the_time_a_version_name_shows(sandbox: Sandbox, mounts: Mounts) -> None:
    sandbox.write("personal", SLUG, "notes.md", "v1\n")
    mounts()
    target = sandbox.mnt(SLUG, "notes.md")
    os.utime(target, (1_796_393_942, 1_796_393_942))  # 2026-12-04T14:19:02Z
    target.write_text("v2\n")
    history = sandbox.mnt(SLUG, ".history", "notes.md")
    (name,) = os.listdir(history)
    assert name == "personal@20261204T141902Z.md"
    done = restore(sandbox, target, "--at", "20261204T141902")
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "v1\n"
    early = restore(sandbox, target, "--at", "20261204T141901")
    assert early.returncode == 2
    assert "no kept own version" in early.stderr


def test_restore_keeps_the_mode_and_makes_a_removed_folder_again(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "notes/secret.md", "private\n")
    os.chmod(sandbox.folder("personal", SLUG) / "notes" / "secret.md", 0o600)
    mounts()
    folder = sandbox.mnt(SLUG, "notes")
    sandbox.run("rm", "-r", folder)
    assert not folder.exists()
    done = restore(sandbox, folder / "secret.md")
    assert done.returncode == 0, done.stderr
    assert (folder / "secret.md").read_text() == "private\n"
    assert stat.S_IMODE(os.stat(folder / "secret.md").st_mode) == 0o600
    refused = restore(sandbox, folder)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "is a folder" in refused.stderr


def test_restore_and_log_with_the_mount_down(sandbox: Sandbox, mounts: Mounts) -> None:
    sandbox.write("personal", SLUG, "MEMORY.md", OWN)
    sandbox.write("work", SLUG, "MEMORY.md", WORK)
    mount = mounts()
    index = sandbox.mnt(SLUG, "MEMORY.md")
    before = index.read_bytes()
    edit(sandbox, index, "- [Work 3](work-3.md)\n", "")
    mount.close()
    assert not index.exists()
    logged = sandbox.memfs("log", index)
    assert logged.returncode == 0, logged.stderr
    assert "rename" in logged.stdout
    done = restore(sandbox, index)
    assert done.returncode == 0, done.stderr
    assert "memfs is not mounted" in done.stdout
    assert (sandbox.folder("personal", SLUG) / "MEMORY.md").read_text() == OWN
    mounts()
    assert index.read_bytes() == before  # the hidden line shows again
