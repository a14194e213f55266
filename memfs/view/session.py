"""The rules of one write session through the mount: what each request on a handle open
for writing means, and what it commits (§7.1, §7.2, §5.3).

Layer view: pure (imports neither pyfuse3 nor trio, does no I/O). A handle open for
writing carries one `WriteSession`: one `State`, and one method per transition, which
refuses a transition from a state it does not leave (`InvalidTransition`), so every path a
write takes can be read in this class. The adapter (adapter/stages.py) asks it what a
request means (`Do`), builds the plan with `plan` and runs it in one worker call
(steps.apply); it never sets a state itself.

The states and what moves a session between them::

    OPEN ─── a change (write, truncate, chmod, utimens): a stage copied from the head ─▶ STAGED
    O_TRUNC or create: an empty stage ─────────────────────────────────────────────────▶ STAGED
    STAGED ─── its commit (the file; its name replaced: a kept version) ───────────────▶ COMMITTED
    COMMITTED ─── a change: a new stage, copied from what it committed ────────────────▶ STAGED
    OPEN, STAGED, COMMITTED ─── a write or truncate fails (ENOSPC, EFBIG, ...) ────────▶ FAILED
    any but RELEASED ─── its name unlinked, or its writer killed by a signal ──────────▶ DISCARDED
    any ─── the last reference to the handle goes ─────────────────────────────────────▶ RELEASED

*Replaced* is no state but what happened to its name: another file was renamed over it
while it was open. Nothing a writer wrote is dropped for that (§7.2): a replaced session's
commit lands its bytes as a kept version of the path, under ``.history/``, not over the
file that replaced it; an index's lands as its change against what it read (§5.3), so both
writers keep their lines. An unlinked name is different: its writer writes into a file
that is gone, as on a local disk, and commits nothing (§7.6).

A FAILED session never commits: the writer's last close (or its fsync) returns the errno,
and the file stays as it was (§7.1); a name it created stays, empty. A DISCARDED one goes
on taking writes on its descriptor, and commits nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from memfs.disk import staging
from memfs.view import indexes
from memfs.view.indexes import IndexChange
from memfs.view.writes import Plan, Planner


class State(enum.Enum):
    OPEN = "open"  # opened for writing; nothing staged yet (an editor's O_RDWR, `touch`)
    STAGED = "staged"  # its stage holds what it wrote (or a bare create or truncation)
    COMMITTED = "committed"  # what it staged landed; nothing changed since
    FAILED = "failed"  # a write or truncate failed: it never commits
    DISCARDED = "discarded"  # unlinked while open, or its writer killed: it never commits
    RELEASED = "released"


class Do(enum.Enum):
    """What a close, an fsync or the release asks of the adapter."""

    NOTHING = "nothing"
    COMMIT = "commit"  # the stage lands: the file, or a kept version if its name was replaced
    FAIL = "fail"  # return the errno of the failed change
    FAIL_EMPTY = "fail-empty"  # a created name whose write failed stays, empty; then FAIL


class Need(enum.Enum):
    """What a change through the handle needs before it can be made on the stage."""

    NOTHING = "nothing"
    COPY = "copy"  # a stage, copied from the head the handle opened
    RESTAGE = "restage"  # a new stage, copied from what its last commit landed


class InvalidTransition(Exception):
    """A transition the session's state does not allow: a bug in the caller."""

    def __init__(self, session: WriteSession, transition: str) -> None:
        super().__init__(f"{transition} from {session.state.value}")


@dataclass(eq=False)
class WriteSession:
    """One handle's write session (see the module)."""

    state: State = State.OPEN
    index: IndexChange | None = None  # an index's save: what its writer read (§5.3)
    errno: int = 0  # FAILED: the errno of the change that failed
    replaced: bool = False  # another file was renamed over its name while it was open
    # A handle keeps the version it replaces once: at its first commit, what stood before
    # it opened. Later commits replace only its own bytes.
    keeps_history: bool = True

    @classmethod
    def truncating(cls, index: IndexChange | None = None) -> WriteSession:
        """An open with O_TRUNC, or a create: an empty stage that commits even with nothing
        written (`: > file`, `touch new`)."""
        return cls(State.STAGED, index)

    # --- what a request needs --------------------------------------------------------

    def change(self) -> Need:
        """A write, truncate, chmod or utimens through the handle: what its stage needs
        first. A FAILED or DISCARDED session's changes go to its stage as they are (the
        writer sees what it wrote) and never commit."""
        if self.state is State.OPEN:
            return Need.COPY
        if self.state is State.COMMITTED:
            # Its stage's file is the committed file (or a kept version) now: a change in
            # place would change that; a new stage starts from it.
            return Need.RESTAGE
        if self.state is State.RELEASED:
            raise InvalidTransition(self, "change")
        return Need.NOTHING

    def staged(self) -> None:
        """The stage a change needed was made (`change`): it holds the writer's bytes. A
        DISCARDED session's stage holds them for its writer alone, and never commits."""
        if self.state is State.DISCARDED:
            return
        if self.state not in (State.OPEN, State.COMMITTED):
            raise InvalidTransition(self, "staged")
        self.state = State.STAGED

    def changed(self) -> None:
        """A change was made on the stage."""
        if self.state in (State.OPEN, State.COMMITTED, State.RELEASED):
            raise InvalidTransition(self, "changed")

    def failed(self, errno: int) -> None:
        """A write or truncate failed: the stage never commits (§7.1); the first errno is
        the one returned."""
        if self.state is State.RELEASED:
            raise InvalidTransition(self, "failed")
        if self.state is not State.DISCARDED and not self.errno:
            self.state, self.errno = State.FAILED, errno

    # --- closing ---------------------------------------------------------------------

    def close(self, *, created: bool) -> Do:
        """A close of one of the writer's descriptors (FUSE's flush). What it asks is done
        only at the writer's own last close (steps.LastClose decides in the worker): a
        forked child's or a dup's close asks nothing. ``created``: the handle made its name
        and never committed it."""
        if self.state is State.STAGED:
            return Do.COMMIT
        if self.state is State.FAILED:
            return Do.FAIL_EMPTY if created else Do.FAIL
        return Do.NOTHING

    def fsync(self) -> Do:
        """fsync(2): what is staged is made durable now, a bare create or truncation too."""
        if self.state is State.STAGED:
            return Do.COMMIT
        if self.state is State.FAILED:
            return Do.FAIL
        return Do.NOTHING

    def release(self, *, created: bool) -> Do:
        """The last reference to the handle went: what its closes left is committed (no
        `close()` waits for it: errors are logged), a created name whose write failed
        stays, empty."""
        if self.state is State.STAGED:
            return Do.COMMIT
        if self.state is State.FAILED and created:
            return Do.FAIL_EMPTY
        return Do.NOTHING

    def committed(self) -> None:
        """What it staged landed (`plan` ran whole)."""
        if self.state is not State.STAGED:
            raise InvalidTransition(self, "committed")
        self.state = State.COMMITTED
        self.keeps_history = False

    def emptied(self) -> None:
        """A FAILED create's name landed empty: it stays FAILED (its close returns errno)."""
        if self.state is not State.FAILED:
            raise InvalidTransition(self, "emptied")

    # --- what happens to its name ----------------------------------------------------

    def name_replaced(self) -> None:
        """Another file was renamed over its name: what it stages lands as a version."""
        if self.state is State.RELEASED:
            raise InvalidTransition(self, "name_replaced")
        self.replaced = True

    def discarded(self) -> None:
        """Its name was unlinked while it was open, or its writer was killed by a signal:
        it never commits (§7.6: it never brings the name back)."""
        if self.state is State.RELEASED:
            raise InvalidTransition(self, "discarded")
        self.state = State.DISCARDED

    def released(self) -> None:
        self.state = State.RELEASED

    @property
    def commits(self) -> bool:
        """Whether anything it holds may still land."""
        return self.state in (State.OPEN, State.STAGED, State.COMMITTED, State.FAILED)


def plan(
    session: WriteSession,
    planner: Planner,
    stage: staging.Stage,
    path: str,
    *,
    created: bool,
    empty: bool = False,
    size: int = 0,
) -> Plan:
    """The plan of a COMMIT (or, ``empty``, a FAIL_EMPTY) of ``session``'s ``stage``, the
    writer's file at ``path`` (``created``: its name's first commit). An index is a save
    of the view against what its writer read (view/indexes.py); any other file whose name
    was replaced lands as a kept version (``size``: the stage's bytes); else the stage
    becomes the file."""
    keep = session.keeps_history
    if empty:
        return planner.commit(stage, path, keep=keep, created=created, empty=True)
    if planner.project.is_index(path):
        assert session.index is not None, "an index's session knows what its writer read"
        return indexes.plan_commit(
            planner, stage, session.index, keep=keep, created=created, path=path
        )
    if session.replaced:
        return planner.keep_stage(stage, path, size)
    return planner.commit(stage, path, keep=keep, created=created)
