"""The catalog of projects: which canonical slugs exist, and each project once loaded.

§2, §4. Layer view: imports neither pyfuse3 nor trio; not thread-safe (one owner).

Listing the root names every project without reading any project folder: one ``scandir`` of
each source's root (`load_listing`, disk I/O), then kept current by `folder_added` and
`folder_removed` (the watcher calls them, no I/O). A project is built by `build` (disk I/O:
the watcher runs it in a worker thread, see watch.py) and published by `adopt`. A canonical
slug no source holds yet is served as an *empty* project (§4: ``here`` never dangles):
a Project with no folder, which becomes an ordinary one when its first folder appears.
"""

from __future__ import annotations

import logging
import os

from sortedcontainers import SortedDict

from memfs.disk import sources, staging, state
from memfs.disk.config import Config
from memfs.rules import names
from memfs.rules import slug as slugs
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
    def __init__(self, config: Config) -> None:
        self.config = config
        # canonical slug -> {(source index, folder name in that source's root)}
        self._slugs: SortedDict[str, set[tuple[int, str]]] | None = None
        self._projects: dict[str, Project] = {}  # canonical slug -> loaded project
        self._empty: dict[str, Project] = {}  # canonical slug no source holds -> its view
        self._early: list[tuple[bool, int, str]] = []  # root changes before the listing

    @property
    def listed(self) -> bool:
        return self._slugs is not None

    def load_listing(self) -> None:
        """List every source's root now (disk I/O; once)."""
        if self._slugs is None:
            self.set_listing(self.read_listing())

    def read_listing(self) -> list[tuple[int, str]]:
        """Every (source, folder name) in the sources' roots: disk I/O, changes nothing (a
        worker thread runs it; `set_listing` takes the result in)."""
        return [
            (i, name)
            for i, source in enumerate(self.config.sources)
            for name in sources.list_slug_folders(source.root)
        ]

    def set_listing(self, found: list[tuple[int, str]]) -> None:
        """Take in a listing, and what the watcher reported while it was read."""
        if self._slugs is not None:
            return
        self._slugs = SortedDict()
        for i, name in found:
            self._add(i, name)
        early, self._early = self._early, []
        for added, i, name in early:
            (self.folder_added if added else self.folder_removed)(i, name)

    def _listing(self) -> SortedDict[str, set[tuple[int, str]]]:
        self.load_listing()  # a no-op once listed: the adapter lists from a worker first
        assert self._slugs is not None
        return self._slugs

    def _add(self, source: int, name: str) -> str | None:
        # A dot name (.stfolder, .stversions, .git) is a tool's, never a project (§2):
        # refused before canonicalising, which would turn '.git' into the slug '-git'.
        if not sources.valid_name(name) or not names.project_folder(name):
            return None
        canonical = slugs.canonical_slug(name)
        if not canonical.startswith("-"):
            # Slugs encode absolute paths, so they begin with '-'; anything else in a
            # source's root is not a project (and must never shadow `here`).
            return None
        assert self._slugs is not None
        self._slugs.setdefault(canonical, set()).add((source, name))
        return canonical

    def slugs(self) -> list[str]:
        return list(self._listing().keys())

    def has(self, slug: str) -> bool:
        return slug in self._listing()

    def loaded(self) -> dict[str, Project]:
        return self._projects

    def project(self, slug: str) -> Project | None:
        """The project for a canonical slug, built now if need be (disk I/O: outside the
        mount); None if no source has it."""
        found = self._projects.get(slug)
        if found is None and self.has(slug):
            found = self.adopt(self.build(slug))
        return found

    def origins(self, slug: str) -> list[Origin]:
        return [self._origin(s, n) for s, n in sorted(self._listing().get(slug, ()))]

    def build(self, slug: str, scan: bool = True, saved: state.Saved | None = None) -> Project:
        """A project of every folder listed for ``slug``: reads what the state folder keeps
        of it (unless given: whiteouts, hidden lines) and, with ``scan``, every folder (disk
        I/O); not published until `adopt`."""
        if saved is None:
            saved = state.load_project(self.config.state_dir, slug)
        project = Project(slug, self.config, (), *saved)
        for origin in self.origins(slug):
            project.add_origin(origin, None if scan else sources.Scan(exists=False))
        return project

    def adopt(self, project: Project) -> Project:
        """Publish a built project; an empty view of the same slug is superseded by it."""
        self._empty.pop(project.slug, None)
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
            found = self._empty[slug] = Project(slug, self.config)
        return found

    def _origin(self, source: int, name: str) -> Origin:
        spec = self.config.sources[source]
        return Origin(source, spec.root, (name, *spec.tail))

    def folder_added(self, source: int, name: str) -> str | None:
        """A slug folder appeared in a source's root; returns its canonical slug."""
        if self._slugs is None:
            self._early.append((True, source, name))  # taken in after the first listing
            return None
        canonical = self._add(source, name)
        if canonical is None:
            return None
        empty = self._empty.pop(canonical, None)
        if empty is not None:
            self._projects[canonical] = empty  # the same object: handles and inodes stay
        if canonical in self._projects:
            # Registered empty; the watcher scans it (off the request thread) and watches it.
            self._projects[canonical].add_origin(self._origin(source, name), sources.Scan())
        return canonical

    def folder_removed(self, source: int, name: str) -> str | None:
        if self._slugs is None:
            self._early.append((False, source, name))
            return None
        if not sources.valid_name(name):
            return None
        canonical = slugs.canonical_slug(name)
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
        return canonical

    def own_place(self, slug: str) -> staging.Place | None:
        """Where writes to ``slug`` land: the own source's folder named by the canonical slug."""
        own = self.config.own
        if own is None:
            return None
        return staging.Place(own.root, (slug, *own.tail))

    def own_folder_made(self, slug: str, saved: state.Saved | None = None) -> Project:
        """The own source's folder for ``slug`` was made through the mount (its first write,
        or mkdir at the root): list it, without reading anything but, if not given, what
        the state folder keeps of the project (small files: the caller can read them in its
        worker, `state.load_project`)."""
        own_index = self.config.own_index
        assert own_index is not None
        self.folder_added(own_index, slug)
        project = self._projects.get(slug)
        if project is None:
            project = self.adopt(self.build(slug, scan=False, saved=saved))
        return project

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each change."""
        if self._slugs is not None:
            assert all(self._slugs.values()), "a listed slug with no folder"
        for slug, project in self._projects.items():
            assert project.slug == slug
            project._check()
        for slug, project in self._empty.items():
            assert slug not in self._projects, slug
            assert not self.has(slug), slug
            assert not project.origins, slug
