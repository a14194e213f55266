"""What the sources' roots hold: the folder of each project, in every source that holds
projects (§2, §3).

Layer disk: one ``scandir`` of each source's root, no link followed (sources.py); a Gemini
CLI source's folders are named by ids, read through its map (gemini.py). Blocking: a mount
lists once, in a worker (adapter/watch.py, loading.py), and keeps the listing current from
inotify; a command that runs without a mount lists when it starts (app/offline.py).
"""

from __future__ import annotations

from memfs.disk import gemini, sources
from memfs.disk.config import Config

# (source index, folder name in its root, the slug a mapped source's folder maps to; None
# for a slug folder, whose name is its slug)
Listing = list[tuple[int, str, str | None]]


def list_roots(config: Config) -> Listing:
    """Every project folder in the sources' roots, in config order (view/catalog.py's
    `Catalog.set_listing` takes it in). A mapped folder that maps to no project is left out;
    a source that holds no projects (user-level memory only, §4.1) lists nothing."""
    found: Listing = []
    for i, source in enumerate(config.sources):
        if not source.projects:
            continue  # user-level memory only: global/ (§4.1)
        if source.mapped:
            moved = config.moved(source)
            mapped = gemini.read_map(source.gemini_dir, moved=moved)
            found += [(i, m.folder, m.slug) for m in mapped if m.slug]
        else:
            found += [(i, name, None) for name in sources.list_slug_folders(source.root)]
    return found
