"""Adopting an old account's memory into the own source: list, then take (§11).

`make_list` offers, for one project, the folders the other (read-only) sources hold, each
with its file count, size and a content hash, and stores the offer in the state folder
(``$XDG_STATE_HOME/memfs/adopt/<list_id>.json``) for `LIST_TTL_NS`. `take` checks a choice
(list id, index, hash) against that offer and against the folder as it is now, then merges
the folder into the own source's folder of the project:

- a file the own source lacks is adopted: copied with its mtime, so "newest by mtime"
  still ranks it where it was;
- a file the own source has keeps its head; the adopted body is kept as history at
  ``.history/<path>/<source>@<UTC>.md`` (with its mtime), unless those bytes are already
  the head or already kept under ``.history/<path>/``;
- ``MEMORY.md``: the own index becomes the union (§5.3) of itself and the adopted one
  (copied when the own source has none); every line it adds is kept there, so the adopted
  index is not kept as history besides (see `_union_memory`).

Every file lands atomically through staging.py and a new file never replaces one that
appeared meanwhile (an agent writing at the same moment wins; the adopted body goes to
history). Equal bytes are never rewritten, so taking the same folder again changes nothing.
The adopted folder is only read, through sources.py.

Indices are 1-based. `take` accepts the full sha256 or any prefix of at least `HASH_SHOWN`
hex digits; `make_list` prints that prefix.

Layer app: the logic of ``memfs adopt`` (cli.py), which runs without a mount: it reads and
writes the disk itself. Imports neither pyfuse3 nor trio. Synchronous and blocking (fsync
per file); meant for the CLI, one caller at a time. A running mount needs no help: it sees the new
files in the own source through inotify like any other write made on disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import secrets
import shlex
import struct
import time
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import sources, staging, state
from memfs.rules import history
from memfs.rules.index import union_index, without_lines
from memfs.view.catalog import Catalog
from memfs.view.project import HISTORY, MEMORY

log = logging.getLogger(__name__)

LIST_TTL_NS = 10 * 60 * 1_000_000_000  # how long a list stays valid: 10 minutes
HASH_SHOWN = 16  # hex digits of the sha256 printed; `take` needs at least these
LIST_FOLDER = "adopt"  # below the state folder
LIST_FORMAT = 1
_LIST_ID_RE = re.compile(r"^[0-9a-f]{8}$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")
# Marks the hash's input format, so a future change cannot match an old list by accident.
_HASH_DOMAIN = b"memfs-adopt-folder-v1\0"
_TEMP_TAG = "adopt-"  # after STAGE_PREFIX: scans skip it, mount recovery removes leftovers

Clock = Callable[[], int]  # nanoseconds since the epoch; tests pass a fixed one


class AdoptError(Exception):
    """A refused list or take: one line naming the cause and the fix."""


@dataclass(frozen=True)
class FileBody:
    """One file of a folder as read for adoption: what the hash covers and what is copied."""

    path: str
    size: int
    mtime_ns: int
    data: bytes


@dataclass(frozen=True)
class Snapshot:
    files: tuple[FileBody, ...]  # sorted by path
    digest: str  # full sha256, hex

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Candidate:
    """One folder offered for adoption. Its path stays in the state file, never printed."""

    source: str  # the source's name
    root: Path  # the source's root
    parts: tuple[str, ...]  # slug folder name, then the template's tail
    files: int
    size: int
    digest: str  # full sha256, hex
    label: str  # source name, with "#n" when the source brings several folders
    # A moved project's memory (moved.py, §4.2): every folder of the old slug, as one
    old_slug: str = ""
    old_path: str = ""


@dataclass(frozen=True)
class AdoptionList:
    list_id: str  # "" when there was nothing to offer (nothing stored)
    slug: str
    own: str  # the own source's name
    created_ns: int
    candidates: tuple[Candidate, ...]


@dataclass
class AdoptReport:
    source: str
    slug: str
    adopted: int = 0  # files the own source lacked, now its head
    history: int = 0  # adopted bodies kept under .history/
    index_lines: int = 0  # lines MEMORY.md gained
    unchanged: int = 0  # files whose bytes were already there
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)

    def summary(self) -> str:
        text = (
            f"adopted {self.adopted} files, kept {self.history} as history, "
            f"index lines added {self.index_lines}, unchanged {self.unchanged}"
        )
        if self.skipped:
            shown = ", ".join(f"{p} ({why})" for p, why in self.skipped[:5])
            more = f" and {len(self.skipped) - 5} more" if len(self.skipped) > 5 else ""
            text += f"; skipped {len(self.skipped)}: {shown}{more}"
        return f"{self.source} -> {self.slug}: {text}"


# --- reading a folder and its hash ------------------------------------------------------


def folder_hash(files: Iterable[FileBody]) -> str:
    """sha256 over (relative name, size, mtime_ns, content) of each file, sorted by name.

    Every field is length-prefixed or fixed-width, so no two different folders feed the
    hash the same bytes.
    """
    h = hashlib.sha256(_HASH_DOMAIN)
    for f in sorted(files, key=lambda f: os.fsencode(f.path)):
        name = os.fsencode(f.path)
        h.update(struct.pack(">Q", len(name)) + name)
        h.update(struct.pack(">QqQ", f.size, f.mtime_ns, len(f.data)))
        h.update(f.data)
    return h.hexdigest()


def snapshot(root: Path, parts: Sequence[str], max_bytes: int) -> Snapshot | None:
    """Every file of ``root/parts`` as `sources.scan` sees it, read; None if it is no folder.

    A file memfs cannot read, or that vanishes between the scan and the read, is left out.
    """
    scan = sources.scan(root, parts, max_bytes)
    if not scan.exists:
        return None
    files = []
    for f in sorted(scan.files, key=lambda f: os.fsencode(f.path)):
        if not f.readable:
            log.info("adopt: left out %s/%s: unreadable", root.joinpath(*parts), f.path)
            continue
        try:
            data = sources.read_file(root, parts, f.path, max_bytes)
        except OSError as exc:
            log.info("adopt: left out %s/%s: %s", root.joinpath(*parts), f.path, exc)
            continue
        files.append(FileBody(f.path, f.size, f.mtime_ns, data))
    return Snapshot(tuple(files), folder_hash(files))


# --- the list -----------------------------------------------------------------------------


def make_list(
    config: cfg.Config, slug: str, *, clock: Clock = time.time_ns, root: Path | None = None
) -> AdoptionList:
    """Offer every other source's folder of project ``slug``, and each move into it (its
    folder ``root``: moved.py); store the offer when not empty.

    Raises:
        AdoptError: no own source, or no source has the project nor any move into it.
    """
    from memfs.app import moved  # it builds on this module

    own = _own_source(config)
    project = offline.load_project(config, slug)
    moves = moved.candidates(config, slug, root)
    if project is None and not moves:
        raise AdoptError(f"no source has project {slug}; check 'memfs sources' and the PATH given")
    origins = [
        o
        for o in (project.origins if project is not None else [])
        if not config.sources[o.source].own and not o.kept and not o.moved
    ]
    per_source: dict[int, int] = {}
    for o in origins:
        per_source[o.source] = per_source.get(o.source, 0) + 1
    seen: dict[int, int] = {}
    found = []
    for o in origins:
        spec = config.sources[o.source]
        snap = snapshot(o.root, o.parts, config.limits.max_file_bytes)
        if snap is None:
            continue
        seen[o.source] = seen.get(o.source, 0) + 1
        label = spec.name if per_source[o.source] == 1 else f"{spec.name}#{seen[o.source]}"
        found.append(
            Candidate(spec.name, o.root, o.parts, len(snap.files), snap.size, snap.digest, label)
        )
    found += moves
    now = clock()
    if not found:
        return AdoptionList("", slug, own.name, now, ())
    folder = state.private_folder(config.state_dir, LIST_FOLDER)
    _prune_lists(folder, now)
    while True:
        list_id = secrets.token_hex(4)
        if not (folder / f"{list_id}.json").exists():
            break
    made = AdoptionList(list_id, slug, own.name, now, tuple(found))
    state.save_private(folder, f"{list_id}.json", _encode(made))
    return made


def format_list(made: AdoptionList, config_arg: Path | None = None) -> str:
    """The lines `memfs adopt list` prints: one per folder, with the command that takes it."""
    if not made.candidates:
        return f"{made.slug}: nothing to adopt: no other source has a folder for this project"
    minutes = LIST_TTL_NS // 60_000_000_000
    lines = [
        f"{made.slug}: {_counted(made.candidates)} to adopt into own source "
        f"{made.own!r}; list {made.list_id}, valid {minutes} minutes"
    ]
    extra = f" --config {shlex.quote(str(config_arg.absolute()))}" if config_arg else ""
    width = max(len(c.label) for c in made.candidates)
    for i, c in enumerate(made.candidates, 1):
        short = c.digest[:HASH_SHOWN]
        lines.append(
            f"  {i}  {c.label:<{width}}  {c.files} files  {c.size} bytes  sha256 {short}  "
            f"memfs adopt take {made.list_id} {i} {short}{extra}"
        )
    return "\n".join(lines)


def _counted(candidates: Sequence[Candidate]) -> str:
    """``2 folder(s)``, ``1 move(s)``, or both: a move (moved.py) is all of an old slug's
    folders, as one entry."""
    moves = sum(1 for c in candidates if c.old_slug)
    folders = len(candidates) - moves
    parts = [f"{folders} folder(s)"] if folders else []
    return " and ".join([*parts, f"{moves} move(s)"] if moves else parts)


def load_list(config: cfg.Config, list_id: str, *, clock: Clock = time.time_ns) -> AdoptionList:
    """A stored list that has not expired.

    Raises:
        AdoptError: a malformed or unknown id, a damaged file, or an expired list.
    """
    again = "run 'memfs adopt list' in the project folder for a new one"
    if not _LIST_ID_RE.match(list_id):
        raise AdoptError(f"list id {list_id!r} is not one 'memfs adopt list' prints; {again}")
    path = config.state_dir / LIST_FOLDER / f"{list_id}.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AdoptError(
            f"no adopt list {list_id} (unknown, or expired and removed); {again}"
        ) from None
    except OSError as exc:
        raise AdoptError(f"cannot read adopt list {list_id}: {exc.strerror}; {again}") from None
    try:
        made = _decode(list_id, raw)
    except (ValueError, KeyError, TypeError):
        raise AdoptError(f"adopt list {list_id} is damaged; {again}") from None
    age = clock() - made.created_ns
    if age >= LIST_TTL_NS:
        raise AdoptError(
            f"adopt list {list_id} expired {(age - LIST_TTL_NS) // 1_000_000_000} s ago "
            f"(lists are valid {LIST_TTL_NS // 60_000_000_000} minutes); {again}"
        )
    return made


def _encode(made: AdoptionList) -> bytes:
    data = {
        "format": LIST_FORMAT,
        "slug": made.slug,
        "own": made.own,
        "created_ns": made.created_ns,
        "candidates": [
            {
                "source": c.source,
                "root": str(c.root),
                "parts": list(c.parts),
                "files": c.files,
                "size": c.size,
                "sha256": c.digest,
                "label": c.label,
                "old_slug": c.old_slug,
                "old_path": c.old_path,
            }
            for c in made.candidates
        ],
    }
    return json.dumps(data, indent=1, sort_keys=True).encode()


def _decode(list_id: str, raw: bytes) -> AdoptionList:
    data: Any = json.loads(raw)
    if data["format"] != LIST_FORMAT:
        raise ValueError(f"format {data['format']!r}")
    candidates = []
    for c in data["candidates"]:
        parts = tuple(_str(p) for p in c["parts"])
        if not parts or not all(sources.valid_name(p) for p in parts):
            raise ValueError(f"bad folder {parts!r}")
        digest = _str(c["sha256"])
        if len(digest) != 64 or not _HEX_RE.match(digest):
            raise ValueError(f"bad hash {digest!r}")
        candidates.append(
            Candidate(
                _str(c["source"]),
                Path(_str(c["root"])),
                parts,
                _int(c["files"]),
                _int(c["size"]),
                digest,
                _str(c["label"]),
                _str(c.get("old_slug", "")),
                _str(c.get("old_path", "")),
            )
        )
    return AdoptionList(
        list_id,
        _str(data["slug"]),
        _str(data["own"]),
        _int(data["created_ns"]),
        tuple(candidates),
    )


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _prune_lists(folder: Path, now: int) -> None:
    """Remove expired lists, so the state folder does not grow with every `list`."""
    place = staging.Place(folder, ())
    for path in folder.glob("*.json"):
        list_id = path.stem
        if not _LIST_ID_RE.match(list_id):
            continue
        try:
            created = _decode(list_id, path.read_bytes()).created_ns
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged list is reported when someone takes it
        if now - created >= LIST_TTL_NS:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink(place, path.name)


# --- take ---------------------------------------------------------------------------------


def take(
    config: cfg.Config, list_id: str, index: int, digest: str, *, clock: Clock = time.time_ns
) -> AdoptReport:
    """Adopt folder ``index`` (1-based) of list ``list_id``, whose hash starts with ``digest``.

    Raises:
        AdoptError: an unknown or expired list, an index out of range, a hash that does not
            match the listed one, a folder that changed since the list, a configuration that
            no longer has that source, or no own source.
        OSError: a write to the own source failed; files written before it stay (each one
            whole), and taking again finishes the rest.
    """
    made = load_list(config, list_id, clock=clock)
    count = len(made.candidates)
    if not 1 <= index <= count:
        raise AdoptError(
            f"index {index} is out of range: list {list_id} has folders 1 to {count}; "
            f"use an index that 'memfs adopt list' printed"
        )
    chosen = made.candidates[index - 1]
    given = digest.strip().lower()
    if len(given) < HASH_SHOWN or not _HEX_RE.match(given):
        raise AdoptError(
            f"hash {digest!r} must be at least {HASH_SHOWN} hex digits; copy it from the "
            f"line of folder {index} that 'memfs adopt list' printed"
        )
    if not chosen.digest.startswith(given):
        raise AdoptError(
            f"hash {given} does not match folder {index} ({chosen.label}) of list {list_id}; "
            f"copy the hash from that folder's line, or run 'memfs adopt list' again"
        )
    own = _own_source(config)
    if chosen.old_slug:
        from memfs.app import moved  # it builds on this module

        _ensure_root(own)
        return moved.take(config, made, chosen)
    spec = next((s for s in config.sources if s.name == chosen.source), None)
    if spec is None or spec.own or spec.root != chosen.root:
        raise AdoptError(
            f"source {chosen.source!r} of list {list_id} is no longer a read-only source in "
            "the configuration; run 'memfs adopt list' again"
        )
    snap = snapshot(chosen.root, chosen.parts, config.limits.max_file_bytes)
    if snap is None or snap.digest != chosen.digest:
        raise AdoptError(
            f"folder {index} ({chosen.label}) of list {list_id} changed since the list was "
            "made; run 'memfs adopt list' again and take the new hash"
        )
    place = Catalog(config).own_place(made.slug)
    assert place is not None  # _own_source found one
    _ensure_root(own)
    whiteouts, hidden_lines = state.load_project(config.state_dir, made.slug)
    # (path, mtime_ns) of this source's versions deleted through the mount (§7.3)
    hidden = {(path, stamp) for path, name, stamp in whiteouts if name == chosen.source}
    report = AdoptReport(chosen.source, made.slug)
    merge(
        place,
        chosen.source,
        snap.files,
        config.limits.max_file_bytes,
        report,
        whited_out=lambda f: (f.path, f.mtime_ns) in hidden,
        hidden_lines=hidden_lines.get(MEMORY, frozenset()),
    )
    return report


def _own_source(config: cfg.Config) -> cfg.SourceSpec:
    own = config.own
    if own is None:
        raise AdoptError(
            "no own source to adopt into; mark one with own = true in "
            f"{cfg.config_path_hint(config)} (or set CLAUDE_CONFIG_DIR)"
        )
    return own


def _ensure_root(own: cfg.SourceSpec) -> None:
    """Create the own source's root (``~/.claude/projects``) of a fresh account.

    Only when it is missing: an existing root may be a symlink the user made on purpose,
    which `staging.open_dir` would refuse below the root.
    """
    if own.root.exists():
        return
    fd = staging.open_dir(staging.Place(own.root.parent, (own.root.name,)), create=True)
    os.close(fd)


# --- the merge ----------------------------------------------------------------------------


class _Own:
    """The own source's folder of the project, as scanned once and then kept current."""

    def __init__(self, place: staging.Place, max_bytes: int) -> None:
        self.place = place
        self.max_bytes = max_bytes
        scan = sources.scan(place.root, place.parts, max_bytes)
        if not scan.exists and scan.left_out:
            raise AdoptError(
                f"the own folder {place} is a symlink, not a folder, or unreadable; "
                "make it a plain folder and take again"
            )
        self.files = {f.path: f.size for f in scan.files if f.readable}  # path -> size
        self.dirs = set(scan.dirs)
        # Links, special files, too big or unreadable ones: never replaced, never read.
        self.left_out = {path for path, _ in scan.left_out if path}
        self.left_out |= {f.path for f in scan.files if not f.readable}

    def taken(self, path: str) -> bool:
        return path in self.files or path in self.dirs or path in self.left_out

    def free(self, path: str) -> bool:
        """Whether a new file can be created at ``path``: nothing there, no file above."""
        if self.taken(path):
            return False
        parts = sources.split(path)
        above = ["/".join(parts[:i]) for i in range(1, len(parts))]
        return not any(a in self.files or a in self.left_out for a in above)

    def read(self, path: str) -> bytes:
        return sources.read_file(self.place.root, self.place.parts, path, self.max_bytes)

    def same(self, path: str, data: bytes) -> bool:
        """Whether the own file at ``path`` holds exactly ``data``."""
        if self.files.get(path) != len(data):
            return False
        try:
            return self.read(path) == data
        except OSError:
            return False

    def create(self, path: str, data: bytes, mtime_ns: int) -> bool:
        """A new file at ``path``, atomically; False if something appeared there meanwhile.

        Staged and committed under a temporary name first, then linked into place: the link
        fails rather than replace a file an agent wrote since the scan.
        """
        *dirs, name = sources.split(path)
        folder = self.place.below(*dirs)
        temp = f"{sources.STAGE_PREFIX}{_TEMP_TAG}{secrets.token_hex(8)}"
        staging.replace(folder, temp, data, mtime_ns)
        try:
            staging.rename(folder, temp, folder, name, noreplace=True)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink(folder, temp)
        self._note(path, len(data))
        return True

    def replace(self, path: str, data: bytes) -> None:
        *dirs, name = sources.split(path)
        staging.replace(self.place.below(*dirs), name, data)
        self._note(path, len(data))

    def refresh(self, path: str) -> None:
        """Look at ``path`` again after a create found it taken."""
        found = sources.stat_file(self.place.root, self.place.parts, path, self.max_bytes)
        if found is not None and found.readable:
            self.files[path] = found.size
        else:
            self.left_out.add(path)  # a folder, link or special file: never replaced

    def _note(self, path: str, size: int) -> None:
        self.files[path] = size
        parts = sources.split(path)
        self.dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))


def merge(
    place: staging.Place,
    source: str,
    files: Iterable[FileBody],
    max_bytes: int,
    report: AdoptReport,
    *,
    whited_out: Callable[[FileBody], bool] = lambda f: False,
    hidden_lines: Set[str] = frozenset(),
) -> None:
    """Merge ``files`` of source ``source`` into the own folder ``place``; count in ``report``.

    A file ``whited_out`` (deleted through the mount while only ``source`` had it) is kept
    as history only, so adopting does not bring it back; nor does the adopted MEMORY.md
    bring back ``hidden_lines``, lines a save through the mount removed (§5.3).
    """
    own = _Own(place, max_bytes)
    for f in files:
        if f.path == MEMORY and hidden_lines:
            text = without_lines(f.data.decode("utf-8", "surrogateescape"), hidden_lines)
            f = dataclasses.replace(f, data=text.encode("utf-8", "surrogateescape"))
        hidden = whited_out(f)
        if f.path == MEMORY and not hidden and MEMORY in own.files:
            added = _union_memory(own, f)
            if added is not None:
                report.index_lines += added
                if added == 0:
                    report.unchanged += 1
                continue
        if not hidden and own.free(f.path):
            if own.create(f.path, f.data, f.mtime_ns):
                report.adopted += 1
                continue
            own.refresh(f.path)  # a file appeared there since the scan: compare below
        if f.path in own.files and own.same(f.path, f.data):
            report.unchanged += 1
            continue
        _keep_history(own, source, f, report)


def _union_memory(own: _Own, f: FileBody) -> int | None:
    """Make the own MEMORY.md the union of itself and ``f``; returns the lines added.

    The adopted index is not kept as history besides: its lines live on in the union, and
    a kept copy would make taking again not idempotent once a later take of another folder
    grew the union (the copied-in index of the first take is no longer the head then).
    None when the own index cannot be read: the caller keeps ``f`` as history instead.
    """
    try:
        head = own.read(MEMORY)
    except OSError as exc:
        log.warning("adopt: cannot read %s/%s: %s", own.place, MEMORY, exc)
        return None
    text = head.decode("utf-8", "surrogateescape")
    union = union_index(text, [f.data.decode("utf-8", "surrogateescape")])
    if union == text:
        return 0
    own.replace(MEMORY, union.encode("utf-8", "surrogateescape"))
    added = union[len(text) :]
    if text and not text.endswith("\n"):
        added = added[1:]  # the separator union_index put after an unterminated last line
    return added.count("\n")


def _keep_history(own: _Own, source: str, f: FileBody, report: AdoptReport) -> None:
    """Keep ``f`` at ``.history/<path>/<source>@<UTC>[~n].md`` unless its bytes are there."""
    folder = f"{HISTORY}/{f.path}"
    prefix = f"{folder}/"
    kept = [p for p in own.files if p.startswith(prefix) and "/" not in p[len(prefix) :]]
    if any(own.same(p, f.data) for p in sorted(kept)):
        report.unchanged += 1
        return
    for n in range(1, 10_000):
        path = prefix + history.version_name(source, f.mtime_ns, n)
        if not own.free(path):
            if own.taken(path):
                continue  # another version of the same second: the next suffix
            break  # a file or link where a folder must be: nothing below it can be made
        if own.create(path, f.data, f.mtime_ns):
            report.history += 1
            return
        own.refresh(path)
    report.skipped.append((f.path, f"no room under {folder} in the own folder"))
    log.warning("adopt: %s: cannot keep %s as history under %s", own.place, f.path, folder)
