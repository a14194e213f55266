"""A project's derived documents: the body MEMORY.md shows, PREAMBLE.md, the file bodies
they read, and what ``memfs status`` asks of them.

§5.3, §6, §7a. Layer view: imports neither pyfuse3 nor trio; not thread-safe, like the
project it belongs to. The view (project.py) decides what every path shows; this module
only reads it, and caches what it derives from it for one generation of the project. It
reads no disk: the bodies the renderings draw on are read ahead by its owner
(`bodies_wanted`, then `keep_bodies`: a worker's `sources.read_bodies` while serving); a
body a rendering needs that was not read ahead is asked of the reader the project's owner
gave it (`Project.read_body`; the adapter's reads it on the request thread, §7a's known
exception).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memfs.disk.config import Config
from memfs.disk.sources import BodyRead
from memfs.rules import index, preamble
from memfs.rules.preamble import Doc, IndexEntry, MemoryOverLimit
from memfs.view.userlevel import kind_of
from memfs.view.versions import FOREVER_NS, MEMORY, Kind, Version

if TYPE_CHECKING:
    from memfs.view.project import Project

log = logging.getLogger(__name__)

# Bytes read from a file's start to find its frontmatter description.
DESCRIPTION_BYTES = 2048
DESCRIPTIONS_KEPT = 4096  # descriptions cached before the cache starts over
# PREAMBLE-<N>.md renderings kept per project at once (§6): a few budgets are asked for
# again and again (an agent's own); any N may be, so the cache starts over past this.
SIZED_KEPT = 8
# Reads `bodies_wanted` adds beyond what the renderings need when every file is text: a
# rendering skips a file that is not text, or gone, and reads the next one.
SPARE_READS = 2
# How a body no worker read ahead is read: (root, parts, path, limit) -> at most limit
# bytes, OSError if it cannot be (sources.read_file's shape). Given by the project's owner.
BodyReader = Callable[[Path, tuple[str, ...], str, int], bytes]

__all__ = ["BodyRead", "BodyReader", "Documents", "empty_preamble"]


@dataclass
class Rendered:
    """A synthetic body, computed once per project generation."""

    generation: int
    data: bytes
    valid_until_ns: int = FOREVER_NS  # a future-dated file becomes eligible then
    files_at: str | None = None


class Documents:
    """What one project's view derives: MEMORY.md's body (the union when several sources
    have one), PREAMBLE.md, the bodies they read (kept when a worker read them ahead), and
    the status questions about them. Each is computed once per generation and cached.

    The project owns this object, and this object holds the project weakly: a project must
    stay free of reference cycles, since the watcher freezes every loaded project out of
    the collector's sight (watch.Turns) and only reference counting frees one dropped since.
    """

    def __init__(self, project: Project) -> None:
        self._of = weakref.ref(project)
        self._memory: dict[str, Rendered] = {}  # index path -> its body (§5.3)
        self._preamble: Rendered | None = None
        self._sized: dict[int, Rendered] = {}  # budget -> PREAMBLE-<budget>.md (§6)
        self._descriptions: dict[Version, str | None] = {}
        # version -> (the limit it was read with, its bytes), read off the request thread
        # for the renderings to come (`bodies_wanted`, `keep_bodies`)
        self._bodies: dict[Version, tuple[int, bytes]] = {}
        # (generation, value): what `memfs status` asks, computed once per generation
        self._stale: tuple[int, list[tuple[str, str]]] | None = None
        self._over_limit: tuple[int, MemoryOverLimit | None] | None = None

    @property
    def _project(self) -> Project:
        project = self._of()
        assert project is not None, "a project's documents outlived it"
        return project

    # --- bodies ----------------------------------------------------------------------

    def read(self, v: Version, limit: int | None = None) -> bytes:
        """Version ``v``'s body, at most ``limit`` bytes (None: the size cap): from the
        bodies kept by `keep_bodies` when they hold it, else from the project's reader."""
        project = self._project
        cap = project.config.limits.max_file_bytes if limit is None else limit
        if self._kept(v, cap):
            return self._bodies[v][1][:cap]
        if project.read_body is None:
            raise RuntimeError(f"{v.path} was not read ahead, and {project.slug} has no reader")
        return project.read_body(*_body_read(project, v, cap))

    def _kept(self, v: Version, cap: int) -> bool:
        """At least ``cap`` bytes of ``v`` are kept: read with a limit as large, or whole
        (shorter than the limit it was read with)."""
        kept = self._bodies.get(v)
        return kept is not None and (kept[0] >= cap or len(kept[1]) < kept[0])

    def bodies_wanted(self, now_ns: int | None = None) -> list[tuple[Version, BodyRead]]:
        """The reads the next PREAMBLE.md and MEMORY.md will ask for and that are not kept
        yet, each with where to read it (a worker reads them: `sources.read_bodies`, then
        `keep_bodies`); memory only, O(N + index lines). Kept bodies no rendering will ask
        for any more are dropped.

        A superset of what the renderings read when every file is text: the latest
        handoffs, the newest files and a few more, every MEMORY.md version, and the start
        of each file the index may describe (unless described already); in global/claude,
        every version of each subagent's index too. Whatever a rendering asks beyond these,
        it reads itself.
        """
        project = self._project
        now = time.time_ns() if now_ns is None else now_ns
        settings = project.config.preamble
        cap = project.config.limits.max_file_bytes
        found: dict[Version, int] = {}
        for path in project.indexes():
            leaf = project.tree.leaf(path)
            if leaf is not None and leaf.version is not None:
                for v in (leaf.version, *leaf.others):
                    found[v] = cap
        handoffs = [v for v in reversed(project.handoffs) if v.mtime_ns <= now][:SPARE_READS]
        for v in [*handoffs, *project.leads()]:
            found[v] = cap
        by_mtime = project.by_mtime
        end = by_mtime.bisect_key_right((now, "\U0010ffff"))
        whole = settings.newest + SPARE_READS
        described = settings.index_max
        for pos in range(end - 1, -1, -1):
            v = by_mtime[pos]
            superseded = _is_handoff(v) and v not in handoffs[:1]  # never inlined
            if whole > 0 and not superseded:
                found[v] = cap
                whole -= 1
            elif described > 0:
                if v not in self._descriptions:
                    found.setdefault(v, DESCRIPTION_BYTES)
                described -= 1
            else:
                break
        self._bodies = {v: kept for v, kept in self._bodies.items() if v in found}
        return [(v, _body_read(project, v, n)) for v, n in found.items() if not self._kept(v, n)]

    def keep_bodies(self, bodies: dict[Version, tuple[int, bytes]]) -> None:
        """Keep these bodies (version -> (the limit read with, the bytes)) for `read`."""
        self._bodies.update(bodies)

    def drop_bodies(self) -> None:
        self._bodies = {}

    # --- MEMORY.md -------------------------------------------------------------------

    def memory_index(self, path: str = MEMORY) -> bytes:
        """The body index ``path`` shows (the top MEMORY.md, or a subagent's in
        global/claude): the head's, or the union when several sources have one."""
        project = self._project
        leaf = project.tree.leaf(path)
        if leaf is None or leaf.version is None:
            return b""
        cached = self._memory.get(path)
        if cached is not None and cached.generation == project.generation:
            return cached.data
        if leaf.kind is Kind.FILE:
            data = self._read_or_empty(project, leaf.version)
        else:
            data = self._union(project, [leaf.version, *leaf.others], path)
        if any(r.generation != project.generation for r in self._memory.values()):
            self._memory = {}  # only this generation's are kept
        self._memory[path] = Rendered(project.generation, data)
        return data

    def _union(self, project: Project, versions: Sequence[Version], path: str = MEMORY) -> bytes:
        """The union of ``versions`` of index ``path``, the first the head (§5.3), the lines
        a save hid taken out of every version but the own index (the head, when it is the
        own source's)."""
        hidden = project.hidden_of(path)
        own = project.config.own_index
        texts = []
        for n, v in enumerate(versions):
            text = self._read_or_empty(project, v).decode("utf-8", "surrogateescape")
            if n or not project.origins[v.origin].writable(own):
                text = index.without_lines(text, hidden)
            texts.append(text)
        return index.union_index(texts[0], texts[1:]).encode("utf-8", "surrogateescape")

    def other_indexes(self, path: str = MEMORY) -> list[tuple[Path, tuple[str, ...], str]]:
        """Where every version of index ``path`` lies but the own source's (conflict copies
        and versions whited out for now included): a save reads them in its worker
        (index_save.SaveIndex) to know which hidden lines still hide something."""
        project = self._project
        leaf = project.tree.leaf(path)
        own = project.config.own_index
        origins = project.origins
        versions = [v for v in project.versions(path) if not origins[v.origin].writable(own)]
        if leaf is not None:
            versions += [v for v in leaf.others if v.path != path]  # conflict copies
        return [
            (project.origins[v.origin].root, project.origins[v.origin].parts, v.path)
            for v in versions
        ]

    def _read_or_empty(self, project: Project, v: Version) -> bytes:
        try:
            return self.read(v)
        except OSError as exc:
            log.warning("%s: cannot read %s: %s", project.slug, project.real_path(v), exc)
            return b""

    # --- PREAMBLE.md -----------------------------------------------------------------

    def preamble(
        self, files_at: str | None, now_ns: int | None = None, budget: int | None = None
    ) -> bytes:
        """PREAMBLE.md for this generation of the project (§6), cached until it changes;
        with ``budget``, PREAMBLE-<budget>.md: the same rendering under that budget.

        ``files_at`` is the mount folder of this project; None (no mount) points every
        marker at the file's real path instead.
        """
        project = self._project
        now = time.time_ns() if now_ns is None else now_ns
        cached = self._preamble if budget is None else self._sized.get(budget)
        if (
            cached is not None
            and cached.generation == project.generation
            and cached.files_at == files_at
            and now < cached.valid_until_ns
        ):
            return cached.data
        settings = project.config.preamble
        data, valid_until = self._render_preamble(
            project, files_at, now, settings.budget if budget is None else budget
        )
        rendered = Rendered(project.generation, data, valid_until, files_at)
        if budget is None:
            self._preamble = rendered
        else:
            if len(self._sized) >= SIZED_KEPT:
                self._sized.clear()
            self._sized[budget] = rendered
        return data

    def preamble_valid_until(self) -> int:
        """When the cached PREAMBLE.md changes by itself (a future-dated file comes due)."""
        cached = self._preamble
        return cached.valid_until_ns if cached is not None else FOREVER_NS

    def _render_preamble(
        self, project: Project, files_at: str | None, now: int, budget: int
    ) -> tuple[bytes, int]:
        settings = project.config.preamble
        due = _Due()  # when the rendering changes by itself: a file dated after `now`
        latest = self._latest_handoff(project, now, files_at, due)
        index_doc, until = self._index_doc(project, files_at, now)
        due.at(until)
        # Newest first, skipping files dated after `now`: one bisect, then a walk of N + rest.
        by_mtime = project.by_mtime
        end = by_mtime.bisect_key_right((now, "\U0010ffff"))
        if end < len(by_mtime):
            due.at(by_mtime[end].mtime_ns)
        inlined = latest is not None and latest[1] is not None
        leads = [v for v in project.leads() if v.mtime_ns <= now]
        lead = [d for v in leads if (d := self._doc(project, v, files_at, now, due)) is not None]
        newest: list[preamble.Doc] = []
        rest: list[preamble.IndexEntry] = []
        reads = 0  # whole-file reads for the newest section: bounded, see below
        for pos in range(end - 1, -1, -1):
            v = by_mtime[pos]
            is_latest = latest is not None and v is latest[0]
            if (is_latest and inlined) or v in leads:
                continue  # shown above
            # Superseded handoffs are never inlined (§6.4): a stale handoff read as
            # current derails an agent. Nor is the latest when it is not text.
            superseded = latest is not None and not is_latest and _is_handoff(v)
            not_text = is_latest
            if not superseded and not is_latest and len(newest) < settings.newest:
                reads += 1
                doc = self._doc(project, v, files_at, now, due)
                if doc is not None and preamble.is_text(doc.body):
                    newest.append(doc)
                    continue
                if doc is None:
                    continue  # unreadable (gone since the scan): counted in "more"
                not_text = True
            if len(rest) >= settings.index_max:
                # Keep walking only to fill the newest section, past superseded handoffs
                # (no read) and at most as many files that are not text as it and the
                # index hold together, so that a folder of binaries costs no more.
                if len(newest) >= settings.newest or reads >= settings.newest + settings.index_max:
                    break
                continue
            rest.append(self._index_entry(project, v, files_at, now, due, superseded, not_text))
        eligible = end - (1 if inlined else 0) - len(leads)
        inp = preamble.PreambleInput(
            project=project.slug,
            files_at=files_at or _real_folder(project),
            handoff=latest[1] if latest is not None else None,
            index=index_doc,
            newest=newest,
            rest=rest,
            more=max(0, eligible - len(newest) - len(rest)),
            heading="Project memory" if kind_of(project.slug) is None else "User-level memory",
            moved_from=project.moved_from,
            lead=lead,
        )
        data = preamble.render(inp, budget=budget, file_cap=settings.file_cap)
        return data, due.ns

    def _index_entry(
        self,
        project: Project,
        v: Version,
        files_at: str | None,
        now: int,
        due: _Due,
        superseded: bool,
        not_text: bool,
    ) -> IndexEntry:
        return preamble.IndexEntry(
            v.path,
            v.size,
            self._description(v),
            v.mtime_ns,
            superseded=superseded,
            newer=_stale_mark(project, v, files_at, now, due),
            not_text=not_text,
            conflicts=project.conflicts(v.path),
        )

    def _index_doc(
        self, project: Project, files_at: str | None, now: int
    ) -> tuple[Doc | None, int]:
        """The MEMORY.md section: the union of the versions dated no later than ``now``."""
        leaf = project.tree.leaf(MEMORY)
        if leaf is None or leaf.version is None:
            return None, FOREVER_NS
        versions = [leaf.version, *leaf.others]
        present = [v for v in versions if v.mtime_ns <= now]
        until = min((v.mtime_ns for v in versions if v.mtime_ns > now), default=FOREVER_NS)
        if not present:
            return None, until
        if len(present) == len(versions):
            body = self.memory_index()
        else:
            body = self._union(project, present)
        where = f"{files_at}/{MEMORY}" if files_at else str(project.real_path(present[0]))
        return Doc(where, MEMORY, body, mtime_ns=max(v.mtime_ns for v in present)), until

    def _latest_handoff(
        self, project: Project, now: int, files_at: str | None, due: _Due
    ) -> tuple[Version, Doc | None] | None:
        """The latest handoff dated no later than ``now`` (§6.2), and its Doc.

        The Doc is None when the file is not text: it is still the latest, so no older
        handoff takes its place (that one is superseded, whatever this one holds); it is
        listed in the index instead. One that cannot be read is gone since the scan (its
        change event is on its way): the next one is taken.
        """
        handoffs = project.handoffs
        for pos in range(len(handoffs) - 1, -1, -1):
            v = handoffs[pos]
            if v.mtime_ns > now:
                continue
            doc = self._doc(project, v, files_at, now, due)
            if doc is None:
                continue
            return v, doc if preamble.is_text(doc.body) else None
        return None

    def _doc(
        self, project: Project, v: Version, files_at: str | None, now: int, due: _Due
    ) -> Doc | None:
        try:
            # A subagent's index (global/claude) is inlined as the view shows it: the union
            # of every account's (§5.3), whose versions bodies_wanted reads ahead.
            body = self.memory_index(v.path) if project.is_index(v.path) else self.read(v)
        except OSError as exc:
            log.warning("%s: cannot read %s: %s", project.slug, project.real_path(v), exc)
            return None
        where = f"{files_at}/{v.path}" if files_at else str(project.real_path(v))
        newer = _stale_mark(project, v, files_at, now, due)
        conflicts = project.conflicts(v.path)
        return preamble.Doc(
            where, v.path, body, project.source_name(v), v.mtime_ns, newer, conflicts
        )

    def _description(self, v: Version) -> str | None:
        if v not in self._descriptions:
            try:
                found = preamble.description(self.read(v, DESCRIPTION_BYTES))
            except OSError:
                found = None
            if len(self._descriptions) > DESCRIPTIONS_KEPT:
                self._descriptions.clear()
            self._descriptions[v] = found
        return self._descriptions[v]

    # --- what `memfs status` asks ----------------------------------------------------

    def stale_own_heads(self) -> list[tuple[str, str]]:
        """Own heads another source has a newer version of, for ``memfs status``.

        Each is (view path, the newer version's ``.history/`` path in the view), sorted
        by view path; versions of any date count. Computed once per generation:
        O(versions), then O(1) until the project changes.
        """
        project = self._project
        cached = self._stale
        if cached is not None and cached[0] == project.generation:
            return list(cached[1])
        found = []
        for path, head in project.heads.items():
            newer, _ = project.newer_version(head)
            if newer is not None:
                found.append((path, project.history_view(newer) or str(project.real_path(newer))))
        found.sort()
        self._stale = (project.generation, found)
        return list(found)

    def memory_over_limit(self) -> MemoryOverLimit | None:
        """How the merged MEMORY.md passes what Claude Code loads; None if it loads whole.

        For ``memfs status``: the union's size is cached per generation, and so is this.
        """
        project = self._project
        cached = self._over_limit
        if cached is not None and cached[0] == project.generation:
            return cached[1]
        over = preamble.memory_over_limit(self.memory_index())
        self._over_limit = (project.generation, over)
        return over

    # --- invariants ------------------------------------------------------------------

    def _check(self) -> None:
        """Assert every invariant of what is cached; Project._check calls this."""
        project = self._project
        # Every cache is of a generation the project had: none runs ahead of the view.
        for rendered in (*self._memory.values(), self._preamble, *self._sized.values()):
            assert rendered is None or rendered.generation <= project.generation
        for asked in (self._stale, self._over_limit):
            assert asked is None or asked[0] <= project.generation
        # The union is cached only while the view shows a MEMORY.md (every change to the
        # view is a new generation).
        for path, rendered in self._memory.items():
            if rendered.generation == project.generation:
                leaf = project.tree.leaf(path)
                assert leaf is not None
                assert leaf.version is not None
        # A body is kept with the limit it was read with, and never holds more.
        assert all(len(data) <= limit for limit, data in self._bodies.values())
        assert len(self._descriptions) <= DESCRIPTIONS_KEPT + 1
        assert len(self._sized) <= SIZED_KEPT


def empty_preamble(
    config: Config, slug: str, files_at: str | None, budget: int | None = None
) -> bytes:
    """PREAMBLE.md of project ``slug`` while no source holds memory for it (§4, §6).

    Needs no Project: the frame says there is no memory yet and where the first write
    lands (the own source's folder for ``slug``), or that the mount is read-only. Under
    the configured budget, or ``budget`` (PREAMBLE-<budget>.md). ``files_at`` is the
    project's folder in the mount; None (no mount) names the own source's folder there
    instead, or the slug without one.
    """
    own = config.own
    own_folder = str(own.folder(slug)) if own is not None else None
    return preamble.render_empty(
        slug,
        files_at or own_folder or slug,
        own_folder,
        budget=config.preamble.budget if budget is None else budget,
    )


class _Due:
    """The earliest moment a rendering changes by itself (a future-dated file comes due)."""

    def __init__(self) -> None:
        self.ns = FOREVER_NS

    def at(self, ns: int) -> None:
        self.ns = min(self.ns, ns)


def _body_read(project: Project, v: Version, limit: int) -> BodyRead:
    origin = project.origins[v.origin]
    return (origin.root, origin.parts, v.path, limit)


def _real_folder(project: Project) -> str:
    own = project.config.own_index
    folders = [o.folder for o in project.origins if o.writable(own)] or [
        o.folder for o in project.origins
    ]
    return str(folders[0]) if folders else project.slug


def _stale_mark(
    project: Project, v: Version, files_at: str | None, now: int, due: _Due
) -> str | None:
    """Where a newer version of own head ``v`` is to be read, or None (§6)."""
    newer, later = project.newer_version(v, now)
    due.at(later)
    if newer is None:
        return None
    if files_at is None:  # no mount: the real file is what can be read
        return str(project.real_path(newer))
    return project.history_view(newer) or str(project.real_path(newer))


def _is_handoff(v: Version) -> bool:
    """Whether a head in the project's `by_mtime` is one of its `handoffs`, by its name
    alone (the two take the same heads, and membership in the sorted list would rank it
    again)."""
    return preamble.is_handoff(v.path)
