"""Tier 3: nothing accepted through the mount is lost, for its mode or for its name (§5.1,
§5.2, §7.3, §7.6), and a project folder takes times like any folder.

Modes only show their faults to a normal user (root ignores permission bits), so those
tests run memfs and every client as one (``normal_user`` in mounting.py). Names and times
show to root as well, with the sandbox's three sources.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounting import (
    MOUNT_MARKS,
    Mounts,
    NormalUser,
    Sandbox,
    alive,
    errno_of,
    normal_user,
    slug_of,
)

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
OWN_WORDS = b"The own words, newest.\n"
WORK_WORDS = b"An older version, in a read-only account.\n"


# --- modes, as a normal user ---------------------------------------------------------------


@pytest.fixture
def user() -> Iterator[NormalUser]:
    yield from normal_user(SLUG, OWN_WORDS)


class UserMount:
    """The normal user's `memfs mount ~/memfs`, its discovered accounts, and `sh -c`."""

    def __init__(self, user: NormalUser) -> None:
        self.user = user
        self.mnt = user.home / "memfs"
        self.own = user.home / ".claude" / "projects" / SLUG / "memory"

    def mount(self) -> None:
        self.mnt.mkdir(exist_ok=True)
        os.chown(self.mnt, self.user.uid, self.user.gid)
        done = self.user.memfs("mount", self.mnt)
        assert done.returncode == 0, done.stderr

    def umount(self) -> None:
        done = self.user.memfs("umount", self.mnt)
        assert done.returncode == 0, done.stderr
        assert not any(alive(pid) for pid in self.user.pids)

    def sh(self, script: str) -> tuple[int, str, str]:
        """``script`` run by the user's ``sh`` in the project's folder of the mount."""
        # cd in the shell: root, which starts it, may not enter the user's mount.
        done = self.user.run("sh", "-c", f'cd "$1" && {script}', "sh", self.mnt / SLUG)
        return done.returncode, done.stdout, done.stderr

    def ok(self, script: str) -> str:
        code, out, err = self.sh(script)
        assert code == 0, (script, err)
        return out

    def mode(self, name: str) -> str:
        return self.ok(f"stat -c %a {name}").strip()

    def listed(self) -> list[str]:
        return self.ok("ls -A").split()


@pytest.fixture
def mounted(user: NormalUser) -> UserMount:
    """The user's own account holds notes.md (newest); a second account, read-only, an
    older notes.md."""
    work = user.home / ".claude-work" / "projects" / SLUG / "memory"
    work.mkdir(parents=True)
    (work / "notes.md").write_bytes(WORK_WORDS)
    os.utime(work / "notes.md", (1_600_000_000, 1_600_000_000))
    for path in [user.home / ".claude-work", *(user.home / ".claude-work").rglob("*")]:
        os.chown(path, user.uid, user.gid)
    m = UserMount(user)
    m.mount()
    return m


def test_chmod_000_keeps_the_own_version_the_head_and_chmod_644_brings_it_back(
    mounted: UserMount,
) -> None:
    m = mounted
    assert m.ok("cat notes.md").encode() == OWN_WORDS
    m.ok("chmod 000 notes.md")
    # The own file stays the head, unreadable as on a local folder: never the older
    # read-only version in its place.
    assert m.mode("notes.md") == "0"
    code, _, err = m.sh("cat notes.md")
    assert code != 0
    assert "Permission denied" in err
    # A remount scans the own folder afresh: still the own file, still mode 0.
    m.umount()
    m.mount()
    assert "notes.md" in m.listed()
    assert m.mode("notes.md") == "0"
    m.ok("chmod 644 notes.md")
    assert m.mode("notes.md") == "644"
    assert m.ok("cat notes.md").encode() == OWN_WORDS  # never the read-only version
    assert (m.own / "notes.md").read_bytes() == OWN_WORDS


def test_an_own_index_with_mode_000_is_refused_as_any_own_file(user: NormalUser) -> None:
    # Issue 36: `chmod 000 MEMORY.md`, then `cat` showed the union without the own lines
    # and `echo l >> MEMORY.md` returned 0 and dropped the line. An own index its owner
    # may not read behaves as any own file: EACCES, and nothing written is lost.
    own_index = b"- [Own](own.md)\n"
    work = user.home / ".claude-work" / "projects" / SLUG / "memory"
    work.mkdir(parents=True)
    (work / "MEMORY.md").write_bytes(b"- [Work](work.md)\n")
    m = UserMount(user)
    (m.own / "MEMORY.md").write_bytes(own_index)
    for path in [user.home, *user.home.rglob("*")]:
        os.chown(path, user.uid, user.gid)
    m.mount()
    assert m.ok("cat MEMORY.md") == "- [Own](own.md)\n- [Work](work.md)\n"
    m.ok("chmod 000 MEMORY.md")
    assert m.mode("MEMORY.md") == "0"
    code, out, err = m.sh("cat MEMORY.md")
    assert (code, out) == (1, ""), (code, out)
    assert "Permission denied" in err
    code, _, err = m.sh("echo l >> MEMORY.md")
    assert code != 0
    assert "Permission denied" in err
    assert (m.own / "MEMORY.md").read_bytes() == own_index
    m.ok("chmod 600 MEMORY.md")
    m.ok("echo '- [L](l.md)' >> MEMORY.md")
    assert (m.own / "MEMORY.md").read_bytes() == own_index + b"- [L](l.md)\n"
    assert m.ok("cat MEMORY.md") == "- [Own](own.md)\n- [L](l.md)\n- [Work](work.md)\n"


@pytest.mark.parametrize(
    "make",
    [
        "python3 -c 'import os; os.close(os.open(\"new.md\", os.O_CREAT | os.O_WRONLY, 0))'",
        "umask 777 && echo words > new.md",
        "echo words > new.md && chmod 000 new.md",
    ],
    ids=["create-mode-0", "umask-777", "chmod-000"],
)
def test_a_file_with_mode_0_stays_listed_and_chmod_restores_it(
    mounted: UserMount, make: str
) -> None:
    m = mounted
    m.ok(make)
    for remounted in (False, True):
        if remounted:
            m.umount()
            m.mount()
        assert "new.md" in m.listed(), remounted
        assert m.mode("new.md") == "0"
        code, _, err = m.sh("cat new.md")
        assert code != 0
        assert "Permission denied" in err, err
    m.ok("chmod 600 new.md")
    assert m.mode("new.md") == "600"
    body = m.ok("cat new.md")
    assert body in ("", "words\n")
    assert stat.S_IMODE((m.own / "new.md").stat().st_mode) == 0o600


# --- names: refused at once, or shown for as long as they are on disk ------------------------

# Each written through the mount, then looked for after a remount.
SHOWN = [
    "notes.md~",  # a backup
    ".plan.md.swp",  # vim's swap
    "#scratch#",  # emacs's auto-save
    "draft.partial",  # rclone's partial file
    ".todo.backup",  # looks like rsync's temp name: `.<name>.XXXXXX`
    "notes.md.tmp.4242.0123456789ab",  # Claude Code's temp name
    ".notes.md.Ab12Cd",  # rsync's temp name
]
REFUSED = ["._notes.md", ".git"]  # AppleDouble, git: tools' own files


def test_a_name_written_through_the_mount_is_refused_or_stays_across_remounts(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("work", SLUG, "MEMORY.md", "# Memory\n", 2)
    own = sandbox.folder("personal", SLUG)
    mounts()
    project = sandbox.mnt(SLUG)
    for name in SHOWN:
        (project / name).write_bytes(f"body of {name}\n".encode())
    for name in REFUSED:
        assert errno_of((project / name).write_bytes, b"x") == errno.EINVAL, name
        assert not (own / name).exists(), name
    assert errno_of(os.mkdir, project / ".git") == errno.EINVAL
    assert errno_of(os.mkdir, project / ".stversions") == errno.EINVAL
    (project / "plain.md").write_bytes(b"plain\n")
    assert errno_of(os.rename, project / "plain.md", project / "._plain.md") == errno.EINVAL
    assert errno_of(os.rename, project / "plain.md", project / ".DS_Store") == errno.EINVAL
    os.rename(project / "plain.md", project / "plain.md~")
    assert set(SHOWN) <= set(os.listdir(project))

    mounts.started[-1].close()
    mounts()
    listed = set(os.listdir(project))
    for name in [*SHOWN, "plain.md~"]:
        assert name in listed, name
        body = b"plain\n" if name == "plain.md~" else f"body of {name}\n".encode()
        assert (project / name).read_bytes() == body, name
        assert (own / name).read_bytes() == body, name
    for name in [*REFUSED, ".DS_Store", "._plain.md"]:
        assert name not in listed, name
        assert errno_of(os.stat, project / name) == errno.ENOENT, name
    # A writer's file is its own business: never in PREAMBLE.md.
    preamble = (project / "PREAMBLE.md").read_bytes()
    assert b"scratch" not in preamble
    assert b".swp" not in preamble


# --- times of a project folder ---------------------------------------------------------------


@pytest.mark.parametrize("own_folder", [True, False], ids=["own-folder", "read-only-only"])
def test_tar_extracts_into_a_project_folder(
    sandbox: Sandbox, mounts: Mounts, tmp_path: Path, own_folder: bool
) -> None:
    """`tar -x` sets the times (and, as root, the mode) of its `.`: the project folder."""
    sandbox.write("work", SLUG, "MEMORY.md", "# Memory\n", 2)
    if own_folder:
        sandbox.write("personal", SLUG, "old.md", "old\n", 1)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.md").write_bytes(b"a\n")
    (src / "sub" / "b.md").write_bytes(b"b\n")
    src.chmod(0o755)
    os.utime(src, (1_700_000_000, 1_700_000_000))
    mounts()
    project = sandbox.mnt(SLUG)
    done = sandbox.run("sh", "-c", f"tar -C {src} -cf - . | tar -C {project} -xf -", check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert (project / "a.md").read_bytes() == b"a\n"
    assert (project / "sub" / "b.md").read_bytes() == b"b\n"
    own = sandbox.source("personal").folder(SLUG)
    assert (own / "a.md").read_bytes() == b"a\n"
    assert own.stat().st_mtime_ns == 1_700_000_000 * 10**9  # the times landed there
    os.utime(project, ns=(1_650_000_000 * 10**9, 1_650_000_000 * 10**9))
    assert own.stat().st_mtime_ns == 1_650_000_000 * 10**9
