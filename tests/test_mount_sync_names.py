"""Tier 3: a sync tool's files through a real mount (§2, §5.1, §5.2, §12).

A read-only source is a folder a sync tool fills: its root holds `.stfolder`, `.stversions`
and `.git`, and a project folder holds a temp file in flight (full of NUL bytes, as
Syncthing's sparse temp files are) and a conflict copy. None of them may show as a project
or a head; the conflict copy is a version of its original under `.history/`. The same holds
for files that appear while the mount is live (the watcher's single-path updates).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from mounting import MOUNT_MARKS, Mounts, Sandbox, errno_of, set_age, slug_of, wait_until

from memfs.view.project import history_stamp

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/notes_app"))
TEMP = ".syncthing.x.md.tmp"
CONFLICT = "notes.sync-conflict-20261201-075022-C7DWIIF.md"
SOON = 1.0  # §5.4


def listing(path: Path) -> set[str]:
    return set(os.listdir(path))


def read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def build(box: Sandbox) -> Path:
    """The work source as Syncthing leaves it; returns work's project folder."""
    root = box.source("work").root
    (root / ".stfolder").mkdir()
    # With versioning on, Syncthing archives old versions under .stversions, slug by slug.
    box_archive = root / ".stversions" / "memory"  # what a project `-stversions` would read
    box_archive.mkdir(parents=True)
    (box_archive / "notes~20261130-101010.md").write_text("ARCHIVED by syncthing\n")
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    box.write("personal", SLUG, "MEMORY.md", "- [Notes](notes.md)\n", age_days=3)
    box.write("work", SLUG, "notes.md", "WORK notes\n", age_days=2)
    box.write("work", SLUG, TEMP, b"\0" * 65536, age_days=0.01)
    box.write("work", SLUG, CONFLICT, "the other machine's edit\n", age_days=0.02)
    return box.source("work").folder(SLUG)


def test_sync_tool_files_never_show_as_projects_or_heads(sandbox: Sandbox, mounts: Mounts) -> None:
    work = build(sandbox)
    mount = mounts()

    root = listing(sandbox.mountpoint)
    assert root == {"global", "here", SLUG}, root
    for phantom in ("-stfolder", "-stversions", "-git"):
        # Any slug may be looked up (a project with no memory yet, §4): then it is
        # empty, nothing of the marker folder shows in it.
        if errno_of(os.stat, sandbox.mnt(phantom)) != errno.ENOENT:
            assert listing(sandbox.mnt(phantom)) == {"PREAMBLE.md"}, phantom

    files = listing(sandbox.mnt(SLUG))
    assert files == {"PREAMBLE.md", "MEMORY.md", "notes.md", ".history"}, files
    assert errno_of(os.stat, sandbox.mnt(SLUG, TEMP)) == errno.ENOENT
    assert errno_of(os.stat, sandbox.mnt(SLUG, CONFLICT)) == errno.ENOENT
    assert read(sandbox.mnt(SLUG, "notes.md")) == b"WORK notes\n"

    # The conflict copy is a version of notes.md, named by its source and mtime.
    stamp = history_stamp(os.stat(work / CONFLICT).st_mtime_ns)
    versions = listing(sandbox.mnt(SLUG, ".history", "notes.md"))
    assert versions == {f"work@{stamp}.md"}, versions
    copy = sandbox.mnt(SLUG, ".history", "notes.md", f"work@{stamp}.md")
    assert read(copy) == b"the other machine's edit\n"

    preamble = read(sandbox.mnt(SLUG, "PREAMBLE.md"))
    assert b"\0" not in preamble
    for name in (b".syncthing", b"sync-conflict", b"the other machine's edit", b"ARCHIVED"):
        assert name not in preamble, name
    assert b"WORK notes" in preamble

    left_out = {(item["path"], item["why"]) for item in mount.status()["left_out"]}
    assert (TEMP, "in flight: Syncthing temp file") in left_out, left_out


def test_sync_tool_files_that_appear_while_mounted(sandbox: Sandbox, mounts: Mounts) -> None:
    work = build(sandbox)
    mounts()
    preamble_path = sandbox.mnt(SLUG, "PREAMBLE.md")
    assert b"WORK notes" in read(preamble_path)  # loaded, watched, caches warm

    # Syncthing starts a transfer: a sparse temp file, then a conflict copy lands.
    big = work / ".syncthing.big.md.tmp"
    with open(big, "wb") as f:
        f.truncate(900_000)
    second = "notes.sync-conflict-20261201-080000-ABCDEF2.md"
    (work / second).write_text("a second conflicting edit\n")
    set_age(work / second, 0.001)
    stamp = history_stamp(os.stat(work / second).st_mtime_ns)
    wait_until(
        lambda: f"work@{stamp}.md" in listing(sandbox.mnt(SLUG, ".history", "notes.md")),
        SOON * 5,
        "the new conflict copy under .history/notes.md",
    )
    # Events come in order: the temp file was seen before the conflict copy.
    assert listing(sandbox.mnt(SLUG)) == {"PREAMBLE.md", "MEMORY.md", "notes.md", ".history"}
    preamble = read(preamble_path)
    assert b"\0" not in preamble
    assert b".syncthing" not in preamble
    assert b"sync-conflict" not in preamble

    # The transfer ends: Syncthing renames the temp file over its target.
    big.write_bytes(b"BIG arrived whole\n")
    big.rename(work / "big.md")
    wait_until(lambda: "big.md" in listing(sandbox.mnt(SLUG)), SOON * 5, "big.md shows")
    assert read(sandbox.mnt(SLUG, "big.md")) == b"BIG arrived whole\n"

    # A marker folder made at the root while mounted is no project either.
    root = sandbox.source("work").root
    (root / ".stversions-new").mkdir()
    other = slug_of(Path("/home/u/src/other"))
    (root / other / "memory").mkdir(parents=True)
    wait_until(lambda: other in listing(sandbox.mountpoint), SOON * 5, "the new project")
    assert listing(sandbox.mountpoint) == {"global", "here", SLUG, other}


def test_a_conflict_copy_name_written_through_the_mount_is_refused(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """Issue 36: `echo x > a.sync-conflict-<date>-<time>-<dev>.md` was accepted, then the
    name gave ENOENT: the view shows a conflict copy only under .history/<original>/. A
    writer gets EINVAL at once instead, as for the other names no view shows (§5.1)."""
    work = build(sandbox)
    own = sandbox.folder("personal", SLUG)
    mounts()
    project = sandbox.mnt(SLUG)
    mine = "notes.sync-conflict-20240101-120000-ABCDEFG.md"
    for name in (mine, "notes (conflicted copy 2024-01-01 120000).md"):
        done = sandbox.run("sh", "-c", f"echo x > '{project / name}'", check=False)
        assert done.returncode != 0, name
        assert b"Invalid argument" in done.stderr, done.stderr
        assert not (own / name).exists(), name
    (project / "draft.md").write_bytes(b"draft\n")
    assert errno_of(os.rename, project / "draft.md", project / mine) == errno.EINVAL
    assert read(project / "draft.md") == b"draft\n"
    assert mine not in listing(project)
    # The real conflict copy is still the one version of notes.md under .history/.
    stamp = history_stamp(os.stat(work / CONFLICT).st_mtime_ns)
    assert listing(project / ".history" / "notes.md") == {f"work@{stamp}.md"}
