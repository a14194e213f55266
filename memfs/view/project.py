"""A loaded project: every source's versions of every path, the head of each, its history.

SPEC 4, 5.2, 6. Layer view: imports neither pyfuse3 nor trio; not thread-safe (the adapter
owns each project and changes it from one task). File bodies are read through sources.py.

The merged view is a `Tree` of view paths. A path's versions decide, in `_refresh`, what it
shows: the head at the path itself, every other version under
``.history/<path>/<source>@<UTC>.md``. Heads are also kept in sorted indices (by mtime, by
handoff rank), so a preamble costs O(N + index lines) and one changed file O(log n).
"""

from __future__ import annotations

import enum
import functools
import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sortedcontainers import SortedKeyList

from memfs.disk import sources
from memfs.disk.config import Config
from memfs.rules import history, index, names, preamble
from memfs.rules.preamble import Doc, IndexEntry, MemoryOverLimit
from memfs.rules.tree import ROOT, Tree, ancestors, parent_of

log = logging.getLogger(__name__)

HISTORY = history.HISTORY
PREAMBLE = "PREAMBLE.md"
MEMORY = "MEMORY.md"
# Names at a project's root that memfs itself serves; a source file there is history only.
RESERVED = frozenset({HISTORY, PREAMBLE})
DIR_WHITEOUT = -1  # the mtime field of a folder's whiteout
# Bytes read from a file's start to find its frontmatter description.
DESCRIPTION_BYTES = 2048


@dataclass(frozen=True)
class Origin:
    """One source folder that belongs to this project (a source may bring several)."""

    source: int  # index into the config's sources
    root: Path
    parts: tuple[str, ...]  # slug folder name, then the template's tail

    @property
    def folder(self) -> Path:
        return self.root.joinpath(*self.parts)


@dataclass(frozen=True, slots=True)
class Version:
    origin: int  # index into Project.origins
    path: str
    size: int
    mtime_ns: int
    mode: int = 0o644  # permission bits
    atime_ns: int = field(default=0, compare=False)  # shown, never compared (see FileStat)


class Kind(enum.Enum):
    FILE = "file"  # a head version
    HISTORY = "history"  # any other version, read-only
    MEMORY = "memory"  # MEMORY.md when several sources have one: the union
    PREAMBLE = "preamble"  # synthetic, computed on open


@dataclass(frozen=True, slots=True)
class Leaf:
    kind: Kind
    version: Version | None = None
    others: tuple[Version, ...] = ()  # MEMORY: the other versions, newest first


FOREVER_NS = 1 << 62
# Reads `bodies_wanted` adds beyond what the renderings need when every file is text: a
# rendering skips a file that is not text, or gone, and reads the next one.
SPARE_READS = 2
BodyRead = tuple[Path, tuple[str, ...], str, int]  # (root, parts, path, limit)
SEEN_SLACK = 4096  # looks at vanished paths kept before they are pruned
SEEN_KEEP_NS = 60 * 1_000_000_000  # far longer than any worker's read of the disk


@dataclass
class Rendered:
    """A synthetic body, computed once per project generation."""

    generation: int
    data: bytes
    valid_until_ns: int = FOREVER_NS  # a future-dated file becomes eligible then
    files_at: str | None = None


@dataclass
class Counts:
    files: int = 0
    left_out: list[tuple[str, str, str]] = field(default_factory=list)  # (source, path, why)


history_stamp = history.stamp  # the name tests and older callers know


class Project:
    """The merged memory of one canonical slug."""

    def __init__(
        self,
        slug: str,
        config: Config,
        origins: Iterable[Origin] = (),
        whiteouts: Iterable[tuple[str, str, int]] = (),
    ) -> None:
        self.slug = slug
        self.config = config
        self.origins: list[Origin] = []
        self.tree: Tree[Leaf] = Tree()
        self.generation = 0
        self.counts = Counts()
        self._versions: dict[str, dict[int, Version]] = {}  # path -> origin -> version
        # (origin, path) -> when it was last looked at (monotonic ns): see `observe`
        self._seen: dict[tuple[int, str], int] = {}
        self._seen_dirs: dict[tuple[int, str], int] = {}
        self._dirs: dict[str, set[int]] = {}  # folder path -> origins holding it
        self._under: Counter[str] = Counter()  # path -> versions and folders below it
        self._shown: dict[str, list[str]] = {}  # path -> view paths it occupies now
        self._owner: dict[str, str] = {}  # view path -> the path whose version it shows
        self._waiting: dict[str, set[str]] = {}  # view path -> paths that want it too
        self._heads: dict[str, Version] = {}  # path -> head, for the indices below
        self._by_mtime: SortedKeyList[Version, Any] = SortedKeyList(key=_mtime_key)
        self._handoffs: SortedKeyList[Version, Any] = SortedKeyList(key=_handoff_key)
        # (path, source name, mtime_ns or DIR_WHITEOUT): read-only versions hidden by unlink
        self._whiteouts: set[tuple[str, str, int]] = set(whiteouts)
        self._marked: set[str] = set()  # folders held open in the tree
        self._memory: Rendered | None = None
        self._preamble: Rendered | None = None
        self._descriptions: dict[Version, str | None] = {}
        # version -> (the limit it was read with, its bytes), read off the request thread
        # for the renderings to come (`bodies_wanted`, `keep_bodies`)
        self._bodies: dict[Version, tuple[int, bytes]] = {}
        # (generation, value): what `memfs status` asks, computed once per generation
        self._stale: tuple[int, list[tuple[str, str]]] | None = None
        self._over_limit: tuple[int, MemoryOverLimit | None] | None = None
        self._logged: set[tuple[int, str, str]] = set()  # left-out files already logged
        # original path -> its conflict copies' paths that hold a version (SPEC 5.1)
        self._conflicts: dict[str, set[str]] = {}
        # Paths shown though a name rule matches them: the own source's writers' files
        # (names.Way.WRITERS: rsync's `.x.AbC123`, vim's `.x.swp`), never in PREAMBLE.md.
        self._in_flight: set[str] = set()
        self.tree.add(PREAMBLE, Leaf(Kind.PREAMBLE))
        for origin in origins:
            self.add_origin(origin)

    # --- loading and changes --------------------------------------------------------

    def add_origin(self, origin: Origin, scan: sources.Scan | None = None) -> int:
        """Register a source folder and take in ``scan`` of it (None: scan it now, which
        reads the disk: only where no request waits); returns its index. A folder known
        already keeps what it holds."""
        for i, known in enumerate(self.origins):
            if known == origin:
                return i
        self.origins.append(origin)
        i = len(self.origins) - 1
        self.rescan(i, scan)
        return i

    def origin_index(self, origin: Origin) -> int | None:
        return next((i for i, o in enumerate(self.origins) if o == origin), None)

    def scan(self, i: int) -> sources.Scan:
        """Read origin ``i``'s folder (disk I/O: a worker thread's job while serving)."""
        origin = self.origins[i]
        return sources.scan(origin.root, origin.parts, self.config.limits.max_file_bytes)

    def observe(
        self,
        i: int,
        path: str,
        found: sources.FileStat | str | None,
        at_ns: int,
        *,
        named: bool = False,
    ) -> None:
        """What a look at ``path`` in origin ``i`` found at ``at_ns`` (time.monotonic_ns):
        the file, why it is left out (sources.look), or nothing. Taken in unless a later
        look is known already: looks are taken in worker threads (a plan's, the
        watcher's) and may come back out of order; the latest wins. ``named``: the look
        checked the name rules already (a scan does), see `set_version`."""
        if self._seen.get((i, path), -1) > at_ns:
            return
        self._seen[(i, path)] = at_ns
        if len(self._seen) > 2 * len(self._versions) + SEEN_SLACK:
            self._forget_old_looks(at_ns)
        if isinstance(found, sources.FileStat):
            self.set_version(i, found, named=named)
            return
        self.drop_version(i, path)
        if found is not None:
            self._leave_out(i, path, found)

    def left_out_in(self, i: int, path: str) -> str | None:
        """Why origin ``i``'s file at ``path`` is left out of the view, if it is."""
        label = self._label(i)
        return next(
            (why for lab, p, why in self.counts.left_out if lab == label and p == path), None
        )

    def _forget_old_looks(self, now_ns: int) -> None:
        """Drop the looks at paths no origin holds any more, once older than any look a
        worker could still bring back: every temp name a writer used would stay else."""
        old = now_ns - SEEN_KEEP_NS
        self._seen = {k: t for k, t in self._seen.items() if t > old or k[1] in self._versions}

    def observe_dir(self, i: int, path: str, present: bool, at_ns: int) -> None:
        """`observe` for a folder of origin ``i``."""
        if self._seen_dirs.get((i, path), -1) > at_ns:
            return
        self._seen_dirs[(i, path)] = at_ns
        self.set_dir(i, path, present=present)

    def rescan(self, i: int, scan: sources.Scan | None = None, at_ns: int | None = None) -> None:
        """Bring origin ``i`` up to date with ``scan`` of its folder, begun at ``at_ns``
        (None: scan it now): O(files in that folder), no I/O when the scan is given. A path
        looked at after the scan began keeps what that look found."""
        if scan is None:
            at_ns = time.monotonic_ns()
            scan = self.scan(i)
        if at_ns is None:
            at_ns = time.monotonic_ns()
        label = self._label(i)
        self.counts.left_out = [e for e in self.counts.left_out if e[0] != label]
        for path, why in scan.left_out:
            self._leave_out(i, path, why)
        files = scan.files  # the scan checked the name rules of every one
        exempt = [f for f, _ in scan.by_name if self._admits(i, _path_rule(f.path))]
        for f, why in scan.by_name:
            if not self._admits(i, _path_rule(f.path)):
                self._leave_out(i, f.path, why)
        new = {f.path: f for f in [*files, *exempt]}
        # A scan says nothing of what lies below a folder it did not read (too deep, or
        # unreadable for a moment): what was known there stays (SPEC 7.6).
        unread = tuple(
            f"{path}/" if path else ""
            for path, why in scan.left_out
            if why.startswith(sources.NOT_READ)
        )
        old = [
            p
            for p, vs in self._versions.items()
            if i in vs and p not in new and not (unread and p.startswith(unread))
        ]
        for path in old:
            self.observe(i, path, None, at_ns)
        versions, seen = self._versions, self._seen
        for f in files:
            # Known and unchanged, the common case of a rescan (the watcher's, absorbed on
            # the request thread): only the time of the look is taken in, as observe would,
            # in a fifth of observe's time.
            known = versions.get(f.path)
            v = known.get(i) if known is not None else None
            key = (i, f.path)
            if (
                v is not None
                and (v.size, v.mtime_ns, v.mode, v.atime_ns)
                == (f.size, f.mtime_ns, f.mode, f.atime_ns)
                and f.readable
                and seen.get(key, -1) <= at_ns
            ):
                seen[key] = at_ns
            else:
                self.observe(i, f.path, f, at_ns, named=True)
        for f in exempt:
            self.observe(i, f.path, f, at_ns)
        new_dirs = set(scan.dirs)
        gone = [
            p
            for p, os_ in self._dirs.items()
            if i in os_ and p not in new_dirs and not (unread and f"{p}/".startswith(unread))
        ]
        for path in gone:
            self.observe_dir(i, path, False, at_ns)
        for path in new_dirs:
            self.observe_dir(i, path, True, at_ns)

    def _label(self, i: int) -> str:
        return f"{self._source_name(i)}:{i}"

    def _leave_out(self, i: int, path: str, why: str) -> None:
        """Count ``path`` of origin ``i`` in status; log it once."""
        entry = (self._label(i), path, why)
        if entry not in self.counts.left_out:
            self.counts.left_out.append(entry)
        if (i, path, why) not in self._logged:
            self._logged.add((i, path, why))
            # Temp files come and go with every transfer, and every synced folder has a
            # marker: expected, worth a trace, not a warning.
            expected = why.startswith((names.IN_FLIGHT, names.TOOL_FILE))
            level = logging.DEBUG if expected else logging.WARNING
            log.log(level, "left out %s/%s: %s", self.origins[i].folder, path, why)

    def _forget_left_out(self, i: int, path: str) -> None:
        label = self._label(i)
        before = len(self.counts.left_out)
        self.counts.left_out = [
            e for e in self.counts.left_out if not (e[0] == label and e[1] == path)
        ]
        if len(self.counts.left_out) != before:
            self._logged = {e for e in self._logged if not (e[0] == i and e[1] == path)}

    def _is_own(self, i: int) -> bool:
        return self.origins[i].source == self.config.own_index

    def _admits(self, i: int, rule: names.Rule | None) -> bool:
        """Whether origin ``i`` shows a file whose path ``rule`` matches (None: no rule).

        A writer's file (names.Way.WRITERS) is shown from the own source, where only a
        writer through the mount or its user puts it, for as long as it is there; from a
        read-only source it is another writer's file in flight. A tool's file never shows.
        """
        return rule is None or (rule.way is names.Way.WRITERS and self._is_own(i))

    def set_version(self, i: int, f: sources.FileStat, *, named: bool = False) -> None:
        """Origin ``i`` now holds ``f`` (new or changed).

        A path a name rule matches (names.RULES) is counted in status instead, unless it is
        a writer's file in the own source (`_admits`); a file memfs cannot read likewise,
        unless it is the own source's: an own file is never left out for its mode, and
        stays the head. ``named``: the caller found that no rule matches it (a scan checks
        each name it lists), so the rules are not run again (they cost a third of a
        project's build).
        """
        if not f.readable and not self._is_own(i):
            self.drop_version(i, f.path)
            self._leave_out(i, f.path, "unreadable")
            return
        new = Version(i, f.path, f.size, f.mtime_ns, f.mode, f.atime_ns)
        versions = self._versions.get(f.path)
        old = versions.get(i) if versions is not None else None
        if versions is not None and old is not None and old == new:
            # Known already, so the name rules let it in: no rule to check, the common case
            # of every rescan.
            if old.atime_ns != new.atime_ns:
                versions[i] = new  # only the atime moved: shown, but no change of the file
                self._refresh(f.path)
            return
        rule = None if named else _path_rule(f.path)
        if not self._admits(i, rule):
            assert rule is not None
            self.drop_version(i, f.path)  # first: it forgets the path's left-out entry
            self._leave_out(i, f.path, rule.why)
            return
        if rule is not None:
            self._in_flight.add(f.path)
        versions = self._versions.setdefault(f.path, {})
        is_new = i not in versions
        versions[i] = new
        if is_new:
            self._count_under(f.path, +1)
        self._refresh(f.path)

    def drop_version(self, i: int, path: str) -> None:
        """Origin ``i`` no longer holds ``path`` (gone, or left out from now on)."""
        self._forget_left_out(i, path)
        versions = self._versions.get(path)
        if not versions or i not in versions:
            return
        del versions[i]
        if not versions:
            del self._versions[path]
            self._in_flight.discard(path)
        self._refresh(path)
        self._count_under(path, -1)

    def set_dir(self, i: int, path: str, *, present: bool) -> None:
        holders = self._dirs.setdefault(path, set())
        if present == (i in holders):
            if not holders:
                del self._dirs[path]
            return
        # A folder beats a file of the same path, so it counts at the path itself too. The
        # order matters: a file demoted by a new folder leaves the tree before the folder is
        # marked, and a folder is unmarked before the file it hid comes back.
        if present:
            holders.add(i)
            self._count_under(path, +1, include_self=True)
            self._sync_mark(path)
        else:
            holders.discard(i)
            if not holders:
                del self._dirs[path]
            self._sync_mark(path)
            self._count_under(path, -1, include_self=True)
        self._changed()

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

    def _source_name(self, origin: int) -> str:
        return self.config.sources[self.origins[origin].source].name

    def whiteouts_for(self, path: str) -> list[tuple[str, str, int]]:
        """The records that would hide every read-only version of ``path`` (file or folder)
        and are not there yet; changes nothing (writes.py plans with it)."""
        own = self.config.own_index
        found = [(v.origin, v.mtime_ns) for v in self._versions.get(path, {}).values()]
        found += [(i, DIR_WHITEOUT) for i in self._dirs.get(path, ())]
        added = []
        for origin, stamp in found:
            if self.origins[origin].source != own:
                key = (path, self._source_name(origin), stamp)
                if key not in self._whiteouts:
                    added.append(key)
        return added

    def whiteout(self, path: str) -> list[tuple[str, str, int]]:
        """Hide every read-only version of ``path`` now; returns the new records."""
        added = self.whiteouts_for(path)
        if added:
            self.set_whiteouts(self._whiteouts | set(added))
        return added

    def set_whiteouts(self, records: Iterable[tuple[str, str, int]]) -> None:
        old = self._whiteouts
        self._whiteouts = set(records)
        for path in {r[0] for r in self._whiteouts | old}:
            self._refresh(path)
            self._sync_mark(path)

    @property
    def whiteouts(self) -> set[tuple[str, str, int]]:
        return set(self._whiteouts)

    def _count_under(self, path: str, delta: int, *, include_self: bool = False) -> None:
        steps = [path, *ancestors(path)] if include_self else list(ancestors(path))
        flipped = []
        for a in steps:
            before = self._under[a]
            self._under[a] = before + delta
            if self._under[a] <= 0:
                del self._under[a]
            if (before == 0) != (self._under[a] == 0):
                flipped.append(a)
        for a in flipped:
            if a in self._versions:
                self._refresh(a)

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
        for shown in self._shown.pop(path, []):
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
        versions = list(self._versions.get(path, {}).values())
        if path.startswith(HISTORY + "/"):
            if versions:
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
        return [v for copy in copies for v in self._versions[copy].values()]

    def conflicts(self, path: str) -> int:
        """How many conflict copies of ``path`` the sources hold (SPEC 5.1): O(copies).

        Each is a version under ``.history/<path>/``; a sync tool's conflict is resolved
        when its copy is deleted, so any count above 0 is unresolved.
        """
        return sum(len(self._versions[copy]) for copy in self._conflicts.get(path, ()))

    def _eligible(self, v: Version) -> bool:
        path = v.path
        # A source file at, or below a folder named like, a name memfs serves itself goes
        # to history: it can neither replace nor hide under the synthetic entry.
        if path.split("/", 1)[0] in RESERVED or self._under.get(path, 0) > 0:
            return False
        source = self.config.sources[self.origins[v.origin].source].name
        return (path, source, v.mtime_ns) not in self._whiteouts

    def _pick(self, versions: Sequence[Version]) -> Version:
        """The head: the own source's version, else the newest; ties go to config order."""
        own = self.config.own_index

        def rank(v: Version) -> tuple[bool, int, int, int]:
            source = self.origins[v.origin].source
            return (source != own, -v.mtime_ns, source, v.origin)

        return min(versions, key=rank)

    def _show_head(
        self, path: str, head: Version, visible: list[Version], copies: list[Version]
    ) -> None:
        # A conflict copy of MEMORY.md is a version too: its links join the union (5.3).
        if path == MEMORY and len(visible) + len(copies) > 1:
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
        if path != MEMORY:
            self._by_mtime.add(head)
        if preamble.is_handoff(parent_of(path)[1]):
            self._handoffs.add(head)

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
            if name not in used:
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
        self._shown.setdefault(path, []).append(view)
        return True

    # --- reading ---------------------------------------------------------------------

    def leaf(self, view: str) -> Leaf | None:
        return self.tree.leaf(view)

    def head(self, path: str) -> Version | None:
        return self._heads.get(path)

    def versions(self, path: str) -> list[Version]:
        return list(self._versions.get(path, {}).values())

    def folder_stat(self, path: str) -> sources.FileStat | None:
        """A real folder behind view folder ``path``: the own source's, else the first."""
        own = self.config.own_index
        holders = sorted(self._dirs.get(path, ()), key=lambda i: (self.origins[i].source != own, i))
        for i in holders:
            origin = self.origins[i]
            found = sources.stat_folder(origin.root, origin.parts, path)
            if found is not None:
                return found
        return None

    def dir_holders(self, path: str) -> set[int]:
        return self._dirs.get(path, set())

    def versions_under(self, folder: str) -> list[Version]:
        prefix = f"{folder}/" if folder else ""
        return [v for p, vs in self._versions.items() if p.startswith(prefix) for v in vs.values()]

    def folders(self) -> list[str]:
        return list(self._dirs)

    def read(self, v: Version, limit: int | None = None) -> bytes:
        """Version ``v``'s body, at most ``limit`` bytes (None: the size cap): from the
        bodies kept by `keep_bodies` when they hold it, else from the disk."""
        cap = self.config.limits.max_file_bytes if limit is None else limit
        if self._kept(v, cap):
            return self._bodies[v][1][:cap]
        origin = self.origins[v.origin]
        return sources.read_file(origin.root, origin.parts, v.path, cap)

    def _kept(self, v: Version, cap: int) -> bool:
        """At least ``cap`` bytes of ``v`` are kept: read with a limit as large, or whole
        (shorter than the limit it was read with)."""
        kept = self._bodies.get(v)
        return kept is not None and (kept[0] >= cap or len(kept[1]) < kept[0])

    def bodies_wanted(self, now_ns: int | None = None) -> list[tuple[Version, BodyRead]]:
        """The reads the next PREAMBLE.md and MEMORY.md will ask for and that are not kept
        yet, each with where to read it (a worker reads them: `read_bodies`, then
        `keep_bodies`); memory only, O(N + index lines). Kept bodies no rendering will ask
        for any more are dropped.

        A superset of what the renderings read when every file is text: the latest
        handoffs, the newest files and a few more, every MEMORY.md version, and the start
        of each file the index may describe (unless described already). Whatever a
        rendering asks beyond these, it reads itself.
        """
        now = time.time_ns() if now_ns is None else now_ns
        settings = self.config.preamble
        cap = self.config.limits.max_file_bytes
        found: dict[Version, int] = {}
        leaf = self.tree.leaf(MEMORY)
        if leaf is not None and leaf.version is not None:
            for v in (leaf.version, *leaf.others):
                found[v] = cap
        handoffs = [v for v in reversed(self._handoffs) if v.mtime_ns <= now][:SPARE_READS]
        for v in handoffs:
            found[v] = cap
        end = self._by_mtime.bisect_key_right((now, "\U0010ffff"))
        whole = settings.newest + SPARE_READS
        described = settings.index_max
        for pos in range(end - 1, -1, -1):
            v = self._by_mtime[pos]
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
        return [(v, self._body_read(v, n)) for v, n in found.items() if not self._kept(v, n)]

    def _body_read(self, v: Version, limit: int) -> BodyRead:
        origin = self.origins[v.origin]
        return (origin.root, origin.parts, v.path, limit)

    def keep_bodies(self, bodies: dict[Version, tuple[int, bytes]]) -> None:
        """Keep these bodies (version -> (the limit read with, the bytes)) for `read`."""
        self._bodies.update(bodies)

    def drop_bodies(self) -> None:
        self._bodies = {}

    def real_path(self, v: Version) -> Path:
        return self.origins[v.origin].folder / v.path

    def source_name(self, v: Version) -> str:
        return self.config.sources[self.origins[v.origin].source].name

    def memory_index(self) -> bytes:
        """The body MEMORY.md shows: the head's, or the union when several sources have one."""
        leaf = self.tree.leaf(MEMORY)
        if leaf is None or leaf.version is None:
            return b""
        if self._memory is not None and self._memory.generation == self.generation:
            return self._memory.data
        if leaf.kind is Kind.FILE:
            data = self._read_or_empty(leaf.version)
        else:
            head = self._read_or_empty(leaf.version).decode("utf-8", "surrogateescape")
            others = [
                self._read_or_empty(v).decode("utf-8", "surrogateescape") for v in leaf.others
            ]
            data = index.union_index(head, others).encode("utf-8", "surrogateescape")
        self._memory = Rendered(self.generation, data)
        return data

    def _read_or_empty(self, v: Version) -> bytes:
        try:
            return self.read(v)
        except OSError as exc:
            log.warning("%s: cannot read %s: %s", self.slug, self.real_path(v), exc)
            return b""

    def mtime_ns(self, leaf: Leaf) -> int:
        if leaf.kind is Kind.MEMORY and leaf.version is not None:
            return max(v.mtime_ns for v in (leaf.version, *leaf.others))
        if leaf.version is not None:
            return leaf.version.mtime_ns
        # PREAMBLE.md: as new as the newest head it may draw on, in O(1): the newest of the
        # mtime index (every head but MEMORY.md) and MEMORY.md's.
        newest = self._by_mtime[-1].mtime_ns if self._by_mtime else 0
        memory = self._heads.get(MEMORY)
        return max(newest, memory.mtime_ns if memory is not None else 0)

    # --- PREAMBLE.md -----------------------------------------------------------------

    def preamble(self, files_at: str | None, now_ns: int | None = None) -> bytes:
        """PREAMBLE.md for this generation of the project (SPEC 6), cached until it changes.

        ``files_at`` is the mount folder of this project; None (no mount) points every
        marker at the file's real path instead.
        """
        now = time.time_ns() if now_ns is None else now_ns
        cached = self._preamble
        if (
            cached is not None
            and cached.generation == self.generation
            and cached.files_at == files_at
            and now < cached.valid_until_ns
        ):
            return cached.data
        data, valid_until = self._render_preamble(files_at, now)
        self._preamble = Rendered(self.generation, data, valid_until, files_at)
        return data

    def preamble_valid_until(self) -> int:
        """When the cached PREAMBLE.md changes by itself (a future-dated file comes due)."""
        cached = self._preamble
        return cached.valid_until_ns if cached is not None else FOREVER_NS

    def _render_preamble(self, files_at: str | None, now: int) -> tuple[bytes, int]:
        settings = self.config.preamble
        due = _Due()  # when the rendering changes by itself: a file dated after `now`
        latest = self._latest_handoff(now, files_at, due)
        index_doc, until = self._index_doc(files_at, now)
        due.at(until)
        # Newest first, skipping files dated after `now`: one bisect, then a walk of N + rest.
        end = self._by_mtime.bisect_key_right((now, "\U0010ffff"))
        if end < len(self._by_mtime):
            due.at(self._by_mtime[end].mtime_ns)
        inlined = latest is not None and latest[1] is not None
        newest: list[preamble.Doc] = []
        rest: list[preamble.IndexEntry] = []
        reads = 0  # whole-file reads for the newest section: bounded, see below
        for pos in range(end - 1, -1, -1):
            v = self._by_mtime[pos]
            is_latest = latest is not None and v is latest[0]
            if is_latest and inlined:
                continue
            # Superseded handoffs are never inlined (SPEC 6.4): a stale handoff read as
            # current derails an agent. Nor is the latest when it is not text.
            superseded = latest is not None and not is_latest and _is_handoff(v)
            not_text = is_latest
            if not superseded and not is_latest and len(newest) < settings.newest:
                reads += 1
                doc = self._doc(v, files_at, now, due)
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
            rest.append(self._index_entry(v, files_at, now, due, superseded, not_text))
        eligible = end - (1 if inlined else 0)
        inp = preamble.PreambleInput(
            project=self.slug,
            files_at=files_at or self._real_folder(),
            handoff=latest[1] if latest is not None else None,
            index=index_doc,
            newest=newest,
            rest=rest,
            more=max(0, eligible - len(newest) - len(rest)),
        )
        data = preamble.render(inp, budget=settings.budget, file_cap=settings.file_cap)
        return data, due.ns

    def _index_entry(
        self,
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
            newer=self._stale_mark(v, files_at, now, due),
            not_text=not_text,
            conflicts=self.conflicts(v.path),
        )

    def _index_doc(self, files_at: str | None, now: int) -> tuple[Doc | None, int]:
        """The MEMORY.md section: the union of the versions dated no later than ``now``."""
        leaf = self.tree.leaf(MEMORY)
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
            texts = [self._read_or_empty(v).decode("utf-8", "surrogateescape") for v in present]
            body = index.union_index(texts[0], texts[1:]).encode("utf-8", "surrogateescape")
        where = f"{files_at}/{MEMORY}" if files_at else str(self.real_path(present[0]))
        return Doc(where, MEMORY, body, mtime_ns=max(v.mtime_ns for v in present)), until

    def _real_folder(self) -> str:
        own = self.config.own_index
        folders = [o.folder for o in self.origins if o.source == own] or [
            o.folder for o in self.origins
        ]
        return str(folders[0]) if folders else self.slug

    def _latest_handoff(
        self, now: int, files_at: str | None, due: _Due
    ) -> tuple[Version, Doc | None] | None:
        """The latest handoff dated no later than ``now`` (SPEC 6.2), and its Doc.

        The Doc is None when the file is not text: it is still the latest, so no older
        handoff takes its place (that one is superseded, whatever this one holds); it is
        listed in the index instead. One that cannot be read is gone since the scan (its
        change event is on its way): the next one is taken.
        """
        for pos in range(len(self._handoffs) - 1, -1, -1):
            v = self._handoffs[pos]
            if v.mtime_ns > now:
                continue
            doc = self._doc(v, files_at, now, due)
            if doc is None:
                continue
            return v, doc if preamble.is_text(doc.body) else None
        return None

    def _doc(self, v: Version, files_at: str | None, now: int, due: _Due) -> Doc | None:
        try:
            body = self.read(v)
        except OSError as exc:
            log.warning("%s: cannot read %s: %s", self.slug, self.real_path(v), exc)
            return None
        where = f"{files_at}/{v.path}" if files_at else str(self.real_path(v))
        newer = self._stale_mark(v, files_at, now, due)
        conflicts = self.conflicts(v.path)
        return preamble.Doc(where, v.path, body, self.source_name(v), v.mtime_ns, newer, conflicts)

    def _newer_version(self, head: Version, now: int | None = None) -> tuple[Version | None, int]:
        """Another source's version newer than ``head`` when ``head`` is the own one.

        The newest such version that could be a head (not whited out) and is dated no
        later than ``now`` (None: any date), and when a later-dated one comes due.
        O(versions of the path).
        """
        own = self.config.own_index
        if own is None or self.origins[head.origin].source != own or head.path == MEMORY:
            return None, FOREVER_NS  # MEMORY.md shows the union, never the own head alone
        newer = [
            v
            for v in self._versions.get(head.path, {}).values()
            if self.origins[v.origin].source != own
            and v.mtime_ns > head.mtime_ns
            and self._eligible(v)
        ]
        if now is None:
            return (self._newest_first(newer)[0] if newer else None), FOREVER_NS
        present = [v for v in newer if v.mtime_ns <= now]
        later = min((v.mtime_ns for v in newer if v.mtime_ns > now), default=FOREVER_NS)
        return (self._newest_first(present)[0] if present else None), later

    def _stale_mark(self, v: Version, files_at: str | None, now: int, due: _Due) -> str | None:
        """Where a newer version of own head ``v`` is to be read, or None (SPEC 6)."""
        newer, later = self._newer_version(v, now)
        due.at(later)
        if newer is None:
            return None
        if files_at is None:  # no mount: the real file is what can be read
            return str(self.real_path(newer))
        return self._history_view(newer) or str(self.real_path(newer))

    def _history_view(self, v: Version) -> str | None:
        """The ``.history/`` path the view shows version ``v`` at, if it shows it."""
        for view in self._shown.get(v.path, ()):
            leaf = self.tree.leaf(view)
            if leaf is not None and leaf.kind is Kind.HISTORY and leaf.version == v:
                return view
        return None

    def stale_own_heads(self) -> list[tuple[str, str]]:
        """Own heads another source has a newer version of, for ``memfs status``.

        Each is (view path, the newer version's ``.history/`` path in the view), sorted
        by view path; versions of any date count. Computed once per generation:
        O(versions), then O(1) until the project changes.
        """
        cached = self._stale
        if cached is not None and cached[0] == self.generation:
            return list(cached[1])
        found = []
        for path, head in self._heads.items():
            newer, _ = self._newer_version(head)
            if newer is not None:
                found.append((path, self._history_view(newer) or str(self.real_path(newer))))
        found.sort()
        self._stale = (self.generation, found)
        return list(found)

    def memory_over_limit(self) -> MemoryOverLimit | None:
        """How the merged MEMORY.md passes what Claude Code loads; None if it loads whole.

        For ``memfs status``: the union's size is cached per generation, and so is this.
        """
        cached = self._over_limit
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        over = preamble.memory_over_limit(self.memory_index())
        self._over_limit = (self.generation, over)
        return over

    def _description(self, v: Version) -> str | None:
        if v not in self._descriptions:
            try:
                found = preamble.description(self.read(v, DESCRIPTION_BYTES))
            except OSError:
                found = None
            if len(self._descriptions) > 4096:
                self._descriptions.clear()
            self._descriptions[v] = found
        return self._descriptions[v]

    # --- invariants ------------------------------------------------------------------

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each change."""
        self.tree._check()
        indexed = {v for p, v in self._heads.items() if _in_preamble(p)}
        assert indexed == {*self._by_mtime, *self._heads_memory()}
        assert list(self._handoffs) == sorted(
            (v for v in indexed if preamble.is_handoff(parent_of(v.path)[1])),
            key=_handoff_key,
        )
        for path, versions in self._versions.items():
            for i, v in versions.items():
                assert v.origin == i
                assert v.path == path
            shown = self._shown.get(path, [])
            copies = self._conflict_versions(path)
            assert len(shown) <= len(versions) + len(copies), (path, shown)
            original = conflict_original(path)
            if original is not None:
                assert path in self._conflicts.get(original, ()), path
                assert not shown, (path, shown)
            rule = names.path_rule(path)
            assert all(self._admits(i, rule) for i in versions), path
            assert (rule is not None) == (path in self._in_flight), path
            assert _path_rule(path) == rule, path
        for original, copies_of in self._conflicts.items():
            assert copies_of, original
            assert all(conflict_original(c) == original for c in copies_of), original
            assert copies_of <= self._versions.keys(), original
        under: Counter[str] = Counter()
        for path, versions in self._versions.items():
            for a in ancestors(path):
                under[a] += len(versions)
        for path, holders in self._dirs.items():
            for a in [path, *ancestors(path)]:
                under[a] += len(holders)
        assert +under == +self._under, (under, self._under)
        assert self.tree.leaf(PREAMBLE) is not None

    def _heads_memory(self) -> list[Version]:
        return [v for p, v in self._heads.items() if p == MEMORY]


def read_bodies(reads: Sequence[tuple[Version, BodyRead]]) -> dict[Version, tuple[int, bytes]]:
    """Worker thread: every read of `Project.bodies_wanted` that succeeds (a file gone
    since is left to the rendering, which reports it)."""
    out: dict[Version, tuple[int, bytes]] = {}
    for v, (root, parts, path, limit) in reads:
        try:
            out[v] = (limit, sources.read_file(root, parts, path, limit))
        except OSError:
            continue
    return out


def empty_preamble(config: Config, slug: str, files_at: str | None) -> bytes:
    """PREAMBLE.md of project ``slug`` while no source holds memory for it (SPEC 4, 6).

    Needs no Project: the frame says there is no memory yet and where the first write
    lands (the own source's folder for ``slug``), or that the mount is read-only. Under
    the configured budget. ``files_at`` is the project's folder in the mount; None (no
    mount) names the own source's folder there instead, or the slug without one.
    """
    own = config.own
    own_folder = str(own.folder(slug)) if own is not None else None
    return preamble.render_empty(
        slug, files_at or own_folder or slug, own_folder, budget=config.preamble.budget
    )


class _Due:
    """The earliest moment a rendering changes by itself (a future-dated file comes due)."""

    def __init__(self) -> None:
        self.ns = FOREVER_NS

    def at(self, ns: int) -> None:
        self.ns = min(self.ns, ns)


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


# names.path_reason runs every rule's regex on every component (tens of µs a path); looks
# at one path (the watcher's, a plan's) ask again for the same paths. A pure function of
# the path, so its answers are kept, bounded (thread-safe: workers build, the trio thread
# changes).
_path_rule = functools.lru_cache(maxsize=1 << 16)(names.path_rule)


def _path_reason(path: str) -> str:
    rule = _path_rule(path)
    return "" if rule is None else rule.why


def _in_preamble(path: str) -> bool:
    """Heads the preamble may draw on: every one but a writer's file (names.RULES)."""
    return not _path_reason(path)


def _hidden(path: str) -> bool:
    """Folders of sources that the main view does not show as folders."""
    return path in RESERVED or path == ROOT


def _mtime_key(v: Version) -> tuple[int, str]:
    return (v.mtime_ns, v.path)


def _is_handoff(v: Version) -> bool:
    """Whether a head in ``_by_mtime`` is one of ``_handoffs``, by its name alone (the two
    take the same heads, and membership in the sorted list would rank it again)."""
    return preamble.is_handoff(v.path)


def _handoff_key(v: Version) -> tuple[tuple[int, int, int], str]:
    return (preamble.handoff_rank(parent_of(v.path)[1], v.mtime_ns), v.path)
