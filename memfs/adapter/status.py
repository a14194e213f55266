"""`memfs status`: what a running mount reports about itself (§8).

Layer adapter: reads the adapter's state on the trio thread (its one system call an fstat
of each writer's stage, `_stages_in_flight`) and returns plain JSON-ready data, which
`fs.MemFS.getxattr` serves as the ``user.memfs.status`` xattr of the root and cli.py
prints. Must not import pyfuse3 (cli.py reads the name of the xattr from here).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memfs.adapter.inodes import Inodes
from memfs.adapter.kernel import Kernel
from memfs.adapter.loading import Projects
from memfs.adapter.moves import Moves
from memfs.adapter.stages import Stages
from memfs.adapter.writing import OpenFiles
from memfs.disk.config import Config
from memfs.rules import names
from memfs.rules.tree import parent_of
from memfs.view.catalog import Catalog

STATUS_XATTR = "user.memfs.status"
# An xattr value holds at most 64 KiB (XATTR_SIZE_MAX): each list is cut to this many items,
# and its full length is given beside it as ``<name>_count``.
LISTED = 100


@dataclass(slots=True)
class Stats:
    """The adapter's counters, as `memfs status` reports them."""

    requests: Counter[str] = field(default_factory=Counter)  # by name; see `all_requests`
    # The warm paths' requests, counted in plain fields: no call and no dict per request
    # (issue 14: on a warm `cat` memfs's own work is a few statements a request).
    open: int = 0
    flush: int = 0
    release: int = 0
    opendir: int = 0
    readdir: int = 0
    releasedir: int = 0
    stale_swept: bool = False  # the crash sweep of the own source has finished
    stale_removed: int = 0
    # The keeper (keeper.py): its first look at every source's folders is done; the
    # changes made on disk it saw since, and the versions it kept for them.
    disk_swept: bool = False
    disk_changes: int = 0
    disk_versions: int = 0

    def count(self, op: str) -> None:
        requests = self.requests
        requests[op] = requests.get(op, 0) + 1  # half of a Counter's += 1, every request

    def all_requests(self) -> dict[str, int]:
        found = dict(self.requests)
        for name in WARM_REQUESTS:
            if count := getattr(self, name):
                found[name] = count
        return found


WARM_REQUESTS = ("open", "flush", "release", "opendir", "readdir", "releasedir")


class Reporting(Protocol):
    """What the report reads of the adapter (fs.MemFS): its parts, not its handlers."""

    mountpoint: Path
    config: Config
    catalog: Catalog
    stats: Stats
    kernel: Kernel
    inodes: Inodes
    files: OpenFiles
    stages: Stages
    projects: Projects
    moves: Moves


def report(ops: Reporting) -> dict[str, Any]:
    found = _report(ops)
    for name in ("left_out", "memory_over_limit", "stale_own_heads"):
        items = found[name]
        found[f"{name}_count"] = len(items)
        found[name] = items[:LISTED]
    return found


def _stages_in_flight(ops: Reporting) -> list[dict[str, str]]:
    """This mount's own stage files (`.memfs-stage.*`, §7.1) that exist now, as left-out
    files: those of the writers' open handles, each checked by an fstat of the descriptor
    the stage holds (`Stage.on_disk`), never by reading a folder on this thread (§7a). The
    project's scans and the watcher leave these names alone, since a record of one would
    outlive it (the watcher skips their events). A stage a worker is committing or moving
    right now is left out: its name is changing under it."""
    own = ops.config.own
    found = []
    for f in ops.files:
        stage = f.stage
        if stage is None or ops.stages.busy(f) or not stage.on_disk():
            continue
        folder = parent_of(f.key[1])[0]
        found.append(
            {
                "project": f.key[0],
                "source": own.name if own is not None else "",
                "path": f"{folder}/{stage.temp}" if folder else stage.temp,
                "why": names.left_out_reason(stage.temp),
            }
        )
    return found


def _report(ops: Reporting) -> dict[str, Any]:
    projects = ops.catalog.loaded()
    watcher = ops.projects.watcher
    return {
        "mountpoint": str(ops.mountpoint),
        "pid": os.getpid(),
        # Where its journal and state are, and its config: `memfs log` and `memfs restore`
        # act on the mount a path lies in (a demo's has a state folder of its own).
        "state_dir": str(ops.config.state_dir),
        "config": str(ops.config.path) if ops.config.path is not None else None,
        "own": ops.config.own.name if ops.config.own is not None else None,
        "sources": [{"name": s.name, "path": s.template, "own": s.own} for s in ops.config.sources],
        "projects_listed": len(ops.catalog.slugs()) if ops.catalog.listed else 0,
        "projects_loaded": len(projects),
        "files": sum(len(p.tree) for p in projects.values()),
        "left_out": [
            *(
                {"project": slug, "source": src, "path": path, "why": why}
                for slug, p in projects.items()
                for src, path, why in p.counts.left_out
            ),
            *_stages_in_flight(ops),
        ],
        "requests": (requests := ops.stats.all_requests()),
        "requests_total": sum(requests.values()),
        "invalidations": ops.kernel.sent,
        "invalidation_errors": ops.kernel.errors,
        "commits": ops.stages.commits,
        "loads": watcher.loads if watcher is not None else 0,
        "watch_events": watcher.events if watcher is not None else 0,
        # Folders inotify could not watch (its limit): changes in them show late.
        "watch_failures": watcher.watches.failures if watcher is not None else 0,
        # memfs's own renames (commits included), skipped: their plans read the names back.
        "own_renames_skipped": watcher.own_renames if watcher is not None else 0,
        "stale_swept": ops.stats.stale_swept,
        "stale_removed": ops.stats.stale_removed,
        "disk_swept": ops.stats.disk_swept,
        "disk_changes": ops.stats.disk_changes,
        "disk_versions": ops.stats.disk_versions,
        "inodes": len(ops.inodes),
        "open_handles": len(ops.files),
        # Claude Code loads only the head of MEMORY.md (§1): whose merged index is
        # longer, and whose own heads are older than another account's version.
        "memory_over_limit": [
            {"project": slug, "lines": o.lines, "bytes": o.size, "beyond": o.topics_beyond}
            for slug, p in sorted(projects.items())
            if (o := p.documents.memory_over_limit()) is not None
        ],
        # Moved projects whose memory shows under their new path (§4.2)
        "moves": ops.moves.report(),
        "stale_own_heads": [
            {"project": slug, "path": path, "newer": newer}
            for slug, p in sorted(projects.items())
            for path, newer in p.documents.stale_own_heads()
        ],
    }
