"""Inode numbers for view paths, and the kernel's lookup count of each (FUSE-NOTES).

Layer adapter, but plain: imports neither pyfuse3 nor trio; not thread-safe (the adapter's
trio thread owns it). A path keeps its number while it exists, so a walk finds the same
inode twice. A number is never reused while the kernel may still hold it: a path that
vanishes while the kernel holds its number (unlinked while open, replaced by a rename)
keeps the number *detached* (it still names its old path, which no longer names it) until
the kernel forgets it.
"""

from __future__ import annotations

from collections import Counter
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


class Inodes:
    def __init__(self) -> None:
        self._by_key: dict[Key, int] = {ROOT_KEY: ROOT_INODE, HERE_KEY: HERE_INODE}
        self._by_ino: dict[int, Key] = {ROOT_INODE: ROOT_KEY, HERE_INODE: HERE_KEY}
        self._lookups: Counter[int] = Counter()
        self._next = HERE_INODE + 1
        # Bumped whenever a path loses its number (detached, moved, freed): what was built
        # with the numbers of an older epoch (attrs.Listings) is built again.
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._by_ino)

    def number(self, key: Key) -> int:
        """The number of ``key``, given now if it has none."""
        ino = self._by_key.get(key)
        if ino is None:
            ino = self._next
            self._next += 1
            self._by_key[key] = ino
            self._by_ino[ino] = key
        return ino

    def known(self, key: Key) -> int | None:
        return self._by_key.get(key)

    def key(self, ino: int) -> Key | None:
        """The path ``ino`` names (or named, when it is detached)."""
        return self._by_ino.get(ino)

    def detached(self, ino: int) -> bool:
        key = self._by_ino.get(ino)
        return key is not None and self._by_key.get(key) != ino

    def looked_up(self, ino: int) -> None:
        self.looked_up_all([ino])

    def looked_up_all(self, inos: list[int]) -> None:
        """Each of ``inos`` once (a readdir reply's entries): one call a reply."""
        lookups = self._lookups
        for ino in inos:
            n = lookups.get(ino, 0)
            if not n:
                ino = self._same(ino)
            lookups[ino] = n + 1

    def _same(self, ino: int) -> int:
        """The int object the tables hold for number ``ino`` (``ino`` if none): a count
        keyed by it takes no int of its own (the numbers of a walk's every entry)."""
        key = self._by_ino.get(ino)
        same = self._by_key.get(key) if key is not None else None
        return same if same == ino and same is not None else ino

    def lookups(self, ino: int) -> int:
        return self._lookups.get(ino, 0)

    def forget(self, ino: int, n: int, exists: Callable[[Key], bool]) -> None:
        """The kernel dropped ``n`` references; free the number once it holds none and
        its path is gone (a path that exists keeps its number across walks)."""
        left = self._lookups[ino] - n
        if left > 0:
            self._lookups[ino] = left
            return
        self._lookups.pop(ino, None)
        key = self._by_ino.get(ino)
        if key is None or ino <= HERE_INODE:
            return
        if self._by_key.get(key) != ino:
            del self._by_ino[ino]  # detached: nothing else can reach it
        elif not exists(key):
            del self._by_ino[ino]
            del self._by_key[key]
            self.epoch += 1

    def detach(self, key: Key) -> int | None:
        """``key`` is gone (unlinked) or replaced: its number stays with the kernel's
        references, and the path gets a new number when it is made again."""
        ino = self._by_key.pop(key, None)
        if ino is not None:
            self.epoch += 1
        if ino is not None and self._lookups.get(ino, 0) == 0:
            del self._by_ino[ino]
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
            self._by_ino[ino] = new

    def _check(self) -> None:
        """Assert every invariant; the tests call this after each step."""
        for key, ino in self._by_key.items():
            assert self._by_ino.get(ino) == key, (key, ino)
        for ino, key in self._by_ino.items():
            if self._by_key.get(key) != ino:  # detached: only the kernel's references keep it
                assert self._lookups.get(ino, 0) > 0, (ino, key)
        assert all(n > 0 for n in self._lookups.values()), self._lookups
        assert all(ino in self._by_ino for ino in self._lookups), "a count with no inode"
        assert self._next > max(self._by_ino)
