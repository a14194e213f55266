"""Tier 3: nothing an agent does through a real mount loses memory (§7.2).

Every version a write, a rename onto, a truncate or an unlink replaces is kept under the
project's `.history/`, within `versions` per file and `history_bytes` per project;
`memfs restore` puts one back, and `memfs log` says who changed what. Each change is made
by a real client in a subprocess (`sh`, `cp`, `rm`, `truncate`, Python, Claude Code's temp
file and rename).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from mounting import MOUNT_MARKS, Mounts, Sandbox, slug_of

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))

# Claude Code's write (AGENTS notes): X.tmp.<pid>.<12 hex> with O_EXCL, fsync, close, rename.
CLAUDE_WRITE = r"""
import os, sys
path, body = sys.argv[1], sys.argv[2].encode()
temp = f"{path}.tmp.{os.getpid()}.0123456789ab"
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, body)
os.fsync(fd)
os.close(fd)
os.rename(temp, path)
"""


def kept(path: Path) -> dict[str, bytes]:
    """The versions shown under ``path``'s `.history/` folder, by name."""
    if not path.exists():
        return {}
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def python(sandbox: Sandbox, script: str, *args: str | Path) -> None:
    sandbox.out("python3", "-c", script, *args)


def test_every_way_of_replacing_or_removing_a_file_keeps_the_version_before(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "notes.md", "first\n")
    sandbox.write("personal", SLUG, "plan.md", "the plan\n")
    sandbox.write("personal", SLUG, "todo.md", "a long list of things\n")
    sandbox.write("personal", SLUG, "gone.md", "soon deleted\n")
    mounts()
    mnt = sandbox.mnt(SLUG)
    sandbox.run("sh", "-c", 'echo second > "$1"', "sh", mnt / "notes.md")  # O_TRUNC
    python(sandbox, CLAUDE_WRITE, mnt / "plan.md", "the new plan\n")  # temp + rename
    sandbox.run("truncate", "-s", "6", mnt / "todo.md")
    sandbox.run("rm", mnt / "gone.md")
    history = mnt / ".history"
    assert list(kept(history / "notes.md").values()) == [b"first\n"]
    assert list(kept(history / "plan.md").values()) == [b"the plan\n"]
    assert list(kept(history / "todo.md").values()) == [b"a long list of things\n"]
    assert list(kept(history / "gone.md").values()) == [b"soon deleted\n"]
    assert (mnt / "todo.md").read_bytes() == b"a long"
    assert not (mnt / "gone.md").exists()
    # Kept in the own source, so they sync with it; named after the own source.
    own = sandbox.folder("personal", SLUG) / ".history"
    assert [n.split("@")[0] for n in os.listdir(own / "gone.md")] == ["personal"]
    # `cp` brings one back, and `memfs restore` another.
    (name,) = kept(history / "gone.md")
    sandbox.run("cp", history / "gone.md" / name, mnt / "gone.md")
    assert (mnt / "gone.md").read_bytes() == b"soon deleted\n"
    done = sandbox.memfs("restore", mnt / "notes.md")
    assert done.returncode == 0, done.stderr
    assert (mnt / "notes.md").read_bytes() == b"first\n"
    # The restore is a write like any other: what it replaced is kept too.
    assert sorted(kept(history / "notes.md").values()) == [b"first\n", b"second\n"]


def test_restore_at_a_time_and_through_here(sandbox: Sandbox, mounts: Mounts) -> None:
    project = sandbox.project_dir("shop")
    slug = slug_of(project)
    sandbox.write("personal", slug, "notes.md", "v1\n")
    mounts()
    target = sandbox.mnt(slug, "notes.md")
    for n, when in ((2, "2026-01-01T10:00:00Z"), (3, "2026-01-02T10:00:00Z")):
        sandbox.run("touch", "-d", when.replace("T", " ").rstrip("Z") + " UTC", target)
        target.write_text(f"v{n}\n")
    # v1 was replaced at 2026-01-01 (its mtime set then), v2 at 2026-01-02.
    outside = sandbox.memfs("restore", sandbox.base / "notes.md")
    assert outside.returncode == 2
    assert "not a file in a memfs mount" in outside.stderr
    here = subprocess_in(sandbox, project, "restore", "--at", "2026-01-01T12:00", "here/notes.md")
    assert here.returncode == 0, here.stderr
    assert target.read_text() == "v1\n"
    none = sandbox.memfs("restore", "--at", "2020-01-01", target)
    assert none.returncode == 2, none.stderr
    assert "no kept own version" in none.stderr, none.stderr
    bad = sandbox.memfs("restore", "--at", "yesterday", target)
    assert bad.returncode == 2
    assert "--at" in bad.stderr


def subprocess_in(sandbox: Sandbox, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`memfs` run from ``cwd``, as a user in a project; ``here/...`` is in the mount."""
    rel = [str(sandbox.mountpoint / a) if a.startswith("here/") else a for a in args]
    return subprocess.run(
        [sys.executable, "-m", "memfs", *rel],
        env=sandbox.env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=40,
        check=False,
    )


def test_versions_per_file_and_bytes_per_project_are_bounded(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write_config(limits={"versions": 5, "history_bytes": 40_000})
    mounts()
    mnt = sandbox.mnt(SLUG)
    mnt.mkdir(exist_ok=True)
    target = mnt / "notes.md"
    for n in range(50):
        target.write_bytes(b"%03d\n" % n * 100)  # 400 B each
    versions = kept(mnt / ".history" / "notes.md")
    assert len(versions) == 5, list(versions)
    assert sorted(versions.values()) == [b"%03d\n" % n * 100 for n in range(44, 49)]
    # Big files: the project's kept bytes stay within history_bytes, oldest out first,
    # and every file keeps its newest kept version.
    for n in range(4):
        for fill in b"xyz":
            (mnt / f"big-{n}.md").write_bytes(bytes([fill]) * 9_000)
    own = sandbox.folder("personal", SLUG) / ".history"
    total = sum(f.stat().st_size for f in own.rglob("*") if f.is_file())
    assert total <= 40_000, total
    for n in range(4):
        assert list(kept(mnt / ".history" / f"big-{n}.md").values()) == [b"y" * 9_000]
    assert kept(mnt / ".history" / "notes.md"), "a file keeps its newest kept version"


def test_log_names_the_process_of_each_change(sandbox: Sandbox, mounts: Mounts) -> None:
    sandbox.write("personal", SLUG, "notes.md", "first\n")
    sandbox.write("personal", SLUG, "old.md", "old\n")
    mounts()
    mnt = sandbox.mnt(SLUG)
    python(sandbox, CLAUDE_WRITE, mnt / "notes.md", "by python\n")
    sandbox.run("rm", mnt / "old.md")
    sandbox.run("cp", mnt / "notes.md", mnt / "copy.md")
    done = sandbox.memfs("log", "--json", "-n", "0")
    assert done.returncode == 0, done.stderr
    changes = json.loads(done.stdout)
    seen = [(c["what"], c["path"], c["to"], c["comm"]) for c in changes]
    temp = next(p for _, p, _, _ in seen if p.startswith("notes.md.tmp."))
    # Newest first.
    assert seen[:4] == [
        ("create", "copy.md", "", "cp"),
        ("unlink", "old.md", "", "rm"),
        ("rename", temp, "notes.md", "python3"),
        ("create", temp, "", "python3"),
    ], seen
    by_what = {c["what"] + c["path"]: c for c in changes}
    unlinked = by_what["unlinkold.md"]
    assert unlinked["before"] == 4
    assert unlinked["after"] is None
    assert unlinked["kept"].startswith(".history/old.md/personal@"), unlinked
    renamed = by_what["rename" + temp]
    assert renamed["kept"].startswith(".history/notes.md/personal@"), renamed
    assert renamed["after"] == len("by python\n")
    assert all(c["project"] == SLUG and c["pid"] > 0 for c in changes)
    # For a person, and for one file; the journal is private to the user.
    text = sandbox.memfs("log", mnt / "old.md")
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("\n") == 1, text.stdout
    assert "unlink" in text.stdout
    assert "by rm[" in text.stdout
    # A project folder is a folder in the mount too: all of its changes (issue 36).
    whole = sandbox.memfs("log", mnt)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.count("\n") == len(changes), whole.stdout
    folder = sandbox.memfs("restore", mnt)
    assert folder.returncode == 2
    assert f"{mnt} is a project folder; name a file in it" in folder.stderr
    for name in ("memfs.db", "memfs.db-wal"):  # the store holding the journal
        held = sandbox.state_dir / name
        assert held.stat().st_mode & 0o777 == 0o600
    # The journal names and sizes, never content (the store's baselines hold what memfs
    # read of each file, §7.2: they are the versions a change on disk will replace).
    with sqlite3.connect(sandbox.state_dir / "memfs.db") as db:
        rows = db.execute("SELECT * FROM journal").fetchall()
    assert len(rows) == len(changes)
    assert not any(b"by python" in repr(row).encode() for row in rows)


def test_writers_swap_and_backup_files_keep_no_versions(sandbox: Sandbox, mounts: Mounts) -> None:
    mounts()
    mnt = sandbox.mnt(SLUG)
    mnt.mkdir(exist_ok=True)
    for name in (".notes.md.swp", "notes.md~"):
        (mnt / name).write_text("one")
        (mnt / name).write_text("two")
    assert not (mnt / ".history").exists()
