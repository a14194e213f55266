"""Tier 3: undo that never destroys (issue 36): where features meet, no save, rename or
concurrent edit through a real mount loses a line or a version (§5.3, §7.2).

Each case is one a hostile tester found losing memory: an old mtime pruned at once, an
in-place save racing a rename, a rename of the index away and back, times set through a
descriptor lost at the commit. Real clients in subprocesses (`cp -p`, `rsync -a`,
`touch -d`, `mv`, `sh`, Python's `os.replace`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mounting import MOUNT_MARKS, Mounts, Sandbox, slug_of

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
OWN_INDEX = "# Memory\n- [Own](own.md)\n"
WORK_INDEX = "- [Work](work.md)\n- [Deploys](deploys.md)\n"

# Claude Code's Edit of MEMORY.md: read it, write a temp file, fsync, rename over it.
EDIT = r"""
import os, sys
path, line = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    read = f.read()
temp = f"{path}.tmp.{os.getpid()}.0123456789ab"
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, read + line.encode() + b"\n")
os.fsync(fd)
os.close(fd)
os.rename(temp, path)
"""
# Two sessions saving MEMORY.md in a loop, each as its tool does: Claude Code's Edit
# (temp file and rename) or a save in place (read, then O_TRUNC, write, a moment, close).
SAVES = r"""
import os, sys, time
path, tag, rounds, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
for n in range(rounds):
    line = f"- [{tag}{n}]({tag}{n}.md)\n".encode()
    with open(path, "rb") as f:
        read = f.read()
    if how == "edit":
        temp = f"{path}.tmp.{os.getpid()}.0123456789ab"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, read + line)
        os.fsync(fd)
        os.close(fd)
        os.rename(temp, path)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, read + line)
        time.sleep(0.01)  # the tool's own pace: the other's rename lands meanwhile
        os.close(fd)
"""


def python(sandbox: Sandbox, script: str, *args: str | Path) -> None:
    sandbox.out(sys.executable, "-c", script, *args)


def versions(folder: Path) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder))}


def test_a_version_with_an_old_mtime_is_kept_not_pruned_at_once(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write_config(limits={"versions": 20})
    sandbox.write("personal", SLUG, "notes.md", "v0\n")
    mounts()
    target = sandbox.mnt(SLUG, "notes.md")
    for n in range(1, 21):
        target.write_text(f"v{n}\n")
    history = sandbox.mnt(SLUG, ".history", "notes.md")
    assert len(os.listdir(history)) == 20
    old = sandbox.base / "old.md"
    # rsync -a, cp -p and touch -d each leave a version dated long before the kept ones.
    for tool in ("cp", "rsync", "touch"):
        old.write_text(f"from {tool}\n")
        os.utime(old, (1_000_000_000, 1_000_000_000))  # 2001
        if tool == "cp":
            sandbox.run("cp", "-p", old, target)
        elif tool == "rsync":
            sandbox.run("rsync", "-a", old, target)
        else:
            target.write_text(f"from {tool}\n")
            sandbox.run("touch", "-d", "2001-09-09", target)
        assert os.stat(target).st_mtime < 1_100_000_000, tool  # its times survived
        target.write_text(f"after {tool}\n")  # replaces the old-dated version
    kept = versions(history)
    assert len(kept) == 20
    bodies = set(kept.values())
    for tool in ("cp", "rsync", "touch"):
        assert f"from {tool}\n".encode() in bodies, (tool, sorted(kept))


def test_cp_p_onto_an_existing_file_keeps_the_times_it_set(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "notes.md", "before\n")
    mounts()
    src = sandbox.base / "src.md"
    src.write_text("copied with its times\n")
    os.utime(src, ns=(1_500_000_000_123_456_789, 1_600_000_000_987_654_321))
    target = sandbox.mnt(SLUG, "notes.md")
    sandbox.run("cp", "-p", src, target)
    assert target.read_text() == "copied with its times\n"
    assert os.stat(target).st_mtime_ns == 1_600_000_000_987_654_321
    own = sandbox.folder("personal", SLUG) / "notes.md"
    assert os.stat(own).st_mtime_ns == 1_600_000_000_987_654_321


def test_in_place_and_temp_and_rename_saves_of_the_index_at_once_lose_no_line(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "MEMORY.md", OWN_INDEX)
    sandbox.write("work", SLUG, "MEMORY.md", WORK_INDEX)
    mounts()
    index = sandbox.mnt(SLUG, "MEMORY.md")
    rounds = 25
    savers = [
        subprocess.Popen(
            [sys.executable, "-c", SAVES, str(index), tag, str(rounds), tag],
            env=sandbox.env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("place", "edit")
    ]
    errors = [err for p in savers if (err := p.communicate(timeout=40)[1]) or p.returncode]
    assert errors == []
    view = index.read_text()
    lost = [
        f"{tag}{n}"
        for tag in ("place", "edit")
        for n in range(rounds)
        if f"[{tag}{n}]({tag}{n}.md)" not in view
    ]
    assert lost == [], view
    assert "- [Work](work.md)" in view  # nothing of work's hidden
    assert "- [Own](own.md)" in view


def test_renaming_the_index_away_and_back_hides_no_other_accounts_line(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "MEMORY.md", OWN_INDEX)
    sandbox.write("work", SLUG, "MEMORY.md", WORK_INDEX)
    mounts()
    mnt = sandbox.mnt(SLUG)
    index = mnt / "MEMORY.md"
    before = index.read_text()
    sandbox.run("mv", index, mnt / "MEMORY.md~")
    assert index.read_text() == WORK_INDEX  # work's lines stay shown
    python(sandbox, EDIT, index, "- [New](new.md)")  # a tmp+rename save meanwhile
    sandbox.run("sh", "-c", 'echo "- [Fresh](fresh.md)" >> "$1"', "sh", index)  # a fresh write
    sandbox.run("rm", mnt / "MEMORY.md~")
    view = index.read_text()
    for line in [*before.splitlines(), "- [New](new.md)", "- [Fresh](fresh.md)"]:
        assert line in view.splitlines(), (line, view)
    # Away and back again: the view is as it was.
    sandbox.run("mv", index, mnt / "backup.md")
    sandbox.run("mv", mnt / "backup.md", index)
    assert sorted(index.read_text().splitlines()) == sorted(view.splitlines())


def test_a_writer_whose_file_is_replaced_before_its_close_keeps_its_bytes(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("personal", SLUG, "notes.md", "first\n")
    mounts()
    target = sandbox.mnt(SLUG, "notes.md")
    with open(target, "r+b") as slow:
        slow.seek(0)
        slow.write(b"the slow writer's words\n")
        slow.truncate()
        slow.flush()
        python(sandbox, EDIT, target, "the fast one's line")
    assert target.read_text() == "first\nthe fast one's line\n"
    kept = versions(sandbox.mnt(SLUG, ".history", "notes.md"))
    assert b"the slow writer's words\n" in kept.values(), kept
    assert b"first\n" in kept.values(), kept
