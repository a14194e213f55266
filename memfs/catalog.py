"""The catalog of projects: which canonical slugs exist, and each project loaded on demand.

SPEC 2, 4. Pure core: imports neither pyfuse3 nor trio; not thread-safe (one owner).

Listing the root names every project without reading any project folder: one ``scandir`` of
each source's root, done on first use, then kept current by `folder_added` and
`folder_removed` (the watcher calls them). A project is scanned when first asked for.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sortedcontainers import SortedDict

from memfs import slug as slugs
from memfs import sources, staging, state
from memfs.config import Config
from memfs.project import Origin, Project

log = logging.getLogger(__name__)


class Catalog:
    def __init__(self, config: Config) -> None:
        self.config = config
        # canonical slug -> {(source index, folder name in that source's root)}
        self._slugs: SortedDict[str, set[tuple[int, str]]] | None = None
        self._projects: dict[str, Project] = {}  # canonical slug -> loaded project

    def _listing(self) -> SortedDict[str, set[tuple[int, str]]]:
        if self._slugs is None:
            self._slugs = SortedDict()
            for i, source in enumerate(self.config.sources):
                for name in sources.list_slug_folders(source.root):
                    self._add(i, name)
        return self._slugs

    def _add(self, source: int, name: str) -> str | None:
        if not sources.valid_name(name):
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
        """The project for a canonical slug, scanned on first use; None if no source has it."""
        found = self._projects.get(slug)
        if found is not None:
            return found
        folders = self._listing().get(slug)
        if not folders:
            return None
        origins = [self._origin(s, n) for s, n in sorted(folders)]
        whiteouts = state.load_whiteouts(self.config.state_dir, slug)
        project = Project(slug, self.config, origins, whiteouts)
        self._projects[slug] = project
        return project

    def _origin(self, source: int, name: str) -> Origin:
        spec = self.config.sources[source]
        return Origin(source, spec.root, (name, *spec.tail))

    def folder_added(self, source: int, name: str) -> str | None:
        """A slug folder appeared in a source's root; returns its canonical slug."""
        if self._slugs is None:
            return None  # nothing listed yet: the first listing will see it
        canonical = self._add(source, name)
        if canonical is not None and canonical in self._projects:
            self._projects[canonical].add_origin(self._origin(source, name))
        return canonical

    def folder_removed(self, source: int, name: str) -> str | None:
        if self._slugs is None or not sources.valid_name(name):
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
                project.rescan(i)  # the folder is gone: every version of it goes
            if not folders:
                del self._projects[canonical]
        return canonical

    def own_place(self, slug: str) -> staging.Place | None:
        """Where writes to ``slug`` land: the own source's folder named by the canonical slug."""
        own = self.config.own
        if own is None:
            return None
        return staging.Place(own.root, (slug, *own.tail))

    def create(self, slug: str) -> Project:
        """Make the own source's folder for a new project and load it (mkdir at the root)."""
        place = self.own_place(slug)
        if place is None:
            raise PermissionError("no own source")
        fd = staging.open_dir(place, create=True)
        os.close(fd)
        self._listing()
        own_index = self.config.own_index
        assert own_index is not None
        self._add(own_index, slug)
        project = self.project(slug)
        assert project is not None
        return project

    def source_roots(self) -> list[tuple[int, Path]]:
        return [(i, s.root) for i, s in enumerate(self.config.sources)]

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each change."""
        if self._slugs is not None:
            assert all(self._slugs.values()), "a listed slug with no folder"
        for slug, project in self._projects.items():
            assert project.slug == slug
            project._check()
