"""Tier 1: every write to a source folder: staged files, atomic replace, kept history (§7)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import CLAUDE_SLUG, at, errno_of, set_mtime, write

from memfs.disk import inotify, sources, staging
from memfs.disk.sources import STAGE_PREFIX
from memfs.disk.staging import Keep, Place, Stage
from memfs.view.project import history_stamp

# A symlink met where a folder should be: O_NOFOLLOW|O_DIRECTORY gives one of these.
REFUSED = (errno.ELOOP, errno.ENOTDIR)


@pytest.fixture
def place(tmp_path: Path) -> Place:
    """The own source's memory folder of one project; the source root exists, the rest not."""
    root = tmp_path / "home" / ".claude" / "projects"
    root.mkdir(parents=True)
    return Place(root, (CLAUDE_SLUG, "memory"))


def folder_of(place: Place) -> Path:
    return place.root.joinpath(*place.parts)


def temps(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(n for n in os.listdir(folder) if n.startswith(STAGE_PREFIX))


@pytest.fixture
def stages() -> Iterator[list[Stage]]:
    """Stages a test opens; every one is aborted (closed) at the end, as the adapter does."""
    opened: list[Stage] = []
    yield opened
    for stage in opened:
        stage.abort()


def open_stage(
    stages: list[Stage], place: Place, name: str, *, copy: bool, mode: int = 0o644
) -> Stage:
    """A stage of ``name``: a copy of the current file (copy=True) or empty, like O_TRUNC."""
    initial = None
    target = folder_of(place) / name
    if copy and target.exists():
        initial = os.open(target, os.O_RDONLY)
    try:
        stage = Stage(place, name, initial_fd=initial, mode=mode)
    finally:
        if initial is not None:
            os.close(initial)
    stages.append(stage)
    return stage


def test_a_stage_says_whether_its_temp_file_is_on_disk(place: Place, stages: list[Stage]) -> None:
    folder = folder_of(place)
    stage = open_stage(stages, place, "a.md", copy=False)
    assert stage.on_disk()
    stage.write(0, b"x")
    stage.commit()
    assert not stage.on_disk()  # committed: no temp file any more, the target is the file
    again = open_stage(stages, place, "b.md", copy=False)
    (folder / again.temp).unlink()  # by hand, in the source
    assert not again.on_disk()
    again.abort()
    assert not again.on_disk()


def test_place() -> None:
    place = Place(Path("/r"), ("a",))
    assert place.below("b", "c") == Place(Path("/r"), ("a", "b", "c"))
    assert str(place) == "/r/a"


def test_commit_replaces_the_target_atomically(place: Place, stages: list[Stage]) -> None:
    folder = folder_of(place)
    target = write(folder / "a.md", "old", at(1))
    before = target.stat().st_ino
    stage = open_stage(stages, place, "a.md", copy=False)
    assert stage.size() == 0
    assert stage.write(0, b"new body") == 8
    # Staged in the same folder, under memfs's own prefix, invisible to scans.
    assert temps(folder) == [stage.temp]
    assert [f.path for f in sources.scan(place.root, place.parts, 1000).files] == ["a.md"]
    assert target.read_bytes() == b"old"
    staged_ino = os.fstat(stage.fd).st_ino
    st = stage.commit()
    assert st is not None
    # The temp file itself became the target: nothing was copied, nothing half-written.
    assert target.read_bytes() == b"new body"
    assert target.stat().st_ino == staged_ino != before
    assert st.st_ino == staged_ino
    assert temps(folder) == []


def test_a_commit_keeps_the_stage_descriptor_number_valid_throughout(
    place: Place, stages: list[Stage]
) -> None:
    """The adapter's thread may fstat a stage (a getattr asking its size) while a worker
    commits it: the number never closes under that call. The writable descriptor still
    closes before the rename, so its IN_CLOSE_WRITE names the stage, which the watcher
    skips, not the target."""
    folder = folder_of(place)
    write(folder / "a.md", "old", at(1))
    stage = open_stage(stages, place, "a.md", copy=False)
    stage.write(0, b"new body")
    number, staged = stage.fd, os.fstat(stage.fd)
    watcher = inotify.Inotify()
    try:
        watcher.add(folder, inotify.IN_CLOSE_WRITE)
        assert stage.commit() is not None
        data = os.read(watcher.fd, 1 << 16)
    finally:
        watcher.close()
    assert stage.fd == number
    assert fcntl.fcntl(number, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    assert fcntl.fcntl(number, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    assert os.fstat(number).st_ino == staged.st_ino == (folder / "a.md").stat().st_ino
    closed = [name for _, mask, _, name in inotify.parse(data) if mask & inotify.IN_CLOSE_WRITE]
    assert closed
    assert all(name.startswith(STAGE_PREFIX) for name in closed), closed


def test_a_retarget_to_another_folder_keeps_the_folder_descriptor_number(
    place: Place, stages: list[Stage]
) -> None:
    stage = open_stage(stages, place, "a.md", copy=False)
    stage.write(0, b"moved along")
    number, other = stage._dir_fd, place.below("sub")
    stage.retarget(other, "b.md")
    assert stage._dir_fd == number
    assert os.fstat(number).st_ino == folder_of(other).stat().st_ino
    assert temps(folder_of(place)) == []
    assert temps(folder_of(other)) == [stage.temp]
    assert stage.commit() is not None
    assert (folder_of(other) / "b.md").read_bytes() == b"moved along"


def test_first_write_creates_the_folders(place: Place, stages: list[Stage]) -> None:
    assert not folder_of(place).exists()
    stage = open_stage(stages, place, "new.md", copy=False)
    stage.write(0, b"hello")
    stage.commit()
    assert (folder_of(place) / "new.md").read_bytes() == b"hello"


def test_abort_removes_the_temp_file(place: Place) -> None:
    folder = folder_of(place)
    target = write(folder / "a.md", "old")
    stage = Stage(place, "a.md", initial_fd=None, mode=0o644)
    stage.write(0, b"never committed")
    assert len(temps(folder)) == 1
    stage.abort()
    assert temps(folder) == []
    assert target.read_bytes() == b"old"
    stage.abort()  # twice is safe
    assert stage.fd == -1


def test_abort_after_commit_keeps_the_target(place: Place) -> None:
    stage = Stage(place, "a.md", initial_fd=None, mode=0o644)
    stage.write(0, b"kept")
    stage.commit()
    stage.abort()
    assert (folder_of(place) / "a.md").read_bytes() == b"kept"
    assert temps(folder_of(place)) == []


def test_a_stage_starts_as_a_copy_of_the_head(place: Place, stages: list[Stage]) -> None:
    target = write(folder_of(place) / "a.md", "hello world\n")
    stage = open_stage(stages, place, "a.md", copy=True)
    assert stage.size() == 12
    assert stage.read(0, 100) == b"hello world\n"
    stage.write(6, b"WORLD")
    assert target.read_bytes() == b"hello world\n"
    stage.commit()
    assert target.read_bytes() == b"hello WORLD\n"


def test_a_copy_up_that_fails_leaves_no_temp_file(place: Place, tmp_path: Path) -> None:
    # The head cannot be read (a folder's descriptor: EISDIR), as a copy-up that meets
    # ENOSPC fails half-way: the stage is not made, and its temp file is gone.
    write(folder_of(place) / "a.md", "hello\n")
    head = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert errno_of(Stage.copy_of, place, "a.md", 0o644, head, None) == errno.EISDIR
    finally:
        os.close(head)
    assert temps(folder_of(place)) == []


def test_a_truncating_stage_starts_empty(place: Place, stages: list[Stage]) -> None:
    target = write(folder_of(place) / "a.md", "a long old body\n")
    stage = open_stage(stages, place, "a.md", copy=False)
    assert stage.read(0, 100) == b""
    stage.write(0, b"x")
    stage.commit()
    assert target.read_bytes() == b"x"


def test_truncate_through_a_stage(place: Place, stages: list[Stage]) -> None:
    target = write(folder_of(place) / "a.md", "0123456789")
    stage = open_stage(stages, place, "a.md", copy=True)
    stage.truncate(4)
    assert stage.dirty
    stage.commit()
    assert target.read_bytes() == b"0123"


def test_commit_without_a_change_does_nothing(place: Place, stages: list[Stage]) -> None:
    folder = folder_of(place)
    target = write(folder / "a.md", "same", at(1))
    before = target.stat()
    stage = open_stage(stages, place, "a.md", copy=True)
    assert stage.commit() is None
    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    stage.abort()
    assert temps(folder) == []


def test_each_open_stages_on_its_own(place: Place, stages: list[Stage]) -> None:
    target = write(folder_of(place) / "a.md", "base")
    one = open_stage(stages, place, "a.md", copy=True)
    two = open_stage(stages, place, "a.md", copy=True)
    assert one.temp != two.temp
    one.write(0, b"ONE!")
    two.write(4, b" two")
    one.commit()
    assert target.read_bytes() == b"ONE!"
    two.commit()  # the last close wins, whole
    assert target.read_bytes() == b"base two"


def test_write_after_commit_restages(place: Place, stages: list[Stage]) -> None:
    folder = folder_of(place)
    target = folder / "a.md"
    stage = open_stage(stages, place, "a.md", copy=False)
    stage.write(0, b"first")
    stage.commit()
    first_ino = target.stat().st_ino
    reader = os.open(target, os.O_RDONLY)
    try:
        stage.restage()  # what a write session asks before its next change (view/session.py)
        stage.write(5, b", second")
        # A new temp file holds the change; the committed file is not edited in place.
        assert len(temps(folder)) == 1
        assert target.read_bytes() == b"first"
        assert os.pread(reader, 100, 0) == b"first"
        stage.commit()
        assert target.read_bytes() == b"first, second"
        assert target.stat().st_ino != first_ino
        assert os.pread(reader, 100, 0) == b"first"  # a reader keeps the whole old file
    finally:
        os.close(reader)
    assert temps(folder) == []


def test_truncate_after_commit_restages(place: Place, stages: list[Stage]) -> None:
    target = folder_of(place) / "a.md"
    stage = open_stage(stages, place, "a.md", copy=False)
    stage.write(0, b"0123456789")
    stage.commit()
    first_ino = target.stat().st_ino
    stage.restage()
    stage.truncate(3)
    assert target.read_bytes() == b"0123456789"
    stage.commit()
    assert target.read_bytes() == b"012"
    assert target.stat().st_ino != first_ino


def test_mode_is_the_one_asked_for(place: Place, stages: list[Stage]) -> None:
    old = os.umask(0o077)
    try:
        stage = open_stage(stages, place, "a.md", copy=False, mode=0o664)
    finally:
        os.umask(old)
    stage.write(0, b"x")
    stage.commit()
    target = folder_of(place) / "a.md"
    assert stat.S_IMODE(target.stat().st_mode) == 0o664
    stage.chmod(0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    # A write after that chmod keeps it.
    stage.restage()
    stage.write(1, b"y")
    stage.commit()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_bytes() == b"xy"


def test_replace_writes_whole_with_mtime(place: Place) -> None:
    staging.replace(place, "a.md", b"body", at(42))
    target = folder_of(place) / "a.md"
    assert target.read_bytes() == b"body"
    assert target.stat().st_mtime_ns == at(42)
    staging.replace(place, "a.md", b"again")
    assert target.read_bytes() == b"again"
    assert temps(folder_of(place)) == []


# --- kept handoff history -------------------------------------------------------------


def keep_of(place: Place, name: str, last: int) -> Keep:
    return Keep(place.below(".history", name), "claude", last)


def kept(place: Place, name: str) -> list[str]:
    folder = folder_of(place) / ".history" / name
    return sorted(os.listdir(folder)) if folder.exists() else []


def test_keep_version_hard_links_the_replaced_version(place: Place, stages: list[Stage]) -> None:
    folder = folder_of(place)
    target = write(folder / "handoff.md", "v1", at(1))
    old_ino = target.stat().st_ino
    stage = open_stage(stages, place, "handoff.md", copy=False)
    stage.write(0, b"v2")
    stage.commit(keep_of(place, "handoff.md", 20))
    name = f"claude@{history_stamp(at(1))}.md"
    assert kept(place, "handoff.md") == [name]
    copy = folder / ".history" / "handoff.md" / name
    assert copy.read_bytes() == b"v1"
    assert copy.stat().st_ino == old_ino  # the very bytes replaced, not a copy
    assert copy.stat().st_mtime_ns == at(1)
    assert target.read_bytes() == b"v2"


def test_a_commit_makes_the_kept_version_durable_before_it_replaces(
    place: Place, stages: list[Stage], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order that keeps a version through a crash: the new bytes' fsync, the link,
    the history folder's fsync, and only then the rename, then the folder's."""
    folder = folder_of(place)
    write(folder / "a.md", "v1", at(1))
    stage = open_stage(stages, place, "a.md", copy=False)
    stage.write(0, b"v2")
    temp = stage.temp
    calls: list[str] = []
    real_fsync, real_link, real_rename = os.fsync, os.link, os.rename

    def fsync(fd: int) -> None:
        calls.append(f"fsync {os.path.relpath(os.readlink(f'/proc/self/fd/{fd}'), folder)}")
        real_fsync(fd)

    def link(src: str, dst: str, **kw: Any) -> None:
        calls.append(f"link {src}")
        real_link(src, dst, **kw)

    def rename(src: str, dst: str, **kw: Any) -> None:
        calls.append(f"rename {src} {dst}")
        real_rename(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "rename", rename)
    stage.commit(keep_of(place, "a.md", 20))
    marks = [c for c in calls if c.startswith("link /proc/self/fd/")]  # `mark_commit`
    assert [c for c in calls if c not in marks] == [
        f"fsync {temp}",
        "link a.md",
        "fsync .history/a.md",
        f"rename {temp} a.md",
        "fsync .",
    ]
    assert (folder / "a.md").read_bytes() == b"v2"
    assert kept(place, "a.md") == [f"claude@{history_stamp(at(1))}.md"]


def test_keep_with_nothing_to_replace_keeps_nothing(place: Place, stages: list[Stage]) -> None:
    stage = open_stage(stages, place, "handoff.md", copy=False)
    stage.write(0, b"first ever")
    stage.commit(keep_of(place, "handoff.md", 20))
    assert kept(place, "handoff.md") == []


def commit_a_minute_apart(place: Place, target: Path, versions: range, last: int) -> None:
    """Commit ``v{n}`` over ``target`` for each n, v{n-1} written a minute before it."""
    for n in versions:
        set_mtime(target, at(n * 60))
        stage = Stage(place, target.name, initial_fd=None, mode=0o644)
        try:
            stage.write(0, f"v{n}".encode())
            stage.commit(keep_of(place, target.name, last))
        finally:
            stage.abort()


def test_kept_versions_are_pruned_to_the_last_n(place: Place) -> None:
    folder = folder_of(place)
    target = write(folder / "handoff.md", "v0", at(0))
    commit_a_minute_apart(place, target, range(1, 6), last=3)
    names = kept(place, "handoff.md")
    # Numbered in the order kept (v0 was number 1): the last three stay.
    assert names == [numbered(at(n * 60), n) for n in (3, 4, 5)]
    bodies = [(folder / ".history" / "handoff.md" / name).read_bytes() for name in names]
    assert bodies == [b"v2", b"v3", b"v4"]
    assert target.read_bytes() == b"v5"


def numbered(mtime_ns: int, n: int) -> str:
    """The name of the own source's kept version number ``n`` written at ``mtime_ns``."""
    return f"claude@{history_stamp(mtime_ns)}" + (f"~{n}" if n > 1 else "") + ".md"


def test_a_version_older_than_every_kept_one_is_kept_and_the_first_kept_goes(
    place: Place,
) -> None:
    # Issue 36: `cp -p`, `rsync -a`, `touch -d` give the replaced version an old mtime.
    # Pruning goes by the order kept, never by mtime: it is the newest kept, not gone.
    folder = folder_of(place)
    target = write(folder / "notes.md", "v0", at(0))
    commit_a_minute_apart(place, target, range(1, 4), last=3)
    set_mtime(target, at(-10 * 86400))  # ten days before every kept one
    stage = Stage(place, "notes.md", initial_fd=None, mode=0o644)
    try:
        stage.write(0, b"v4")
        stage.commit(keep_of(place, "notes.md", 3))
    finally:
        stage.abort()
    names = kept(place, "notes.md")
    assert numbered(at(-10 * 86400), 4) in names
    bodies = {(folder / ".history" / "notes.md" / name).read_bytes() for name in names}
    assert bodies == {b"v1", b"v2", b"v3"}  # v0, kept first, went first


def test_identical_bytes_are_one_version(place: Place) -> None:
    folder = folder_of(place)
    target = write(folder / "notes.md", "same", at(0))
    for n in range(1, 6):
        set_mtime(target, at(n))  # an mtime-only change is no new version either
        stage = Stage(place, "notes.md", initial_fd=None, mode=0o644)
        try:
            stage.write(0, b"same")
            stage.commit(keep_of(place, "notes.md", 20))
        finally:
            stage.abort()
    assert [(folder / ".history/notes.md" / n).read_bytes() for n in kept(place, "notes.md")] == [
        b"same"
    ]


def test_a_commit_killed_after_keeping_a_version_leaves_at_most_the_last_n(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memfs killed right after a version is linked into the history (the crash test's
    SIGKILL can land there): the history already holds no more than ``last``."""
    folder = folder_of(place)
    target = write(folder / "handoff.md", "v0", at(0))
    commit_a_minute_apart(place, target, range(1, 4), last=3)
    assert len(kept(place, "handoff.md")) == 3
    link = os.link

    def killed_after(*args: object, **kwargs: object) -> None:
        link(*args, **kwargs)  # type: ignore[arg-type]
        raise SystemExit("killed")

    monkeypatch.setattr(staging.os, "link", killed_after)
    set_mtime(target, at(4 * 60))
    stage = Stage(place, "handoff.md", initial_fd=None, mode=0o644)
    try:
        stage.write(0, b"v4")
        with pytest.raises(SystemExit):
            stage.commit(keep_of(place, "handoff.md", 3))
    finally:
        stage.abort()
    names = kept(place, "handoff.md")
    assert names == [numbered(at(n * 60), n) for n in (2, 3, 4)]
    assert target.read_bytes() == b"v3"  # the commit never replaced it


def test_kept_versions_in_the_same_second(place: Place) -> None:
    folder = folder_of(place)
    for body in ("v1", "v2", "v3"):
        write(folder / "handoff.md", body, at(7))
        stage = Stage(place, "handoff.md", initial_fd=None, mode=0o644)
        try:
            stage.write(0, b"next")
            stage.commit(keep_of(place, "handoff.md", 20))
        finally:
            stage.abort()
    base = f"claude@{history_stamp(at(7))}"
    assert kept(place, "handoff.md") == [f"{base}.md", f"{base}~2.md", f"{base}~3.md"]
    bodies = [(folder / ".history/handoff.md" / n).read_bytes() for n in kept(place, "handoff.md")]
    assert bodies == [b"v1", b"v2", b"v3"]


def test_keep_zero_keeps_nothing(place: Place) -> None:
    write(folder_of(place) / "handoff.md", "v1", at(1))
    stage = Stage(place, "handoff.md", initial_fd=None, mode=0o644)
    try:
        stage.write(0, b"v2")
        stage.commit(keep_of(place, "handoff.md", 0))
    finally:
        stage.abort()
    assert kept(place, "handoff.md") == []


def test_keep_leaves_other_prefixes_alone(place: Place) -> None:
    folder = folder_of(place)
    write(folder / ".history" / "handoff.md" / "work@20200101T000000Z.md", "work's")
    write(folder / "handoff.md", "v1", at(1))
    stage = Stage(place, "handoff.md", initial_fd=None, mode=0o644)
    try:
        stage.write(0, b"v2")
        stage.commit(keep_of(place, "handoff.md", 0))
    finally:
        stage.abort()
    assert kept(place, "handoff.md") == ["work@20200101T000000Z.md"]


# --- recovery, names, folders ------------------------------------------------------------


def test_remove_stale_removes_only_stage_files(place: Place) -> None:
    folder = folder_of(place)
    write(folder / f"{STAGE_PREFIX}0011223344556677", "left by a crash")
    write(folder / f"{STAGE_PREFIX}8899aabbccddeeff", "left by a crash")
    write(folder / "a.md", "a")
    write(folder / "memfs-stage-lookalike.md", "b")
    names = os.listdir(folder)
    assert staging.remove_stale(place, [*names, f"{STAGE_PREFIX}gone"]) == 2
    assert sorted(os.listdir(folder)) == ["a.md", "memfs-stage-lookalike.md"]
    assert staging.remove_stale(place.below("missing"), [f"{STAGE_PREFIX}x"]) == 0


def test_rename(place: Place) -> None:
    folder = folder_of(place)
    write(folder / "a.md", "a")
    staging.rename(place, "a.md", place.below("sub"), "b.md", noreplace=False)
    assert not (folder / "a.md").exists()
    assert (folder / "sub" / "b.md").read_bytes() == b"a"
    write(folder / "c.md", "c")
    staging.rename(place, "c.md", place.below("sub"), "b.md", noreplace=False)
    assert (folder / "sub" / "b.md").read_bytes() == b"c"


def test_rename_noreplace(place: Place) -> None:
    folder = folder_of(place)
    write(folder / "a.md", "a")
    write(folder / "b.md", "b")
    with pytest.raises(FileExistsError):
        staging.rename(place, "a.md", place, "b.md", noreplace=True)
    assert (folder / "a.md").read_bytes() == b"a"
    assert (folder / "b.md").read_bytes() == b"b"
    staging.rename(place, "a.md", place, "c.md", noreplace=True)
    assert not (folder / "a.md").exists()
    assert (folder / "c.md").read_bytes() == b"a"


def test_rename_noreplace_moves_a_folder(place: Place) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # staging.rename(noreplace=True) uses link+unlink, and link(2) refuses directories
    # (EPERM): `mv` of a folder with RENAME_NOREPLACE fails although the name is free.
    folder = folder_of(place)
    (folder / "sub").mkdir(parents=True)
    staging.rename(place, "sub", place, "moved", noreplace=True)
    assert (folder / "moved").is_dir()


def test_rename_over_a_handoff_keeps_it(place: Place) -> None:
    folder = folder_of(place)
    write(folder / "handoff.md", "old handoff", at(3))
    write(folder / "handoff.md.tmp.123.456", "new handoff", at(4))
    keep = keep_of(place, "handoff.md", 20)
    staging.rename(place, "handoff.md.tmp.123.456", place, "handoff.md", keep=keep)
    assert (folder / "handoff.md").read_bytes() == b"new handoff"
    name = f"claude@{history_stamp(at(3))}.md"
    assert kept(place, "handoff.md") == [name]
    assert (folder / ".history" / "handoff.md" / name).read_bytes() == b"old handoff"


def test_unlink_mkdir_rmdir(place: Place) -> None:
    folder = folder_of(place)
    staging.mkdir(place, "sub", 0o755)
    assert (folder / "sub").is_dir()
    with pytest.raises(FileExistsError):
        staging.mkdir(place, "sub", 0o755)
    write(folder / "sub" / "a.md", "a")
    with pytest.raises(OSError, match="not empty"):
        staging.rmdir(place, "sub")
    staging.unlink(place.below("sub"), "a.md")
    staging.rmdir(place, "sub")
    assert os.listdir(folder) == []
    with pytest.raises(FileNotFoundError):
        staging.unlink(place, "a.md")


def test_set_attrs(place: Place) -> None:
    target = write(folder_of(place) / "a.md", "0123456789")
    staging.set_attrs(place, "a.md", mode=0o600, size=3)
    staging.set_attrs(place, "a.md", times_ns=(at(1), at(2)))
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_mtime_ns == at(2)
    assert target.read_bytes() == b"012"


def test_set_attrs_size_and_times_in_one_call_keeps_the_times(place: Place) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # set_attrs applies times before size; the ftruncate then stamps mtime with the
    # current time, so a setattr asking for both gets the wrong mtime.
    target = write(folder_of(place) / "a.md", "0123456789")
    staging.set_attrs(place, "a.md", times_ns=(at(1), at(2)), size=3)
    assert target.read_bytes() == b"012"
    assert target.stat().st_mtime_ns == at(2)


# --- containment: no symlink below the source root -------------------------------------


def test_open_dir_refuses_a_symlink_component(place: Place, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (place.root / CLAUDE_SLUG).symlink_to(outside)
    for create in (False, True):
        assert errno_of(staging.open_dir, place, create=create) in REFUSED
    (outside / "memory").mkdir()
    assert errno_of(staging.open_dir, place, create=False) in REFUSED
    # Nothing is written through the link either.
    assert errno_of(staging.replace, place, "a.md", b"escaped") in REFUSED
    assert errno_of(Stage, place, "a.md", initial_fd=None, mode=0o644) in REFUSED
    assert list(outside.rglob("*")) == [outside / "memory"]


def test_open_dir_from_a_folder_open_near_it_walks_only_below_it(
    place: Place, tmp_path: Path
) -> None:
    """A kept version's folder opened from the stage's own folder: the same folder as a
    walk from the root, no symlink below it either, and ``near``'s descriptor untouched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    near = staging.open_dir(place, create=True)
    try:
        fd = staging.open_dir(place.below(".history", "a.md"), create=True, near=(place, near))
        try:
            assert os.path.samestat(os.fstat(fd), (folder_of(place) / ".history" / "a.md").stat())
        finally:
            os.close(fd)
        (folder_of(place) / "link").symlink_to(outside)
        for create in (False, True):
            below = place.below("link", "x")
            assert errno_of(staging.open_dir, below, create=create, near=(place, near)) in REFUSED
        assert list(outside.iterdir()) == []
        # A place outside ``near`` is walked from the root as before.
        other = Place(place.root, (CLAUDE_SLUG, "other"))
        os.close(staging.open_dir(other, create=True, near=(place, near)))
        assert (place.root / CLAUDE_SLUG / "other").is_dir()
        assert os.path.samestat(os.fstat(near), folder_of(place).stat())
    finally:
        os.close(near)


def test_open_dir_refuses_a_dangling_symlink_even_to_create(place: Place, tmp_path: Path) -> None:
    (place.root / CLAUDE_SLUG).mkdir()
    (place.root / CLAUDE_SLUG / "memory").symlink_to(tmp_path / "would-be-created")
    assert errno_of(staging.open_dir, place, create=True) in REFUSED
    assert not (tmp_path / "would-be-created").exists()


def test_open_dir_refuses_a_bad_component(place: Place) -> None:
    for bad in ("..", ".", "", "a/b"):
        assert errno_of(staging.open_dir, place.below(bad), create=True) == errno.EINVAL


def test_open_dir_trusts_the_root_itself(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "x").mkdir(parents=True)
    (tmp_path / "root-link").symlink_to(real)
    fd = staging.open_dir(Place(tmp_path / "root-link", ("x",)), create=False)
    os.close(fd)


def test_open_dir_of_a_missing_folder_without_create(place: Place) -> None:
    with pytest.raises(FileNotFoundError):
        staging.open_dir(place, create=False)
    assert not (place.root / CLAUDE_SLUG).exists()


def test_open_dir_makes_a_missing_source_root_only_to_create(tmp_path: Path) -> None:
    """A fresh account has no projects/ yet: its first write makes it, a read never."""
    place = Place(tmp_path / ".claude" / "projects", (CLAUDE_SLUG, "memory"))
    with pytest.raises(FileNotFoundError):
        staging.open_dir(place, create=False)
    assert not place.root.exists()
    os.close(staging.open_dir(place, create=True))
    assert folder_of(place).is_dir()
    os.close(staging.open_dir(place, create=True))  # and once it is there, it is opened


def test_a_commit_without_the_folder_fsync_still_lands_whole(tmp_path: Path) -> None:
    place = staging.Place(tmp_path, ("p",))
    stage = staging.Stage(place, "x.md.tmp.1.0123456789ab", initial_fd=None, mode=0o600)
    try:
        stage.write(0, b"body")
        assert stage.commit(sync_folder=False) is not None
    finally:
        stage.abort()
    landed = tmp_path / "p" / "x.md.tmp.1.0123456789ab"
    assert landed.read_bytes() == b"body"
    assert [p.name for p in (tmp_path / "p").iterdir()] == [landed.name]  # no temp left


def test_set_attrs_mode_does_not_follow_a_symlink_out_of_the_source(
    place: Place, tmp_path: Path
) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # §10: memfs writes only in the own source. set_attrs(mode=...) calls os.chmod
    # with follow_symlinks=True, so a symlink planted in the own source (or a file swapped
    # for one between lookup and setattr) lets chmod change a file anywhere.
    outside = write(tmp_path / "outside.txt", "not memfs's")
    os.chmod(outside, 0o644)
    folder = folder_of(place)
    folder.mkdir(parents=True)
    (folder / "a.md").symlink_to(outside)
    with pytest.raises(OSError):  # noqa: PT011 (any refusal will do)
        staging.set_attrs(place, "a.md", mode=0o600)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
