"""pins.py: kept folder descriptors never serve a file the view does not report."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from memfs.disk.pins import Pins


def _stat(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def _body(fd: int) -> bytes:
    try:
        return os.pread(fd, 100, 0)
    finally:
        os.close(fd)


def test_a_second_open_goes_through_the_kept_folder(tmp_path: Path) -> None:
    (tmp_path / "p" / "sub").mkdir(parents=True)
    f = tmp_path / "p" / "sub" / "a.md"
    f.write_text("one")
    pins = Pins()
    fd, current = pins.open(tmp_path, ("p",), "sub/a.md", _stat(f))
    assert current
    assert _body(fd) == b"one"
    assert len(pins) == 1
    fd, current = pins.open(tmp_path, ("p",), "sub/a.md", _stat(f))
    assert current
    assert _body(fd) == b"one"
    assert len(pins) == 1
    pins.close()
    assert len(pins) == 0


def test_a_folder_replaced_on_disk_is_walked_again(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "a.md").write_text("old")
    pins = Pins()
    fd, _ = pins.open(tmp_path, ("p",), "a.md", _stat(folder / "a.md"))
    os.close(fd)
    # A sync tool replaces the whole folder: the kept descriptor names the old one.
    folder.rename(tmp_path / "gone")
    folder.mkdir()
    (folder / "a.md").write_text("new body")
    want = _stat(folder / "a.md")
    fd, current = pins.open(tmp_path, ("p",), "a.md", want)
    assert current
    assert _body(fd) == b"new body"
    pins.close()


def test_a_changed_file_is_reported_as_not_current(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("one")
    pins = Pins()
    before = _stat(f)
    os.close(pins.open(tmp_path, (), "a.md", before)[0])
    f.write_text("longer now")
    fd, current = pins.open(tmp_path, (), "a.md", before)
    assert not current  # the disk holds another version than the view reports
    assert _body(fd) == b"longer now"
    pins.close()


def test_a_file_replaced_by_one_of_the_same_size_and_mtime_is_not_current(
    tmp_path: Path,
) -> None:
    # A sync tool keeps the sender's mtime: the new file looks the same but for its inode.
    f = tmp_path / "a.md"
    f.write_text("one")
    pins = Pins()
    before = _stat(f)
    os.close(pins.open(tmp_path, (), "a.md", before)[0])
    other = tmp_path / "incoming"
    other.write_text("two")
    os.utime(other, ns=(before[1], before[1]))
    other.replace(f)
    fd, current = pins.open(tmp_path, (), "a.md", before)
    assert not current
    assert _body(fd) == b"two"
    pins.close()


def test_links_and_folders_are_refused(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("x")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")
    (tmp_path / "dir").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "dir")
    pins = Pins()
    with pytest.raises(OSError, match="symbolic links") as info:
        pins.open(tmp_path, (), "link.md", (1, 0))
    assert info.value.errno == errno.ELOOP
    with pytest.raises(OSError, match="not a regular file") as info:
        pins.open(tmp_path, (), "dir", (0, 0))
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        pins.open(tmp_path, ("linked",), "x.md", (0, 0))
    pins.close()


def test_at_most_limit_folders_are_kept(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.md").write_text(name)
    pins = Pins(limit=2)
    for name in "abc":
        fd, _ = pins.open(tmp_path, (name,), "f.md", _stat(tmp_path / name / "f.md"))
        os.close(fd)
    assert len(pins) == 2
    pins.close()


def _limits_after_raise(as_nobody: bool) -> tuple[int, int, int]:
    """(soft, hard, the hard limit it started with) in a child that starts with a soft
    limit of 256 (systemd's default is 1024) and a hard one of at most 4,096, as itself or,
    with ``as_nobody``, as the user nobody, after the daemon's start raised them."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    script = (
        "import os, resource, sys\n"
        "from memfs.app import mount\n"
        "from memfs.disk import pins\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, (256, {hard}))\n"
        "if sys.argv[1] == 'nobody' and os.geteuid() == 0:\n"
        "    os.setgid(65534)\n"
        "    os.setuid(65534)  # no capability left\n"
        "mount._raise_descriptor_limit()\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "print(soft, hard, pins.Pins().limit)\n"
    )
    who = "nobody" if as_nobody else "self"
    done = subprocess.run(
        [sys.executable, "-c", script, who], capture_output=True, text=True, timeout=30, check=True
    )
    soft, raised, limit = map(int, done.stdout.split())
    assert limit == max(1, min(soft // 8, 8192))  # the folders kept: an eighth of it
    return soft, raised, hard


@pytest.mark.parametrize("as_nobody", [False, True])
def test_the_daemon_raises_its_descriptor_limit_before_it_keeps_any(as_nobody: bool) -> None:
    # The soft limit up to the hard one, which stays: as root too (CI) and as a normal user.
    soft, raised, hard = _limits_after_raise(as_nobody)
    assert (soft, raised) == (hard, hard)
