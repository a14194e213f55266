"""The versions a project keeps in its own source's ``.history/``, and which go when the
project's budget is spent (§7.2).

Layer view: no I/O, imports neither pyfuse3 nor trio; not thread-safe (its project's owner
changes it, from one task). `Holdings` tells it every own version under ``.history/`` that
comes or goes, so a write asks what to prune in O(pruned · log n), never by walking the
history folder: a project that keeps 20 versions of a thousand files holds 20,000 of them.

The rule: kept versions are counted by their bytes; when keeping one more would take the
total past ``history_bytes``, the ones kept first go first (by when each was kept, its
file's ctime: never by mtime, which a `cp -p` or `touch -d` sets to any date), but never
the newest kept version of a path, so every file ever replaced or removed keeps its last
version, whatever its size.
"""

from __future__ import annotations

from dataclasses import dataclass

from sortedcontainers import SortedKeyList

from memfs.rules.history import HISTORY


@dataclass(frozen=True, slots=True)
class KeptVersion:
    view: str  # `.history/<path>/<name>`
    size: int
    kept_ns: int  # when it was kept: its file's ctime
    # The order the view learned of it: a plan reads back what it kept before the next
    # plan runs, so among versions of one ctime (the clock ticks every few ms) this is the
    # order kept.
    seq: int = 0

    @property
    def of(self) -> str:
        """The path whose version this is."""
        return self.view[len(HISTORY) + 1 :].rpartition("/")[0]


def _age(k: KeptVersion) -> tuple[int, int]:
    return (k.kept_ns, k.seq)


class KeptVersions:
    """One project's own kept versions: kept first first, their bytes, the newest of each
    path."""

    def __init__(self) -> None:
        self._by_age: SortedKeyList[KeptVersion, tuple[int, int]] = SortedKeyList(key=_age)
        self._by_view: dict[str, KeptVersion] = {}
        self._of: dict[str, SortedKeyList[KeptVersion, tuple[int, int]]] = {}
        self.bytes = 0
        self._seq = 0

    def put(self, view: str, size: int, kept_ns: int) -> None:
        self.discard(view)
        self._seq += 1
        k = KeptVersion(view, size, kept_ns, self._seq)
        if not k.of:
            return  # a file right under .history/ is no version of any path
        self._by_age.add(k)
        self._by_view[view] = k
        self._of.setdefault(k.of, SortedKeyList(key=_age)).add(k)
        self.bytes += size

    def discard(self, view: str) -> None:
        k = self._by_view.pop(view, None)
        if k is None:
            return
        self._by_age.remove(k)
        siblings = self._of[k.of]
        siblings.remove(k)
        if not siblings:
            del self._of[k.of]
        self.bytes -= k.size

    def __len__(self) -> int:
        return len(self._by_view)

    def of(self, path: str) -> list[KeptVersion]:
        """``path``'s kept versions, kept first first (approximately: by when each was
        kept; the number in its name is the order exactly, history.parse)."""
        return list(self._of.get(path, ()))

    def over_budget(
        self, path: str, adding: int, budget: int, versions: int | None = None
    ) -> list[str]:
        """The kept versions to remove so that keeping ``adding`` more bytes, a new
        version of ``path``, stays within ``budget``: oldest first, never the newest kept
        version of a path (the new one is ``path``'s newest from then on). The oldest of
        ``path`` past ``versions`` go with the keep anyway (keeping.py prunes them): their
        bytes are not counted, and no other version goes in their stead."""
        mine = self.of(path) if versions is not None else []
        counted = set(mine[: max(0, len(mine) + 1 - (versions or 0))])
        excess = self.bytes - sum(k.size for k in counted) + adding - budget
        if excess <= 0:
            return []
        gone: list[str] = []
        for k in self._by_age:
            if excess <= 0:
                break
            newest = self._of[k.of][-1]
            if k in counted or (k is newest and k.of != path):
                continue
            gone.append(k.view)
            excess -= k.size
        return gone

    def _check(self) -> None:
        assert len(self._by_age) == len(self._by_view) == sum(map(len, self._of.values()))
        assert self.bytes == sum(k.size for k in self._by_view.values())
