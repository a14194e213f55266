"""Inode numbers for view paths, and the kernel's lookup count of each (FUSE-NOTES).

Layer adapter, but plain: imports neither pyfuse3 nor trio; not thread-safe (the adapter's
trio thread owns it). A path keeps its number while it exists, so a walk finds the same
inode twice. A number is never reused while the kernel may still hold it: a path that
vanishes while the kernel holds its number (unlinked while open, replaced by a rename)
keeps the number *detached* (it still names its old path, which no longer names it) until
the kernel forgets it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

Key = tuple[str, str]  # (slug, view path); ("", "") is the root, (slug, "") a project

ROOT_INODE = 1  # pyfuse3.ROOT_INODE, fixed by the FUSE protocol
HERE_INODE = ROOT_INODE + 1
ROOT_KEY: Key = ("", "")
HERE = "here"
HERE_KEY: Key = ("", HERE)
# global/ (§4.1), memfs's own folder beside `here`; its entries are global/<kind> projects
# (keys ("global/<kind>", "")) and ("", "global/<name>") for anything else it serves.
GLOBAL = "global"
GLOBAL_KEY: Key = ("", GLOBAL)


# Numbers are given in turn and freed in any order, so the tables keyed by number are pages
# of consecutive numbers: a page holds the path and the lookup count of each of its
# numbers (about 24 bytes a number, against some 110 in two dicts keyed by int) and is
# dropped with its last path. A page outlives its freed numbers only while one of them
# lives: numbers given together (a listing, a burst of saves) mostly die together.
PAGE_BITS = 8
PAGE = 1 << PAGE_BITS
SLOT = PAGE - 1


class _Page:
    __slots__ = ("counts", "paths", "slugs", "used")

    def __init__(self) -> None:
        # A number's key is (slugs[slot], paths[slot]), no slot holding a tuple of its own
        # (64 bytes a path); slugs[slot] None: the number names nothing.
        self.slugs: list[str | None] = [None] * PAGE
        self.paths: list[str] = [""] * PAGE
        self.counts = array("Q", bytes(8 * PAGE))  # the kernel's lookups (uint64 in FUSE)
        self.used = 0  # numbers that name a path


class Inodes:
    def __init__(self) -> None:
        # slug -> view path -> number: one dict a project, so no (slug, path) tuple is kept
        # for each path either.
        self._by_path: dict[str, dict[str, int]] = {}
        self._pages: dict[int, _Page] = {}
        self._numbered = 0
        self._next = HERE_INODE + 1
        # Bumped whenever a path loses its number (detached, moved, freed): what was built
        # with the numbers of an older epoch (attrs.Listings) is built again.
        self.epoch = 0
        for key, ino in ((ROOT_KEY, ROOT_INODE), (HERE_KEY, HERE_INODE)):
            self._by_path.setdefault(key[0], {})[key[1]] = ino
            self._name(ino, key)

    def __len__(self) -> int:
        return self._numbered

    def number(self, key: Key) -> int:
        """The number of ``key``, given now if it has none."""
        slug, path = key
        paths = self._by_path.get(slug)
        if paths is None:
            paths = self._by_path[slug] = {}
        ino = paths.get(path)
        if ino is None:
            ino = self._next
            self._next += 1
            paths[path] = ino
            self._name(ino, key)
        return ino

    def known(self, key: Key) -> int | None:
        paths = self._by_path.get(key[0])
        return paths.get(key[1]) if paths is not None else None

    def key(self, ino: int) -> Key | None:
        """The path ``ino`` names (or named, when it is detached)."""
        page = self._pages.get(ino >> PAGE_BITS)
        if page is None:
            return None
        slug = page.slugs[ino & SLOT]
        return (slug, page.paths[ino & SLOT]) if slug is not None else None

    def detached(self, ino: int) -> bool:
        key = self.key(ino)
        return key is not None and self.known(key) != ino

    def looked_up(self, ino: int) -> None:
        self.looked_up_all([ino])

    def looked_up_all(self, inos: list[int]) -> None:
        """Each of ``inos`` once (a readdir reply's entries): one call a reply. Only a number
        that names a path counts: one freed before its reply went out (not expected) is
        left uncounted, and its forget finds nothing."""
        pages = self._pages
        for ino in inos:
            page = pages.get(ino >> PAGE_BITS)
            if page is not None and page.slugs[ino & SLOT] is not None:
                page.counts[ino & SLOT] += 1

    def lookups(self, ino: int) -> int:
        page = self._pages.get(ino >> PAGE_BITS)
        return page.counts[ino & SLOT] if page is not None else 0

    def forget(self, ino: int, n: int, exists: Callable[[Key], bool]) -> None:
        """The kernel dropped ``n`` references; free the number once it holds none and
        its path is gone (a path that exists keeps its number across walks)."""
        page = self._pages.get(ino >> PAGE_BITS)
        if page is None:
            return  # not a number the kernel was given
        slot = ino & SLOT
        left = page.counts[slot] - n
        page.counts[slot] = max(left, 0)
        key = self.key(ino)
        if left > 0 or key is None or ino <= HERE_INODE:
            return
        if self.known(key) != ino:
            self._free(ino)  # detached: nothing else can reach it
        elif not exists(key):
            self._free(ino)
            self._unnumber(key)
            self.epoch += 1

    def detach(self, key: Key) -> int | None:
        """``key`` is gone (unlinked) or replaced: its number stays with the kernel's
        references, and the path gets a new number when it is made again."""
        ino = self._unnumber(key)
        if ino is not None:
            self.epoch += 1
            if self.lookups(ino) == 0:
                self._free(ino)
        return ino

    def move(self, src: Key, dst: Key, *, folder: bool) -> None:
        """The kernel moved its entry: the inode at ``src`` (and below, for a ``folder``)
        now lives at ``dst``; what stood at ``dst`` is detached. A file's move costs one
        key; a folder's walks every number (the paths below it have no index)."""
        slug, old = src
        paths = self._by_path.get(slug, {})
        if folder:
            moved = {
                path: ino
                for path, ino in paths.items()
                if path == old or path.startswith(old + "/")
            }
        else:
            ino = paths.get(old)
            moved = {old: ino} if ino is not None else {}
        for path in moved:
            self._unnumber((slug, path))
        self.epoch += 1
        self.detach(dst)
        for path, ino in moved.items():
            new = (slug, dst[1] + path[len(old) :])
            self.detach(new)
            self._by_path.setdefault(slug, {})[new[1]] = ino
            self._name(ino, new)

    def _unnumber(self, key: Key) -> int | None:
        """Take ``key``'s number from it (a project's table goes with its last path)."""
        paths = self._by_path.get(key[0])
        if paths is None:
            return None
        ino = paths.pop(key[1], None)
        if not paths:
            del self._by_path[key[0]]
        return ino

    def _name(self, ino: int, key: Key) -> None:
        """``ino`` names ``key`` from now on (its page made when it is the first)."""
        page = self._pages.get(ino >> PAGE_BITS)
        if page is None:
            page = self._pages[ino >> PAGE_BITS] = _Page()
        slot = ino & SLOT
        if page.slugs[slot] is None:
            page.used += 1
            self._numbered += 1
        page.slugs[slot], page.paths[slot] = key

    def _free(self, ino: int) -> None:
        """``ino`` names nothing any more (the kernel holds none of it): its page goes with
        its last number."""
        page = self._pages[ino >> PAGE_BITS]
        page.slugs[ino & SLOT], page.paths[ino & SLOT] = None, ""
        page.used -= 1
        self._numbered -= 1
        if not page.used:
            del self._pages[ino >> PAGE_BITS]

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each step."""
        for slug, paths in self._by_path.items():
            assert paths, slug
            for path, ino in paths.items():
                assert self.key(ino) == (slug, path), (slug, path, ino)
        numbered = 0
        for at, page in self._pages.items():
            held = [at << PAGE_BITS | slot for slot in range(PAGE) if page.slugs[slot] is not None]
            assert page.used == len(held) > 0, (at, page.used)
            numbered += len(held)
            for ino in held:
                key = self.key(ino)
                assert key is not None
                if self.known(key) != ino:  # detached: only the kernel's references keep it
                    assert self.lookups(ino) > 0, (ino, key)
            for slot in range(PAGE):
                if page.slugs[slot] is None:
                    assert page.counts[slot] == 0, "a count with no inode"
                    assert page.paths[slot] == "", "a path with no inode"
            assert max(held) < self._next
        assert numbered == self._numbered
