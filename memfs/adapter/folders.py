"""Open folders: each `opendir`'s snapshot listing, and the entries `readdir` sends (§4).

Layer adapter (pyfuse3), trio thread only. A listing is a snapshot per handle: cookies are
positions in it, so a folder changing mid-listing neither skips nor repeats an entry. A
project folder's listing keeps its entries' attributes while its stamp holds (attrs.py,
`Listings`, packed), so a warm `ls` or walk builds no attributes: each entry's six
kept fields are copied into one object as it is sent. A subfolder's entry shows its real
folder's attributes, read with the next entries' in one worker call (§7a).
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable

import pyfuse3

from memfs.adapter.attrs import NOTHING_READ, Folders, Listing, Listings, Shown
from memfs.adapter.inodes import GLOBAL, GLOBAL_KEY, HERE, HERE_KEY, Inodes, Key
from memfs.adapter.renderings import Renderings
from memfs.adapter.writing import OpenFiles
from memfs.view.catalog import Catalog
from memfs.view.project import PREAMBLE, Project

# Entries whose subfolders' real folders one worker call reads, from the first a reply
# makes: more than a reply takes (a getdents buffer of 32 KiB, about 200 entries with
# their attributes).
READ_AHEAD = 256


class OpenFolders:
    """Every open folder handle's listing, and the replies to its readdir calls."""

    def __init__(
        self,
        catalog: Catalog,
        files: OpenFiles,
        inodes: Inodes,
        shown: Shown,
        renderings: Renderings,
        project: Callable[[str], Awaitable[Project]],
    ) -> None:
        self.catalog = catalog
        self.files = files
        self.inodes = inodes
        self.shown = shown
        self.renderings = renderings
        self._project = project  # a slug's project, loaded off the trio thread if need be
        self.listings = Listings(shown)  # folder -> entries with attributes, kept
        self._open: dict[int, Listing] = {}  # folder handle -> snapshot
        self._sending = shown.sending()  # each kept entry's attributes, in turn
        self._scratch = shown.sending()  # what `_subfolders` asks of the kept entries
        self._next = 1

    def open_root(self) -> int:
        """The root's listing: `here`, `global` and every project (the catalog listed
        already); slugs begin with '-', so they sort after both."""
        slugs = list(self.catalog.slugs())
        keys = [GLOBAL_KEY, HERE_KEY, *((s, "") for s in slugs)]
        return self._add(Listing((-1, -1), [GLOBAL, HERE, *slugs], keys))

    def open_global(self, preamble: pyfuse3.EntryAttributes) -> int:
        """global/'s listing (§4.1): a folder per kind with any source, and PREAMBLE.md
        with its attributes (``preamble``: rendered as the folder opened)."""
        kinds = self.catalog.global_kinds()
        keys = [(f"{GLOBAL}/{k}", "") for k in kinds]
        keys.append(("", f"{GLOBAL}/{PREAMBLE}"))
        attrs: list[pyfuse3.EntryAttributes | None] = [None] * len(kinds)
        attrs.append(preamble)
        return self._add(Listing((-1, -1), [*kinds, PREAMBLE], keys, attrs))

    def open(self, project: Project, path: str) -> int:
        """A listing of folder ``path`` of ``project``, files being created included."""
        slug = project.slug
        pending = list(self.files.pending_names(slug, path)) if self.files.creating() else []
        found = self.listings.of(project, path, pending, self.inodes.epoch)
        if found is None:
            raise pyfuse3.FUSEError(errno.ENOTDIR if project.tree.leaf(path) else errno.ENOENT)
        return self._add(found)

    def _add(self, listing: Listing) -> int:
        dh = self._next
        self._next += 1
        self._open[dh] = listing
        return dh

    def close(self, fh: int) -> None:
        self._open.pop(fh, None)

    async def reply(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        """Send the entries from ``start_id`` on, as many as the reply takes."""
        listing = self._open.get(fh)
        if listing is None or start_id >= len(listing):
            return  # the end (every `ls` asks once more until an empty reply)
        # The entries of a project folder share its project; the root's (slugs) have none.
        project: Project | None = None
        kept = False  # whether the attributes kept in the listing still hold
        folders = NOTHING_READ  # the real folders read for the subfolders' entries
        slug = listing.slug
        if slug:
            project = self.catalog.loaded().get(slug) or await self._project(slug)
            kept = listing.holds(project, self.inodes.epoch)
        # Every entry the reply takes counts as a kernel lookup, but only once the reply is
        # sent: a readdir that fails mid-way sends the kernel an error and none of them.
        taken: list[int] = []
        reply = pyfuse3.readdir_reply
        sending = self._sending
        for pos in range(start_id, len(listing)):
            # A warm listing's entry is kept whole (with its number): nothing to make.
            ino = listing.kept(pos, sending) if kept else 0
            if ino:
                attrs = sending
            else:
                if project is not None and self._unread(listing, pos, project, folders):
                    # A subfolder: its real folder and the next entries' are read in one
                    # worker call (§7a); each entry then shows the project as it is now.
                    wanted = self._subfolders(listing, pos, project, kept)
                    folders = await self.shown.read_folders(project, wanted)
                    project = self.catalog.loaded().get(slug) or await self._project(slug)
                    kept = kept and listing.holds(project, self.inodes.epoch)
                found = self._entry_attrs(listing, pos, project, kept, folders)
                if found is None:
                    continue  # vanished since opendir
                attrs, ino = found, found.st_ino
            if not reply(token, listing.name(pos), attrs, pos + 1):
                break
            taken.append(ino)
        self.inodes.looked_up_all(taken)

    def _subfolders(self, listing: Listing, start: int, project: Project, kept: bool) -> list[str]:
        """The subfolders among the `READ_AHEAD` entries from ``start`` whose attributes a
        reply would make (not kept): their real folders are to be read."""
        found = []
        scratch = self._scratch
        for pos in range(start, min(len(listing), start + READ_AHEAD)):
            if kept and listing.kept(pos, scratch):
                continue
            key = listing.key(pos)
            if self.shown.shows_folder(key, project):
                found.append(key[1])
        return found

    def _unread(self, listing: Listing, pos: int, project: Project, folders: Folders) -> bool:
        """Whether entry ``pos`` is a subfolder whose real folder was not read yet (O(1);
        no subfolder at all in most memory folders)."""
        if not project.tree.subdirs(listing.folder):
            return False
        key = listing.key(pos)
        return key[1] not in folders and self.shown.shows_folder(key, project)

    def _entry_attrs(
        self, listing: Listing, pos: int, project: Project | None, kept: bool, folders: Folders
    ) -> pyfuse3.EntryAttributes | None:
        """Listing entry ``pos``'s attributes made (and kept when they may be), its inode
        number given; None if it is gone."""
        key, attrs = listing.key(pos), listing.given(pos)
        try:
            if key[1] == PREAMBLE and project is not None:
                return self._preamble_entry(listing, key, project, kept)
            if attrs is None:  # given: global/PREAMBLE.md's
                attrs = self.shown.of(0, key, project, folders)
        except pyfuse3.FUSEError:
            return None
        if not kept or not attrs.st_ino:
            attrs.st_ino = self.renderings.inode_of(key)
        if kept and self.shown.packs(attrs):
            listing.keep(pos, attrs)
        return attrs

    def _preamble_entry(
        self, listing: Listing, key: Key, project: Project, kept: bool
    ) -> pyfuse3.EntryAttributes:
        """PREAMBLE.md's entry: its rendering's inode number and size. Made again only
        when the listing's stamp or the rendering changed (each `ls` lists it)."""
        data = self.renderings.render(project)
        if kept and listing.preamble and listing.preamble[0][0] is data:
            return listing.preamble[0][1]
        attrs = self.shown.of(0, key, project)
        attrs.st_ino = self.renderings.inode_of(key)
        attrs.st_size = len(self.renderings.of(attrs.st_ino, project))
        listing.preamble[:] = [(data, attrs)] if kept else []
        return attrs
