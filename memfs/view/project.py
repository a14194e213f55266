"""A loaded project: every source's versions of every path, the head of each, its history.

§4, §5.2, §6. Layer view: imports neither pyfuse3 nor trio; not thread-safe (the adapter
owns each project and changes it from one task).

A project is built in three parts, one job each: `Holdings` (holdings.py) takes in what
the source folders hold; `Project`, built on it, is the merged view of those versions; its
`documents` (documents.py) derive MEMORY.md's union, PREAMBLE.md and the status questions
from the view, and cache them per generation.

The merged view is a `Tree` of view paths. A path's versions decide, in `_refresh`, what it
shows: the head at the path itself, every other version under
``.history/<path>/<source>@<UTC>.md``. Heads are also kept in sorted indices (by mtime, by
handoff rank), so a preamble costs O(N + index lines) and one changed file O(log n).
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sortedcontainers import SortedKeyList

from memfs.disk.config import CODEX, GEMINI, Config
from memfs.rules import history, layouts, names, preamble
from memfs.rules.tree import ROOT, Tree, parent_of
from memfs.view.documents import BodyRead, BodyReader, Documents
from memfs.view.holdings import Holdings, cached_path_rule
from memfs.view.versions import DIR_WHITEOUT, FOREVER_NS, reserved
from memfs.view.versions import HISTORY as HISTORY
from memfs.view.versions import MEMORY as MEMORY
from memfs.view.versions import PREAMBLE as PREAMBLE
from memfs.view.versions import Kind as Kind
from memfs.view.versions import Leaf as Leaf
from memfs.view.versions import Origin as Origin
from memfs.view.versions import Version as Version

# The names imported `as` themselves are re-exported: the adapter, the plans and the tests
# import them from here (the values live in versions.py).

log = logging.getLogger(__name__)

history_stamp = history.stamp  # the name tests and older callers know


class Project(Holdings):
    """The merged memory of one canonical slug: the view of what its sources hold."""

    def __init__(
        self,
        slug: str,
        config: Config,
        whiteouts: Iterable[tuple[str, str, int]] = (),
        hidden_lines: Iterable[str] | Mapping[str, Iterable[str]] = (),
        *,
        read_body: BodyReader | None = None,
    ) -> None:
        """A view of no folder yet: its origins come with their scans (`add_origin`), and
        ``whiteouts`` and ``hidden_lines`` are what the state folder keeps of it
        (state.load_project, read by the caller). ``read_body`` reads a body a rendering
        needs that was not read ahead (`Documents.read`); None: every one must be."""
        super().__init__(slug, config, whiteouts, hidden_lines)
        self.read_body = read_body
        self.tree: Tree[Leaf] = Tree()
        self.generation = 0
        # path -> view paths it occupies now: one path shows one view as a plain string
        # (no list per file: 2 MiB of the benchmark's 20,000), more as a list (`_views`)
        self._shown: dict[str, str | list[str]] = {}
        self._owner: dict[str, str] = {}  # view path -> the path whose version it shows
        self._waiting: dict[str, set[str]] = {}  # view path -> paths that want it too
        self._heads: dict[str, Version] = {}  # path -> head, for the indices below
        self._by_mtime: SortedKeyList[Version, Any] = SortedKeyList(key=_mtime_key)
        self._handoffs: SortedKeyList[Version, Any] = SortedKeyList(key=_handoff_key)
        self._marked: set[str] = set()  # folders held open in the tree
        # original path -> its conflict copies' paths that hold a version (§5.1)
        self._conflicts: dict[str, set[str]] = {}
        # MEMORY.md's union, PREAMBLE.md and the bodies they read (holds this weakly)
        self.documents = Documents(self)
        self.tree.add(PREAMBLE, Leaf(Kind.PREAMBLE))
        # The paths this project's memory moved from, oldest last (§4.2): PREAMBLE.md's
        # frame names them. Set by the catalog, which knows the moves it follows.
        self.moved_from: tuple[str, ...] = ()

    def set_moved_from(self, paths: tuple[str, ...]) -> None:
        """The project follows moves from ``paths`` now (catalog.py)."""
        if paths != self.moved_from:
            self.moved_from = paths
            self._changed()

    # --- what Holdings asks of the view (besides `_refresh`, below) -----------------

    def _sync_mark(self, path: str) -> None:
        """Show a folder while any holder of it is not whited out."""
        want = not _hidden(path) and any(
            (path, self._source_name(i), DIR_WHITEOUT) not in self._whiteouts
            for i in self._dirs.get(path, ())
        )
        if want and path not in self._marked:
            if self.tree.mark_dir(path):
                self._marked.add(path)
        elif not want and path in self._marked:
            self._marked.discard(path)
            self.tree.unmark_dir(path)

    def _changed(self) -> None:
        self.generation += 1

    # --- the view of one path -------------------------------------------------------

    def _refresh(self, path: str) -> None:
        """Recompute everything ``path``'s versions show: head, history, indices."""
        original = conflict_original(path)
        if original is not None:
            # A conflict copy shows nothing of its own: its original shows it as history.
            copies = self._conflicts.setdefault(original, set())
            if path in self._versions:
                copies.add(path)
            else:
                copies.discard(path)
                if not copies:
                    del self._conflicts[original]
            path = original
        freed: set[str] = set()
        for shown in _views(self._shown.pop(path, None)):
            self.tree.remove(shown)
            del self._owner[shown]
            freed |= self._waiting.pop(shown, set())
        self._show_versions(path)
        # Paths that wanted a view entry this one held (a kept copy of a history version in
        # the own source has the very name memfs computes for it) get their turn.
        for other in sorted(freed - {path}):
            self._refresh(other)

    def _show_versions(self, path: str) -> None:
        head = self._heads.pop(path, None)
        if head is not None:
            self._by_mtime.discard(head)
            self._handoffs.discard(head)
        self._changed()
        versions = list(self._versions.get(path, ()))
        if path.startswith(HISTORY + "/"):
            if versions:
                owner = self._owner.get(path)
                if owner is not None and owner != path:
                    # The name memfs gave another source's version of a path is the very
                    # name of a version kept on disk (a read-only source's, kept by the
                    # keeper, issue 37): the kept file has it, the other takes the next.
                    self._refresh(owner)
                self._show(path, path, Leaf(Kind.HISTORY, self._pick(versions)))
            return
        copies = self._conflict_versions(path)
        if not versions and not copies:
            return
        visible = [v for v in versions if self._eligible(v)]
        winner = self._pick(visible) if visible else None
        if winner is not None:
            self._show_head(path, winner, visible, copies)
        used: set[str] = set()
        # Conflict copies are never heads; their history names follow the same rule.
        for v in sorted([*versions, *copies], key=lambda v: (v.origin, v.mtime_ns, v.path)):
            if v is not winner:
                self._show(path, self._history_name(path, v, used), Leaf(Kind.HISTORY, v))

    def _conflict_versions(self, path: str) -> list[Version]:
        copies = sorted(self._conflicts.get(path, ()))
        return [v for copy in copies for v in self._versions[copy]]

    def conflicts(self, path: str) -> int:
        """How many conflict copies of ``path`` the sources hold (§5.1): O(copies).

        Each is a version under ``.history/<path>/``; a sync tool's conflict is resolved
        when its copy is deleted, so any count above 0 is unresolved.
        """
        return sum(len(self._versions[copy]) for copy in self._conflicts.get(path, ()))

    def _eligible(self, v: Version) -> bool:
        path = v.path
        # A source file at, or below a folder named like, a name memfs serves itself goes
        # to history: it can neither replace nor hide under the synthetic entry.
        if reserved(path.split("/", 1)[0]) or self._under.get(path, 0) > 0:
            return False
        source = self.config.sources[self.origins[v.origin].source].name
        return (path, source, v.mtime_ns) not in self._whiteouts

    def _pick(self, versions: Sequence[Version]) -> Version:
        """The head: the own source's version, else the newest; ties go to config order."""
        own = self.config.own_index

        def rank(v: Version) -> tuple[bool, int, int, int]:
            origin = self.origins[v.origin]
            return (not origin.writable(own), -v.mtime_ns, origin.source, v.origin)

        return min(versions, key=rank)

    def _show_head(
        self, path: str, head: Version, visible: list[Version], copies: list[Version]
    ) -> None:
        # A conflict copy of MEMORY.md is a version too: its links join the union (5.3).
        # Lines a save hid are taken out of every version but the own index: a lone other
        # version with such lines is shown as computed too (documents.py). An own index
        # its owner may not read (chmod 000) is shown as the own file it is, so that
        # reading it is refused (EACCES) as any such file's is, not answered with a union
        # that silently lacks every own line (§5.2).
        own = self.origins[head.origin].writable(self.config.own_index)
        if (
            self.is_index(path)
            and not (own and not head.mode & stat.S_IRUSR)
            and (len(visible) + len(copies) > 1 or (self.hidden_of(path) and not own))
        ):
            others = self._newest_first(v for v in [*visible, *copies] if v is not head)
            leaf = Leaf(Kind.MEMORY, head, tuple(others))
        else:
            leaf = Leaf(Kind.FILE, head)
        if not self._show(path, path, leaf):
            return
        self._heads[path] = head
        # Only a writer's file in the own source passes set_version against the name rules,
        # so this is _in_preamble without running the rules again.
        if path in self._in_flight:
            return  # a writer's temp, swap or backup file: in the view, never in PREAMBLE.md
        if not self._feeds_preamble(path, head):
            return  # not memory by its name (§6): in the view, never in PREAMBLE.md
        if path != MEMORY:
            self._by_mtime.add(head)
        if preamble.is_handoff(parent_of(path)[1]):
            self._handoffs.add(head)

    def _feeds_preamble(self, path: str, head: Version) -> bool:
        """Whether head ``head`` at ``path`` may be inlined or indexed in PREAMBLE.md (§6):
        Markdown or plain text outside dot folders, and not one of Gemini CLI's draft
        skills (its folder's `skills/`; the same path in another source is memory)."""
        if not names.feeds_preamble(path):
            return False
        source = self.config.sources[self.origins[head.origin].source]
        if source.kind == CODEX:
            return not layouts.codex_generated(path)
        return not (source.kind == GEMINI and names.gemini_draft(path))

    def leads(self) -> list[Version]:
        """Heads PREAMBLE.md shows first, before the handoff: Codex's memory_summary.md,
        which Codex injects into every prompt (its version from a Codex folder)."""
        head = self._heads.get(layouts.CODEX_SUMMARY)
        if head is None or self.config.sources[self.origins[head.origin].source].kind != CODEX:
            return []
        return [head]

    def _newest_first(self, versions: Iterable[Version]) -> list[Version]:
        """Newest first; equal mtimes in config order, so no scan order shows through."""
        return sorted(
            versions, key=lambda v: (-v.mtime_ns, self.origins[v.origin].source, v.origin)
        )

    def _history_name(self, path: str, v: Version, used: set[str]) -> str:
        source = self.config.sources[self.origins[v.origin].source].name
        n = 1
        while True:  # two folders of one source, same second: the next number
            name = f"{HISTORY}/{path}/{history.version_name(source, v.mtime_ns, n)}"
            if name not in used and name not in self._versions:  # not a kept file's
                used.add(name)
                return name
            n += 1

    def _show(self, path: str, view: str, leaf: Leaf) -> bool:
        owner = self._owner.get(view)
        if owner is not None and owner != path:
            # Taken by another path's version (same name, in practice the same bytes):
            # wait for it, never share one entry between two owners.
            self._waiting.setdefault(view, set()).add(path)
            return False
        if not self.tree.add(view, leaf):
            log.warning("%s: %s hidden: a file or folder is in the way", self.slug, view)
            return False
        self._owner[view] = path
        views = self._shown.get(path)
        if views is None:
            self._shown[path] = view
        elif isinstance(views, str):
            self._shown[path] = [views, view]
        else:
            views.append(view)
        return True

    # --- reading ---------------------------------------------------------------------

    def leaf(self, view: str) -> Leaf | None:
        return self.tree.leaf(view)

    def head(self, path: str) -> Version | None:
        return self._heads.get(path)

    def mtime_ns(self, leaf: Leaf, *, drawn_on_nothing: int = 0) -> int:
        """The mtime ``leaf`` shows (§4): its head's; a union MEMORY.md's newest version's;
        PREAMBLE.md's the newest head it may draw on, or ``drawn_on_nothing`` (the adapter
        gives the mount's start) when it draws on none: a project with no memory yet, an
        empty global/ kind. Its frame alone is no file's, and 1970 would rank it oldest."""
        if leaf.kind is Kind.MEMORY and leaf.version is not None:
            return max(v.mtime_ns for v in (leaf.version, *leaf.others))
        if leaf.version is not None:
            return leaf.version.mtime_ns
        # In O(1): the newest of the mtime index (every head but MEMORY.md) and MEMORY.md's.
        newest = [self._by_mtime[-1].mtime_ns] if self._by_mtime else []
        memory = self._heads.get(MEMORY)
        if memory is not None:
            newest.append(memory.mtime_ns)
        return max(newest, default=drawn_on_nothing)

    def newer_version(self, head: Version, now: int | None = None) -> tuple[Version | None, int]:
        """Another source's version newer than ``head`` when ``head`` is the own one.

        The newest such version that could be a head (not whited out) and is dated no
        later than ``now`` (None: any date), and when a later-dated one comes due.
        O(versions of the path).
        """
        own = self.config.own_index
        if own is None or not self.origins[head.origin].writable(own) or self.is_index(head.path):
            return None, FOREVER_NS  # MEMORY.md shows the union, never the own head alone
        newer = [
            v
            for v in self._versions.get(head.path, ())
            if not self.origins[v.origin].writable(own)
            and v.mtime_ns > head.mtime_ns
            and self._eligible(v)
        ]
        if now is None:
            return (self._newest_first(newer)[0] if newer else None), FOREVER_NS
        present = [v for v in newer if v.mtime_ns <= now]
        later = min((v.mtime_ns for v in newer if v.mtime_ns > now), default=FOREVER_NS)
        return (self._newest_first(present)[0] if present else None), later

    def history_view(self, v: Version) -> str | None:
        """The ``.history/`` path the view shows version ``v`` at, if it shows it."""
        for view in _views(self._shown.get(v.path)):
            leaf = self.tree.leaf(view)
            if leaf is not None and leaf.kind is Kind.HISTORY and leaf.version == v:
                return view
        return None

    # The head indices, for the documents: read them, never change them.

    @property
    def heads(self) -> Mapping[str, Version]:
        """Every path's head (path -> version)."""
        return self._heads

    @property
    def by_mtime(self) -> SortedKeyList[Version, Any]:
        """The heads PREAMBLE.md may draw on but MEMORY.md, oldest first (by mtime, path)."""
        return self._by_mtime

    @property
    def handoffs(self) -> SortedKeyList[Version, Any]:
        """The handoffs among `by_mtime`, lowest rank first (§6.2)."""
        return self._handoffs

    # --- the documents derived from the view (documents.py) --------------------------
    # Asked here for the many callers and the hot paths (every open of MEMORY.md or
    # PREAMBLE.md, the watcher's read-ahead); everything else of them, of `documents`.

    def indexes(self) -> list[str]:
        """The index paths the view shows (§5.3): MEMORY.md, and in global/claude each
        subagent's (O(heads) there, which holds user memory only)."""
        if not self.agents:
            return [MEMORY] if MEMORY in self._heads else []
        return [path for path in self._heads if self.is_index(path)]

    def memory_index(self, path: str = MEMORY) -> bytes:
        """The body index ``path`` shows: `Documents.memory_index`."""
        return self.documents.memory_index(path)

    def preamble(
        self, files_at: str | None, now_ns: int | None = None, budget: int | None = None
    ) -> bytes:
        """PREAMBLE.md (or PREAMBLE-<budget>.md) for this generation: `Documents.preamble`."""
        return self.documents.preamble(files_at, now_ns, budget)

    def bodies_wanted(self, now_ns: int | None = None) -> list[tuple[Version, BodyRead]]:
        """The reads the next renderings want done ahead: `Documents.bodies_wanted`."""
        return self.documents.bodies_wanted(now_ns)

    def keep_bodies(self, bodies: dict[Version, tuple[int, bytes]]) -> None:
        """Keep bodies read ahead for the renderings: `Documents.keep_bodies`."""
        self.documents.keep_bodies(bodies)

    # --- invariants ------------------------------------------------------------------

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each change."""
        super()._check()  # what the sources hold
        self.tree._check()
        indexed = {
            v for p, v in self._heads.items() if _in_preamble(p) and self._feeds_preamble(p, v)
        }
        assert indexed == {*self._by_mtime, *self._heads_memory()}
        assert list(self._handoffs) == sorted(
            (v for v in indexed if preamble.is_handoff(parent_of(v.path)[1])),
            key=_handoff_key,
        )
        for path, versions in self._versions.items():
            shown = _views(self._shown.get(path))
            copies = self._conflict_versions(path)
            assert len(shown) <= len(versions) + len(copies), (path, shown)
            original = conflict_original(path)
            if original is not None:
                assert path in self._conflicts.get(original, ()), path
                assert not shown, (path, shown)
        for original, copies_of in self._conflicts.items():
            assert copies_of, original
            assert all(conflict_original(c) == original for c in copies_of), original
            assert copies_of <= self._versions.keys(), original
        assert self.tree.leaf(PREAMBLE) is not None
        self.documents._check()

    def _heads_memory(self) -> list[Version]:
        return [v for p, v in self._heads.items() if p == MEMORY]


def conflict_original(path: str) -> str | None:
    """The path a conflict copy at ``path`` is a version of; None for any other path.

    Versions under ``.history/`` are history already and keep their own path.
    """
    if path == HISTORY or path.startswith(HISTORY + "/"):
        return None
    folder, name = parent_of(path)
    original = names.conflict_original(name)
    if original is None:
        return None
    return f"{folder}/{original}" if folder else original


def _path_reason(path: str) -> str:
    rule = cached_path_rule(path)
    return "" if rule is None else rule.why


def _in_preamble(path: str) -> bool:
    """Heads the name rules let the preamble draw on: every one but a writer's file
    (names.RULES); `Project._feeds_preamble` narrows them to memory's names (§6)."""
    return not _path_reason(path)


def _views(shown: str | list[str] | None) -> Sequence[str]:
    """A `Project._shown` value as the view paths it stands for."""
    if shown is None:
        return ()
    return (shown,) if isinstance(shown, str) else shown


def _hidden(path: str) -> bool:
    """Folders of sources that the main view does not show as folders."""
    return reserved(path) or path == ROOT


def _mtime_key(v: Version) -> tuple[int, str]:
    return (v.mtime_ns, v.path)


def _handoff_key(v: Version) -> tuple[tuple[int, int, int], str]:
    return (preamble.handoff_rank(parent_of(v.path)[1], v.mtime_ns), v.path)
