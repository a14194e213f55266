"""goose's per-project memory: which projects hold ``<root>/.goose/memory/`` (issue 38).

goose (block/goose, its memory extension) keeps a project's memory inside the project, in
``<working folder>/.goose/memory/<category>.txt``, and the user's in
``$XDG_CONFIG_HOME/goose/memory/`` (global/goose). It registers the project nowhere memfs
can read (its sessions database is not a documented format), so memfs looks where it
knows projects are: the roots the other sources name (Gemini CLI's markers, Kilo Code's
manifests) and the roots of the slug folders of Claude Code's and pi's sources, each slug
inverted on the disk (`roots_of_slug`: the existing folders whose path has that slug).
Each root holding ``.goose/memory`` joins the project ``here`` names for it
(`slug.project_slug`). The watcher watches each root for ``.goose`` and each ``.goose`` for
``memory``, and reads the map again when a source's root lists a new project.

Layer disk: listings on the way down each slug, a ``stat`` a root. A worker's job while a
mount serves.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from memfs.disk import mapped
from memfs.disk.mapped import Mapping
from memfs.rules import layouts
from memfs.rules import slug as slugs

log = logging.getLogger(__name__)

MAX_DEPTH = 32  # path components a slug is inverted through
MAX_ROOTS = 4  # folders one slug may name (a `-` stands for '/', '.', '_', '-' or ' ')
MAX_LISTINGS = 256  # folders listed to invert one slug: a slug never costs a whole walk


def read_map(
    roots: Iterable[tuple[str, str]], before: mapped.Before | None = None
) -> list[Mapping]:
    """Each of ``roots`` ((root, where memfs learnt it)) that holds ``.goose/memory``, named
    by its slug, and its project; ``before`` is called with each root (``.goose``) and each
    ``.goose`` (``memory``) before it is looked at."""
    found: dict[str, Mapping] = {}
    for root, where in roots:
        top = Path(root)
        if before is not None:
            before(top, frozenset({layouts.GOOSE_FOLDER[0]}))
            before(top / layouts.GOOSE_FOLDER[0], frozenset({layouts.GOOSE_FOLDER[1]}))
        memory = top.joinpath(*layouts.GOOSE_FOLDER)
        real, why = mapped.followed(memory)
        if real is None and why:
            log.warning("goose memory folder %s is %s; left out", memory, why)
            continue
        if not memory.is_dir():
            continue
        name = slugs.claude_slug(root)
        if name not in found:
            slug = slugs.project_slug(root)
            found[name] = Mapping(name, root, slug, f"from {where}", real or memory)
    return [found[name] for name in sorted(found)]


# folder -> its entries as (slug, path), for one read of the map: many slugs share the
# folders on their way down (the home, a src/ of checkouts), each listed once.
Listings = dict[str, list[tuple[str, str]]]


def roots_of_slug(
    slug: str, listings: Listings | None = None, avoid: frozenset[str] = frozenset()
) -> list[str]:
    """The existing folders whose absolute path has Claude Code's slug ``slug``, at most
    `MAX_ROOTS`, sorted; none for a slug cut and hashed (over 200 characters, §2).
    ``listings`` keeps what was listed, for the next slug of the same read. Only an entry
    whose slug begins the one sought is looked at, and never one in ``avoid`` (FUSE mounts,
    `fuse_mounts`: memfs's own would wait for itself, another's may be slow or remote)."""
    if not slug.startswith("-") or len(slug) >= slugs.SLUG_MAX:
        return []
    listings = {} if listings is None else listings
    found: list[str] = []
    budget = [MAX_LISTINGS]

    def down(folder: str, depth: int) -> None:
        if len(found) >= MAX_ROOTS or depth > MAX_DEPTH or budget[0] <= 0:
            return
        for here, path in _listed(folder, listings, budget):
            if here != slug and not slug.startswith(here + "-"):
                continue
            if path in avoid or not os.path.isdir(path):
                continue
            if here == slug:
                found.append(path)
            down(path, depth + 1)

    down("/", 0)
    return sorted(found)


def _listed(folder: str, listings: Listings, budget: list[int]) -> list[tuple[str, str]]:
    """``folder``'s entries as (slug, path), listed once per read (no stat)."""
    known = listings.get(folder)
    if known is None:
        budget[0] -= 1
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = []
        paths = [os.path.join(folder, name) for name in names]
        known = listings[folder] = [(slugs.claude_slug(p), p) for p in paths]
    return known


def fuse_mounts(mountinfo: str = "/proc/self/mountinfo") -> frozenset[str]:
    """The mount points of FUSE filesystems (memfs's own among them), never walked into."""
    found = set()
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                fstype = line.split(" - ", 1)[1].split()[0]
                if fstype.startswith("fuse"):
                    found.add(_unescape(fields[4]))
    except OSError:
        pass
    return frozenset(found)


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces and the like are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)
