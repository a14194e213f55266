"""What stat shows of the view: pyfuse3 attributes of the root, projects, folders and files.

Layer adapter: knows pyfuse3's EntryAttributes; reads the catalog, projects and open files,
never changes them; called on the trio thread only. A folder below a project's top shows
its real folder's mode and times: the caller reads them first, in a worker (`read_folders`,
`of_read`: an fstatat or two, for what the kernel has not cached; it keeps them an hour),
and gives them to `of`. §4 (owner, real size and mtime), 7.6 (modes, st_nlink, atime), 7a.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

import pyfuse3

from memfs.adapter import workers
from memfs.adapter.inodes import GLOBAL_KEY, HERE_KEY, ROOT_KEY, Key
from memfs.adapter.kernel import Token, token_of
from memfs.adapter.writing import OpenFile, OpenFiles
from memfs.disk import sources
from memfs.disk.config import Config
from memfs.rules.history import in_history
from memfs.rules.preamble import sized_budget
from memfs.view.catalog import Catalog, is_project_name
from memfs.view.project import PREAMBLE, Kind, Leaf, Project

CACHE_TIMEOUT = 3600.0  # long kernel caching, kept true by invalidation (FUSE-NOTES)
_NONE_VOLATILE: frozenset[str] = frozenset()
SIZED_LEAF = Leaf(Kind.PREAMBLE)  # what a PREAMBLE-<N>.md shows: no tree holds it (§6)
# View folder path -> the real folder whose attributes it shows, as a worker read it (None:
# none found); `Shown.of` takes what its caller read.
Folders = Mapping[str, sources.FileStat | None]
NOTHING_READ: Folders = MappingProxyType({})


def leaf_of(project: Project, path: str) -> Leaf | None:
    """What view ``path`` of ``project`` shows: its tree's leaf, or a PREAMBLE-<N>.md,
    which is found by name only (§6: served at every N, listed at none)."""
    leaf = project.tree.leaf(path)
    if leaf is None and sized_budget(path) is not None:
        return SIZED_LEAF
    return leaf


class Shown:
    """Builds the attributes memfs answers lookups, getattr and readdir with."""

    def __init__(
        self,
        config: Config,
        catalog: Catalog,
        files: OpenFiles,
        preamble_size: Callable[[int, Project, str], int],
        uid: int,
        gid: int,
        holds_other: Callable[[int, Token], bool],
    ) -> None:
        self.config = config
        self.catalog = catalog
        self.files = files
        self.preamble_size = preamble_size  # (inode, project, path) -> the rendering's size
        # (inode, version) -> whether an open reads another version through the page cache
        self.holds_other = holds_other
        self.uid, self.gid = uid, gid
        self.started_ns = time.time_ns()

    def seen_by(
        self, attrs: pyfuse3.EntryAttributes, pid: int, key: Key
    ) -> pyfuse3.EntryAttributes:
        """`as_seen_by` for ``key``'s attributes: the version the kernel may cache of it is
        asked about only when no writer is (kernel.py)."""
        ino, project = attrs.st_ino, self.catalog.loaded().get(key[0])
        older = lambda: self.holds_other(ino, token_of(project, key[1]))  # noqa: E731
        return self.as_seen_by(attrs, pid, older_cached=older)

    def as_seen_by(
        self, attrs: pyfuse3.EntryAttributes, pid: int, *, older_cached: Callable[[], bool]
    ) -> pyfuse3.EntryAttributes:
        """The size caller ``pid`` must see, where the kernel's one size per inode cannot
        serve every caller alike; the kernel then keeps none and asks again each time.

        - While a file is being written, its writer sees its own size, everyone else the
          committed file's (§7.1). The writer is the thread that opened it (FUSE names
          the calling thread), so the writer's size reaches as few callers as possible.
        - While an open reads an older version through the page cache (``older_cached()``,
          asked only when no writer is; kernel.py), every caller sees that version's size,
          so its reads are not cut at the new one's (opens of the newer one read past the
          cache, whole, whatever size they were told).
        """
        ino = attrs.st_ino
        if self.files.has_writers(ino):
            size = self.files.own_size(ino, pid)
        elif older_cached():
            size = self.files.cached_size(ino)
        else:
            return attrs
        if size is not None:
            attrs.st_size = size
            attrs.st_blocks = (size + 511) // 512
        # The name keeps its inode: the kernel may keep the entry (a rename of a temp file
        # then needs no lookup), only not the attributes.
        attrs.attr_timeout = 0
        return attrs

    def shows_folder(self, key: Key, project: Project | None) -> bool:
        """Whether ``key`` may be a folder that shows a real folder's attributes (below a
        project's top, outside .history/): `of` wants it read first."""
        path = key[1]
        return (
            project is not None
            and bool(path)
            and project.tree.is_dir(path)
            and not in_history(path)
        )

    async def read_folders(
        self, project: Project, paths: Iterable[str]
    ) -> dict[str, sources.FileStat | None]:
        """The real folder behind each of ``paths`` (view folders of ``project``), read in
        one worker call (§7a): the own source's, else the first origin's that has it."""
        where = [
            (path, [(o.root, o.parts) for o in project.folder_origins(path)]) for path in paths
        ]
        return await workers.run(_stat_folders, where)

    async def of_read(self, ino: int, key: Key, project: Project | None) -> pyfuse3.EntryAttributes:
        """`of`, the real folder behind a folder read first in a worker when it has one."""
        read = NOTHING_READ
        if project is not None and self.shows_folder(key, project):
            read = await self.read_folders(project, [key[1]])
        return self.of(ino, key, project, read)

    def of(
        self, ino: int, key: Key, project: Project | None, folders: Folders = NOTHING_READ
    ) -> pyfuse3.EntryAttributes:
        """``key``'s attributes; ``project`` is its project, loaded (None at the root);
        ``folders``: the real folders the caller read (`read_folders`), one for a folder
        that shows one's attributes."""
        slug, path = key
        if key == ROOT_KEY:  # its folders: every project and global/
            return self.folder(ino, 0o755, self.started_ns, 3 + len(self.catalog.slugs()))
        if key == HERE_KEY:
            return self.entry(ino, stat.S_IFLNK | 0o777, 0, self.started_ns, timeout=0.0)
        if key == GLOBAL_KEY:  # memfs's own, as the root: no write lands in it
            kinds = len(self.catalog.global_kinds())
            return self.folder(ino, 0o555, self.started_ns, 2 + kinds)
        if not slug:
            raise pyfuse3.FUSEError(errno.ENOENT)  # nothing else in global/ yet
        if not path:
            if not self.catalog.has(slug) and not is_project_name(slug):
                raise pyfuse3.FUSEError(errno.ENOENT)
            loaded = self.catalog.loaded().get(slug)
            subdirs = loaded.tree.subdirs("") if loaded is not None else 0
            return self.folder(ino, self.dir_mode(), self.started_ns, 2 + subdirs)
        assert project is not None
        leaf = leaf_of(project, path)
        if leaf is None:
            return self._not_a_file(ino, key, project, folders)
        mtime = project.mtime_ns(leaf, drawn_on_nothing=self.started_ns)
        if leaf.kind is Kind.PREAMBLE:
            size = self.preamble_size(ino, project, path)
            if path != PREAMBLE:
                # PREAMBLE-<N>.md: never listed, so no listing keeps its entry either; the
                # kernel looks it up at each use and finds the current rendering
                # (renderings.py), with no invalidation to send for any N.
                return self.entry(ino, stat.S_IFREG | 0o444, size, mtime, timeout=0.0)
            # It changes by itself when a future-dated file comes due: the kernel may keep
            # the entry only until then.
            due = (project.documents.preamble_valid_until() - time.time_ns()) / 1e9
            timeout = max(0.0, min(CACHE_TIMEOUT, due))
            return self.entry(ino, stat.S_IFREG | 0o444, size, mtime, timeout)
        assert leaf.version is not None
        if leaf.kind is Kind.MEMORY:  # the union, shown at its head's path
            size = len(project.memory_index(leaf.version.path))
        else:
            size = leaf.version.size
        atime = leaf.version.atime_ns if leaf.kind is Kind.FILE else 0
        return self.entry(ino, stat.S_IFREG | self.file_mode(leaf), size, mtime, atime_ns=atime)

    def _not_a_file(
        self, ino: int, key: Key, project: Project, folders: Folders
    ) -> pyfuse3.EntryAttributes:
        """A name that holds no head: a file being created, a folder, or a left-out file."""
        path = key[1]
        pending = self.files.pending(key)
        if pending is not None and pending.stage is not None:
            # Nothing committed yet: an empty file to all but its writer (`seen_by`).
            return self.entry(ino, stat.S_IFREG | pending.stage.mode, 0, time.time_ns())
        if not project.tree.is_dir(path):
            return self._left_out(ino, key, project)
        nlink = 2 + project.tree.subdirs(path)
        if in_history(path):
            return self.folder(ino, 0o555, self.started_ns, nlink)
        if path not in folders:
            # Not read: it became a folder after its caller looked. What the merge shows,
            # kept by the kernel for no time: the next getattr reads it.
            attrs = self.folder(ino, self.dir_mode(), self.started_ns, nlink)
            attrs.attr_timeout = attrs.entry_timeout = 0
            return attrs
        found = folders[path]
        if found is None:  # a folder only the merge makes: no real one to show
            return self.folder(ino, self.dir_mode(), self.started_ns, nlink)
        mode = found.mode if self.config.own is not None else found.mode & ~0o222
        attrs = self.folder(ino, mode, found.mtime_ns, nlink)
        attrs.st_atime_ns = found.atime_ns or found.mtime_ns
        return attrs

    def _left_out(self, ino: int, key: Key, project: Project) -> pyfuse3.EntryAttributes:
        """A file of the own source the view leaves out (over the size cap, §5.1): not
        listed, not readable, but it may be looked up by name so that it can be unlinked
        and its folder removed (§7.6). The kernel keeps no entry of it."""
        origin = self.catalog.own_origin(project.slug)
        i = None if origin is None else project.origin_index(origin)
        if i is None or project.left_out_in(i, key[1]) is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.entry(ino, stat.S_IFREG, 0, self.started_ns, timeout=0.0)

    def detached(self, ino: int) -> pyfuse3.EntryAttributes:
        """A file unlinked or replaced while open: what its descriptors see (§7.6)."""
        f = next((o for o in self.files.of_inode(ino) if o.stage is not None), None)
        f = f or next(iter(self.files.of_inode(ino)), None)
        if f is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        mode = f.stage.mode if f.stage is not None else 0o644
        if f.version is not None and f.stage is None:
            mode = f.version.mode
        attrs = self.entry(ino, stat.S_IFREG | mode, f.size(), time.time_ns(), timeout=0.0)
        attrs.st_nlink = 0
        return attrs

    def writers(self, f: OpenFile, detached: bool) -> pyfuse3.EntryAttributes:
        """A writer's own attributes after it changed its stage, kept by the kernel no
        longer than this request: tools that truncate check the size the kernel then holds
        (RLIMIT_FSIZE, EFBIG)."""
        if detached:
            return self.detached(f.ino)
        assert f.stage is not None
        attrs = self.entry(f.ino, stat.S_IFREG | f.stage.mode, f.stage.size(), time.time_ns())
        attrs.attr_timeout = attrs.entry_timeout = 0
        return attrs

    def dir_mode(self) -> int:
        return 0o755 if self.config.own is not None else 0o555

    def file_mode(self, leaf: Leaf) -> int:
        """A head shows its real permission bits (a chmod through the mount shows);
        what memfs serves read-only shows no write bit."""
        writable = self.config.own is not None
        if leaf.kind is Kind.FILE and leaf.version is not None:
            return leaf.version.mode if writable else leaf.version.mode & ~0o222
        if leaf.kind is Kind.MEMORY and writable:
            return 0o644
        return 0o444

    def folder(self, ino: int, mode: int, mtime_ns: int, nlink: int) -> pyfuse3.EntryAttributes:
        e = self.entry(ino, stat.S_IFDIR | mode, 0, mtime_ns)
        e.st_nlink = nlink  # 2 plus its subfolders, as on a local filesystem (§7.6)
        return e

    def entry(
        self,
        ino: int,
        mode: int,
        size: int,
        mtime_ns: int,
        timeout: float = CACHE_TIMEOUT,
        atime_ns: int = 0,
    ) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        e.generation = 0
        e.entry_timeout = timeout
        e.attr_timeout = timeout
        e.st_mode = mode
        e.st_nlink = 1
        e.st_uid = self.uid
        e.st_gid = self.gid
        e.st_rdev = 0
        e.st_size = size
        e.st_blksize = 4096
        e.st_blocks = (size + 511) // 512
        e.st_mtime_ns = e.st_ctime_ns = mtime_ns
        e.st_atime_ns = atime_ns or mtime_ns
        return e

    def packs(self, e: pyfuse3.EntryAttributes) -> bool:
        """Whether ``e`` is what `entry` makes with the default timeout, so that a listing
        may keep it as its `PACKED` fields and send it again through `sending`."""
        return (
            e.entry_timeout == e.attr_timeout == CACHE_TIMEOUT
            and e.generation == 0
            and e.st_uid == self.uid
            and e.st_gid == self.gid
            and e.st_rdev == 0
            and e.st_blksize == 4096
            and e.st_blocks == (e.st_size + 511) // 512
            and e.st_ctime_ns == e.st_mtime_ns
        )

    def sending(self) -> pyfuse3.EntryAttributes:
        """The one object readdir fills with each kept entry's fields in turn: pyfuse3
        copies an entry into the reply as it is added (readdir_reply), so the next entry
        may overwrite it."""
        return self.entry(0, stat.S_IFREG, 0, 0)


# What a listing keeps of an entry's attributes, as int64s: everything else is what
# `Shown.entry` always makes (`Shown.packs`). 48 bytes an entry, not a pyfuse3
# EntryAttributes (200 bytes): 3.3 MiB of the benchmark's fixture walked.
PACKED = ("st_ino", "st_mode", "st_nlink", "st_size", "st_mtime_ns", "st_atime_ns")
_ENTRY = struct.Struct(f"{len(PACKED)}q")


class Listing:
    """A folder's entries as one opendir saw them: names, keys and attributes by position.
    Attributes are kept only while nothing they depend on changed (their ``st_ino`` is set
    by readdir: a name takes a number only when it is listed): the project's generation
    and the inode numbers' epoch are ``stamp``. Entries that are never kept are computed at
    each readdir (PREAMBLE.md, a file being created, every entry of the root).

    A project folder's listing holds its names (the tree's own strings) and the slug and
    prefix its keys are made of, not a key, an encoded name and a tuple per entry: kept
    listings of every folder a walk visited were 8 MiB of the benchmark's fixture so."""

    __slots__ = (
        "_given",
        "_keys",
        "_names",
        "_packed",
        "_prefix",
        "_slug",
        "preamble",
        "stamp",
        "volatile",
    )

    def __init__(
        self,
        stamp: tuple[int, int],
        names: list[str],
        keys: list[Key] | None = None,
        given: list[pyfuse3.EntryAttributes | None] | None = None,
        *,
        slug: str = "",
        prefix: str = "",
        volatile: Collection[str] = (),
    ) -> None:
        self.stamp = stamp
        self._names = names
        # Given keys (the root's, global/'s); None: (slug, prefix + name), a project's.
        self._keys = keys
        self._slug, self._prefix = slug, prefix
        self._given = given  # attributes made with the listing (global/PREAMBLE.md's)
        # The kept entries' `PACKED` fields, an st_ino of 0 for one not kept; made at the
        # first entry kept.
        self._packed: bytearray | None = None
        self.volatile = volatile  # names whose attributes are never kept
        # PREAMBLE.md's entry as readdir last made it, with the rendering it showed (at
        # most one): while the stamp holds and the project renders that very bytes object,
        # its inode number and size are the same (renderings.py), and readdir reuses it.
        self.preamble: list[tuple[bytes, pyfuse3.EntryAttributes]] = []

    def __len__(self) -> int:
        return len(self._names)

    @property
    def slug(self) -> str:
        """The project whose folder this lists; "" for the root and global/."""
        return self._slug

    @property
    def folder(self) -> str:
        """The view folder a project's listing lists ("" for its top, the root's, global/'s)."""
        return self._prefix.removesuffix("/")

    def name(self, pos: int) -> bytes:
        return self._names[pos].encode("utf-8", "surrogateescape")  # os.fsencode's

    def key(self, pos: int) -> Key:
        keys = self._keys
        return keys[pos] if keys is not None else (self._slug, self._prefix + self._names[pos])

    def given(self, pos: int) -> pyfuse3.EntryAttributes | None:
        return self._given[pos] if self._given is not None else None

    def holds(self, project: Project, epoch: int) -> bool:
        """Whether its kept attributes still hold for ``project`` and the inode epoch."""
        return self.stamp == (project.generation, epoch)

    def keep(self, pos: int, attrs: pyfuse3.EntryAttributes) -> None:
        """readdir computed entry ``pos``'s attributes (a plain entry, `Shown.packs`, its
        number given) while the stamp holds: the next listing sends them again
        (PREAMBLE.md's and a file being created's are not kept)."""
        if self._names[pos] in self.volatile:
            return
        packed = self._packed
        if packed is None:
            packed = self._packed = bytearray(_ENTRY.size * len(self._names))
        at = pos * _ENTRY.size
        try:
            _ENTRY.pack_into(packed, at, *(getattr(attrs, f) for f in PACKED))
        except struct.error:  # a time past 2262, out of an int64: made at each readdir
            packed[at : at + _ENTRY.size] = bytes(_ENTRY.size)  # pack_into stops half-way

    def kept(self, pos: int, into: pyfuse3.EntryAttributes) -> int:
        """Fill ``into`` with entry ``pos``'s kept attributes and give its inode number;
        0 if it has none kept."""
        packed = self._packed
        if packed is None:
            return 0
        entry: tuple[int, ...] = _ENTRY.unpack_from(packed, pos * _ENTRY.size)
        ino, mode, nlink, size, mtime, atime = entry
        if ino:
            into.st_ino, into.st_mode, into.st_nlink = ino, mode, nlink
            into.st_size, into.st_blocks = size, (size + 511) // 512
            into.st_mtime_ns = into.st_ctime_ns = mtime
            into.st_atime_ns = atime
        return ino


class Listings:
    """Project folders' listings with their entries' attributes, kept per folder until the
    project or the inode numbers change: a warm `ls` costs no attribute building. Called on
    the trio thread only."""

    def __init__(self, shown: Shown) -> None:
        self.shown = shown
        self._kept: dict[Key, Listing] = {}  # folder -> its listing at its stamp

    def of(
        self, project: Project, path: str, pending: Collection[str], epoch: int
    ) -> Listing | None:
        """The listing of folder ``path`` of ``project``, with the names being created
        there (``pending``); None if it is not a folder."""
        folder = (project.slug, path)
        stamp = (project.generation, epoch)
        kept = self._kept.get(folder)
        if kept is not None and kept.holds(project, epoch) and not pending:
            return kept
        children = project.tree.children(path)
        if children is None:
            return None
        # Names only: the attributes are built by readdir, a reply's worth at a time, and
        # kept here for the next listing. Built all at once, a first `ls` of 10,000 files
        # held the request thread over 100 ms (§7a).
        names = sorted({*children, *pending}) if pending else children  # sorted already
        # PREAMBLE.md lies in the project's folder only: a subfolder with nothing being
        # created shares one empty set.
        volatile = frozenset({PREAMBLE, *pending}) if pending or not path else _NONE_VOLATILE
        listing = Listing(
            stamp, names, slug=project.slug, prefix=f"{path}/" if path else "", volatile=volatile
        )
        if not pending:
            self._kept[folder] = listing
        return listing


def _stat_folders(
    where: list[tuple[str, list[tuple[Path, tuple[str, ...]]]]],
) -> dict[str, sources.FileStat | None]:
    """Worker thread: each view folder's real folder, the first of its places that has it."""
    return {path: sources.stat_first_folder(places, path) for path, places in where}


def statvfs_of(root: Path) -> pyfuse3.StatvfsData:
    """statfs of the mount: the own source's filesystem (blocking: run in a worker)."""
    try:
        st = os.statvfs(root)
    except OSError:
        st = os.statvfs("/")
    data = pyfuse3.StatvfsData()
    for attr in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail"):
        setattr(data, attr, getattr(st, attr))
    data.f_files = st.f_files
    data.f_ffree = st.f_ffree
    data.f_favail = st.f_favail
    data.f_namemax = sources.NAME_MAX
    return data
