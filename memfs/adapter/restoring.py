"""`memfs restore` answered by the running mount (§7.2): the command asks, the daemon
restores through its one way down, and the command reads what it did.

Layer adapter (trio). The command sets the root's ``user.memfs.restore`` xattr to a JSON
request (`REQUEST`); the daemon chooses and plans the restore (view/restore.py) under the
commit lock, so no save through the mount runs between the choice and the write, and
runs it in one worker call like any change (stages.Stages.run). It keeps the outcome,
one line, under the request's id, which the command reads back as the xattr
``user.memfs.result.<id>`` (`RESULT`). A mount that is down is restored by the command
itself, on the sources and the state (app/history.py): the same choice and plan.
"""

from __future__ import annotations

import errno
import json
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from memfs.adapter.stages import Stages
from memfs.view import restore
from memfs.view.project import Project
from memfs.view.writes import Plan, Refused

REQUEST = "user.memfs.restore"
RESULT = "user.memfs.result."
KEPT_RESULTS = 64  # outcomes kept for their commands to read, newest


class Restores:
    """The daemon's side of `memfs restore`."""

    def __init__(self, stages: Stages, project: Callable[[str], Awaitable[Project]]) -> None:
        self.stages = stages
        self._project = project
        self._results: OrderedDict[str, bytes] = OrderedDict()

    async def run(self, raw: bytes) -> None:
        """Restore what ``raw`` (a JSON request) asks; its outcome is kept for `result`.

        Raises:
            Refused: EINVAL for a request that does not parse.
        """
        try:
            request = json.loads(raw)
            ident = str(request["id"])
            slug, ask = str(request["project"]), ask_of(request)
        except (ValueError, KeyError, TypeError):
            raise Refused(errno.EINVAL) from None
        try:
            line = await self._restore(slug, ask)
            outcome = {"ok": True, "line": line}
        except restore.NotRestorable as exc:
            outcome = {"ok": False, "error": str(exc)}
        except Refused as exc:
            outcome = {"ok": False, "error": f"{os.strerror(exc.errno)} ({slug}/{ask.path})"}
        except OSError as exc:
            outcome = {"ok": False, "error": f"{exc.strerror or exc} ({slug}/{ask.path})"}
        self._results[ident] = json.dumps(outcome).encode()
        while len(self._results) > KEPT_RESULTS:
            self._results.popitem(last=False)

    def result(self, ident: str) -> bytes | None:
        # Kept, not taken: a reader asks twice for a long value (its size, then it).
        return self._results.get(ident)

    async def _restore(self, slug: str, ask: restore.Ask) -> str:
        project = await self._project(slug)
        chosen: list[restore.Choice] = []

        def made() -> Plan:
            # Chosen once the commit lock is held: against the view every save left.
            choice = restore.choose(project, ask)
            chosen.append(choice)
            return restore.plan(self.stages.planner(project), choice, ask)

        await self.stages.run(project, made)
        return restore.told(project, ask, chosen[0])


def ask_of(request: dict[str, object]) -> restore.Ask:
    """The Ask a request names (the command's side writes it with `request_of`)."""
    at = request.get("at_ns")
    version, source = request.get("version"), request.get("source")
    return restore.Ask(
        str(request["path"]),
        version=str(version) if version is not None else None,
        at_ns=int(at) if isinstance(at, int) else None,
        source=str(source) if source is not None else None,
    )
