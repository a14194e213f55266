"""Opening the version an open through the mount reads: one openat and one fstat (issue 14).

Layer disk: imports neither pyfuse3 nor trio; not thread-safe (the adapter's trio thread owns
it). Its I/O is what serving an open needs anyway (§7a allows descriptor work on the
request thread): an openat and an fstat, and on a miss the folder walk `sources.open_file`
makes. It reads no bytes; every read of source bytes stays in sources.py's sense of the
word, through the descriptor it returns.

Walking from a source's root to a file's folder costs an open per component; the folders
are therefore kept open, at most `folder_limit()` of them. A kept folder may since have been
moved or replaced on disk, so a file opened through it is used only when its fstat shows
the very version the view reports; on any failure or mismatch the folder is dropped and the
file is opened again from the root, exactly as before.
"""

from __future__ import annotations

import errno
import os
import resource
import stat
from collections.abc import Sequence
from pathlib import Path

from memfs.disk import sources


# Folders kept open, past it the oldest goes: an eighth of what the process may open (the
# benchmark's 600 projects in 4 sources are 2,000 folders).
def folder_limit(soft: int | None = None) -> int:
    """Of ``soft`` descriptors, or of the process's soft limit, read when a Pins is made:
    mount.py raises the descriptor limit before that."""
    if soft is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(1, min(soft // 8, 8192))


FolderKey = tuple[Path, tuple[str, ...]]  # (source root, components below it)


class Pins:
    def __init__(self, limit: int | None = None) -> None:
        limit = folder_limit() if limit is None else limit
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit}")
        self.limit = limit
        self._folders: dict[FolderKey, int] = {}  # folder -> descriptor, oldest first

    def __len__(self) -> int:
        return len(self._folders)

    def open(
        self, root: Path, parts: Sequence[str], path: str, want: tuple[int, int, int]
    ) -> tuple[int, bool]:
        """A read-only descriptor of ``root/parts/path``, and whether its (size, mtime_ns, inode)
        is ``want``: False when the disk holds another version by now.

        Raises:
            OSError: gone, unreadable, a link or not a regular file (EINVAL).
        """
        *dirs, name = sources.split(path)
        key = (root, (*parts, *dirs))
        kept = self._folders.get(key)
        if kept is not None:
            found = _open_in(kept, name)
            if found is not None and found[1] == want:
                return found[0], True
            if found is not None:
                os.close(found[0])
            self._drop(key)  # moved, replaced or changed: walk from the root again
        folder = sources.folder_fd(root, key[1])
        try:
            fd = os.open(name, sources.FILE_FLAGS, dir_fd=folder)
        except BaseException:
            os.close(folder)
            raise
        self._keep(key, folder)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"not a regular file: {path}")
        return fd, (st.st_size, st.st_mtime_ns, st.st_ino) == want

    def _keep(self, key: FolderKey, fd: int) -> None:
        if len(self._folders) >= self.limit:
            self._drop(next(iter(self._folders)))
        self._folders[key] = fd

    def _drop(self, key: FolderKey) -> None:
        fd = self._folders.pop(key, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for key in list(self._folders):
            self._drop(key)


def _open_in(folder: int, name: str) -> tuple[int, tuple[int, int, int]] | None:
    """``name`` in an open folder with its (size, mtime_ns, inode); None if it is not a
    regular file there (any more)."""
    try:
        fd = os.open(name, sources.FILE_FLAGS, dir_fd=folder)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, (st.st_size, st.st_mtime_ns, st.st_ino)
