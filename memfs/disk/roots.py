"""What the sources' roots hold: the folder of each project, in every source that holds
projects (§2, §3).

Layer disk: one ``scandir`` of each source's root (sources.py, mapped.py); a mapped source's
folders are named by ids, read through its map (gemini.py, kilo.py, goose.py). A project
folder may be a link to a folder the user owns, or its memory folder may be: the real
folder comes with the listing (`Reals`). Blocking: a mount lists once, in a worker
(adapter/watch.py, loading.py), and keeps the listing current from inotify; a command that
runs without a mount lists when it starts (app/offline.py).
"""

from __future__ import annotations

from pathlib import Path

from memfs.disk import gemini, goose, kilo, mapped
from memfs.disk.config import GEMINI, GOOSE, KILO, Config, SourceSpec

# (source index, folder name in its root, the slug a mapped source's folder maps to; None
# for a slug folder, whose name is its slug)
Listing = list[tuple[int, str, str | None]]
# (source index, folder name) -> the real memory folder, for a folder reached through a
# link or kept outside its source's root (goose's, inside each project)
Reals = dict[tuple[int, str], Path]


def list_roots(config: Config) -> Listing:
    """Every project folder in the sources' roots, in config order (`list_folders`'s
    listing)."""
    return list_folders(config)[0]


def list_folders(config: Config) -> tuple[Listing, Reals]:
    """Every project folder in the sources' roots, in config order, and the real folder of
    each one reached through a link (view/catalog.py's `Catalog.set_listing` takes both in).
    A mapped folder that maps to no project is left out; a source that holds no projects
    (user-level memory only, §4.1) lists nothing."""
    found: Listing = []
    reals: Reals = {}
    for i, source in enumerate(config.sources):
        if not source.projects:
            continue  # user-level memory only: global/ (§4.1)
        if source.mapped:
            for m in read_map(config, i):
                if m.slug is not None:
                    found.append((i, m.folder, m.slug))
                    if m.real is not None:
                        reals[i, m.folder] = m.real
            continue
        names, linked = list_source(config, i)
        found += [(i, name, None) for name in names]
        reals.update({(i, name): real for name, real in linked.items()})
    return found, reals


def list_source(config: Config, i: int) -> tuple[list[str], dict[str, Path]]:
    """The project folders in slug source ``i``'s root, and the real memory folder of each
    one reached through a link (the folder, or its tail's ``memory/``)."""
    source = config.sources[i]
    names = mapped.list_folders(source.root)
    reals = {n: r for n in names if (r := mapped.real_memory(source.root, n, source.tail))}
    return names, reals


def read_map(config: Config, i: int, before: mapped.Before | None = None) -> list[mapped.Mapping]:
    """Mapped source ``i``'s folders and the project each maps to, by its kind; ``before``
    is called with each folder that may change the map, and the names in it that may,
    before it is read (the watcher watches it first)."""
    source = config.sources[i]
    if source.kind == GEMINI:
        return gemini.read_map(source.gemini_dir, before, config.moved(source))
    if source.kind == KILO:
        return kilo.read_map(source.root, before)
    if source.kind == GOOSE:
        return goose.read_map(goose_roots(config), before)
    raise ValueError(f"source {source.name!r} of kind {source.kind!r} is not mapped")


def goose_roots(config: Config) -> list[tuple[str, str]]:
    """Project roots memfs knows from the other sources, where goose may keep a project's
    memory (``<root>/.goose/memory``): (root, where it was learnt), roots sorted.

    Gemini CLI's markers and Kilo Code's manifests name roots; a slug folder (Claude Code's,
    pi's) names a root only through its slug, which is inverted on the disk
    (`goose.roots_of_slug`)."""
    found: dict[str, str] = {}
    listings: goose.Listings = {}
    avoid = goose.fuse_mounts()
    for i, source in enumerate(config.sources):
        if source.kind in (GEMINI, KILO):
            for m in read_map(config, i):
                if m.root is not None:
                    found.setdefault(m.root, f"{source.name}'s map")
        elif source.projects and not source.mapped:
            for name in mapped.list_folders(source.root):
                for root in goose.roots_of_slug(name, listings, avoid):
                    found.setdefault(root, f"{source.name}'s folder {name}")
    return sorted(found.items())


def describe(config: Config, source: SourceSpec) -> list[str]:
    """What `memfs sources` says of a mapped source: each folder, its root and its project,
    or why it is not mapped."""
    i = config.sources.index(source)
    if source.kind == GEMINI:
        return gemini.describe(source.gemini_dir)
    found = read_map(config, i)
    if not found:
        return [f"no project folders yet ({_looked(config, source)})"]
    return [mapped.line(m) for m in found]


def _looked(config: Config, source: SourceSpec) -> str:
    if source.kind == GOOSE:
        return f"looked in {len(goose_roots(config))} project roots memfs knows"
    return f"in {source.root}"
