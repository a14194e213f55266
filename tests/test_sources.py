"""Tier 1: every read of the source folders (§5.1, §10)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from helpers import CLAUDE_SLUG, PI_SLUG, at, errno_of, fake_home, write

from memfs.disk import sources
from memfs.disk.sources import STAGE_PREFIX, FileStat

MAX = 1000
# A symlink met on the way to a file: O_NOFOLLOW|O_DIRECTORY gives one of these.
REFUSED = (errno.ELOOP, errno.ENOTDIR)


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    """A Claude Code memory folder: ``<root>/<slug>/memory`` with root = projects/."""
    return fake_home(tmp_path).memory(".claude")


def scan(memory: Path, max_bytes: int = MAX) -> sources.Scan:
    root = memory.parent.parent
    return sources.scan(root, (memory.parent.name, memory.name), max_bytes)


def test_scan_lists_files_recursively_with_size_and_mtime(memory: Path) -> None:
    write(memory / "MEMORY.md", "- [a](a.md)\n", at(1))
    write(memory / "a.md", "aaaa", at(2))
    write(memory / "sub" / "b.md", "b", at(3))
    write(memory / "sub" / "deeper" / "c.md", "cc", at(4))
    (memory / "empty").mkdir()
    result = scan(memory)
    assert result.exists
    assert sorted(result.files, key=lambda f: f.path) == [
        FileStat("MEMORY.md", 12, at(1)),
        FileStat("a.md", 4, at(2)),
        FileStat("sub/b.md", 1, at(3)),
        FileStat("sub/deeper/c.md", 2, at(4)),
    ]
    assert sorted(result.dirs) == ["empty", "sub", "sub/deeper"]
    assert result.left_out == []


def test_a_scan_under_a_folder_reads_that_folder_alone(memory: Path) -> None:
    """What lies below one folder, its paths relative to the origin as a whole scan gives
    them; a folder that is gone, or a file now, exists no more (the file has a look of its
    own), and neither is left out."""
    write(memory / "a.md", "a", at(1))
    write(memory / "sub" / "b.md", "b", at(2))
    write(memory / "sub" / "deeper" / "c.md", "cc", at(3))
    root, parts = memory.parent.parent, (memory.parent.name, memory.name)
    result = sources.scan(root, parts, MAX, under="sub")
    assert result.exists
    assert sorted(f.path for f in result.files) == ["sub/b.md", "sub/deeper/c.md"]
    assert result.dirs == ["sub/deeper"]
    deeper = sources.scan(root, parts, MAX, under="sub/deeper")
    assert [f.path for f in deeper.files] == ["sub/deeper/c.md"]
    for gone in ("nothing", "a.md"):
        found = sources.scan(root, parts, MAX, under=gone)
        assert (found.exists, found.files, found.left_out) == (False, [], [])


def test_a_scan_under_a_folder_too_deep_to_read_says_whether_it_is_there(
    memory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_DEPTH a folder is not looked into, as a whole scan leaves it; whether it
    is there still counts (stress-ng's dirdeep: a folder the view kept after it went on
    disk made its parent impossible to remove)."""
    monkeypatch.setattr(sources, "MAX_DEPTH", 2)
    write(memory / "a" / "b" / "c" / "d.md", "d", at(1))
    root, parts = memory.parent.parent, (memory.parent.name, memory.name)
    there = sources.scan(root, parts, MAX, under="a/b/c")
    assert there.exists
    assert (there.files, there.dirs) == ([], [])
    assert there.left_out == [("a/b/c", f"{sources.NOT_READ}deeper than 2 folders")]
    gone = sources.scan(root, parts, MAX, under="a/b/x")
    assert (gone.exists, gone.left_out) == (False, [])


def test_scan_leaves_out_symlinks_fifos_and_big_files(memory: Path, tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "secret.md", "secret")
    write(memory / "ok.md", "ok")
    (memory / "file-link.md").symlink_to(outside)
    (memory / "dir-link").symlink_to(outside.parent)
    (memory / "dangling.md").symlink_to(tmp_path / "nowhere")
    os.mkfifo(memory / "fifo.md")
    write(memory / "big.md", b"x" * (MAX + 1))
    write(memory / "edge.md", b"x" * MAX)  # exactly the cap is kept
    write(memory / "sub" / "inner-link.md", "").unlink()
    (memory / "sub" / "inner-link.md").symlink_to(outside)
    result = scan(memory)
    assert sorted(f.path for f in result.files) == ["edge.md", "ok.md"]
    assert result.dirs == ["sub"]
    reasons = dict(result.left_out)
    assert reasons == {
        "file-link.md": "symlink",
        "dir-link": "symlink",
        "dangling.md": "symlink",
        "fifo.md": "special file",
        "big.md": f"over {MAX} bytes",
        "sub/inner-link.md": "symlink",
    }


def test_scan_never_follows_a_folder_symlink(memory: Path, tmp_path: Path) -> None:
    write(tmp_path / "outside" / "secret.md", "secret")
    (memory / "linked").symlink_to(tmp_path / "outside")
    result = scan(memory)
    assert result.files == []
    assert result.dirs == []


def test_scan_of_a_deep_tree_does_not_crash(tmp_path: Path) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # §5.1: odd entries are left out, never fatal. _scan_dir/_scan_subdir recurse two
    # frames per level, so ~500 nested folders raise RecursionError out of scan().
    root = tmp_path / "root"
    (root / "s").mkdir(parents=True)
    fd = os.open(root / "s", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(600):
            os.mkdir("a", dir_fd=fd)
            child = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    result = sources.scan(root, ("s",), 1000)
    assert result.exists


def test_scan_reports_stage_files_by_name(memory: Path) -> None:
    write(memory / "a.md", "a")
    write(memory / f"{STAGE_PREFIX}0123456789abcdef", "half-written")
    write(memory / "sub" / f"{STAGE_PREFIX}feedfacefeedface", "half-written")
    result = scan(memory)
    assert sorted(f.path for f in result.files) == ["a.md"]
    # memfs's own temp files are never part of the view; the project counts them in status.
    assert sorted(f.path for f, _ in result.by_name) == [
        f"{STAGE_PREFIX}0123456789abcdef",
        f"sub/{STAGE_PREFIX}feedfacefeedface",
    ]
    assert all(why == "in flight: memfs stage file" for _, why in result.by_name)


def test_scan_leaves_this_processs_own_stages_alone(memory: Path) -> None:
    # Its writers' handles know them (`memfs status` asks those), and the watcher skips
    # their events: a record of one here would outlive it (issue 36).
    write(memory / "a.md", "a")
    write(memory / f"{sources.OWN_STAGE_PREFIX}0123abcd", "half-written")
    write(memory / f"{sources.OWN_MARK_PREFIX}0123abcd", "")
    write(memory / f"{STAGE_PREFIX}adopt-0123", "another process's")
    result = scan(memory)
    assert [f.path for f in result.files] == ["a.md"]
    assert [f.path for f, _ in result.by_name] == [f"{STAGE_PREFIX}adopt-0123"]
    assert result.left_out == []


def test_scan_reports_temp_and_tool_files_by_name(memory: Path) -> None:
    write(memory / "notes.md", "notes")
    write(memory / ".syncthing.notes.md.tmp", b"\0" * 64)
    write(memory / "sub" / ".notes.md.swp", "swap")
    write(memory / "sub" / "notes.sync-conflict-20261201-075022-C7DWIIF.md", "a version")
    result = scan(memory)
    # A conflict copy is a file like any other here: the project makes it history.
    assert sorted(f.path for f in result.files) == [
        "notes.md",
        "sub/notes.sync-conflict-20261201-075022-C7DWIIF.md",
    ]
    assert sorted((f.path, f.size, why) for f, why in result.by_name) == [
        (".syncthing.notes.md.tmp", 64, "in flight: Syncthing temp file"),
        ("sub/.notes.md.swp", 4, "in flight: editor swap file"),
    ]
    assert result.left_out == []


def test_scan_never_walks_a_tool_folder(memory: Path) -> None:
    write(memory / "a.md", "a")
    write(memory / ".git" / "objects" / "ab" / "cdef", b"x\x9c\0")
    write(memory / ".stversions" / "a~20261201-075022.md", "archived")
    (memory / ".stfolder").mkdir()
    write(memory / "sub" / ".stfolder", "")  # old Syncthing: the marker is a file
    result = scan(memory)
    assert [f.path for f in result.files] == ["a.md"]
    assert result.dirs == ["sub"]
    assert sorted(result.left_out) == [
        (".git", "sync tool's file: git repository"),
        (".stfolder", "sync tool's file: Syncthing folder marker"),
        (".stversions", "sync tool's file: Syncthing versions"),
    ]
    assert [(f.path, why) for f, why in result.by_name] == [
        ("sub/.stfolder", "sync tool's file: Syncthing folder marker")
    ]


def test_scan_refuses_a_symlinked_memory_folder(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    real = tmp_path / "elsewhere"
    write(real / "a.md", "a")
    project = fh.account(".claude") / "projects" / CLAUDE_SLUG
    project.mkdir(parents=True)
    (project / "memory").symlink_to(real)
    result = scan(project / "memory")
    assert not result.exists
    assert result.files == []
    assert result.left_out == [("", "symlink or not a folder")]


def test_scan_refuses_a_symlinked_slug_folder(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    real = fh.memory(".claude-work")
    write(real / "a.md", "a")
    root = fh.account(".claude") / "projects"
    (root / CLAUDE_SLUG).symlink_to(real.parent)
    result = sources.scan(root, (CLAUDE_SLUG, "memory"), MAX)
    assert not result.exists
    assert result.files == []


def test_scan_of_a_missing_folder(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    root = fh.account(".claude") / "projects"
    result = sources.scan(root, ("-nothing", "memory"), MAX)
    assert not result.exists
    assert result.files == []
    assert result.left_out == []


def test_scan_of_a_vanished_folder(memory: Path) -> None:
    write(memory / "a.md", "a")
    assert scan(memory).exists
    (memory / "a.md").unlink()
    memory.rmdir()
    result = scan(memory)
    assert not result.exists
    assert result.files == []


def test_scan_of_a_file_where_the_folder_should_be(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    project = fh.account(".claude") / "projects" / CLAUDE_SLUG
    write(project / "memory", "not a folder")
    result = scan(project / "memory")
    assert not result.exists
    assert result.left_out == [("", "symlink or not a folder")]


def test_scan_of_pi_folder_without_tail(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    write(fh.pi() / "notes.md", "pi notes", at(5))
    result = sources.scan(fh.pi_root, (PI_SLUG,), MAX)
    assert result.files == [FileStat("notes.md", 8, at(5))]


def test_list_slug_folders_ignores_files_and_symlinks(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    root = fh.account(".claude") / "projects"
    fh.memory(".claude", "-home-a-one")
    fh.memory(".claude", "-home-a-two")
    write(root / "-home-a-file", "not a project")
    (root / "-home-a-link").symlink_to(root / "-home-a-one")
    (root / "-home-a-dangling").symlink_to(tmp_path / "nowhere")
    assert sorted(sources.list_slug_folders(root)) == ["-home-a-one", "-home-a-two"]


def test_list_slug_folders_of_a_missing_root(tmp_path: Path) -> None:
    assert sources.list_slug_folders(tmp_path / "missing") == []
    write(tmp_path / "file", "x")
    assert sources.list_slug_folders(tmp_path / "file") == []


def test_read_file_reads_at_most_limit(memory: Path) -> None:
    write(memory / "sub" / "a.md", "0123456789")
    parts = (memory.parent.name, memory.name)
    root = memory.parent.parent
    assert sources.read_file(root, parts, "sub/a.md", 100) == b"0123456789"
    assert sources.read_file(root, parts, "sub/a.md", 4) == b"0123"
    assert sources.read_file(root, parts, "sub/a.md", 0) == b""


def test_read_file_leaves_the_atime_as_it_was(memory: Path) -> None:
    # An atime older than the mtime is one relatime would move at the next read: memfs's
    # own reads (renderings, read-ahead) must not (a utimensat through the mount stays).
    target = write(memory / "a.md", "body")
    os.utime(target, ns=(1_000_000_000, os.stat(target).st_mtime_ns))
    assert sources.read_file(memory.parent.parent, (memory.parent.name, memory.name), "a.md", 100)
    assert os.stat(target).st_atime_ns == 1_000_000_000


def test_read_file_refuses_symlinks(memory: Path, tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "secret.md", "secret")
    (memory / "link.md").symlink_to(outside)
    (memory / "dir").symlink_to(outside.parent)
    parts = (memory.parent.name, memory.name)
    root = memory.parent.parent
    assert errno_of(sources.read_file, root, parts, "link.md", 100) == errno.ELOOP
    assert errno_of(sources.read_file, root, parts, "dir/secret.md", 100) in REFUSED
    assert errno_of(sources.open_file, root, parts, "link.md") == errno.ELOOP
    assert errno_of(sources.open_file, root, parts, "dir/secret.md") in REFUSED


def test_read_file_refuses_a_fifo_without_blocking(memory: Path) -> None:
    os.mkfifo(memory / "fifo.md")
    parts = (memory.parent.name, memory.name)
    root = memory.parent.parent
    assert errno_of(sources.read_file, root, parts, "fifo.md", 100) == errno.EINVAL
    assert errno_of(sources.open_file, root, parts, "fifo.md") == errno.EINVAL


def test_read_file_refuses_dot_dot(memory: Path) -> None:
    write(memory.parent / "escape.md", "above the memory folder")
    parts = (memory.parent.name, memory.name)
    root = memory.parent.parent
    assert errno_of(sources.read_file, root, parts, "../escape.md", 100) == errno.EINVAL
    assert errno_of(sources.read_file, root, parts, "./a.md", 100) == errno.EINVAL


def test_read_file_of_a_missing_file(memory: Path) -> None:
    parts = (memory.parent.name, memory.name)
    with pytest.raises(FileNotFoundError):
        sources.read_file(memory.parent.parent, parts, "gone.md", 100)


def test_open_file_gives_a_readable_descriptor(memory: Path) -> None:
    write(memory / "a.md", "hello")
    fd = sources.open_file(memory.parent.parent, (memory.parent.name, memory.name), "a.md")
    try:
        assert os.pread(fd, 10, 1) == b"ello"
    finally:
        os.close(fd)


def test_stat_file(memory: Path, tmp_path: Path) -> None:
    write(memory / "a.md", "abc", at(7))
    write(memory / "big.md", b"x" * (MAX + 1))
    (memory / "link.md").symlink_to(memory / "a.md")
    os.mkfifo(memory / "fifo.md")
    (memory / "dir").mkdir()
    root, parts = memory.parent.parent, (memory.parent.name, memory.name)
    assert sources.stat_file(root, parts, "a.md", MAX) == FileStat("a.md", 3, at(7))
    for path in ("big.md", "link.md", "fifo.md", "dir", "gone.md", "dir/gone.md"):
        assert sources.stat_file(root, parts, path, MAX) is None, path


def test_look_each_says_what_look_says_of_each_and_opens_each_folder_once(
    memory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(memory / "a.md", "abc", at(7))
    write(memory / "sub" / "b.md", "de", at(8))
    write(memory / "big.md", b"x" * (MAX + 1))
    (memory / "link").symlink_to(memory / "sub")
    root, parts = memory.parent.parent, (memory.parent.name, memory.name)
    paths = ["a.md", "sub/b.md", "big.md", "gone.md", "sub", "a.md", "link/b.md", "no/b.md"]
    each = [sources.look(root, parts, path, MAX) for path in paths]
    assert each[:3] == [FileStat("a.md", 3, at(7)), FileStat("sub/b.md", 2, at(8)), each[2]]
    assert isinstance(each[2], str)  # left out, and why
    assert each[3:] == [None, None, each[0], None, None]  # gone, a folder, link, no folder
    opened: list[tuple[tuple[str, ...], tuple[str, ...] | None]] = []
    folder_fd = sources.folder_fd

    def counted(
        root: Path, parts: tuple[str, ...], near: tuple[tuple[str, ...], int] | None = None
    ) -> int:
        opened.append((tuple(parts), near[0] if near else None))
        return folder_fd(root, parts, near)

    monkeypatch.setattr(sources, "folder_fd", counted)
    assert sources.look_each([(root, parts, path) for path in paths], MAX) == each
    # Each folder once: memory/ for its five names, and the link and the missing folder
    # (which fail, and would be tried again); those below memory/ walked from it, the link
    # refused there as from the root.
    below = [(*parts, "sub"), (*parts, "link"), (*parts, "no")]
    assert sorted(opened) == sorted([(parts, None)] + [(p, parts) for p in below])


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a.md", True),
        (".hidden", True),
        ("x" * 255, True),
        ("x" * 256, False),
        ("é" * 128, False),  # 256 bytes in UTF-8
        ("", False),
        (".", False),
        ("..", False),
        ("a/b", False),
        ("a\0b", False),
    ],
)
def test_valid_name(name: str, valid: bool) -> None:
    assert sources.valid_name(name) is valid


def test_split() -> None:
    assert sources.split("a//b/c/") == ["a", "b", "c"]
    assert sources.split("") == []


@pytest.fixture
def vanishing(memory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``going.md``, renamed away between memfs's stat of it and its access check (a
    writer's temp file renamed over its target a moment later)."""
    going = write(memory / "going.md", "a temp file\n", at(5))
    access = os.access

    def renamed_meanwhile(name: str, mode: int, **kwargs: object) -> bool:
        if name == "going.md" and going.exists():
            going.rename(memory / "gone.md")
            return False  # what access() says of a name that is not there
        return access(name, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sources.os, "access", renamed_meanwhile)
    return going


def test_a_file_gone_between_its_stat_and_its_access_check_is_not_unreadable(
    memory: Path, vanishing: Path
) -> None:
    root, parts = memory.parent.parent, (memory.parent.name, memory.name)
    assert sources.look(root, parts, "going.md", MAX) is None  # gone, not left out


def test_a_scan_meeting_a_file_gone_after_its_stat_goes_on_without_it(
    memory: Path, vanishing: Path
) -> None:
    write(memory / "stays.md", "here\n", at(6))
    found = scan(memory)
    # gone.md came after the listing: its own event brings it.
    assert [f.path for f in found.files] == ["stays.md"]
    assert found.left_out == []  # nothing logged and counted as unreadable


@pytest.fixture
def no_read_access(monkeypatch: pytest.MonkeyPatch) -> None:
    """memfs runs as a user whom mode 0 denies: access() says no to every file. (Root's
    access() always says yes, and these tests may run as root.)"""

    def denied(name: str, mode: int, **kwargs: object) -> bool:
        return False

    monkeypatch.setattr(sources.os, "access", denied)


def test_a_file_memfs_cannot_read_is_listed_with_its_mode(
    memory: Path, no_read_access: None
) -> None:
    # `chmod 000 notes.md`, or a create with mode 0: never left out for its mode. The
    # project decides what an unreadable file of each source shows (own: the head still).
    locked = write(memory / "notes.md", "own words\n", at(5))
    locked.chmod(0)
    write(memory / ".notes.md.swp", "vim's swap\n", at(5)).chmod(0)
    found = scan(memory)
    assert found.left_out == []
    assert found.files == [FileStat("notes.md", 10, at(5), mode=0, readable=False)]
    assert [(f.path, f.readable) for f, _ in found.by_name] == [(".notes.md.swp", False)]
    root, parts = memory.parent.parent, (memory.parent.name, memory.name)
    assert sources.look(root, parts, "notes.md", MAX) == found.files[0]
    assert sources.stat_file(root, parts, "notes.md", MAX) == found.files[0]


def test_a_readable_file_says_so(memory: Path) -> None:
    write(memory / "notes.md", "words\n", at(5)).chmod(0o640)
    assert scan(memory).files == [FileStat("notes.md", 6, at(5), mode=0o640, readable=True)]


def test_open_below_refuses_every_symlink_on_the_way(memory: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    write(outside / "deep" / "x.md", "outside")
    write(memory / "sub" / "deep" / "x.md", "inside")
    (memory / "folder-link").symlink_to(outside)
    (memory / "sub" / "file-link.md").symlink_to(outside / "deep" / "x.md")
    top = os.open(memory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = sources.open_below(top, ["sub", "deep", "x.md"], sources.FILE_FLAGS)
        try:
            assert os.read(fd, 100) == b"inside"
        finally:
            os.close(fd)
        fd = sources.open_below(top, ["sub", "deep"])
        try:
            assert os.path.samestat(os.fstat(fd), (memory / "sub" / "deep").stat())
        finally:
            os.close(fd)
        for parts in (["folder-link", "deep"], ["folder-link", "deep", "x.md"]):
            assert errno_of(sources.open_below, top, parts, sources.FILE_FLAGS) in REFUSED
        assert errno_of(sources.open_below, top, ["sub", "file-link.md"], sources.FILE_FLAGS) in (
            REFUSED
        )
        assert errno_of(sources.open_below, top, ["sub", "deep", "x.md", "y"]) == errno.ENOTDIR
        assert errno_of(sources.open_below, top, ["sub", "gone"]) == errno.ENOENT
        for bad in ("..", ".", "", "a/b"):
            assert errno_of(sources.open_below, top, ["sub", bad]) == errno.EINVAL
        os.fstat(top)  # the caller's descriptor stays open
    finally:
        os.close(top)
