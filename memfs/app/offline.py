"""Projects read from disk for the commands that run without a mount: ``memfs preamble``,
``memfs restore`` with the mount down (history.py), ``memfs adopt`` (adopt.py).

What a mount's watcher reads in worker threads (adapter/watch.py), read here at once: every
source's root listed (disk/roots.py), what the state folder keeps of a project
(`state.load_project`) and each of its folders scanned (`sources.scan`); the view
(view/catalog.py, view/holdings.py) takes them in as values.

Layer app: blocking, one caller at a time; imports neither pyfuse3 nor trio, so the
commands that use it start without them.
"""

from __future__ import annotations

import time

from memfs.disk import moves, roots, sources, state
from memfs.disk.config import Config
from memfs.view.catalog import Catalog
from memfs.view.project import Origin, Project


def listed(config: Config) -> Catalog:
    """A catalog of every project the sources' roots hold now."""
    catalog = Catalog(config, read_body=sources.read_file)
    for move in moves.followed_now(config.state_dir):  # moved projects (§4.2), as mounted
        catalog.follow(move.old_slug, move.new_slug, move.old_path)
    catalog.set_listing(*roots.list_folders(config))
    return catalog


def build(catalog: Catalog, slug: str) -> Project:
    """``slug``'s project read from disk now: what the state folder keeps of it and every
    folder the catalog lists for it, scanned. Not published (`Catalog.adopt`)."""
    config = catalog.config
    folders = [(o, o.root, o.parts, o.only) for o in catalog.origins(slug)]
    saved = state.load_project(config.state_dir, slug)
    return catalog.build(slug, saved, sources.scan_each(folders, config.limits.max_file_bytes))


def load(catalog: Catalog, slug: str) -> Project | None:
    """``slug``'s project in ``catalog``, read from disk and published unless loaded already;
    None when no source holds it."""
    found = catalog.loaded().get(slug)
    if found is None and catalog.has(slug):
        found = catalog.adopt(build(catalog, slug))
    return found


def load_project(config: Config, slug: str) -> Project | None:
    """``slug``'s project as the disk holds it now (None: no source holds it)."""
    return load(listed(config), slug)


def scan(project: Project, i: int, under: str = "") -> sources.Scan:
    """Origin ``i`` of ``project`` scanned now (its folder ``under``, if given)."""
    origin = project.origins[i]
    limit = project.config.limits.max_file_bytes
    return sources.scan(origin.root, origin.parts, limit, origin.only, under)


def rescan(project: Project, i: int, under: str = "") -> None:
    """Origin ``i`` of ``project`` read again now, whole (or its folder ``under``)."""
    at = time.monotonic_ns()
    project.rescan(i, scan(project, i, under), at, under)


def add_origin(project: Project, origin: Origin) -> int:
    """``origin`` registered in ``project`` and read now; returns its index. A folder
    known already keeps what it holds."""
    known = project.origin_index(origin)
    if known is not None:
        return known
    i = project.add_origin(origin, sources.Scan(exists=False))
    rescan(project, i)
    return i
