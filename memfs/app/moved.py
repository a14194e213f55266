"""`memfs adopt` for moved projects (issue 38, §4.2, §11): offering a move, and making one
permanent.

A project folder moved on this machine shows its old path's memory from every account
while memfs follows the move (disk/moves.py); a move memfs cannot be sure of (the same git
repository in another folder, the old path gone) is only offered here. Either way, `memfs
adopt list` run in the new folder lists it as one entry (every folder of the old slug, the
own account's first), and `memfs adopt take` copies them all into the own source's folder
of the new slug with adopt.py's merge (the own account's old files first, so they stay the
heads; another account's differing files kept as history), then records the move as taken:
the memory is the own account's under the new path for good, with or without memfs, and
the view stops following the move (at the next mount, for a running one).

Layer app: blocking, for the CLI; imports neither pyfuse3 nor trio.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from memfs.app import adopt, offline
from memfs.disk import config as cfg
from memfs.disk import moves, state
from memfs.rules import slug as slugs
from memfs.rules.moves import Root
from memfs.view.catalog import Catalog
from memfs.view.project import MEMORY, Origin

_MOVE_DOMAIN = b"memfs-adopt-move-v1\0"


def look(config: cfg.Config, root: Path) -> str:
    """The slug of project root ``root``, after following a certain move into it and
    recording it (as `here` does in a mount), so that a command run first in a moved
    folder sees what a mount would."""
    slug = slugs.canonical_slug(slugs.claude_slug(str(root)))
    catalog = offline.listed(config)
    moves.look(config.state_dir, str(root), slug, catalog.has(slug))
    return slug


def candidates(config: cfg.Config, slug: str, root: Path | None) -> list[adopt.Candidate]:
    """One entry per move into ``slug``: each move followed, then each offered (the same
    repository elsewhere, its old path gone; ``root`` is the project's folder)."""
    catalog = offline.listed(config)
    found = []
    for old, (new, path) in sorted(catalog.moves().items()):
        if new == slug:
            found.append(_candidate(config, catalog, old, path, moved=True))
    if root is not None:
        for offered in moves.offers(config.state_dir, str(root), slug):
            found.append(_candidate(config, catalog, offered.slug, offered.path, moved=False))
    return [c for c in found if c.files]


def _folders(catalog: Catalog, old: str, moved: bool) -> list[Origin]:
    """Slug ``old``'s folders in every source, the own source's first."""
    own = catalog.config.own_index
    if moved:
        new = next(n for o, (n, _) in catalog.moves().items() if o == old)
        found = [
            o for o in catalog.origins(new) if o.moved and not o.kept and catalog.named(o) == old
        ]
    else:
        found = [o for o in catalog.origins(old) if not o.kept]
    return sorted(found, key=lambda o: (o.source != own, o.source, o.parts))


def _candidate(
    config: cfg.Config, catalog: Catalog, old: str, path: str, *, moved: bool
) -> adopt.Candidate:
    folders = _folders(catalog, old, moved)
    files = size = 0
    digest = hashlib.sha256(_MOVE_DOMAIN)
    for o in folders:
        snap = adopt.snapshot(o.root, o.parts, config.limits.max_file_bytes)
        if snap is None:
            continue
        files += len(snap.files)
        size += snap.size
        digest.update(f"{o.source}\0{o.folder}\0{snap.digest}\0".encode("utf-8", "surrogateescape"))
    how = "moved from" if moved else "same repository, was at"
    return adopt.Candidate(
        source="",
        root=Path("/"),
        parts=(old,),
        files=files,
        size=size,
        digest=digest.hexdigest(),
        label=f"{how} {path}",
        old_slug=old,
        old_path=path,
    )


def take(
    config: cfg.Config, made: adopt.AdoptionList, chosen: adopt.Candidate
) -> adopt.AdoptReport:
    """Copy every folder of the move ``chosen`` into the own source's folder of the list's
    project, and record the move as taken.

    Raises:
        AdoptError: the move's folders changed since the list.
    """
    catalog = offline.listed(config)
    moved = chosen.old_slug in catalog.moves()
    now = _candidate(config, catalog, chosen.old_slug, chosen.old_path, moved=moved)
    if now.digest != chosen.digest:
        raise adopt.AdoptError(
            f"the memory moved from {chosen.old_path} changed since list {made.list_id} was "
            "made; run 'memfs adopt list' again and take the new hash"
        )
    place = catalog.own_place(made.slug)
    assert place is not None  # adopt.take checked the own source
    whiteouts, hidden_lines = state.load_project(config.state_dir, made.slug)
    report = adopt.AdoptReport(f"moved from {chosen.old_path}", made.slug)
    for o in _folders(catalog, chosen.old_slug, moved):
        snap = adopt.snapshot(o.root, o.parts, config.limits.max_file_bytes)
        if snap is None:
            continue
        name = config.sources[o.source].name
        hidden = {(p, stamp) for p, n, stamp in whiteouts if n == name}

        def whited_out(f: adopt.FileBody, hidden: set[tuple[str, int]] = hidden) -> bool:
            return (f.path, f.mtime_ns) in hidden

        adopt.merge(
            place,
            name,
            snap.files,
            config.limits.max_file_bytes,
            report,
            whited_out=whited_out,
            hidden_lines=hidden_lines.get(MEMORY, frozenset()),
        )
    old = Root(chosen.old_path, chosen.old_slug, 0, 0, 0)
    new = Root("", made.slug, 0, 0, 0)
    if moved:
        moves.mark_taken(config.state_dir, chosen.old_slug)
    else:
        moves.follow(config.state_dir, old, new, taken=True)  # offered no more
    return report
