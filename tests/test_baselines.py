"""Tier 1: what memfs read of every source's files, and the versions a change on disk
replaced (disk/baselines.py, §7.2, issue 37), on a real folder with a clock the test sets.

The last part is a seeded model test of the promise: whatever a file held while it stood
still for a second before memfs looked at it, and any version a change through the mount
replaced, is kept (or is the file now) after any mix of replaces, rewrites in place,
removals, commits through the mount and looks; nothing is kept that was never on disk; a
read-only source is never written.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import pytest

from memfs.disk import baselines, journal, keeping, store
from memfs.disk.baselines import Folder, OwnFolder
from memfs.disk.config import Limits
from memfs.disk.places import Place
from memfs.rules.history import HISTORY

SECOND = 1_000_000_000
T0 = 1_790_000_000 * SECOND  # the test's clock starts here (2026)
SLUG = "-home-u-src-shop"


@pytest.fixture(autouse=True)
def _fresh_stores() -> object:
    yield
    store.close_all()


class Box:
    """A source folder (own or read-only), the state folder, and the test's clock."""

    def __init__(self, tmp: Path, *, own: bool, limits: Limits | None = None) -> None:
        self.root = tmp / "src"
        self.state = tmp / "state"
        self.state.mkdir(parents=True)
        self.folder = Folder("claude" if own else "work", self.root, (SLUG, "memory"), own)
        self.folder.path.mkdir(parents=True)
        self.limits = limits or Limits(versions=100)
        self.now = T0

    @property
    def db(self) -> store.Store:
        return store.of(self.state)

    def tick(self, ns: int) -> None:
        self.now += ns

    def put(self, path: str, data: bytes, *, in_place: bool = False) -> None:
        """A tool writes ``path`` (a rename over it, or in place), at the clock's time."""
        target = self.folder.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if in_place and target.exists():
            with open(target, "r+b") as f:
                f.truncate(0)
                f.write(data)
        else:
            temp = target.with_name(f".{target.name}.tmp")
            temp.write_bytes(data)
            os.rename(temp, target)
        os.utime(target, ns=(self.now, self.now))

    def remove(self, path: str) -> None:
        (self.folder.path / path).unlink()

    def look(self, path: str) -> baselines.Looked:
        return baselines.look(self.db, self.folder, path, self.limits, self.state, now_ns=self.now)

    def sweep(self) -> tuple[list[baselines.Seen], list[str]]:
        return baselines.sweep(self.db, self.folder, self.limits, self.state, now_ns=self.now)

    def kept_place(self) -> Path:
        return Path(str(self.folder.kept(self.state))) / HISTORY

    def kept(self, path: str) -> dict[str, bytes]:
        """The versions kept of ``path``, by name."""
        folder = self.kept_place() / path
        if not folder.is_dir():
            return {}
        return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder))}

    def own_folder(self) -> OwnFolder:
        return OwnFolder(self.folder, SLUG, self.limits, self.state)

    def commit(self, path: str, data: bytes | None) -> None:
        """What a plan through the mount does to ``path`` (data None: removes it): catch up
        with the disk, keep what it replaces, replace, tell the store (steps.apply)."""
        own = self.own_folder()
        with baselines.GUARD:
            baselines.catch_up(own, [path], now_ns=self.now)
            *dirs, name = path.split("/")
            parent = Place(self.root, (SLUG, "memory", *dirs))
            history = Place(self.root, (SLUG, "memory", HISTORY, *path.split("/")))
            keep = keeping.Keep(history, "claude", 100, path)
            (self.folder.path.joinpath(*dirs)).mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder.path.joinpath(*dirs), os.O_RDONLY | os.O_DIRECTORY)
            try:
                keeping.keep_version(parent, fd, name, keep)
            finally:
                os.close(fd)
            if data is None:
                self.remove(path)
            else:
                self.put(path, data)
            baselines.rebase(own, [path])


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# --- one change at a time -------------------------------------------------------------


@pytest.mark.parametrize("own", [True, False])
def test_a_replace_keeps_what_memfs_read(tmp_path: Path, own: bool) -> None:
    box = Box(tmp_path, own=own)
    box.put("notes.md", b"v0\n")
    box.tick(2 * SECOND)
    assert box.sweep() == ([], [])  # read: it stood still
    box.put("notes.md", b"v1\n")
    seen = box.look("notes.md").seen
    assert seen is not None
    assert seen.what == baselines.REPLACE
    assert list(box.kept("notes.md").values()) == [b"v0\n"]
    assert seen.version == f"{HISTORY}/notes.md/{next(iter(box.kept('notes.md')))}"
    # Renamed into place, so read at once: the next replace keeps it too.
    box.put("notes.md", b"v2\n")
    box.look("notes.md")
    assert sorted(box.kept("notes.md").values()) == [b"v0\n", b"v1\n"]


@pytest.mark.parametrize("own", [True, False])
def test_a_rewrite_in_place_is_read_only_once_it_stands_still(tmp_path: Path, own: bool) -> None:
    box = Box(tmp_path, own=own)
    box.put("notes.md", b"v0\n")
    box.tick(2 * SECOND)
    box.sweep()
    box.tick(SECOND // 10)
    box.put("notes.md", b"v1, half\n", in_place=True)
    found = box.look("notes.md")
    assert found.seen is None  # still being written: what it becomes decides
    assert found.again  # not still yet: looked at again later
    box.tick(SECOND // 10)
    box.put("notes.md", b"v1, whole\n", in_place=True)
    assert box.look("notes.md").again
    box.tick(2 * SECOND)
    found = box.look("notes.md")
    assert not found.again  # read now
    assert found.seen is not None
    assert found.seen.what == baselines.REWRITE
    box.put("notes.md", b"v2\n", in_place=True)
    box.look("notes.md")
    box.tick(2 * SECOND)
    box.look("notes.md")
    # The half-written bytes never stood still: not a version; the whole one is.
    assert sorted(box.kept("notes.md").values()) == [b"v0\n", b"v1, whole\n"]


@pytest.mark.parametrize("own", [True, False])
def test_a_rewrite_in_place_of_the_same_bytes_is_no_version(tmp_path: Path, own: bool) -> None:
    box = Box(tmp_path, own=own)
    box.put("notes.md", b"v0\n")
    box.tick(2 * SECOND)
    box.sweep()
    box.put("notes.md", b"", in_place=True)  # truncated, caught before its write
    assert box.look("notes.md").again
    box.put("notes.md", b"v0\n", in_place=True)
    box.tick(2 * SECOND)
    found = box.look("notes.md")
    assert found.seen is None
    assert not found.again
    assert box.kept("notes.md") == {}


@pytest.mark.parametrize("own", [True, False])
def test_a_removal_keeps_the_last_version(tmp_path: Path, own: bool) -> None:
    box = Box(tmp_path, own=own)
    box.put("sub/notes.md", b"only\n")
    box.tick(2 * SECOND)
    box.sweep()
    box.remove("sub/notes.md")
    seen = box.look("sub/notes.md").seen
    assert seen is not None
    assert (seen.what, seen.after) == (baselines.REMOVE, None)
    assert list(box.kept("sub/notes.md").values()) == [b"only\n"]
    assert box.db.baseline(box.folder.key, b"sub/notes.md") is None


def test_identical_bytes_and_touches_keep_nothing(tmp_path: Path) -> None:
    box = Box(tmp_path, own=False)
    box.put("notes.md", b"same\n")
    box.tick(2 * SECOND)
    box.sweep()
    for in_place in (False, True, False):
        box.tick(2 * SECOND)
        box.put("notes.md", b"same\n", in_place=in_place)
        box.tick(2 * SECOND)
        assert box.look("notes.md") == baselines.Looked()
    box.tick(2 * SECOND)
    os.utime(box.folder.path / "notes.md", ns=(box.now, box.now))
    assert box.look("notes.md") == baselines.Looked()
    assert box.kept("notes.md") == {}
    # A version kept once is named again when the same bytes go again, not copied.
    box.put("notes.md", b"other\n")
    first = box.look("notes.md").seen
    box.put("notes.md", b"same\n")
    box.look("notes.md")
    box.put("notes.md", b"other\n")
    again = box.look("notes.md").seen
    assert first is not None
    assert again is not None
    assert first.version == again.version
    assert len(box.kept("notes.md")) == 2


def test_versions_limit_keeps_the_last_five(tmp_path: Path) -> None:
    for own in (True, False):
        box = Box(tmp_path / str(own), own=own, limits=Limits(versions=5))
        box.put("notes.md", b"v0\n")
        box.look("notes.md")
        for n in range(1, 31):
            box.tick(1000)
            box.put("notes.md", f"v{n}\n".encode())
            box.look("notes.md")
        assert sorted(box.kept("notes.md").values()) == [f"v{n}\n".encode() for n in range(25, 30)]


def test_read_only_versions_are_private_and_bounded_never_a_files_last(tmp_path: Path) -> None:
    box = Box(tmp_path, own=False, limits=Limits(versions=100, state_bytes=3000))
    before_tree = None
    for n in range(20):
        box.put(f"f{n % 4}.md", bytes([65 + n]) * 400)
        box.look(f"f{n % 4}.md")
        box.tick(1000)
    before_tree = _tree(box.root)
    versions = [p for p in box.kept_place().rglob("*.md") if p.is_file()]
    assert {oct(p.stat().st_mode & 0o777) for p in versions} == {"0o600"}
    sizes = sum(p.stat().st_size for p in versions)
    assert sizes <= 3000
    # Every file still has its newest kept version, the oldest went first.
    for i in range(4):
        kept = box.kept(f"f{i}.md")
        assert kept, i
        assert bytes([65 + 12 + i]) * 400 in kept.values()
    assert _tree(box.root) == before_tree  # the source is not written
    assert not (box.folder.path / HISTORY).exists()


def test_an_mtime_ahead_of_the_clock_is_read_at_once_and_a_big_file_is_left(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path, own=False, limits=Limits(max_file_bytes=100))
    box.put("ahead.md", b"from another machine\n")
    os.utime(box.folder.path / "ahead.md", ns=(box.now + 3600 * SECOND,) * 2)
    assert box.look("ahead.md") == baselines.Looked()  # read, not looked at again
    assert box.db.baseline(box.folder.key, b"ahead.md") is not None
    box.put("big.md", b"x" * 200)
    assert box.look("big.md") == baselines.Looked()  # too big to serve: left alone


def test_a_sweep_keeps_what_changed_while_memfs_was_down(tmp_path: Path) -> None:
    box = Box(tmp_path, own=False)
    for name in ("a.md", "b.md", "c.md"):
        box.put(name, name.encode())
    box.tick(2 * SECOND)
    assert box.sweep() == ([], [])
    box.put("a.md", b"a, new")
    box.remove("b.md")
    box.tick(2 * SECOND)
    seen, again = box.sweep()
    assert sorted((s.path, s.what) for s in seen) == [
        ("a.md", baselines.REPLACE),
        ("b.md", baselines.REMOVE),
    ]
    assert again == []
    assert list(box.kept("a.md").values()) == [b"a.md"]
    assert list(box.kept("b.md").values()) == [b"b.md"]


def test_a_change_through_the_mount_is_no_change_on_disk(tmp_path: Path) -> None:
    box = Box(tmp_path, own=True)
    box.put("notes.md", b"v0\n")
    box.tick(2 * SECOND)
    box.sweep()
    box.commit("notes.md", b"v1\n")
    assert box.look("notes.md") == baselines.Looked()
    box.commit("notes.md", None)
    assert box.look("notes.md") == baselines.Looked()
    assert journal.read(box.state) == []
    assert sorted(box.kept("notes.md").values()) == [b"v0\n", b"v1\n"]


def test_a_commit_catches_up_with_a_change_on_disk_it_would_hide(tmp_path: Path) -> None:
    """A tool replaced the file, and a write through the mount comes before the keeper's
    look: the tool's replaced version is kept and journaled as made on disk."""
    box = Box(tmp_path, own=True)
    box.put("notes.md", b"mine\n")
    box.tick(2 * SECOND)
    box.sweep()
    box.put("notes.md", b"the tool's\n")
    box.commit("notes.md", b"mine again\n")
    assert sorted(box.kept("notes.md").values()) == [b"mine\n", b"the tool's\n"]
    (change,) = journal.read(box.state)
    assert (change.what, change.way, change.source) == ("replace", journal.DISK, "claude")
    assert box.kept("notes.md")[change.kept.rpartition("/")[2]] == b"mine\n"


# --- the model ----------------------------------------------------------------------------

PATHS = ("a.md", "b.md", "sub/c.md")


@pytest.mark.parametrize("seed", range(6))
def test_the_model_nothing_that_stood_still_is_lost(tmp_path: Path, seed: int) -> None:
    """Random tools' changes (rename over, in place, rm), commits through the mount (own
    source: odd seeds) and looks, on a clock that moves by a random step: after each,

    - every version memfs had to read (it stood still a second when a look came, or a
      commit through the mount replaced it) is kept or is the file now, once memfs
      looked at the path since a tool last changed it and the look did not ask to look
      again (the file still being written in place);
    - every kept version held bytes that were once on disk there;
    - a read-only source holds exactly what the tools wrote (memfs never writes it).
    """
    rng = random.Random(seed)
    own = seed % 2 == 1
    box = Box(tmp_path, own=own)
    disk: dict[str, tuple[bytes, int]] = {}  # path -> (bytes, mtime) as the tools left it
    ever: dict[str, set[bytes]] = {p: set() for p in PATHS}
    must: dict[str, set[bytes]] = {p: set() for p in PATHS}
    counter = 0
    done: list[str] = []  # what each step did, for the failure's message
    dirty: set[str] = set()  # changed by a tool since memfs last looked
    for step in range(400):
        counter += 1
        path = rng.choice(PATHS)
        data = f"{path} #{counter}\n".encode()
        choice = rng.random()
        box.tick(rng.choice((1, 50_000_000, 300_000_000, 1_200_000_000)))
        if choice < 0.25:
            in_place = rng.random() < 0.5 and path in disk
            box.put(path, data, in_place=in_place)
            disk[path] = (data, box.now)
            dirty.add(path)
            done.append(f"{box.now - T0} {'rewrite' if in_place else 'replace'} {data!r}")
        elif choice < 0.35 and path in disk:
            box.remove(path)
            del disk[path]
            dirty.add(path)
            done.append(f"{box.now - T0} rm {path}")
        elif choice < 0.5 and own:
            if path in disk:
                must[path].add(disk[path][0])  # the mount keeps what it replaces
            remove = rng.random() < 0.3 and path in disk
            box.commit(path, None if remove else data)
            dirty.discard(path)
            done.append(f"{box.now - T0} commit {path} {None if remove else data!r}")
            if remove:
                del disk[path]
            else:
                disk[path] = (data, box.now)
        elif choice < 0.9:
            found = box.look(path)
            done.append(f"{box.now - T0} look {path}: {found}")
            if not found.again:  # else still being written: the keeper looks again
                dirty.discard(path)
            if path in disk and box.now - disk[path][1] >= baselines.STILL_NS:
                must[path].add(disk[path][0])
        else:
            swept = box.sweep()
            done.append(f"{box.now - T0} sweep: {swept}")
            dirty = set(swept[1])
            for p, (body, mtime) in disk.items():
                if box.now - mtime >= baselines.STILL_NS:
                    must[p].add(body)
        if path in disk:
            ever[path].add(disk[path][0])
        for p in PATHS:
            if p in dirty:
                continue  # what it replaced is kept once memfs looks
            kept = set(box.kept(p).values())
            now = {disk[p][0]} if p in disk else set()
            missing = must[p] - kept - now
            assert not missing, f"seed {seed} step {step}: {p} lost {missing}\n" + "\n".join(done)
            assert kept <= ever[p], f"seed {seed} step {step}: {p} kept {kept - ever[p]}"
        if not own:
            assert {p: b for p, (b, _) in disk.items()} == {
                p: (box.folder.path / p).read_bytes() for p in PATHS if p in disk
            }
            assert not (box.folder.path / HISTORY).exists()


@pytest.mark.parametrize("own", [True, False])
def test_a_removed_folder_keeps_every_file_it_held(tmp_path: Path, own: bool) -> None:
    """`rm -rf memory/` (a consolidation that starts over): each file's last version kept;
    the own source's come back under a `.history/` of the folder made again."""
    box = Box(tmp_path, own=own)
    box.put("a.md", b"a\n")
    box.put("sub/b.md", b"b\n")
    box.tick(2 * SECOND)
    box.sweep()
    shutil.rmtree(box.folder.path)
    seen, again = box.sweep()
    assert sorted(s.path for s in seen) == ["a.md", "sub/b.md"]
    assert again == []
    assert list(box.kept("a.md").values()) == [b"a\n"]
    assert list(box.kept("sub/b.md").values()) == [b"b\n"]
    assert box.sweep() == ([], [])  # forgotten: kept once
