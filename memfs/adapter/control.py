"""The root's extended attributes: how the commands talk to a running mount (§8, §7.2).

Layer adapter. `memfs status` reads ``user.memfs.status`` (status.py's report); `memfs
restore` sets ``user.memfs.restore`` and reads back ``user.memfs.result.<id>``
(restoring.py). `RootXattrs` holds these three handlers for fs.MemFS, which is built on
it: they answer only at the root, and only these names.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from typing import Any

import pyfuse3

from memfs.adapter import restoring, status
from memfs.adapter.inodes import ROOT_INODE
from memfs.view.writes import Refused

log = logging.getLogger(__name__)

STATUS_XATTR = os.fsencode(status.STATUS_XATTR)
RESTORE_XATTR = os.fsencode(restoring.REQUEST)
RESULT_XATTR = os.fsencode(restoring.RESULT)


class RootXattrs:
    """The xattr handlers of fs.MemFS (see the module); it provides ``stats`` and
    ``restores``, and the report reads the rest of it."""

    stats: status.Stats
    restores: restoring.Restores

    def status(self) -> dict[str, Any]:
        return status.report(self)  # type: ignore[arg-type]  # MemFS is a Reporting

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        # Reading the counters must not change them: only the other names count (the
        # kernel asks for security.capability before every write to a FUSE file).
        if inode == ROOT_INODE and name == STATUS_XATTR:
            return json.dumps(self.status(), sort_keys=True).encode()
        if inode == ROOT_INODE and name.startswith(RESULT_XATTR):
            found = self.restores.result(os.fsdecode(name[len(RESULT_XATTR) :]))
            if found is not None:
                return found
        self.stats.count("getxattr")
        raise pyfuse3.FUSEError(errno.ENODATA)

    async def setxattr(
        self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        """`memfs restore` asking the running mount; nothing else is ever set."""
        self.stats.count("setxattr")
        if inode != ROOT_INODE or name != RESTORE_XATTR:
            raise pyfuse3.FUSEError(errno.ENOTSUP)
        try:
            await self.restores.run(value)
        except Refused as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        except Exception:  # a handler lets out FUSEError only
            log.exception("restore failed")
            raise pyfuse3.FUSEError(errno.EIO) from None

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        return [STATUS_XATTR] if inode == ROOT_INODE else []
