"""A write plan's steps, and `apply`: running one plan's steps in a single worker call.

§7. Layer disk: imports neither pyfuse3 nor trio. A plan (built by view/writes.py,
which only decides) is a list of steps, each one change to the own source or memfs's state
(commit a stage, copy a head up, set attributes, unlink, rename, make or remove a folder;
state.SaveWhiteouts is one too). `apply` runs them in order, under the adapter's commit lock,
then stats every path they touched, so the adapter absorbs the result on its own thread
without touching the disk itself. Every call here blocks on the disk: worker threads only.

How each change reaches the disk (the atomic replace, kept versions, no link followed) is
staging.py's; this module only sequences it. It may import staging, never the reverse.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from memfs.disk import baselines, journal, procs, sources, staging
from memfs.rules.history import HISTORY

log = logging.getLogger(__name__)


class Step(Protocol):
    """One change to the own source (or memfs's state) that a plan asks for."""

    def run(self) -> list[str]:
        """Do it; returns the view paths of versions it kept or pruned (§7.2)."""
        ...


class Skipped(Exception):
    """A step found that the plan must not run (`LastClose`): nothing ran, nothing failed."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


HELD = "held"  # the writer still holds the file: not its last close
KILLED = "killed"  # the writer was killed by a signal: its bytes are dropped


@dataclass
class LastClose:
    """The first step of what a writer's close asks (view/session.py): only the writer's
    own last close commits (§7.1). Its process (``tgid``) still holding ``path`` (a forked
    child closed the descriptor it inherited, or a shell a dup) skips the plan; so does a
    writer killed by a signal (``pid``, the thread that opened it). /proc is read here, in
    the worker, not on the request thread. ``held``: False at the release, where only a
    kill counts."""

    pid: int
    tgid: int
    path: str  # the file's path in the mount, as /proc names the writer's descriptor
    held: bool = True

    def run(self) -> list[str]:
        if self.pid and procs.killed_by_signal(self.pid):
            raise Skipped(KILLED)
        if self.held and procs.holds(self.tgid, self.path):
            raise Skipped(HELD)
        return []


@dataclass(frozen=True)
class Source:
    """Bytes a copy-up starts from: a source file, or ``data`` (the MEMORY.md union)."""

    root: Path | None
    parts: tuple[str, ...]
    path: str
    data: bytes | None


@dataclass
class Commit:
    """A staged write becomes its target (§7.1); ``empty``: an empty file instead (a name a
    create made whose write failed stays, empty, as on a local folder)."""

    stage: staging.Stage
    keep: staging.Keep | None
    sync_folder: bool = True  # False: a writer's temporary name (Stage.commit)
    empty: bool = False

    def run(self) -> list[str]:
        if self.empty:
            self.stage.truncate(0)
        self.stage.dirty = True  # what the session committed lands, changed or not
        self.stage.commit(self.keep, sync_folder=self.sync_folder)
        return self.stage.kept if self.keep is not None else []


@dataclass
class KeepStage:
    """A writer whose name another file replaced while it was open: what it staged lands
    as a kept version of its path (§7.2, view/session.py), not over that file."""

    stage: staging.Stage
    keep: staging.Keep

    def run(self) -> list[str]:
        return self.stage.keep_as_version(self.keep)


@dataclass
class Restage:
    """A committed writer changes again: a new stage copied from what it committed."""

    stage: staging.Stage

    def run(self) -> list[str]:
        self.stage.restage()
        return []


@dataclass
class Retarget:
    """A writer's name was renamed: its stage moves along and commits under the new name."""

    stage: staging.Stage
    place: staging.Place
    name: str

    def run(self) -> list[str]:
        self.stage.retarget(self.place, self.name)
        return []


@dataclass
class ForgetTemp:
    """A writer's name was unlinked while open: its temp file goes now (its descriptor
    keeps the bytes for the writer), so the folder can be removed before the release."""

    stage: staging.Stage

    def run(self) -> list[str]:
        self.stage.forget_temp()
        return []


@dataclass
class Abort:
    """A writer's handle was released: what it did not commit goes, its descriptors close."""

    stage: staging.Stage

    def run(self) -> list[str]:
        self.stage.abort()
        return []


@dataclass
class CopyUp:
    """The own source gets a copy of a read-only head (attributes changed as asked),
    committed atomically; the original stays untouched (§7.3)."""

    src: Source
    folder: staging.Place
    name: str
    mode: int
    size: int | None
    times: tuple[int, int]
    keep: staging.Keep | None
    kept: list[str] = field(default_factory=list)  # the view paths it kept or pruned

    def run(self) -> list[str]:
        self.kept = self._run()
        return self.kept

    def _run(self) -> list[str]:
        stage = staging.Stage(self.folder, self.name, initial_fd=None, mode=self.mode)
        try:
            if self.src.data is not None:
                stage.write(0, self.src.data)
            else:
                assert self.src.root is not None
                fd = sources.open_file(self.src.root, self.src.parts, self.src.path)
                try:
                    staging.copy_fd(fd, stage.fd)
                finally:
                    os.close(fd)
            if self.size is not None:
                stage.truncate(self.size)
            os.utime(stage.fd, ns=self.times)
            stage.dirty = True
            stage.commit(self.keep)
            return stage.kept if self.keep is not None else []
        finally:
            stage.abort()


@dataclass
class SetAttrs:
    place: staging.Place
    name: str
    mode: int | None = None
    times: staging.Times | None = None  # a None side keeps the time it has
    size: int | None = None
    make: bool = False  # a folder, made first (mkdir -p) if missing: a project's own folder

    def run(self) -> list[str]:
        if self.make:
            os.close(staging.open_dir(self.place.below(self.name), create=True))
        staging.set_attrs(
            self.place, self.name, mode=self.mode, times_ns=self.times, size=self.size
        )
        return []


@dataclass
class Unlink:
    place: staging.Place
    name: str
    keep: staging.Keep | None

    def run(self) -> list[str]:
        return staging.unlink(self.place, self.name, self.keep)


@dataclass
class Rename:
    src: staging.Place
    src_name: str
    dst: staging.Place
    dst_name: str
    keep: staging.Keep | None = None
    noreplace: bool = False

    def run(self) -> list[str]:
        return staging.rename(
            self.src,
            self.src_name,
            self.dst,
            self.dst_name,
            noreplace=self.noreplace,
            keep=self.keep,
        )


@dataclass
class MakeStage:
    """A writer's stage in its own folder (mkdir -p of the own source's folders on the way,
    staging.open_dir): `made` holds it once the step ran."""

    make: Callable[[staging.Place, str], staging.Stage]
    place: staging.Place
    name: str
    made: staging.Stage | None = None

    def run(self) -> list[str]:
        self.made = self.make(self.place, self.name)
        return []


@dataclass
class MakeDir:
    place: staging.Place
    name: str
    mode: int

    def run(self) -> list[str]:
        staging.mkdir(self.place, self.name, self.mode)
        return []


@dataclass
class RemoveDir:
    place: staging.Place
    name: str

    def run(self) -> list[str]:
        staging.rmdir(self.place, self.name)
        return []


@dataclass(frozen=True)
class Where:
    """A folder of a project in a source: where `apply` stats a path again."""

    root: Path
    parts: tuple[str, ...]
    only: frozenset[str] | None = None  # the top-level names it holds (versions.Origin)


@dataclass
class Applied:
    """What `apply` found on disk once the steps ran: the adapter absorbs exactly this."""

    found: list[tuple[int, str, sources.FileStat | str | None]] = field(default_factory=list)
    scan: sources.Scan | None = None
    error: OSError | None = None  # the step that failed; the steps after it did not run
    skipped: str = ""  # why a step stopped the plan before anything ran (`Skipped`)
    at_ns: int = 0  # when the disk was looked at again (time.monotonic_ns), after the steps


def apply(
    steps: Sequence[Step],
    reread: Sequence[tuple[int, Where, str]],
    *,
    own: tuple[int, Where] | None,
    rescan: Where | None,
    max_bytes: int,
    change: journal.Change | None = None,
    state_dir: Path | None = None,
    own_folder: baselines.OwnFolder | None = None,
) -> Applied:
    """Run ``steps`` in order, then stat every path they touched; never raises OSError.

    A failing step stops the plan, and what ran before it is still read back, so the view
    shows the disk as it is (`Applied.error` carries the failure for the caller). A plan
    that ran whole journals ``change`` in ``state_dir``, with the size it left and the
    version it kept, as found here (§7.2).
    """
    out = Applied()
    kept: list[str] = []
    with baselines.GUARD:
        # A folder renamed whole (``rescan``) may change any path of the own folder.
        mine = None if rescan is not None else [p for o, _, p in reread if own and o == own[0]]
        if own_folder is not None:
            _catch_up(own_folder, mine)
        try:
            for step in steps:
                kept += step.run()
        except Skipped as skip:
            out.skipped = skip.why
            return out
        except OSError as exc:
            out.error = exc
        out.at_ns = time.monotonic_ns()
        todo = list(reread)
        if own is not None:
            todo += [(own[0], own[1], path) for path in kept]
        wanted = [(where.root, where.parts, path) for _, where, path in todo]
        looks = sources.look_each(wanted, max_bytes)
        out.found = [(o, path, st) for (o, _, path), st in zip(todo, looks, strict=True)]
        if own_folder is not None:
            _rebase(own_folder, mine)
    if rescan is not None:
        out.scan = sources.scan(rescan.root, rescan.parts, max_bytes, rescan.only)
    if change is not None and state_dir is not None and out.error is None:
        _journal(change, state_dir, out.found, own[0] if own is not None else None)
    return out


def _catch_up(own: baselines.OwnFolder, paths: list[str] | None) -> None:
    """A change on disk to ``paths`` that the keeper has not looked at yet keeps its
    version before the plan changes them (`baselines.catch_up`)."""
    try:
        baselines.catch_up(own, paths)
    except (OSError, sqlite3.Error) as exc:
        log.warning("cannot keep what changed on disk in %s: %s", own.folder.path, exc)


def _rebase(own: baselines.OwnFolder, paths: list[str] | None) -> None:
    """The store learns what the plan left at ``paths`` of the own folder, so that the
    keeper (adapter/keeper.py) never takes this change for one made on disk."""
    try:
        baselines.rebase(own, paths)
    except (OSError, sqlite3.Error) as exc:
        log.warning("cannot note what a change left in %s: %s", own.folder.path, exc)


def _journal(
    change: journal.Change,
    state_dir: Path,
    found: list[tuple[int, str, sources.FileStat | str | None]],
    own: int | None,
) -> None:
    """Complete ``change`` with what the disk shows now, and record it."""
    history = f"{HISTORY}/{change.target}/"
    for origin, path, st in found:
        if origin != own or not isinstance(st, sources.FileStat):
            continue
        if path == change.target and change.what not in ("unlink", "rmdir", "mkdir"):
            change.after = st.size
        elif path.startswith(history) and path.count("/") == history.count("/"):
            change.kept = path  # the version kept; those pruned are gone
    journal.record(state_dir, change)
