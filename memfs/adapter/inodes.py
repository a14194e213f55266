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
# of consecutive numbers: a page holds a key slot and a lookup count for each of its
# numbers (about 16 bytes a number, against some 110 in two dicts keyed by int) and is
# dropped with its last key. A page outlives its freed numbers only while one of them
# lives: numbers given together (a listing, a burst of saves) mostly die together.
PAGE_BITS = 8
PAGE = 1 << PAGE_BITS
SLOT = PAGE - 1


class _Page:
    __slots__ = ("counts", "keys", "used")

    def __init__(self) -> None:
        self.keys: list[Key | None] = [None] * PAGE
        self.counts = array("Q", bytes(8 * PAGE))  # the kernel's lookups (uint64 in FUSE)
        self.used = 0  # keys that are not None


class Inodes:
    def __init__(self) -> None:
        self._by_key: dict[Key, int] = {}
        self._pages: dict[int, _Page] = {}
        self._numbered = 0
        self._next = HERE_INODE + 1
        # Bumped whenever a path loses its number (detached, moved, freed): what was built
        # with the numbers of an older epoch (attrs.Listings) is built again.
        self.epoch = 0
        for key, ino in ((ROOT_KEY, ROOT_INODE), (HERE_KEY, HERE_INODE)):
            self._by_key[key] = ino
            self._name(ino, key)

    def __len__(self) -> int:
        return self._numbered

    def number(self, key: Key) -> int:
        """The number of ``key``, given now if it has none."""
        ino = self._by_key.get(key)
        if ino is None:
            ino = self._next
            self._next += 1
            self._by_key[key] = ino
            self._name(ino, key)
        return ino

    def known(self, key: Key) -> int | None:
        return self._by_key.get(key)

    def key(self, ino: int) -> Key | None:
        """The path ``ino`` names (or named, when it is detached)."""
        page = self._pages.get(ino >> PAGE_BITS)
        return page.keys[ino & SLOT] if page is not None else None

    def detached(self, ino: int) -> bool:
        key = self.key(ino)
        return key is not None and self._by_key.get(key) != ino

    def looked_up(self, ino: int) -> None:
        self.looked_up_all([ino])

    def looked_up_all(self, inos: list[int]) -> None:
        """Each of ``inos`` once (a readdir reply's entries): one call a reply. Every one
        is a number given and not freed (only such are sent)."""
        pages = self._pages
        for ino in inos:
            pages[ino >> PAGE_BITS].counts[ino & SLOT] += 1

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
        key = page.keys[slot]
        if left > 0 or key is None or ino <= HERE_INODE:
            return
        if self._by_key.get(key) != ino:
            self._free(ino)  # detached: nothing else can reach it
        elif not exists(key):
            self._free(ino)
            del self._by_key[key]
            self.epoch += 1

    def detach(self, key: Key) -> int | None:
        """``key`` is gone (unlinked) or replaced: its number stays with the kernel's
        references, and the path gets a new number when it is made again."""
        ino = self._by_key.pop(key, None)
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
        if folder:
            moved = {
                key: ino
                for key, ino in self._by_key.items()
                if key[0] == slug and (key[1] == old or key[1].startswith(old + "/"))
            }
        else:
            ino = self._by_key.get(src)
            moved = {src: ino} if ino is not None else {}
        for key in moved:
            del self._by_key[key]
        self.epoch += 1
        self.detach(dst)
        for (_, path), ino in moved.items():
            new = (slug, dst[1] + path[len(old) :])
            self.detach(new)
            self._by_key[new] = ino
            self._name(ino, new)

    def _name(self, ino: int, key: Key) -> None:
        """``ino`` names ``key`` from now on (its page made when it is the first)."""
        page = self._pages.get(ino >> PAGE_BITS)
        if page is None:
            page = self._pages[ino >> PAGE_BITS] = _Page()
        slot = ino & SLOT
        if page.keys[slot] is None:
            page.used += 1
            self._numbered += 1
        page.keys[slot] = key

    def _free(self, ino: int) -> None:
        """``ino`` names nothing any more (the kernel holds none of it): its page goes with
        its last number."""
        page = self._pages[ino >> PAGE_BITS]
        page.keys[ino & SLOT] = None
        page.used -= 1
        self._numbered -= 1
        if not page.used:
            del self._pages[ino >> PAGE_BITS]

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each step."""
        for key, ino in self._by_key.items():
            assert self.key(ino) == key, (key, ino)
        numbered = 0
        for at, page in self._pages.items():
            held = [(at << PAGE_BITS | slot, key) for slot, key in enumerate(page.keys) if key]
            assert page.used == len(held) > 0, (at, page.used)
            numbered += len(held)
            for ino, key in held:
                if self._by_key.get(key) != ino:  # detached: only the kernel's references keep it
                    assert self.lookups(ino) > 0, (ino, key)
            for slot, named in enumerate(page.keys):
                assert named is not None or page.counts[slot] == 0, "a count with no inode"
            assert max(ino for ino, _ in held) < self._next
        assert numbered == self._numbered
