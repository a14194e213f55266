"""Files open through the mount: every handle, the creates not committed yet, who sees what.

§7.1, §7.6. Layer adapter, but plain: imports neither pyfuse3 nor trio; not thread-safe (the
adapter's trio thread owns it). Its only I/O is the size of a stage (an fstat).

A handle reads one version, fixed when it opened (``fd`` or ``data``); a writer's bytes go
to its own stage, which only its writer sees until the commit (everyone else sees the
committed file's size). A name created and not committed yet is *pending*: memfs answers
for it from the stage, so lookups and listings see it. A handle whose name was unlinked or
replaced while it was open keeps working on its descriptors, but its bytes never commit.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from memfs.disk import staging
from memfs.disk.config import Config
from memfs.view.project import Version
from memfs.view.session import State, WriteSession
from memfs.view.writes import Refused, check_size

R = TypeVar("R")

Key = tuple[str, str]  # (slug, view path); ("", "") is the root, (slug, "") a project


@dataclass(eq=False, slots=True)  # slots: made and read on every open (issue 14)
class OpenFile:
    """One open of a file through the mount."""

    ino: int
    key: Key
    version: Version | None = None  # the version it opened (None: synthetic or created)
    fd: int = -1  # that version's file, opened once and closed at release
    borrowed: bool = False  # ``fd`` is the kernel record's (kernel.py), not closed by it
    data: bytes | None = None  # PREAMBLE.md or the MEMORY.md union, fixed at open
    token: object = None  # what the kernel's pages hold for it (kernel.py); None: direct I/O
    # The version's bytes, read whole when an open served through the page cache reads
    # (kernel.py `ReadOpens.snapshot`): the kernel never caches a part of another version.
    snapshot: bytes | None = None
    pid: int = 0  # the thread that opened it (FUSE names the calling thread)
    # Writing: its write session (view/session.py), the one place its state is kept and
    # changed; None for an open that only reads.
    session: WriteSession | None = None
    # Its process: only a close of the writer's own last descriptor commits (`MemFS.flush`),
    # not a forked child's close of the one it inherited.
    tgid: int = 0
    append: bool = False
    stage: staging.Stage | None = None

    @property
    def writer(self) -> bool:
        return self.session is not None

    def change(self, change: Callable[[staging.Stage], R], size: int, config: Config) -> R:
        """A change of its stage that leaves the file ``size`` bytes long at most; one that
        fails (EFBIG past ``max_file_bytes``, ENOSPC, ...) leaves the session FAILED: it
        never commits (§7.1: a full disk never turns a rewrite into an empty file).

        Raises:
            Refused, OSError: what the change met; the session keeps the first errno.
        """
        assert self.stage is not None
        assert self.session is not None
        try:
            check_size(config, size)  # §7.6: past the limit, changing nothing
            done = change(self.stage)
        except Refused as exc:
            self.session.failed(exc.errno)
            raise
        except OSError as exc:
            self.session.failed(exc.errno or errno.EIO)
            raise
        self.session.changed()
        return done

    def set_attrs(
        self,
        config: Config,
        *,
        mode: int | None,
        size: int | None,
        atime_ns: int | None,
        mtime_ns: int | None,
    ) -> None:
        """ftruncate, fchmod, futimens through this writer: its stage changes; None keeps
        what the stage has (a time: UTIME_OMIT)."""
        stage = self.stage
        assert stage is not None
        assert self.session is not None
        if size is not None:
            self.change(lambda s: s.truncate(size), size, config)
        if mode is not None:
            stage.chmod(mode)
        if atime_ns is not None or mtime_ns is not None:
            stage.set_times(atime_ns, mtime_ns)
        self.session.changed()

    def size(self) -> int:
        """The size its own writer sees."""
        if self.stage is not None:
            return self.stage.size()
        if self.data is not None:
            return len(self.data)
        if self.fd >= 0:
            return os.fstat(self.fd).st_size
        return self.version.size if self.version is not None else 0


class OpenFiles:
    """Every open file, by handle number; pending creates by name."""

    def __init__(self) -> None:
        self._by_fh: dict[int, OpenFile] = {}
        # the same files by inode: what asks about one inode (at every open and getattr)
        # looks at its own handles, not at every handle open
        self._by_ino: dict[int, list[OpenFile]] = {}
        self._pending: dict[Key, OpenFile] = {}
        self._next_fh = 1

    def __len__(self) -> int:
        return len(self._by_fh)

    def __iter__(self) -> Iterator[OpenFile]:
        return iter(self._by_fh.values())

    def add(self, f: OpenFile) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._by_fh[fh] = f
        same = self._by_ino.get(f.ino)
        if same is None:
            self._by_ino[f.ino] = [f]
        else:
            same.append(f)
        return fh

    def get(self, fh: int) -> OpenFile | None:
        return self._by_fh.get(fh)

    def pop(self, fh: int) -> OpenFile | None:
        f = self._by_fh.pop(fh, None)
        if f is None:
            return None
        same = self._by_ino[f.ino]
        if len(same) == 1:
            del self._by_ino[f.ino]
        else:
            same.remove(f)
        if self._pending and self._pending.get(f.key) is f:
            del self._pending[f.key]
        return f

    # --- pending creates ------------------------------------------------------------

    def pending(self, key: Key) -> OpenFile | None:
        return self._pending.get(key)

    def set_pending(self, f: OpenFile) -> None:
        self._pending[f.key] = f

    def settled(self, f: OpenFile) -> None:
        """``f`` committed: its name is an ordinary file now."""
        if self._pending.get(f.key) is f:
            del self._pending[f.key]

    def creating(self) -> bool:
        """Whether any name is being created (most listings: none)."""
        return bool(self._pending)

    def pending_names(self, slug: str, folder: str) -> Iterator[str]:
        prefix = f"{folder}/" if folder else ""
        for s, path in self._pending:
            if s == slug and path.startswith(prefix) and "/" not in path[len(prefix) :]:
                yield path[len(prefix) :]

    # --- who sees what --------------------------------------------------------------

    def writers_of(self, ino: int) -> list[OpenFile]:
        return [f for f in self._by_ino.get(ino, ()) if f.stage is not None]

    def has_writers(self, ino: int) -> bool:
        # A loop, not any() over a generator (1.8 against 0.3 µs): asked at every open
        # and getattr.
        for f in self._by_ino.get(ino, ()):  # noqa: SIM110
            if f.stage is not None:
                return True
        return False

    def of_inode(self, ino: int) -> list[OpenFile]:
        return list(self._by_ino.get(ino, ()))

    def cached_size(self, ino: int) -> int | None:
        """The size of the version read through the page cache of ``ino``; None if none is
        (kernel.py: only one version per inode is read that way at a time)."""
        reader = next((f for f in self.of_inode(ino) if f.token is not None), None)
        if reader is None:
            return None
        # The version it opened, not its descriptor's size now: a file appended to on disk
        # keeps its inode, and the reader's pages are of the version before.
        return reader.version.size if reader.version is not None else reader.size()

    def own_writer(self, ino: int, pid: int) -> OpenFile | None:
        """The handle through which thread ``pid`` writes ``ino`` itself, if it does."""
        return next((f for f in self.writers_of(ino) if f.pid == pid), None)

    def setting(self, ino: int, key: Key, pid: int) -> OpenFile | None:
        """The handle a setattr that names none is about: a create not committed yet, or
        thread ``pid``'s own writer of the file. futimens and fchmod reach FUSE without
        their descriptor's handle, and a writer's times or mode must land with its bytes
        (`cp -p` sets them last), not on the file its commit then replaces."""
        pending = self.pending(key)
        if pending is not None or not self.has_writers(ino):
            return pending
        return self.own_writer(ino, pid)

    def own_size(self, ino: int, pid: int) -> int | None:
        """The size ``pid`` sees while it writes ``ino`` itself; None for everyone else."""
        mine = self.own_writer(ino, pid)
        return mine.size() if mine is not None else None

    # --- names that change under open files ----------------------------------------

    def gone(self, key: Key) -> list[OpenFile]:
        """``key`` was unlinked: what is open on it keeps its descriptors, but never
        commits, so it can never bring the name back (§7.6). Returns its writers."""
        writers = self._writers_at(key)
        for f in writers:
            assert f.session is not None
            f.session.discarded()
        self._pending.pop(key, None)
        return writers

    def replaced(self, key: Key) -> None:
        """Another file was renamed over ``key``: what its writers write lands as kept
        versions (an index's as its change), never over that file (§7.2)."""
        for f in self._writers_at(key):
            assert f.session is not None
            f.session.name_replaced()
        self._pending.pop(key, None)

    def _writers_at(self, key: Key) -> list[OpenFile]:
        found = []
        for f in self._by_fh.values():
            if f.key == key and f.session is not None and f.session.commits:
                found.append(f)
        return found

    def move_pending(self, src: Key, dst: Key) -> None:
        """The file being created at ``src`` was renamed to ``dst`` before its first
        commit: its stage will land there (a pending create of ``dst`` is replaced)."""
        f = self._pending[src]
        assert f.stage is not None
        if src == dst:
            return  # rename(2) onto itself changes nothing
        self.replaced(dst)
        f.stage.name = dst[1].rpartition("/")[2]
        self.moved(src, dst)
        self.set_pending(f)

    def moved(self, src: Key, dst: Key) -> list[OpenFile]:
        """``src`` (and what lies below it) was renamed to ``dst``: open files follow.
        Returns the ones that moved."""
        slug, old = src
        followed = []
        for f in self._by_fh.values():
            s, path = f.key
            if s == slug and (path == old or path.startswith(old + "/")):
                f.key = (slug, dst[1] + path[len(old) :])
                followed.append(f)
        moved = {k: f for k, f in self._pending.items() if f.key != k}
        for k, f in moved.items():
            del self._pending[k]
            self._pending[f.key] = f
        return followed

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each step."""
        handles = {id(f) for f in self._by_fh.values()}
        for key, f in self._pending.items():
            assert id(f) in handles, ("a pending create with no open handle", key)
            assert f.key == key, (key, f.key)
            assert f.writer, key
            assert f.stage is not None, key
        by_ino = [id(f) for same in self._by_ino.values() for f in same]
        assert sorted(by_ino) == sorted(handles), "the files by inode are not the open ones"
        assert all(f.ino == ino for ino, same in self._by_ino.items() for f in same)
        for f in self._by_fh.values():
            assert not (f.stage is not None and not f.writer), f.key
            if f.session is not None:
                assert f.session.state is not State.FAILED or f.session.errno, f.key
                assert f.session.state is not State.RELEASED, f.key
