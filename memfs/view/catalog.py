"""The catalog of projects: which canonical slugs exist, and each project once loaded.

§2, §4. Layer view: imports neither pyfuse3 nor trio; not thread-safe (one owner). Reads
no disk: what the disk holds is given to it.

Listing the root names every project without reading any project folder: the listing of
each source's root (disk/roots.py, read by the caller) is taken in by `set_listing`, then
kept current by `folder_added` and `folder_removed` (the watcher calls them). A folder's
name is its slug, canonicalised; a Gemini CLI source's folders are named by ids instead, and
the slug each maps to comes with the listing (disk/gemini.py) and is kept current by
`remap`. A project is built from what the state folder keeps of it and each folder's scan
(`build`; the watcher builds its own in a worker thread, see watch.py, and a command's come
from app/offline.py) and published by `adopt`. A canonical slug no source holds yet is served
as an *empty* project (§4: ``here`` never dangles): a Project with no folder, which becomes
an ordinary one when its first folder appears.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from sortedcontainers import SortedDict

from memfs.disk import baselines, sources, staging, state
from memfs.disk.config import Config
from memfs.disk.roots import Listing, Reals
from memfs.rules import moves, names
from memfs.rules import slug as slugs
from memfs.view import userlevel
from memfs.view.documents import BodyReader
from memfs.view.project import Origin, Project

log = logging.getLogger(__name__)

MAX_EMPTY = 1024  # views of slugs no source holds, kept at once


def is_project_name(name: str) -> bool:
    """A name the root may hold a project under: a canonical slug (§2)."""
    return (
        name.startswith("-")
        and len(os.fsencode(name)) <= sources.NAME_MAX
        and sources.valid_name(name)
        and slugs.canonical_slug(name) == name
    )


class Catalog:
    def __init__(self, config: Config, read_body: BodyReader | None = None) -> None:
        self.config = config
        # How its projects read a body a rendering needs that was not read ahead (the
        # owner's: the adapter's, a command's; `Project.read_body`)
        self.read_body = read_body
        # canonical slug -> {(source index, folder name in that source's root)}
        self._slugs: SortedDict[str, set[tuple[int, str]]] | None = None
        self._projects: dict[str, Project] = {}  # canonical slug -> loaded project
        # loaded projects let go with their last folder, whose changes are still to tell
        self._dropped: list[Project] = []
        self._empty: dict[str, Project] = {}  # canonical slug no source holds -> its view
        # root changes before the listing: (added, source, folder name, mapped slug)
        self._early: list[tuple[bool, int, str, str | None, Path | None]] = []
        # A mapped (Gemini CLI) source's folders: source -> folder name -> its slug
        self._mapped: dict[int, dict[str, str]] = {}
        # The moves followed (§4.2): old canonical slug -> the slug it moved to, and its
        # old path. Every folder of the old slug is listed under the end of its chain.
        self._moved: dict[str, str] = {}
        self._moved_paths: dict[str, str] = {}
        # (source, folder name) -> its real memory folder, for a folder reached through a
        # link or kept outside its source's root (the listing's `Reals`)
        self._reals: Reals = {}
        # global/<kind> -> its origins (§4.1): fixed by the config, listed or not
        self._global = {
            userlevel.slug_of(k): userlevel.origins(config, userlevel.slug_of(k))
            for k in userlevel.kinds(config)
        }

    @property
    def listed(self) -> bool:
        return self._slugs is not None

    def set_listing(self, found: Listing, reals: Reals | None = None) -> None:
        """Take in the sources' roots as listed (`roots.list_folders`, read by the caller:
        the folders, and the real folder of those reached through a link), and what the
        watcher reported while it was read. Once: a later listing is ignored."""
        if self._slugs is not None:
            return
        self._slugs = SortedDict()
        self._reals.update(reals or {})
        for i, name, slug in found:
            self._add(i, name, slug)
        early, self._early = self._early, []
        for added, i, name, slug, real in early:
            if added:
                self.folder_added(i, name, slug, real or self._reals.get((i, name)))
            else:
                self.folder_removed(i, name)

    def _listing(self) -> SortedDict[str, set[tuple[int, str]]]:
        # The adapter lists from a worker before its first question, a command when it
        # starts (app/offline.py).
        assert self._slugs is not None, "the catalog is asked before its listing"
        return self._slugs

    def _add(self, source: int, name: str, mapped: str | None = None) -> str | None:
        # A dot name (.stfolder, .stversions, .git) is a tool's, never a project (§2):
        # refused before canonicalising, which would turn '.git' into the slug '-git'.
        if not sources.valid_name(name) or not names.project_folder(name):
            return None
        is_mapped = self.config.sources[source].mapped
        # A mapped folder's slug comes mapped to this machine already (`Config.moved`).
        canonical = mapped if is_mapped else self._slug_of(source, name)
        if canonical is None or not canonical.startswith("-"):
            # Slugs encode absolute paths, so they begin with '-'; anything else in a
            # source's root is not a project (and must never shadow `here`).
            return None
        if is_mapped:
            known = self._mapped.setdefault(source, {})
            if name in known:
                self.folder_removed(source, name)  # mapped anew: it leaves its old project
            known[name] = canonical
        assert self._slugs is not None
        self._slugs.setdefault(canonical, set()).add((source, name))
        return canonical

    def _rehomed(self, source: int, slug: str) -> str:
        """``slug`` as this machine names it: another machine's folder (§12) maps through
        the two homes (`slugs.rehome`); this machine's stays as it is."""
        theirs = self.config.sources[source].their_home
        if not theirs:
            return slug
        return slugs.rehome(slug, theirs, str(self.config.home))

    def slugs(self) -> list[str]:
        return list(self._listing().keys())

    def has(self, slug: str) -> bool:
        return slug in self._global or slug in self._listing()

    def global_kinds(self) -> list[str]:
        """What global/ lists (§4.1): the kinds with any source."""
        return [userlevel.kind_of(s) or "" for s in self._global]

    def loaded(self) -> dict[str, Project]:
        return self._projects

    def holds(self, slug: str, origin: Origin) -> bool:
        """Whether ``origin`` is still one of ``slug``'s folders (memory only). A mapped
        source's folder may move to another project while a loaded one keeps the origin:
        the watcher reads it for that project no more."""
        if self._slugs is None or slug in self._global:
            return True  # global/'s origins are fixed by the config
        if not self.config.sources[origin.source].mapped:
            return True  # a slug folder is its slug's for as long as it exists
        return (origin.source, origin.key[0]) in self._slugs.get(slug, ())

    def origins(self, slug: str) -> list[Origin]:
        """Every folder of ``slug``: each source's, then where the state folder keeps the
        read-only ones' versions changed on disk (`kept_origin`)."""
        if slug in self._global:
            found = list(self._global[slug])
        else:
            found = [self._origin(s, n) for s, n in sorted(self._listing().get(slug, ()))]
        return found + [k for o in found if (k := self.kept_origin(o)) is not None]

    def kept_origin(self, origin: Origin) -> Origin | None:
        """Where the versions a change on disk replaced of read-only ``origin``'s files are
        kept (issue 37, disk/baselines.py): its mirror in the state folder, whose
        ``.history/`` shows as that source's versions. None for the own source's, kept in
        its own ``.history/``."""
        if origin.source == self.config.own_index:
            return None
        name = self.config.sources[origin.source].name
        root = baselines.kept_root(self.config.state_dir, name)
        return Origin(origin.source, root, origin.key, kept=True)

    def build(
        self,
        slug: str,
        saved: state.Saved,
        scans: Mapping[Origin, tuple[sources.Scan, int]] | None = None,
    ) -> Project:
        """A project of every folder listed for ``slug``, with what the state folder keeps
        of it (``saved``: whiteouts, hidden lines; `state.load_project`) and each folder's
        scan with when it began (``scans``, `sources.scan_each`). A folder with no scan is
        registered unread, for its caller to read (`Holdings.rescan`). Memory only; not
        published until `adopt`."""
        project = Project(slug, self.config, *saved, read_body=self.read_body)
        for origin in self.origins(slug):
            found = scans.get(origin) if scans is not None else None
            if found is None:
                project.add_origin(origin, sources.Scan(exists=False))
            else:
                project.add_origin(origin, *found)
        return project

    def adopt(self, project: Project) -> Project:
        """Publish a built project; an empty view of the same slug is superseded by it."""
        self._empty.pop(project.slug, None)
        project.set_moved_from(self.moved_from(project.slug))
        self._projects[project.slug] = project
        return project

    def empty(self, slug: str) -> Project | None:
        """The view of a canonical slug no source holds yet: only PREAMBLE.md (§4).
        None for a name that is no canonical slug, or a listed project."""
        if self.has(slug) or not is_project_name(slug):
            return None
        found = self._empty.get(slug)
        if found is None:
            if len(self._empty) >= MAX_EMPTY:
                self._empty.clear()  # views of nothing: cheap to make again
            found = self._empty[slug] = Project(slug, self.config, read_body=self.read_body)
        return found

    def _origin(self, source: int, name: str) -> Origin:
        spec = self.config.sources[source]
        moved = not spec.mapped and self._named(source, name) in self._moved
        key = (name, *spec.tail)
        real = self._reals.get((source, name))
        if real is not None:  # read where the link leads; nothing below it is followed
            return Origin(source, real, (), spec.memory_names, via=key, moved=moved)
        return Origin(source, spec.root, key, spec.memory_names, moved=moved)

    # --- moved projects (§4.2) ------------------------------------------------------

    def _named(self, source: int, name: str) -> str:
        """The canonical slug a slug folder's ``name`` in ``source`` stands for on this
        machine (another machine's mapped through the homes, `_rehomed`)."""
        return self._rehomed(source, slugs.canonical_slug(name))

    def named(self, origin: Origin) -> str:
        """The slug ``origin``'s folder is named for (before any move is followed)."""
        return self._named(origin.source, origin.parts[0])

    def _slug_of(self, source: int, name: str, moved: dict[str, str] | None = None) -> str:
        """The project a slug folder ``name`` of ``source`` is listed under: the slug it
        names, or where that slug's project moved to (``moved``: the moves followed, by
        default those followed now)."""
        return moves.final_slug(self._moved if moved is None else moved, self._named(source, name))

    def follow(self, old: str, new: str, old_path: str) -> list[str]:
        """Show slug ``old``'s folders (every source's) in project ``new`` from now on: its
        project moved from ``old_path`` (disk/moves.py decided so). A project moved back
        where it was (``new`` had moved away) no longer follows its move away. Memory only;
        returns the slugs whose folders changed, sorted. Before the listing, it is taken in
        with the listing."""
        if old == new or self._moved.get(old) == new:
            return []
        moved = {o: n for o, n in self._moved.items() if o != new}
        moved[old] = new
        self._moved_paths.pop(new, None)
        self._moved_paths[old] = old_path
        # An empty view of the new slug is let go rather than given the old folders
        # unread: the next request then loads the project whole (its folders scanned),
        # instead of seeing it empty until the watcher has read them.
        self._empty.pop(new, None)
        touched = self._refollow(moved) | {new}
        for slug in touched:
            project = self._projects.get(slug)
            if project is not None:
                project.set_moved_from(self.moved_from(slug))
        return sorted(touched)

    def _refollow(self, moved: dict[str, str]) -> set[str]:
        """Take ``moved`` as the moves followed: each slug folder whose project changes
        leaves the old one and joins the new (O(folders listed), only when a move is
        followed). Returns the slugs whose folders changed."""
        listed = [] if self._slugs is None else [p for fs in self._slugs.values() for p in fs]
        changing = sorted(
            (source, name)
            for source, name in listed
            if not self.config.sources[source].mapped
            and self._slug_of(source, name, moved) != self._slug_of(source, name)
        )
        touched: set[str | None] = set()
        for source, name in changing:
            touched.add(self.folder_removed(source, name))
        self._moved = moved
        for source, name in changing:
            touched.add(self.folder_added(source, name))
        return {s for s in touched if s is not None}

    def moved_from(self, slug: str) -> tuple[str, ...]:
        """The old paths whose memory ``slug`` shows, nearest move first."""
        return tuple(self._moved_paths[old] for old in moves.moved_into(self._moved, slug))

    def moves(self) -> dict[str, tuple[str, str]]:
        """old slug -> (the slug it shows under, its old path), for every move followed."""
        return {
            old: (moves.final_slug(self._moved, old), self._moved_paths[old]) for old in self._moved
        }

    def folder_added(
        self, source: int, name: str, mapped: str | None = None, real: Path | None = None
    ) -> str | None:
        """A slug folder appeared in a source's root (a mapped source's folder: with the
        slug it maps to; one reached through a link: with its real folder); returns its
        canonical slug."""
        if self._slugs is None:
            self._early.append((True, source, name, mapped, real))  # taken in after the listing
            return None
        canonical = self._add(source, name, mapped)
        if canonical is None:
            return None
        if real is not None:  # after _add, which drops a mapped folder's old project first
            self._reals[source, name] = real
        empty = self._empty.pop(canonical, None)
        if empty is not None:
            self._projects[canonical] = empty  # the same object: handles and inodes stay
            empty.set_moved_from(self.moved_from(canonical))
        if canonical in self._projects:
            # Registered empty; the watcher scans it (off the request thread) and watches it.
            self._projects[canonical].add_origin(self._origin(source, name), sources.Scan())
        return canonical

    def folder_removed(self, source: int, name: str) -> str | None:
        if self._slugs is None:
            self._early.append((False, source, name, None, None))
            return None
        if not sources.valid_name(name):
            return None
        if self.config.sources[source].mapped:
            canonical = self._mapped.get(source, {}).pop(name, None)
            if canonical is None:
                return None
        else:
            canonical = self._slug_of(source, name)
        folders = self._slugs.get(canonical)
        if folders is None:
            return None
        folders.discard((source, name))
        if not folders:
            del self._slugs[canonical]
        project = self._projects.get(canonical)
        if project is not None:
            i = project.origin_index(self._origin(source, name))
            if i is not None:
                project.rescan(i, sources.Scan(exists=False))  # every version of it goes
            if not folders:
                del self._projects[canonical]
                self._dropped.append(project)
        self._reals.pop((source, name), None)
        return canonical

    def take_dropped(self) -> list[Project]:
        """The loaded projects let go since the last call, each with its tree's changes
        (every file gone) still to tell the kernel: a process whose working folder is in
        one still reaches its entries."""
        dropped, self._dropped = self._dropped, []
        return dropped

    def remap(
        self, source: int, mapping: dict[str, str], reals: Mapping[str, Path] | None = None
    ) -> list[str]:
        """Mapped source ``source``'s folders map as ``mapping`` says now (folder name ->
        slug; a folder that maps to no project is not in it), their real folders as
        ``reals`` says (folder name -> its real folder, for those reached through a link or
        kept in the project): each folder whose project or real folder changed leaves the
        old one and joins the new. Memory only; returns the slugs whose folders changed,
        sorted. Needs the listing (the watcher lists first)."""
        assert self._slugs is not None, "remapped before the listing"
        reals = reals or {}
        if not self.config.sources[source].mapped:
            return self._relist(source, set(mapping), reals)
        before = dict(self._mapped.get(source, {}))
        moved = {n for n in before if self._reals.get((source, n)) != reals.get(n)}
        touched = set()
        for name, slug in before.items():
            if mapping.get(name) != slug or name in moved:
                touched.add(self.folder_removed(source, name))
        for name, slug in sorted(mapping.items()):
            if before.get(name) != slug or name in moved:
                touched.add(self.folder_added(source, name, slug, reals.get(name)))
        return sorted(s for s in touched if s is not None)

    def _relist(self, source: int, names: set[str], reals: Mapping[str, Path]) -> list[str]:
        """Slug source ``source``'s root holds the folders ``names`` now, those in ``reals``
        reached through a link (issue 38: a link made, changed or gone while mounted): each
        folder that came or went joins or leaves its project, and one that leads elsewhere
        now is read there (`_relink`). O(listing)."""
        assert self._slugs is not None
        listed = {n for folders in self._slugs.values() for s, n in folders if s == source}
        touched = {self.folder_removed(source, n) for n in sorted(listed - names)}
        for n in sorted(names):
            if n not in listed:
                touched.add(self.folder_added(source, n, None, reals.get(n)))
            elif self._reals.get((source, n)) != reals.get(n):
                touched.add(self._relink(source, n, reals.get(n)))
        return sorted(s for s in touched if s is not None)

    def _relink(self, source: int, name: str, real: Path | None) -> str:
        """Listed folder ``name`` of slug source ``source`` leads to ``real`` now (None: no
        link): a loaded project reads the new folder in place of the old, so that it stays
        the same project (its inodes, what the kernel was told) and tells of each change."""
        canonical = self._slug_of(source, name)  # its project: rehomed, moves followed
        old = self._origin(source, name)
        if real is None:
            self._reals.pop((source, name), None)
        else:
            self._reals[source, name] = real
        project = self._projects.get(canonical)
        if project is not None:
            i = project.origin_index(old)
            if i is not None:
                project.rescan(i, sources.Scan(exists=False))  # every version of it goes
            project.add_origin(self._origin(source, name), sources.Scan())  # read next
        return canonical

    def own_place(self, slug: str) -> staging.Place | None:
        """Where writes to ``slug`` land: the own source's folder named by the canonical slug
        (of global/claude: the own account's config folder, §4.1)."""
        if slug in self._global:
            found = self.own_origin(slug)
            return None if found is None else staging.Place(found.root, found.parts)
        own, own_index = self.config.own, self.config.own_index
        if own is None:
            return None
        real = self._reals.get((own_index, slug)) if own_index is not None else None
        if real is not None:
            return staging.Place(real, ())  # the own folder is a link: written where it leads
        return staging.Place(own.root, (slug, *own.tail))

    def own_origin(self, slug: str) -> Origin | None:
        """The own source's origin of ``slug``, where writes land (see `own_place`)."""
        if slug in self._global:
            return userlevel.own_origin(self.config, slug)
        own, place = self.config.own_index, self.own_place(slug)
        if own is not None and (own, slug) in self._reals:
            return self._origin(own, slug)  # a link: the origin the project holds
        return None if own is None or place is None else Origin(own, place.root, place.parts)

    def own_folder_made(self, slug: str, saved: state.Saved) -> Project:
        """The own source's folder for ``slug`` was made through the mount (its first write,
        or mkdir at the root): list it. A project not loaded yet is built unread, with
        ``saved`` (what the state folder keeps of it: the caller reads it in its worker,
        `state.load_project`); the watcher scans its folder."""
        own_index = self.config.own_index
        assert own_index is not None
        self.folder_added(own_index, slug)
        project = self._projects.get(slug)
        if project is None:
            project = self.adopt(self.build(slug, saved))
        return project

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each change."""
        if self._slugs is not None:
            assert all(self._slugs.values()), "a listed slug with no folder"
            listed = {(s, n): slug for slug, fs in self._slugs.items() for s, n in fs}
            for source, folders in self._mapped.items():
                assert self.config.sources[source].mapped, source
                for name, slug in folders.items():
                    assert listed.get((source, name)) == slug, (source, name)
            for (source, name), slug in listed.items():
                if self.config.sources[source].mapped:
                    assert self._mapped[source][name] == slug, (source, name)
            for slug, held in self._slugs.items():
                # every folder of a moved project is listed under where it moved to
                assert slug not in self._moved, slug
                for source, name in held:
                    mapped = self.config.sources[source].mapped
                    assert mapped or self._slug_of(source, name) == slug
        assert set(self._moved) <= set(self._moved_paths)
        for slug, project in self._projects.items():
            assert project.slug == slug
            project._check()
        for slug, project in self._empty.items():
            assert slug not in self._projects, slug
            assert not self.has(slug), slug
            assert not project.origins, slug


def own_folder(config: Config, slug: str, origin: Origin) -> baselines.OwnFolder:
    """The own folder ``origin`` of project ``slug``, as a plan's worker call needs it to
    keep what changed there on disk (disk/baselines.py)."""
    name = config.sources[origin.source].name
    folder = baselines.Folder(name, origin.root, origin.parts, True, origin.only)
    return baselines.OwnFolder(folder, slug, config.limits, config.state_dir)
