"""What a project's source folders hold: every origin's versions of every path and its
folders, as the latest look at each found them, what is left out of the view and why, the
whiteout records that hide read-only versions, and the lines of MEMORY.md a save hid
(§5.3).

§4, §5.2, §7.6. Layer view: imports neither pyfuse3 nor trio; not thread-safe (the
adapter owns each project and changes it from one task). Reads no disk: every scan and
look is given by its caller (sources.py's values, read in a worker while serving).

`Holdings` is the lower half of a loaded project: it takes in what the sources hold and
says which paths changed; `Project` (project.py), built on it, decides what the view shows
of each changed path. The three hooks at the end of the class are where the view takes
over; Holdings itself knows nothing of the view's tree.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from memfs.disk import sources
from memfs.disk.config import Config
from memfs.rules import index, names
from memfs.rules.history import HISTORY
from memfs.rules.tree import ancestors
from memfs.view import userlevel
from memfs.view.kept import KeptVersions
from memfs.view.versions import DIR_WHITEOUT, MEMORY, Origin, Version

log = logging.getLogger(__name__)

_KEPT = HISTORY + "/"
SEEN_SLACK = 4096  # looks at vanished paths kept before they are pruned
SEEN_KEEP_NS = 60 * 1_000_000_000  # far longer than any worker's read of the disk


@dataclass
class Counts:
    files: int = 0
    left_out: list[tuple[str, str, str]] = field(default_factory=list)  # (source, path, why)


class Holdings:
    """Every source folder's versions and folders of one canonical slug (see the module)."""

    def __init__(
        self,
        slug: str,
        config: Config,
        whiteouts: Iterable[tuple[str, str, int]] = (),
        hidden_lines: Iterable[str] | Mapping[str, Iterable[str]] = (),
    ) -> None:
        self.slug = slug
        # global/claude: its subagents' MEMORY.md are indexes too (§4.1, §5.3)
        self.agents = slug == userlevel.slug_of(userlevel.CLAUDE)
        self.config = config
        self.origins: list[Origin] = []
        self.counts = Counts()
        # path -> its versions, one per origin, in origin order (`_with`, `_without`): a
        # tuple, not a dict per path (4 MiB of the benchmark's 16,000 paths)
        self._versions: dict[str, tuple[Version, ...]] = {}
        # (origin, path) -> when it was last looked at (monotonic ns): see `observe`. A
        # scan that read all of an origin's folder looked at every file it found; for the
        # files the origin still holds that look is kept once for the origin (`_scanned`),
        # not an entry per file of every load (2 MiB of the benchmark's 20,000 files).
        # `_looked` is the later of the two.
        self._seen: dict[tuple[int, str], int] = {}
        self._scanned: dict[int, int] = {}  # origin -> when its last whole scan began
        self._seen_dirs: dict[tuple[int, str], int] = {}
        self._dirs: dict[str, set[int]] = {}  # folder path -> origins holding it
        self._under: Counter[str] = Counter()  # path -> versions and folders below it
        # (path, source name, mtime_ns or DIR_WHITEOUT): read-only versions hidden by unlink
        self._whiteouts: set[tuple[str, str, int]] = set(whiteouts)
        # Texts of lines a save of an index removed that other sources hold (§5.3), per
        # index path (a plain set: the top MEMORY.md's)
        if isinstance(hidden_lines, Mapping):
            found = {path: frozenset(lines) for path, lines in hidden_lines.items()}
        else:
            found = {MEMORY: frozenset(hidden_lines)}
        self._hidden: dict[str, frozenset[str]] = {p: ls for p, ls in found.items() if ls}
        self._logged: set[tuple[int, str, str]] = set()  # left-out files already logged
        # Paths shown though a name rule matches them: the own source's writers' files
        # (names.Way.WRITERS: rsync's `.x.AbC123`, vim's `.x.swp`), never in PREAMBLE.md.
        self._in_flight: set[str] = set()
        self.kept = KeptVersions()  # the own source's versions under .history/ (§7.2)

    # --- loading and changes --------------------------------------------------------

    def add_origin(self, origin: Origin, scan: sources.Scan, at_ns: int | None = None) -> int:
        """Register a source folder and take in ``scan`` of it, begun at ``at_ns`` (see
        `rescan`; a placeholder, ``Scan(exists=False)``, registers it unread); returns its
        index. A folder known already keeps what it holds."""
        for i, known in enumerate(self.origins):
            if known == origin:
                return i
        self.origins.append(origin)
        i = len(self.origins) - 1
        self.rescan(i, scan, at_ns)
        return i

    def origin_index(self, origin: Origin) -> int | None:
        return next((i for i, o in enumerate(self.origins) if o == origin), None)

    def observe(
        self,
        i: int,
        path: str,
        found: sources.FileStat | str | None,
        at_ns: int,
        *,
        named: bool = False,
        whole: bool = False,
    ) -> None:
        """What a look at ``path`` in origin ``i`` found at ``at_ns`` (time.monotonic_ns):
        the file, why it is left out (sources.look), or nothing. Taken in unless a later
        look is known already: looks are taken in worker threads (a plan's, the
        watcher's) and may come back out of order; the latest wins. ``named``: the look
        checked the name rules already (a scan does), see `set_version`. ``whole``: the
        look is a whole scan's, whose time `rescan` keeps once for the origin."""
        if self._looked(i, path) > at_ns or not self.origins[i].admits(path):
            return  # a later look's, or no memory of this origin (Origin.only)
        if len(self._seen) > 2 * len(self._versions) + SEEN_SLACK:
            self._forget_old_looks(at_ns)
        if isinstance(found, sources.FileStat):
            self.set_version(i, found, named=named)
        else:
            self.drop_version(i, path)
            if found is not None:
                self._leave_out(i, path, found)
        if not whole or not self._holds(i, path):
            self._seen[(i, path)] = at_ns

    def _looked(self, i: int, path: str) -> int:
        """When ``path`` of origin ``i`` was last looked at (-1: never)."""
        one = self._seen.get((i, path), -1)
        whole = self._scanned.get(i, -1) if self._holds(i, path) else -1
        return one if one > whole else whole

    def _holds(self, i: int, path: str) -> bool:
        versions = self._versions.get(path)
        return versions is not None and _of(versions, i) is not None

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
        if self._seen_dirs.get((i, path), -1) > at_ns or not self.origins[i].admits(path):
            return
        self._seen_dirs[(i, path)] = at_ns
        self.set_dir(i, path, present=present)

    def rescan(self, i: int, scan: sources.Scan, at_ns: int | None = None, under: str = "") -> None:
        """Bring origin ``i`` up to date with ``scan`` of its folder (`sources.scan`),
        begun at ``at_ns`` (time.monotonic_ns; None: no whole look, as a placeholder's):
        O(files in that folder), memory only. A path looked at after the scan began keeps
        what that look found. With ``under``, the scan is of that folder of the origin only:
        what lies elsewhere stays as it is, and the work on what is known is a pass over
        the origin's paths."""
        # A look at every path of the origin: a scan given with the time it began, of a
        # folder that exists, that read every folder below (a placeholder, such as a
        # project registered before its scan, is none).
        whole = at_ns is not None and not under
        if at_ns is None:
            at_ns = time.monotonic_ns()
        label = self._label(i)
        inside = f"{under}/" if under else ""

        def within(path: str) -> bool:
            return not under or path == under or path.startswith(inside)

        self.counts.left_out = [
            e for e in self.counts.left_out if e[0] != label or not within(e[1])
        ]
        for path, why in scan.left_out:
            self._leave_out(i, path, why)
        files = scan.files  # the scan checked the name rules of every one
        exempt = [f for f, _ in scan.by_name if self._admits(i, cached_path_rule(f.path))]
        for f, why in scan.by_name:
            if not self._admits(i, cached_path_rule(f.path)):
                self._leave_out(i, f.path, why)
        new = {f.path: f for f in [*files, *exempt]}
        # A scan says nothing of what lies below a folder it did not read (too deep, or
        # unreadable for a moment): what was known there stays (§7.6).
        unread = tuple(
            f"{path}/" if path else ""
            for path, why in scan.left_out
            if why.startswith(sources.NOT_READ)
        )
        whole = whole and scan.exists and not unread
        old = [
            p
            for p, vs in self._versions.items()
            if _of(vs, i) is not None
            and p not in new
            and within(p)
            and not (unread and p.startswith(unread))
        ]
        for path in old:
            self.observe(i, path, None, at_ns, whole=whole)
        versions, seen = self._versions, self._seen
        for f in files:
            # Known and unchanged, the common case of a rescan (the watcher's, absorbed on
            # the request thread): only the time of the look is taken in, as observe would,
            # in a fifth of observe's time; for a whole scan, once for the origin below.
            known = versions.get(f.path)
            v = _of(known, i) if known is not None else None
            if (
                v is not None
                and (v.size, v.mtime_ns, v.mode, v.atime_ns, v.ino)
                == (f.size, f.mtime_ns, f.mode, f.atime_ns, f.ino)
                and f.readable
                and self._looked(i, f.path) <= at_ns
            ):
                if not whole:
                    seen[(i, f.path)] = at_ns
            else:
                self.observe(i, f.path, f, at_ns, named=True, whole=whole)
        if whole and self._scanned.get(i, -1) < at_ns:
            # The scan looked at every file the origin holds now: those found unchanged and
            # those it took in above (a path it found gone or left out has its own entry).
            self._scanned[i] = at_ns
        for f in exempt:
            self.observe(i, f.path, f, at_ns, whole=whole)
        new_dirs = set(scan.dirs)
        if under and scan.exists:
            new_dirs.add(under)
        gone = [
            p
            for p, os_ in self._dirs.items()
            if i in os_
            and p not in new_dirs
            and within(p)
            and not (unread and f"{p}/".startswith(unread))
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
        return self.origins[i].writable(self.config.own_index)

    def is_own(self, i: int) -> bool:
        """Whether origin ``i`` is the own source's folder of the project (not a moved
        one's, §4.2)."""
        return self._is_own(i)

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
        new = Version(i, f.path, f.size, f.mtime_ns, f.mode, f.atime_ns, f.ino)
        versions = self._versions.get(f.path)
        old = _of(versions, i) if versions is not None else None
        if versions is not None and old is not None and old == new and old.ino == new.ino:
            # Known already, so the name rules let it in: no rule to check, the common case
            # of every rescan.
            if old.atime_ns != new.atime_ns:
                # only the atime moved: shown, but no change of the file
                self._versions[f.path] = _with(versions, new)
                self._refresh(f.path)
            return
        rule = None if named else cached_path_rule(f.path)
        if not self._admits(i, rule):
            assert rule is not None
            self.drop_version(i, f.path)  # first: it forgets the path's left-out entry
            self._leave_out(i, f.path, rule.why)
            return
        if rule is not None:
            self._in_flight.add(f.path)
        versions = self._versions.get(f.path, ())
        is_new = _of(versions, i) is None
        self._versions[f.path] = _with(versions, new)
        if f.path.startswith(_KEPT) and self._is_own(i):
            self.kept.put(f.path, f.size, f.ctime_ns or f.mtime_ns)
        if is_new:
            self._count_under(f.path, +1)
        self._refresh(f.path)

    def drop_version(self, i: int, path: str) -> None:
        """Origin ``i`` no longer holds ``path`` (gone, or left out from now on)."""
        self._forget_left_out(i, path)
        versions = self._versions.get(path)
        if not versions or _of(versions, i) is None:
            return
        versions = _without(versions, i)
        if versions:
            self._versions[path] = versions
        if path.startswith(_KEPT) and self._is_own(i):
            self.kept.discard(path)
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

    def _source_name(self, origin: int) -> str:
        return self.config.sources[self.origins[origin].source].name

    def whiteouts_for(self, path: str) -> list[tuple[str, str, int]]:
        """The records that would hide every read-only version of ``path`` (file or folder)
        and are not there yet; changes nothing (writes.py plans with it)."""
        own = self.config.own_index
        found = [(v.origin, v.mtime_ns) for v in self._versions.get(path, ())]
        found += [(i, DIR_WHITEOUT) for i in self._dirs.get(path, ())]
        added = []
        for origin, stamp in found:
            if not self.origins[origin].writable(own):
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

    def is_index(self, path: str) -> bool:
        """Whether ``path`` is an index shown as §5.3's union (`index.is_index`)."""
        return index.is_index(path, self.agents)

    @property
    def hidden_lines(self) -> frozenset[str]:
        """The lines of the top MEMORY.md hidden from the union, by text (`index.text_of`)."""
        return self.hidden_of(MEMORY)

    def hidden_of(self, path: str) -> frozenset[str]:
        """The lines of index ``path`` hidden from its union."""
        return self._hidden.get(path, frozenset())

    def set_hidden_lines(self, lines: Iterable[str], path: str = MEMORY) -> None:
        new = frozenset(lines)
        if new != self.hidden_of(path):
            if new:
                self._hidden[path] = new
            else:
                self._hidden.pop(path, None)
            self._refresh(path)  # its body and perhaps its kind change (project.py)

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

    @property
    def saved(self) -> tuple[set[tuple[str, str, int]], dict[str, frozenset[str]]]:
        """What the state folder keeps of this project, as the view holds it (state.Saved):
        its whiteouts and each index's hidden lines."""
        return set(self._whiteouts), dict(self._hidden)

    # --- reading ---------------------------------------------------------------------

    def versions(self, path: str) -> list[Version]:
        return list(self._versions.get(path, ()))

    def folder_origins(self, path: str) -> list[Origin]:
        """The origins holding a real folder at view folder ``path``, in the order its
        attributes are looked for: the own source's first, then by origin (memory only; the
        caller stats them, `sources.stat_first_folder`, in a worker while serving)."""
        own = self.config.own_index
        origins = self.origins
        holders = sorted(self._dirs.get(path, ()), key=lambda i: (not origins[i].writable(own), i))
        return [self.origins[i] for i in holders]

    def dir_holders(self, path: str) -> set[int]:
        return self._dirs.get(path, set())

    def versions_under(self, folder: str) -> list[Version]:
        prefix = f"{folder}/" if folder else ""
        return [v for p, vs in self._versions.items() if p.startswith(prefix) for v in vs]

    def folders(self) -> list[str]:
        return list(self._dirs)

    def real_path(self, v: Version) -> Path:
        return self.origins[v.origin].folder / v.path

    def source_name(self, v: Version) -> str:
        return self.config.sources[self.origins[v.origin].source].name

    # --- where the view takes over (Project) -----------------------------------------

    def _refresh(self, path: str) -> None:
        """``path``'s versions changed: the view recomputes what they show."""
        raise NotImplementedError

    def _sync_mark(self, path: str) -> None:
        """Folder ``path``'s holders or whiteouts changed: the view shows it, or not."""
        raise NotImplementedError

    def _changed(self) -> None:
        """Something the view shows changed without a path's versions changing."""
        raise NotImplementedError

    # --- invariants ------------------------------------------------------------------

    def _check(self) -> None:
        """Assert every invariant of what the sources hold; Project._check calls this."""
        for path, versions in self._versions.items():
            assert versions, path
            assert [v.origin for v in versions] == sorted({v.origin for v in versions}), path
            assert all(v.path == path for v in versions), path
            rule = names.path_rule(path)
            assert all(self._admits(v.origin, rule) for v in versions), path
            assert (rule is not None) == (path in self._in_flight), path
            assert cached_path_rule(path) == rule, path
        under: Counter[str] = Counter()
        for path, versions in self._versions.items():
            for a in ancestors(path):
                under[a] += len(versions)
        for path, holders in self._dirs.items():
            for a in [path, *ancestors(path)]:
                under[a] += len(holders)
        assert +under == +self._under, (under, self._under)
        own_kept = [
            p
            for p, vs in self._versions.items()
            if p.startswith(_KEPT)
            for v in vs
            if self._is_own(v.origin)
        ]
        assert len(self.kept) == len([p for p in own_kept if p.count("/") > 1]), own_kept
        self.kept._check()


def _of(versions: tuple[Version, ...], i: int) -> Version | None:
    """Origin ``i``'s version among a path's ``versions``, if it holds one."""
    for v in versions:
        if v.origin == i:
            return v
    return None


def _with(versions: tuple[Version, ...], new: Version) -> tuple[Version, ...]:
    """``versions`` with ``new`` as its origin's version, in origin order."""
    i = new.origin
    return tuple(sorted((*(v for v in versions if v.origin != i), new), key=_origin_of))


def _without(versions: tuple[Version, ...], i: int) -> tuple[Version, ...]:
    return tuple(v for v in versions if v.origin != i)


def _origin_of(v: Version) -> int:
    return v.origin


# names.path_reason runs every rule's regex on every component (tens of µs a path); looks
# at one path (the watcher's, a plan's) ask again for the same paths. A pure function of
# the path, so its answers are kept, bounded (thread-safe: workers build, the trio thread
# changes).
cached_path_rule = functools.lru_cache(maxsize=1 << 16)(names.path_rule)
