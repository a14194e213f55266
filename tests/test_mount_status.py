"""Tier 3: `memfs status` through a real mount lists only stage files that exist (§7.1, §8).

Issue 36: status listed `.memfs-stage.*` files "in flight" long after they were gone: a
project's scan recorded every stage name it met (the first write into a project the own
source lacked scans the new folder while the writer's stage is in it; a stage another
memfs left in a read-only source), and the watcher skipped every event of such a name,
so the record never went. Now this mount's own stages are listed from the writers'
handles (an fstat each), and other stage names are read like any left-out file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mounting import MOUNT_MARKS, Mount, Mounts, Sandbox, slug_of, wait_until

from memfs.disk.sources import STAGE_PREFIX

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
SOON = 5.0  # seconds: §5.4 says one; slack for a loaded machine


def stages_listed(mount: Mount) -> list[dict[str, Any]]:
    return [e for e in mount.status()["left_out"] if STAGE_PREFIX in e["path"]]


def stage_files(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(STAGE_PREFIX))


def test_status_lists_a_writers_stage_while_it_exists_and_never_after(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("work", SLUG, "MEMORY.md", "# Memory\n")  # the own source lacks the project
    mount = mounts()
    project = sandbox.mnt(SLUG)
    with open(project / "notes.md", "wb") as f:
        f.write(b"half")
        f.flush()
        own = sandbox.source("personal").folder(SLUG)  # made with the stage, in one call
        (stage,) = stage_files(own)
        listed = stages_listed(mount)
        assert listed == [
            {
                "project": SLUG,
                "source": "personal",
                "path": stage,
                "why": "in flight: memfs stage file",
            }
        ], listed
    assert (own / "notes.md").read_bytes() == b"half"
    assert stage_files(own) == []
    assert stages_listed(mount) == []  # failed before: the scan of the new folder kept it
    # A stage removed on disk while its writer still holds it is no longer listed either
    # (and its close, which cannot commit it, says so: §7.1).
    f = open(project / "notes.md", "ab")  # noqa: SIM115 (closed below, expecting an error)
    f.write(b", and more")
    f.flush()
    (stage,) = stage_files(own)
    assert [e["path"] for e in stages_listed(mount)] == [stage]
    (own / stage).unlink()
    assert stages_listed(mount) == []
    with pytest.raises(OSError):  # noqa: PT011 (the errno is the commit's, not this test's)
        f.close()
    assert (own / "notes.md").read_bytes() == b"half"


def test_status_forgets_a_stage_file_of_another_memfs_once_it_is_gone(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    sandbox.write("work", SLUG, "MEMORY.md", "# Memory\n")
    other = sandbox.write("work", SLUG, f"{STAGE_PREFIX}0123abcd4567ef89", "half\n")
    mount = mounts()
    os.listdir(sandbox.mnt(SLUG))  # the project loads: its scan finds the stage file
    assert [(e["path"], e["source"]) for e in stages_listed(mount)] == [(other.name, "work:0")]
    other.unlink()
    wait_until(lambda: stages_listed(mount) == [], SOON, "status forgets the stage file")
