"""Tier 3: the POSIX behaviour tools rely on, through a real mount (§7.6, §7.1; issue 12).

One test (or a few) per item of §7.6, made with real syscalls from this process or with
the tools that rely on them (tar, cp -a, install, run as root): a file unlinked while open,
``EFBIG`` at ``max_file_bytes``, mode and umask at mkdir and create, chown to the owner
shown, ``utimensat``, folders' ``st_nlink``, and ``mmap``. Then §7.1's full disk: the
own source on a small tmpfs, filled nearly full, where no failed write may change any file.

Same harness as test_mount_write.py: the ``rw`` fixture fingerprints the read-only sources
before mounting and checks them at the end (memfs writes only in the own source).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import mmap
import os
import stat
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, errno_of, in_mountinfo, wait_until
from test_mount_write import (
    HANDOFF,
    PI_SLUG,
    SLUG,
    SOON,
    STAGE_PREFIX,
    Writes,
    build,
    read,
    stages,
    writes,
)

pytestmark = MOUNT_MARKS

LIMIT = 4096  # max_file_bytes of the EFBIG tests
AT_FDCWD = -100
UTIME_OMIT = (1 << 30) - 2  # <sys/stat.h>: leave this timestamp as it is


@pytest.fixture
def rw(sandbox: Sandbox, mounts: Mounts) -> Iterator[Writes]:
    yield from writes(sandbox, mounts)


def no_stage_left(rw: Writes, what: str) -> None:
    """No stage file anywhere in the own source (release comes after close: wait for it)."""
    wait_until(lambda: stages(rw.own_root) == [], SOON, f"{what}: no stage file left")


def expect_errno(code: int, call: Callable[..., object], *args: object) -> None:
    got = errno_of(call, *args)
    assert got == code, f"{call.__name__}{args}: got {errno.errorcode.get(got or 0, got)}"


# --- a file unlinked while open --------------------------------------------------------


class Tries:
    """Runs calls and keeps a line for each one that fails or returns the wrong value."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def check(self, label: str, want: object, call: Callable[..., object], *args: object) -> None:
        try:
            got = call(*args)
        except OSError as exc:
            self.problems.append(f"{label}: {errno.errorcode.get(exc.errno or 0, exc.errno)}")
            return
        if want is not ANY and got != want:
            self.problems.append(f"{label}: {got!r}, want {want!r}")


ANY = object()  # Tries.check: any value will do, only an error counts


def nlink(fd: int) -> int:
    return os.fstat(fd).st_nlink


def test_unlinked_while_open_stays_usable_until_the_last_close(
    sandbox: Sandbox, rw: Writes
) -> None:
    """fstat shows st_nlink 0; lseek, ftruncate, pread, pwrite work; gone at the last close."""
    build(sandbox)
    rw.mount()
    path = rw.mnt("notes.md")
    body = read(path)
    n = len(body)
    tries = Tries()
    fd = os.open(path, os.O_RDWR)
    reader = os.open(path, os.O_RDONLY)  # never read before the unlink
    try:
        os.unlink(path)
        assert "notes.md" not in os.listdir(rw.mnt())
        assert not rw.own("notes.md").exists()
        expect_errno(errno.ENOENT, os.stat, path)

        tries.check("fstat st_nlink", 0, nlink, fd)
        tries.check("fstat st_size", n, lambda: os.fstat(fd).st_size)
        tries.check("lseek SEEK_END", n, os.lseek, fd, 0, os.SEEK_END)
        tries.check("pread", body, os.pread, fd, 100, 0)
        tries.check("pread, read-only descriptor", body, os.pread, reader, 100, 0)
        tries.check("fstat st_nlink, read-only descriptor", 0, nlink, reader)
        tries.check("pwrite", 2, os.pwrite, fd, b"XY", 4)
        tries.check("pread after pwrite", body[:4] + b"XY" + body[6:], os.pread, fd, 100, 0)
        tries.check("ftruncate shrink", None, os.ftruncate, fd, 3)
        tries.check("fstat st_size after shrink", 3, lambda: os.fstat(fd).st_size)
        tries.check("lseek SEEK_END after shrink", 3, os.lseek, fd, 0, os.SEEK_END)
        tries.check("ftruncate grow", None, os.ftruncate, fd, 4000)
        tries.check("fstat st_size after grow", 4000, lambda: os.fstat(fd).st_size)
        tries.check("pread after grow", body[:3] + b"\0" * 5, os.pread, fd, 8, 0)
        tries.check("write at the offset", 4, os.write, fd, b"tail")
        tries.check("fsync", None, os.fsync, fd)  # asked for durability: nothing may land
        if "notes.md" in os.listdir(rw.mnt()) or rw.own("notes.md").exists():
            tries.problems.append("the name came back while the descriptors were open")
    finally:
        tries.check("close", None, os.close, fd)
    # One descriptor is still open: the file lives on for it.
    tries.check("pread after the other's close", body, os.pread, reader, 100, 0)
    tries.check("close of the last descriptor", None, os.close, reader)
    wait_until(lambda: stages(rw.own_root) == [], SOON, "no stage", must=False)
    if stages(rw.own_root):
        tries.problems.append(f"stage files left: {stages(rw.own_root)}")
    if "notes.md" in os.listdir(rw.mnt()) or errno_of(os.stat, path) != errno.ENOENT:
        tries.problems.append("the name came back through the mount at the last close()")
    if rw.own("notes.md").exists():
        tries.problems.append(f"landed on disk at close(): {read(rw.own('notes.md'))[:40]!r}")
    assert tries.problems == [], "\n".join(tries.problems)


def test_unflushed_writes_of_an_unlinked_file_never_bring_its_name_back(
    sandbox: Sandbox, rw: Writes
) -> None:
    """Existing files and new ones, written and unlinked before their first close."""
    build(sandbox)
    rw.mount()
    tries = Tries()
    for name, flags in (
        ("notes.md", os.O_RDWR),  # an own file: its stage holds a copy of the head
        ("scratch.md", os.O_RDWR | os.O_CREAT | os.O_EXCL),  # mkstemp + unlink, swap files
        ("deploys.md", os.O_RDWR),  # a read-only head: unlinking it leaves a whiteout
    ):
        path = rw.mnt(name)
        head = b"" if flags & os.O_CREAT else read(path)
        fd = os.open(path, flags, 0o600)
        try:
            tries.check(f"{name}: write", 16, os.write, fd, b"unflushed bytes\n")
            os.unlink(path)
            tries.check(f"{name}: fstat st_nlink", 0, nlink, fd)
            tries.check(f"{name}: pwrite", 5, os.pwrite, fd, b"more\n", 16)
            want = b"unflushed bytes\nmore\n" + head[21:]
            tries.check(f"{name}: pread", want, os.pread, fd, 64, 0)
        finally:
            tries.check(f"{name}: close", None, os.close, fd)
        wait_until(lambda: stages(rw.own_root) == [], SOON, "no stage", must=False)
        if name in os.listdir(rw.mnt()) or errno_of(os.stat, path) != errno.ENOENT:
            tries.problems.append(f"{name}: the name came back through the mount at close()")
        if rw.own(name).exists():
            tries.problems.append(f"{name}: landed on disk at close(): {read(rw.own(name))!r}")
    # A second descriptor of the same new file, closed last, does not bring it back either.
    path = rw.mnt("twice.md")
    first = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    second = os.open(path, os.O_RDWR)
    tries.check("twice.md: first write", 4, os.write, first, b"one\n")
    os.unlink(path)
    tries.check("twice.md: first close", None, os.close, first)
    tries.check("twice.md: second write", 4, os.write, second, b"two\n")
    tries.check("twice.md: second close", None, os.close, second)
    wait_until(lambda: stages(rw.own_root) == [], SOON, "no stage", must=False)
    if "twice.md" in os.listdir(rw.mnt()) or rw.own("twice.md").exists():
        tries.problems.append("twice.md: the name came back at the last close()")
    if stages(rw.own_root):
        tries.problems.append(f"stage files left: {stages(rw.own_root)}")
    assert tries.problems == [], "\n".join(tries.problems)


# --- EFBIG at max_file_bytes -------------------------------------------------------------


def snapshot(rw: Writes) -> dict[str, bytes]:
    """Every regular file of the project, read through the mount (PREAMBLE.md aside)."""
    found = {}
    top = rw.mnt()
    for folder, _, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, top)
            if rel != "PREAMBLE.md" and stat.S_ISREG(os.lstat(path).st_mode):
                found[rel] = read(Path(path))
    return found


def disk_files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` on disk, stage files aside."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.startswith(STAGE_PREFIX):
                path = Path(folder, name)
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def shown_on_disk_are_in_view(rw: Writes) -> list[str]:
    """Files of the own folder on disk that the mount does not show (want: none)."""
    missing = []
    for rel in disk_files(rw.own()):
        if rel.startswith(".history/"):
            continue  # kept handoff versions show under .history/ by their own names
        folder, name = os.path.split(rel)
        # The listing, not a stat: the kernel may still hold the name's entry.
        if name not in os.listdir(rw.mnt(folder)) or errno_of(os.stat, rw.mnt(rel)):
            missing.append(rel)
    return missing


def _past_end(fd: int) -> None:
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, b"b")


def _part_way(fd: int) -> None:
    # The limit is reached in the middle of the second write: all of it fails.
    os.write(fd, b"d" * 1000)
    os.lseek(fd, LIMIT - 10, os.SEEK_SET)
    os.write(fd, b"e" * 20)


# case -> (open flags, the change that passes the limit)
PAST_THE_LIMIT: dict[str, tuple[int, Callable[[int], object]]] = {
    "write at EOF": (os.O_RDWR, _past_end),
    "pwrite past EOF": (os.O_RDWR, lambda fd: os.pwrite(fd, b"c" * 10, LIMIT + 100)),
    "ftruncate": (os.O_RDWR, lambda fd: os.ftruncate(fd, LIMIT + 1)),
    "O_APPEND write": (os.O_WRONLY | os.O_APPEND, lambda fd: os.write(fd, b"x")),
    "O_TRUNC, then a write too big": (
        os.O_WRONLY | os.O_TRUNC,
        lambda fd: os.write(fd, b"f" * (LIMIT + 1)),
    ),
    "a write too big part way": (os.O_RDWR, _part_way),
}


def test_write_past_max_file_bytes_fails_with_efbig_and_changes_nothing(
    sandbox: Sandbox, rw: Writes
) -> None:
    """EFBIG at the write or truncate that passes the limit; close() returns it (§7.1)."""
    build(sandbox)
    sandbox.write_config(limits={"max_file_bytes": LIMIT})
    rw.mount()
    full = bytes(range(256)) * (LIMIT // 256)
    names = {case: f"full-{n}.md" for n, case in enumerate(PAST_THE_LIMIT)}
    for name in names.values():
        # Up to the limit exactly: allowed, committed at close.
        with open(rw.mnt(name), "wb", buffering=0) as f:
            assert f.write(full) == LIMIT
        assert read(rw.own(name)) == full
    problems = []
    for case, (flags, change) in PAST_THE_LIMIT.items():
        name = names[case]
        fd = os.open(rw.mnt(name), flags)
        try:
            got = errno_of(change, fd)
        finally:
            closed = errno_of(os.close, fd)
        problems += [
            f"{case}: {label} {errno.errorcode.get(code or 0, code)}, want EFBIG"
            for label, code in (("the change gave", got), ("close() gave", closed))
            if code != errno.EFBIG
        ]
        problems += changed_file(rw, name, full, case)
    got = errno_of(os.truncate, rw.mnt(names["ftruncate"]), LIMIT + 1)
    if got != errno.EFBIG:
        problems.append(f"truncate(path): {errno.errorcode.get(got or 0, got)}, want EFBIG")
    problems += changed_file(rw, names["ftruncate"], full, "truncate(path)")
    # A new file: the same, and it stays, empty, as its create made it (as on a local disk).
    fd = os.open(rw.mnt("huge.md"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        got = errno_of(os.write, fd, b"f" * (LIMIT + 1))
    finally:
        closed = errno_of(os.close, fd)
    if (got, closed) != (errno.EFBIG, errno.EFBIG):
        problems.append(f"new file: write gave {got}, close() gave {closed}, want EFBIG twice")
    left, _ = wait_until(lambda: stages(rw.own_root) == [], SOON, "no stage", must=False)
    if not left:
        problems.append(f"stage files left: {stages(rw.own_root)}")
    if "huge.md" not in os.listdir(rw.mnt()) or read(rw.own("huge.md")) != b"":
        problems.append("the new file that failed with EFBIG is not there, empty")
    problems += [f"on disk, not shown: {rel}" for rel in shown_on_disk_are_in_view(rw)]
    assert problems == [], "\n".join(problems)


def changed_file(rw: Writes, name: str, want: bytes, case: str) -> list[str]:
    """How ``name`` differs from ``want`` through the mount and on disk (want: not at all)."""
    found = []
    if name not in os.listdir(rw.mnt()):
        found.append(f"{case}: {name} vanished from the view")
    for where, path in (("mount", rw.mnt(name)), ("disk", rw.own(name))):
        try:
            data = read(path)
        except OSError as exc:
            found.append(f"{case}: {where}: {errno.errorcode.get(exc.errno or 0)}")
            continue
        if data != want:
            found.append(f"{case}: {where} holds {len(data)} bytes, not the old {len(want)}")
    return found


def test_nothing_written_through_the_mount_vanishes_while_on_disk(
    sandbox: Sandbox, rw: Writes
) -> None:
    """Writes through every client stay shown: a file never leaves the view while on disk."""
    build(sandbox)
    sandbox.write_config(limits={"max_file_bytes": LIMIT})
    rw.mount()
    with contextlib.suppress(OSError), open(rw.mnt("grown.md"), "wb") as f:
        f.write(b"g" * (2 * LIMIT))
    with contextlib.suppress(OSError):
        os.truncate(rw.mnt("notes.md"), 2 * LIMIT)
    with contextlib.suppress(OSError), open(rw.mnt("MEMORY.md"), "ab") as f:
        f.write(b"- line\n" * LIMIT)
    with contextlib.suppress(OSError):
        subprocess.run(
            ["truncate", "-s", str(3 * LIMIT), str(rw.mnt("sub", "deep.md"))],
            env=sandbox.env,
            capture_output=True,
            timeout=15,
            check=False,
        )
    no_stage_left(rw, "writes past the limit")
    missing = shown_on_disk_are_in_view(rw)
    assert missing == [], f"on disk in the own source, gone from the view: {missing}"
    for rel, data in disk_files(rw.own()).items():
        assert len(data) <= LIMIT, f"{rel} passed the limit on disk: {len(data)} bytes"


def test_a_file_over_the_limit_from_outside_stays_out_and_can_be_unlinked(
    sandbox: Sandbox, rw: Writes
) -> None:
    build(sandbox)
    sandbox.write_config(limits={"max_file_bytes": LIMIT})
    sandbox.write("personal", SLUG, "dumps/big.md", b"x" * (LIMIT + 1))
    sandbox.write("personal", SLUG, "dumps/small.md", b"small\n")
    mount = rw.mount()
    assert os.listdir(rw.mnt("dumps")) == ["small.md"]  # left out, as §5.1 says
    # One arriving while mounted: left out too.
    sandbox.write("personal", SLUG, "dumps/late.md", b"y" * (LIMIT + 10))
    counted, _ = wait_until(
        lambda: any(e["path"] == "dumps/late.md" for e in mount.status()["left_out"]),
        SOON,
        "late.md counted as left out",
        must=False,
    )
    problems = []
    if not counted:
        problems.append("late.md, over the limit, was not counted as left out in status")
    assert sorted(os.listdir(rw.mnt("dumps"))) == ["small.md"]
    # rm -r of the folder through the mount removes them all, on disk too.
    os.unlink(rw.mnt("dumps", "small.md"))
    for name in ("big.md", "late.md"):
        got = errno_of(os.unlink, rw.mnt("dumps", name))
        if got is not None or rw.own("dumps", name).exists():
            problems.append(f"unlink of left-out {name}: {errno.errorcode.get(got or 0, got)}")
    got = errno_of(os.rmdir, rw.mnt("dumps"))
    if got is not None or rw.own("dumps").exists():
        problems.append(f"rmdir of the emptied folder: {errno.errorcode.get(got or 0, got)}")
    else:
        assert "dumps" not in os.listdir(rw.mnt())
    assert problems == [], "\n".join(problems)


# --- mode and umask --------------------------------------------------------------------


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


MODES = (0o777, 0o755, 0o750, 0o700, 0o640, 0o604, 0o600, 0o444, 0o111, 0)


def test_mkdir_and_create_honour_mode_and_umask_exactly(sandbox: Sandbox, rw: Writes) -> None:
    build(sandbox)
    rw.mount()
    wrong = []
    for mask in (0, 0o022, 0o077):
        for mode in MODES:
            want = mode & ~mask
            folder = f"d-{mask:03o}-{mode:03o}"
            name = f"f-{mask:03o}-{mode:03o}.md"
            with umask(mask):
                os.mkdir(rw.mnt(folder), mode)
                fd = os.open(rw.mnt(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            # The creating descriptor may write whatever the mode (mode 0 included).
            assert os.write(fd, b"made\n") == 5
            os.close(fd)
            for what, mnt_path, disk in (
                ("mkdir", rw.mnt(folder), rw.own(folder)),
                ("create", rw.mnt(name), rw.own(name)),
            ):
                shown = stat.S_IMODE(os.stat(mnt_path).st_mode)
                on_disk = stat.S_IMODE(os.stat(disk).st_mode)
                if (shown, on_disk) != (want, want):
                    wrong.append(
                        f"{what} mode {mode:03o} umask {mask:03o}: shown {shown:03o}, "
                        f"on disk {on_disk:03o}, want {want:03o}"
                    )
            assert read(rw.own(name)) == b"made\n"
    assert wrong == [], "\n".join(wrong)


# --- chown to the owner shown ----------------------------------------------------------


def attrs(path: Path) -> tuple[int, int, int, int, int]:
    st = os.stat(path)
    return (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns)


def test_chown_to_the_shown_owner_succeeds_and_any_other_is_eperm(
    sandbox: Sandbox, rw: Writes
) -> None:
    build(sandbox)
    rw.mount()
    uid, gid = os.getuid(), os.getgid()
    other = 4242
    problems = []
    for rel in ("notes.md", "deploys.md", "sub", "topics"):  # own and read-only, files, folders
        path = rw.mnt(rel)
        st = os.stat(path)
        assert (st.st_uid, st.st_gid) == (uid, gid), f"{rel} shows {st.st_uid}:{st.st_gid}"
        before = attrs(path)
        on_disk = sorted(disk_files(rw.own()).items())
        for owner, group in ((uid, gid), (uid, -1), (-1, gid), (-1, -1)):
            got = errno_of(os.chown, path, owner, group)
            if got is not None:
                problems.append(f"chown({rel}, {owner}, {group}): {errno.errorcode.get(got)}")
        fd = os.open(path, os.O_RDONLY)
        try:
            got = errno_of(os.fchown, fd, uid, gid)
        finally:
            os.close(fd)
        if got is not None:
            problems.append(f"fchown({rel}, {uid}, {gid}): {errno.errorcode.get(got)}")
        got = errno_of(os.lchown, path, uid, gid)
        if got is not None:
            problems.append(f"lchown({rel}, {uid}, {gid}): {errno.errorcode.get(got)}")
        if attrs(path) != before:
            problems.append(f"chown to the shown owner changed {rel}: {before} -> {attrs(path)}")
        if sorted(disk_files(rw.own()).items()) != on_disk:
            problems.append(f"chown of {rel} to the shown owner wrote in the own source")
        for owner, group in ((other, -1), (-1, other), (other, other), (uid, other)):
            got = errno_of(os.chown, path, owner, group)
            if got != errno.EPERM:
                code = errno.errorcode.get(got or 0, got)
                problems.append(f"chown({rel}, {owner}, {group}): {code}, want EPERM")
        assert attrs(path) == before
    no_stage_left(rw, "chown")
    assert problems == [], "\n".join(problems)


def make_bundle(outside: Path) -> dict[str, tuple[bytes, int, int]]:
    """A small tree outside the mount: rel path -> (bytes, mode, mtime)."""
    tree = {
        "bundle/a.md": (b"alpha\n", 0o640, 1_700_000_000),
        "bundle/sub/b.md": (b"beta\n" * 100, 0o600, 1_700_000_100),
        "bundle/sub/deeper/c.md": (b"", 0o644, 1_700_000_200),
    }
    for rel, (data, mode, when) in tree.items():
        path = outside / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        os.utime(path, (when, when))
    return tree


def check_bundle(rw: Writes, tree: dict[str, tuple[bytes, int, int]], tool: str) -> None:
    for rel, (data, mode, when) in tree.items():
        for where, path in (("mount", rw.mnt(rel)), ("disk", rw.own(rel))):
            st = os.stat(path)
            assert read(path) == data, f"{tool}: {rel} bytes ({where})"
            assert stat.S_IMODE(st.st_mode) == mode, f"{tool}: {rel} mode ({where})"
            assert st.st_mtime_ns == when * 10**9, f"{tool}: {rel} mtime ({where})"


def test_tar_cp_and_install_as_root_into_the_mount(sandbox: Sandbox, rw: Writes) -> None:
    """Root's tools chown to the owner they read (uid 0, gid 0): that must just work."""
    assert os.getuid() == 0, "this test runs as root, as CI does"
    build(sandbox)
    rw.mount()
    outside = sandbox.base / "outside"
    tree = make_bundle(outside)
    archive = sandbox.base / "bundle.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(outside / "bundle", arcname="bundle")
    done = sandbox.run("tar", "-xf", archive, "-C", rw.mnt(), check=False)
    assert done.returncode == 0, f"tar -x as root: {done.stderr.decode(errors='replace')}"
    assert done.stderr == b""
    check_bundle(rw, tree, "tar -x")

    done = sandbox.run("cp", "-a", outside / "bundle", rw.mnt("copied"), check=False)
    assert done.returncode == 0, f"cp -a as root: {done.stderr.decode(errors='replace')}"
    copied = {k.replace("bundle/", "copied/", 1): v for k, v in tree.items()}
    check_bundle(rw, copied, "cp -a")

    src = outside / "bundle" / "a.md"
    done = sandbox.run(
        "install",
        "-o",
        "root",
        "-g",
        "root",
        "-m",
        "0640",
        src,
        rw.mnt("installed.md"),
        check=False,
    )
    assert done.returncode == 0, f"install -o root: {done.stderr.decode(errors='replace')}"
    assert read(rw.mnt("installed.md")) == b"alpha\n"
    assert stat.S_IMODE(os.stat(rw.mnt("installed.md")).st_mode) == 0o640
    no_stage_left(rw, "tar, cp -a, install")


# --- utimensat ---------------------------------------------------------------------------


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


LIBC = ctypes.CDLL(None, use_errno=True)


def utimensat(path: Path, atime_ns: int | None, mtime_ns: int | None) -> None:
    """utimensat(2) with UTIME_OMIT for a time given as None."""

    def spec(ns: int | None) -> Timespec:
        return Timespec(0, UTIME_OMIT) if ns is None else Timespec(*divmod(ns, 10**9))

    times = (Timespec * 2)(spec(atime_ns), spec(mtime_ns))
    if LIBC.utimensat(AT_FDCWD, os.fsencode(path), times, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(path))


def times_of(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_atime_ns, st.st_mtime_ns


def test_utimensat_sets_atime_and_mtime_independently(sandbox: Sandbox, rw: Writes) -> None:
    build(sandbox)
    rw.mount()
    a1, m1 = 1_600_000_000_123_456_789, 1_650_000_000_987_654_321
    a2, m2 = 1_610_000_000 * 10**9, 1_660_000_000 * 10**9
    problems = []

    def expect(rel: str, what: str, want: tuple[int, int]) -> None:
        for where, path in (("mount", rw.mnt(rel)), ("disk", rw.own(rel))):
            got = times_of(path)
            if got != want:
                problems.append(f"{rel}, {what}, {where}: (atime, mtime) {got}, want {want}")

    for rel in ("notes.md", "sub", "deploys.md"):  # own file, own folder, read-only head
        path = rw.mnt(rel)
        utimensat(path, a1, m1)
        expect(rel, "both set", (a1, m1))
        utimensat(path, a2, None)
        expect(rel, "atime alone", (a2, m1))
        utimensat(path, None, m2)
        expect(rel, "mtime alone", (a2, m2))
        # Another process sees the same (nothing cached in this one only).
        out = [int(x) for x in sandbox.out("stat", "-c", "%X %Y", path).split()]
        if out != [a2 // 10**9, m2 // 10**9]:
            problems.append(f"{rel}: stat(1) in another process shows {out}")
    no_stage_left(rw, "utimensat")
    assert problems == [], "\n".join(problems)


# --- st_nlink of folders -----------------------------------------------------------------


def nlink_errors(top: Path) -> list[str]:
    """Folders under ``top`` (itself included) whose st_nlink is not 2 + subfolders."""
    wrong = []
    stack = [top]
    while stack:
        folder = stack.pop()
        subs = [
            folder / name
            for name in os.listdir(folder)
            if stat.S_ISDIR(os.lstat(folder / name).st_mode)  # `here` is a link: not one
        ]
        nlink = os.lstat(folder).st_nlink
        if nlink != 2 + len(subs):
            wrong.append(f"{folder}: st_nlink {nlink}, {len(subs)} subfolders")
        stack += subs
    return wrong


def test_folder_nlink_is_two_plus_its_subfolders(sandbox: Sandbox, rw: Writes) -> None:
    build(sandbox)
    sandbox.write("work", SLUG, "topics/infra/db.md", "WORK db\n")
    sandbox.write("pi", PI_SLUG, "pi-only/x.md", "PI x\n")
    rw.mount()
    wrong = nlink_errors(sandbox.mountpoint)
    assert wrong == [], "\n".join(wrong)
    os.mkdir(rw.mnt("new"))
    os.mkdir(rw.mnt("new", "inner"))
    assert os.lstat(rw.mnt("new")).st_nlink == 3
    assert nlink_errors(rw.mnt()) == []
    os.rmdir(rw.mnt("new", "inner"))
    assert os.lstat(rw.mnt("new")).st_nlink == 2
    assert nlink_errors(rw.mnt()) == []


# --- mmap --------------------------------------------------------------------------------


def test_shared_writable_mmap_of_a_file_open_for_writing_is_enodev(
    sandbox: Sandbox, rw: Writes
) -> None:
    build(sandbox)
    rw.mount()
    path = rw.mnt("notes.md")
    body = read(path)
    fd = os.open(path, os.O_RDWR)
    try:
        got = errno_of(mmap.mmap, fd, len(body), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        assert got == errno.ENODEV, f"shared writable mmap: {errno.errorcode.get(got or 0, got)}"
    finally:
        os.close(fd)
    assert read(path) == body
    assert read(rw.own("notes.md")) == body
    no_stage_left(rw, "refused mmap")


def mapped(path: Path, flags: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        with mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ) as view:
            return view[:]
    finally:
        os.close(fd)


def test_read_only_mmap_works_on_plain_files_and_preamble(sandbox: Sandbox, rw: Writes) -> None:
    build(sandbox)
    rw.mount()
    failed = []
    for rel in ("notes.md", "deploys.md", "sub/deep.md", "MEMORY.md", "PREAMBLE.md"):
        path = rw.mnt(rel)
        want = read(path)
        assert want, rel
        for label, flags in (("MAP_SHARED", mmap.MAP_SHARED), ("MAP_PRIVATE", mmap.MAP_PRIVATE)):
            try:
                got = mapped(path, flags)
            except OSError as exc:
                failed.append(f"{rel} {label}: {errno.errorcode.get(exc.errno or 0)}")
                continue
            if got != want:
                failed.append(f"{rel} {label}: mapped {got[:40]!r}, read {want[:40]!r}")
    assert failed == [], "\n".join(failed)


# --- §7.1: a full own source --------------------------------------------------------

TMPFS_SIZE = "4m"
LEFT_FREE = 16 << 10  # bytes left on the tmpfs once it is filled
BIG = 256 << 10  # a rewrite that cannot fit


@pytest.fixture
def small_own(sandbox: Sandbox) -> Iterator[Path]:
    """The own source's root on a tmpfs of 4 MiB (root only: CI runs as root)."""
    root = sandbox.source("personal").root
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", "tmpfs", str(root)],
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"mount -t tmpfs on {root} failed (needs root): {done.stderr.strip()}")
    try:
        yield root
    finally:
        # The memfs mount is gone by now (``mounts`` is set up after this and torn down first).
        subprocess.run(["umount", str(root)], capture_output=True, timeout=15, check=False)
        if in_mountinfo(root):
            subprocess.run(["umount", "-l", str(root)], capture_output=True, timeout=15)
            pytest.fail(f"tmpfs at {root} was still mounted at teardown")


def fill(root: Path, leave: int) -> Path:
    """Fill the filesystem of ``root`` until ENOSPC, then free ``leave`` bytes."""
    filler = root / ".filler"  # a dot name at the slug level is never a project
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as f:
        while (got := errno_of(f.write, chunk)) is None:
            pass
        assert got == errno.ENOSPC, f"filling {root}: {errno.errorcode.get(got, got)}"
        f.truncate(max(0, f.tell() - leave))
    free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
    assert 0 < free < BIG, f"{free} bytes free after filling"
    return filler


def write_all(fd: int, data: bytes) -> int | None:
    """Write ``data`` in 16 KiB pieces; the errno of the first failure, or of close()."""
    failed = None
    view = memoryview(data)
    try:
        while view and failed is None:
            view = view[os.write(fd, view[: 16 << 10]) :]
    except OSError as exc:
        failed = exc.errno
    closed = errno_of(os.close, fd)
    return failed or closed


def len_of(rel: str, where: str, rw: Writes) -> str:
    path = rw.own(rel) if where == "on disk" else rw.mnt(rel)
    try:
        return str(os.stat(path).st_size)
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, "?")


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest()[:16] for k, v in files.items()}


def test_full_own_source_no_failed_write_changes_any_file(
    sandbox: Sandbox, small_own: Path, rw: Writes
) -> None:
    build(sandbox)
    sandbox.write("personal", SLUG, "MEMORY.md", "# Memory\n" + "- [Notes](notes.md)\n" * 200)
    sandbox.write("personal", SLUG, HANDOFF, "# Handoff\n" + "state of the work\n" * 100, 1)
    rw.mount()
    mnt = rw.mnt
    # A handoff rewrite that works keeps one version: the baseline history.
    with open(mnt(HANDOFF), "wb") as f:
        f.write(b"# Handoff v2\n" + b"newer state\n" * 100)
    before_view = digests(snapshot(rw))
    before_disk = digests(disk_files(rw.own()))
    kept_before = sorted(os.listdir(mnt(".history", HANDOFF)))
    assert kept_before, "the baseline handoff rewrite kept no version"
    filler = fill(small_own, LEFT_FREE)

    results = {}
    # A shell-style rewrite: O_TRUNC, then writes that hit ENOSPC.
    fd = os.open(mnt("MEMORY.md"), os.O_WRONLY | os.O_TRUNC)
    results["O_TRUNC MEMORY.md"] = write_all(fd, b"- [X](x.md)\n" * (BIG // 12))
    # Claude Code's way: X.tmp.<pid>.<hex> with O_EXCL, written; it renames only on success.
    tmp = mnt(f"notes.md.tmp.{os.getpid()}.0123456789ab")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    results["temp file"] = write_all(fd, b"n" * BIG)
    # An append to a copy of the head.
    fd = os.open(mnt("notes.md"), os.O_WRONLY | os.O_APPEND)
    results["append notes.md"] = write_all(fd, b"more notes\n" * (BIG // 11))
    # A handoff rewrite: its version must not be kept for a write that failed.
    fd = os.open(mnt(HANDOFF), os.O_WRONLY | os.O_TRUNC)
    results["O_TRUNC handoff"] = write_all(fd, b"h" * BIG)
    # A rewrite of a read-only head (a copy-up that cannot fit).
    fd = os.open(mnt("deploys.md"), os.O_WRONLY | os.O_APPEND)
    results["append read-only head"] = write_all(fd, b"d" * BIG)

    # Every check below is collected, so that one run names every way the disk changed.
    problems = [
        f"{what}: returned {errno.errorcode.get(code or 0, code)}, not ENOSPC at write or close"
        for what, code in results.items()
        if code != errno.ENOSPC
    ]
    left, _ = wait_until(lambda: stages(rw.own_root) == [], SOON, "no stage", must=False)
    if not left:
        problems.append(f"stage files left: {stages(rw.own_root)}")
    # The temp file its create made stays, empty, as on a local disk: the writer removes it.
    if read(mnt(os.path.basename(tmp))) != b"":
        problems.append(f"the failed temp file {os.path.basename(tmp)} is not there, empty")
    os.unlink(tmp)
    after_disk = digests(disk_files(rw.own()))
    after_view = digests(snapshot(rw))
    for where, before, after in (
        ("on disk", before_disk, after_disk),
        ("through the mount", before_view, after_view),
    ):
        for rel in sorted(before.keys() | after.keys()):
            if before.get(rel) != after.get(rel):
                now = "new" if rel not in before else f"{len_of(rel, where, rw)} bytes now"
                problems.append(f"{rel} changed {where} ({now})")
    kept_after = sorted(os.listdir(mnt(".history", HANDOFF)))
    if kept_after != kept_before:
        problems.append(f"handoff history changed: {kept_before} -> {kept_after}")
    assert problems == [], "\n".join(problems)

    # Space again: the same rewrite works, so the failures were the full disk's.
    filler.unlink()
    fd = os.open(mnt("MEMORY.md"), os.O_WRONLY | os.O_TRUNC)
    assert write_all(fd, b"# Memory\n- [X](x.md)\n") is None
    assert read(mnt("MEMORY.md")).startswith(b"# Memory\n- [X](x.md)\n")
