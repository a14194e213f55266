"""A save of MEMORY.md through the mount, landed as a change of the own index (§5.3).

Layer disk: imports neither pyfuse3 nor trio; every call blocks on the disk (worker threads
only). `SaveIndex` is a plan's step (steps.Step), so it runs in the plan's one worker call,
under the commit lock: the own index it reads is the one its result replaces, since no
other plan runs in between.

The view plans a save (view/indexes.py) with what its writer read. Here the bytes the
writer wrote and the own index as the disk holds it now are read, the pure rule
(`index.save_change`) gives the new own index, and that lands as one atomic replace of the
own MEMORY.md (staging.Stage: fsync, rename, fsync of the folder). When the rule changes
nothing (one source, one writer: a plain file), the writer's own bytes land the way any
write does, the same one atomic replace. Then the lines the save hid from the union are
saved in the state folder (state.save_hidden_lines).

Where the written bytes come from (`Written`): a writer's stage being committed
(`FromStage`: `cat >`, an editor writing in place, an O_RDWR edit, a create), an own file
renamed onto MEMORY.md (`FromFile`: Claude Code's ``MEMORY.md.tmp.<pid>.<hex>``, `sed -i`,
``os.replace``), or bytes the plan names (`FromBytes`: a truncate of MEMORY.md by path, a
read-only source's file renamed onto it, `chmod` or `touch` with no own index yet).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from memfs.disk import sources, staging, state, store
from memfs.rules import index
from memfs.rules.history import HISTORY
from memfs.rules.index import MEMORY

log = logging.getLogger(__name__)

BodyRead = tuple[Path, tuple[str, ...], str]  # (root, parts, path) of a source file


class Written(Protocol):
    """The bytes a writer saved as MEMORY.md, and how they land when the rule keeps them."""

    def data(self, limit: int) -> tuple[bytes, int, tuple[int, int] | None]:
        """(the bytes, their mode (0: the own index's, if any), their times or None)."""
        ...

    def as_is(self, folder: staging.Place, keep: staging.Keep | None) -> list[str] | None:
        """Make these very bytes the own MEMORY.md the way a write of any file lands;
        returns the view paths of versions kept or pruned (§7.2), or None when they land
        as merged bytes do."""
        ...

    def replaced(self) -> None:
        """Other bytes landed instead: what is left of these is the writer's business."""
        ...


@dataclass
class FromStage:
    """A writer's stage whose target is MEMORY.md."""

    stage: staging.Stage

    def data(self, limit: int) -> tuple[bytes, int, tuple[int, int] | None]:
        st = os.fstat(self.stage.fd)
        _check_size(st.st_size, limit)
        return _read_all(self.stage.fd), stat.S_IMODE(st.st_mode), _times(st)

    def as_is(self, folder: staging.Place, keep: staging.Keep | None) -> list[str] | None:
        self.stage.dirty = True  # the session committed it: it lands, changed or not
        self.stage.commit(keep)
        return self.stage.kept if keep is not None else []

    def replaced(self) -> None:
        # The writer's stage keeps its bytes for the writer (its reads and a later write at
        # its own offsets see them): only the merged index was committed. Its temp file
        # goes at release; a later write makes it dirty again, and that commit is taken
        # against the same read, which gives the same index again.
        self.stage.dirty = False


@dataclass
class FromFile:
    """An own file renamed onto MEMORY.md (``name`` in ``place``)."""

    place: staging.Place
    name: str
    noreplace: bool = False

    def data(self, limit: int) -> tuple[bytes, int, tuple[int, int] | None]:
        fd = _open_in(self.place, self.name)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, f"not a regular file: {self.name}")
            _check_size(st.st_size, limit)
            return _read_all(fd), stat.S_IMODE(st.st_mode), _times(st)
        finally:
            os.close(fd)

    def as_is(self, folder: staging.Place, keep: staging.Keep | None) -> list[str] | None:
        return staging.rename(
            self.place, self.name, folder, MEMORY, noreplace=self.noreplace, keep=keep
        )

    def replaced(self) -> None:
        # A rename moves the name away: the merged index took its place, so it goes too.
        staging.unlink(self.place, self.name)


@dataclass
class FromBytes:
    """Bytes the plan names (``body``), or a source file to read them from (``src``), with
    the mode (0: keep the own index's) and times asked for (None: now)."""

    body: bytes | None
    src: BodyRead | None = None
    mode: int = 0
    times: tuple[int, int] | None = None

    def data(self, limit: int) -> tuple[bytes, int, tuple[int, int] | None]:
        if self.body is not None:
            return self.body, self.mode, self.times
        assert self.src is not None
        root, parts, path = self.src
        found = sources.read_file(root, parts, path, limit + 1)
        _check_size(len(found), limit)
        return found, self.mode, self.times

    def as_is(self, folder: staging.Place, keep: staging.Keep | None) -> list[str] | None:
        return None  # no file holds them yet: they land as merged bytes do

    def replaced(self) -> None:
        pass


@dataclass
class SaveIndex:
    """A plan's step: the save of MEMORY.md by a writer that read ``read``, landed as a
    change of the own index in ``folder`` (see the module). ``own_before``: the own index
    an editor moved away just before writing this one (backup-then-write), taken as the
    own index when the disk has none. Afterwards ``hidden`` holds the project's hidden
    lines, as saved."""

    written: Written
    folder: staging.Place  # the own source's project folder, where MEMORY.md lands
    read: bytes
    others: list[BodyRead]  # every version of MEMORY.md but the own source's
    state_dir: Path
    slug: str
    keep: staging.Keep | None
    max_bytes: int
    own_before: bytes | None = None
    hidden: frozenset[str] | None = None
    index: str = MEMORY  # its path in the project: the top MEMORY.md, or a subagent's

    def run(self) -> list[str]:
        data, mode, times = self.written.data(self.max_bytes)
        try:
            own, own_mode = _read_own(self.folder, self.max_bytes)
            had_own = True
        except FileNotFoundError:
            own, own_mode = self.own_before or b"", 0
            had_own = self.own_before is not None
        saved = index.save_change(_text(self.read), _text(data), _text(own))
        merged = saved.own.encode("utf-8", "surrogateescape")
        if not had_own and not merged.strip() and data.strip():
            # Only lines that never land (links to PREAMBLE.md) were written where no own
            # index is: no empty own index is made (Claude Code's backfill in a new project
            # would leave one, and an empty index in PREAMBLE.md).
            self.written.replaced()
            self.hidden = state.load_hidden_lines(self.state_dir, self.slug, self.index)
            return []
        kept = self.written.as_is(self.folder, self.keep) if merged == data else None
        if kept is None:  # merged bytes: a stage of their own, renamed over the own index
            _check_size(len(merged), self.max_bytes)  # another writer's lines added
            kept = self._land(merged, mode or own_mode or staging.FILE_MODE, times)
            self.written.replaced()
        # Then the lines it hid (read here, under the commit lock, so that two saves never
        # lose each other's): if this fails, the index landed, and close() says what failed.
        before = state.load_hidden_lines(self.state_dir, self.slug, self.index)
        texts = [_text(body) for body in self._others()]
        after = index.hidden_after(before, saved, texts)
        if after != before:
            state.save_hidden_lines(self.state_dir, self.slug, after, self.index)
        self.hidden = after
        replaced = next((v for v in reversed(kept) if v.startswith(f"{HISTORY}/{self.index}/")), "")
        if replaced or after != before:
            remember_hidden(self.state_dir, self.slug, self.index, before, after, replaced)
        return kept

    def _land(self, merged: bytes, mode: int, times: tuple[int, int] | None) -> list[str]:
        stage = staging.Stage(self.folder, MEMORY, initial_fd=None, mode=mode)
        try:
            stage.write(0, merged)
            if times is not None:
                os.utime(stage.fd, ns=times)
            stage.commit(self.keep)
            return stage.kept if self.keep is not None else []
        finally:
            stage.abort()

    def _others(self) -> list[bytes]:
        found = []
        for root, parts, path in self.others:
            with contextlib.suppress(OSError):  # gone since: its lines hide nothing now
                found.append(sources.read_file(root, parts, path, self.max_bytes))
        return found


@dataclass
class RestoreHidden:
    """A restore's step (view/restore.py): the lines an index hides go back to what they
    were at ``at_ns``, or (``under``, a kept own version's view path) while that version
    was the own index; when the store has no such record, what it hid at
    ``fallback_ns`` (when the version was kept). Afterwards ``hidden`` holds the set
    saved (None: nothing known, the set left as it is). ``replacing``: the step that put
    the version back, whose kept versions name what the restore replaced."""

    state_dir: Path
    slug: str
    index: str
    at_ns: int | None
    under: str
    fallback_ns: int
    replacing: object = None
    hidden: frozenset[str] | None = None

    def run(self) -> list[str]:
        db = store.of(self.state_dir)
        found = db.hidden_under(self.slug, self.index, self.under) if self.under else None
        if found is None:
            at = self.at_ns if self.at_ns is not None else self.fallback_ns
            found = db.hidden_at(self.slug, self.index, at)
        before = state.load_hidden_lines(self.state_dir, self.slug, self.index)
        if found is None:
            self.hidden = before
            return []
        if found != before:
            state.save_hidden_lines(self.state_dir, self.slug, found, self.index)
        kept = getattr(self.replacing, "kept", [])
        prefix = f"{HISTORY}/{self.index}/"
        replaced = next((v for v in reversed(kept) if v.startswith(prefix)), "")
        if replaced or found != before:
            remember_hidden(self.state_dir, self.slug, self.index, before, found, replaced)
        self.hidden = found
        return []


@dataclass
class ReadIndex:
    """A plan's step: the own index's bytes (``data``; None: there is none) before the
    plan's later steps move or remove it (an editor's backup-then-write, view/indexes.py)."""

    folder: staging.Place
    max_bytes: int
    data: bytes | None = None

    def run(self) -> list[str]:
        try:
            self.data = _read_own(self.folder, self.max_bytes)[0]
        except FileNotFoundError:
            self.data = None
        return []


def remember_hidden(
    state_dir: Path,
    slug: str,
    path: str,
    before: frozenset[str],
    after: frozenset[str],
    replaced: str,
) -> None:
    """The hidden lines' history (store.py), for a restore of the view as it was: never
    fails the save that changed them (logged)."""
    try:
        store.of(state_dir).hidden_changed(slug, path, before, after, replaced)
    except (OSError, sqlite3.Error) as exc:
        log.warning("cannot keep the history of hidden lines of %s/%s: %s", slug, path, exc)


def _read_own(folder: staging.Place, limit: int) -> tuple[bytes, int]:
    """The own MEMORY.md's bytes and mode; FileNotFoundError when there is none."""
    fd = _open_in(folder, MEMORY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(errno.ENOENT, f"not a regular file: {MEMORY}")
        _check_size(st.st_size, limit)
        return _read_all(fd), stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def _open_in(folder: staging.Place, name: str) -> int:
    dir_fd = staging.open_dir(folder, create=False)
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _times(st: os.stat_result) -> tuple[int, int]:
    return (st.st_atime_ns, st.st_mtime_ns)


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))  # §7.6: it would be left out


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")
