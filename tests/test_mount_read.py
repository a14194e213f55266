"""Tier 3: the read path through a real FUSE mount (§4, §5, §6, §8, §9, §10).

Each test builds sources in a sandboxed home, mounts memfs in a subprocess and drives the
mount with ordinary tools (ls, cat, stat, wc, find, readlink) and syscalls. Changes made
directly in a source must show within one second with the kernel's caches warm, so those
tests first read what they are about to change.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mounting import (
    MOUNT_MARKS,
    Mount,
    Mounts,
    Sandbox,
    alive,
    errno_of,
    in_mountinfo,
    mount_entries,
    require_fuse,
    slug_of,
    wait_until,
)

from memfs.view.project import history_stamp

pytestmark = MOUNT_MARKS

# One project seen by three tools: pi keeps '_' and '.' in its folder name, memfs
# canonicalises it to Claude Code's slug.
SHOP = "/home/u/src/my_shop.v2"
SLUG = slug_of(Path(SHOP))  # -home-u-src-my-shop-v2
PI_SLUG = SHOP.replace("/", "-")  # -home-u-src-my_shop.v2
SOON = 1.0  # §5.4: changes in a source show within one second


def lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "surrogateescape").splitlines()


def mtime_ns(path: Path) -> int:
    return os.stat(path, follow_symlinks=False).st_mtime_ns


def read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def build_shop(box: Sandbox) -> dict[str, Path]:
    """A project in all three sources: own wins, else the newest; three MEMORY.md indexes."""
    p = {}
    p["own_memory"] = box.write(
        "personal",
        SLUG,
        "MEMORY.md",
        "# Memory\n\n- [Architecture](architecture.md) - own view\n"
        "- [Testing](testing.md) - how to run the suite\n",
        age_days=3,
    )
    p["own_arch"] = box.write("personal", SLUG, "architecture.md", "OWN architecture\n", 5)
    box.write("personal", SLUG, "testing.md", "---\ndescription: suite\n---\nmake test\n", 6)
    # The newest handoff by mtime, but its name's date is older.
    box.write("personal", SLUG, "handoff-a_20261101.md", "OLD-DATED-HANDOFF nov 1\n", 0.5)

    p["work_memory"] = box.write(
        "work",
        SLUG,
        "MEMORY.md",
        "# Memory\n\n- [Architecture](architecture.md) - work view\n"
        "- [Deploys](deploys.md) - the release train\n",
        age_days=1,
    )
    # Newer than the own version, and still not the head.
    p["work_arch"] = box.write("work", SLUG, "architecture.md", "WORK architecture, newer\n", 1)
    p["work_deploys"] = box.write("work", SLUG, "deploys.md", "Fridays, never.\n", 2)
    p["work_notes"] = box.write("work", SLUG, "notes.md", "WORK notes, older\n", 4)
    p["work_handoff"] = box.write(
        "work", SLUG, "handoff-b_20261125.md", "NEWEST-DATED-HANDOFF nov 25\n", 3
    )
    p["pi_notes"] = box.write("pi", PI_SLUG, "notes.md", "PI notes, newer\n", 2)
    p["pi_memory"] = box.write(
        "pi", PI_SLUG, "MEMORY.md", "- [Pi notes](notes.md)\n- [Style](style.md)\n", 2.5
    )
    return p


def section(preamble: bytes, heading: str) -> bytes:
    """The preamble's section starting with ``heading``, up to the next heading."""
    start = preamble.index(heading.encode())
    end = preamble.find(b"\n## ", start + 1)
    return preamble[start : end if end >= 0 else len(preamble)]


def history_names(box: Sandbox, path: str) -> list[str]:
    return sorted(os.listdir(box.mnt(SLUG, ".history", path)))


# --- the root ------------------------------------------------------------------------


def test_root_lists_every_project_and_loads_none(sandbox: Sandbox, mounts: Mounts) -> None:
    expected = set()
    for n, source in enumerate(("personal", "work", "pi")):
        # Overlapping ranges: projects 40-49 and 80-89 live in two sources each.
        for i in range(n * 40, n * 40 + 50):
            path = f"/home/u/src/proj_{i:03d}.x"
            expected.add(slug_of(Path(path)))
            folder = path.replace("/", "-") if source == "pi" else slug_of(Path(path))
            sandbox.write(source, folder, "MEMORY.md", f"- [p{i}](p{i}.md)\n")
    assert len(expected) == 130
    mount = mounts()

    count = sandbox.out("sh", "-c", f"ls '{sandbox.mountpoint}' | wc -l")
    assert int(count) == len(expected) + 2  # + global, here
    names = set(lines(sandbox.out("ls", sandbox.mountpoint)))
    assert names == expected | {"global", "here"}
    # ls -l stats every entry and reads `here`: still no project is read.
    sandbox.out("ls", "-l", sandbox.mountpoint)
    status = mount.status()
    assert status["projects_listed"] == len(expected)
    assert status["projects_loaded"] == 0

    # A project's files are read when it is first looked up: that one only.
    one = sorted(expected)[45]
    assert sandbox.out("cat", sandbox.mnt(one, "MEMORY.md")).startswith(b"- [p45](p45.md)")
    assert mount.status()["projects_loaded"] == 1


# --- merged files ------------------------------------------------------------------------


def test_heads_history_memory_union_and_preamble(sandbox: Sandbox, mounts: Mounts) -> None:
    budget = 1500
    sandbox.write_config(preamble={"budget": budget})
    p = build_shop(sandbox)
    # A long own index that would crowd out everything else without fair sharing.
    filler = "".join(f"- [Topic {i}](topic-{i}.md) - {'x' * 60}\n" for i in range(60))
    sandbox.write("personal", SLUG, "MEMORY.md", p["own_memory"].read_text() + filler, 3)
    mounts()
    mnt = sandbox.mnt(SLUG)

    # Own version wins over a newer one; the other version is history with its bytes.
    assert sandbox.out("cat", mnt / "architecture.md") == b"OWN architecture\n"
    stamp = history_stamp(mtime_ns(p["work_arch"]))
    assert history_names(sandbox, "architecture.md") == [f"work@{stamp}.md"]
    history = mnt / ".history" / "architecture.md" / f"work@{stamp}.md"
    assert sandbox.out("cat", history) == p["work_arch"].read_bytes()
    # No own version: the newest wins (pi over work), work's is history.
    assert sandbox.out("cat", mnt / "notes.md") == b"PI notes, newer\n"
    stamp = history_stamp(mtime_ns(p["work_notes"]))
    assert history_names(sandbox, "notes.md") == [f"work@{stamp}.md"]
    assert sandbox.out("cat", mnt / ".history/notes.md" / f"work@{stamp}.md") == (
        b"WORK notes, older\n"
    )
    # One version only: no history for it.
    assert sandbox.out("cat", mnt / "deploys.md") == b"Fridays, never.\n"
    assert not (mnt / ".history" / "deploys.md").exists()
    # Files report the head's real size and mtime.
    st = os.stat(mnt / "architecture.md")
    assert st.st_size == len(b"OWN architecture\n")
    assert st.st_mtime_ns // 10**9 == mtime_ns(p["own_arch"]) // 10**9
    assert st.st_uid == os.getuid()

    # MEMORY.md: the own index first, then every target the others link; none twice.
    memory = sandbox.out("cat", mnt / "MEMORY.md")
    assert memory.startswith(sandbox.folder("personal", SLUG).joinpath("MEMORY.md").read_bytes())
    for target in ("architecture.md", "testing.md", "deploys.md", "notes.md", "style.md"):
        assert memory.count(f"]({target})".encode()) == 1, target
    assert b"own view" in memory
    assert b"work view" not in memory
    assert int(sandbox.out("stat", "-c", "%s", mnt / "MEMORY.md")) == len(memory)
    assert {n.split("@")[0] for n in history_names(sandbox, "MEMORY.md")} == {"work", "pi"}

    # PREAMBLE.md: real size, under the budget, the newest *dated* handoff inlined.
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    size = int(sandbox.out("stat", "-c", "%s", mnt / "PREAMBLE.md"))
    assert int(sandbox.out("wc", "-c", mnt / "PREAMBLE.md").split()[0]) == size
    assert len(preamble) == size <= budget
    handoff = section(preamble, "## Handoff")
    assert b"handoff-b_20261125.md" in handoff
    assert b"NEWEST-DATED-HANDOFF" in handoff
    assert b"[Testing](testing.md)" in preamble  # the index is not crowded out entirely
    preamble.decode("utf-8")  # never split a character


def test_listing_shows_heads_and_history_folders(sandbox: Sandbox, mounts: Mounts) -> None:
    build_shop(sandbox)
    mounts()
    mnt = sandbox.mnt(SLUG)
    names = lines(sandbox.out("ls", "-A", mnt))
    assert names == sorted(
        [
            ".history",
            "MEMORY.md",
            "PREAMBLE.md",
            "architecture.md",
            "deploys.md",
            "handoff-a_20261101.md",
            "handoff-b_20261125.md",
            "notes.md",
            "testing.md",
        ]
    )
    found = lines(sandbox.out("find", mnt / ".history", "-type", "f"))
    assert len(found) == 4  # architecture (work), notes (work), MEMORY.md (work, pi)
    # Every file find reports can be read, and its size is its byte count.
    for path in lines(sandbox.out("find", mnt, "-type", "f")):
        data = sandbox.out("cat", path)
        assert os.stat(path).st_size == len(data), path


# --- here ----------------------------------------------------------------------------


def test_here_follows_each_callers_cwd(sandbox: Sandbox, mounts: Mounts) -> None:
    alpha = Path(os.path.realpath(sandbox.project_dir("alpha")))
    beta = Path(os.path.realpath(sandbox.project_dir("beta")))
    repo = Path(os.path.realpath(sandbox.project_dir("repo")))
    deep = repo / "src" / "deep"
    deep.mkdir(parents=True)
    (repo / ".git" / "worktrees" / "feature").mkdir(parents=True)
    (repo / ".git" / "worktrees" / "feature" / "commondir").write_text("../..\n")
    worktree = Path(os.path.realpath(sandbox.project_dir("repo-feature")))
    (worktree / ".git").write_text(f"gitdir: {repo}/.git/worktrees/feature\n")

    sandbox.write("personal", slug_of(alpha), "handoff-x_20260101.md", "ALPHA-HANDOFF\n")
    sandbox.write("work", slug_of(beta), "handoff-x_20260101.md", "BETA-HANDOFF\n")
    sandbox.write("pi", str(repo).replace("/", "-"), "handoff-x_20260101.md", "REPO-HANDOFF\n")
    mounts()
    here = sandbox.mnt("here")

    # Two processes at once, one path, two answers.
    procs = [
        subprocess.Popen(
            ["cat", str(here / "PREAMBLE.md")],
            cwd=cwd,
            env=sandbox.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for cwd in (alpha, beta)
    ]
    outs = [proc.communicate(timeout=15) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert b"ALPHA-HANDOFF" in outs[0][0]
    assert b"BETA-HANDOFF" not in outs[0][0]
    assert b"BETA-HANDOFF" in outs[1][0]
    assert b"ALPHA-HANDOFF" not in outs[1][0]

    def target(cwd: Path) -> str:
        return sandbox.out("readlink", here, cwd=cwd).decode().strip()

    assert target(alpha) == slug_of(alpha)
    assert target(beta) == slug_of(beta)
    assert target(repo) == slug_of(repo)
    assert target(deep) == slug_of(repo)  # up to the git work tree
    assert target(worktree) == slug_of(repo)  # a linked worktree maps to its main checkout
    assert b"REPO-HANDOFF" in sandbox.out("cat", here / "PREAMBLE.md", cwd=worktree)
    # Inside the mount, `here` is the project being walked.
    assert target(sandbox.mnt(slug_of(alpha))) == slug_of(alpha)
    # A folder with no memory yet: `here` still names a folder, holding only PREAMBLE.md
    # (§4); it is not listed at the root until something is written into it.
    stray = sandbox.project_dir("stray")
    assert target(stray) == slug_of(Path(os.path.realpath(stray)))
    assert b"REPO-HANDOFF" not in sandbox.out("cat", here / "PREAMBLE.md", cwd=stray)
    assert sandbox.out("ls", "-A", here / ".", cwd=stray).split() == [b"PREAMBLE.md"]
    assert slug_of(Path(os.path.realpath(stray))).encode() not in sandbox.out("ls", sandbox.mnt())


# --- changes made directly in a source --------------------------------------------------


def test_out_of_band_add_modify_delete_show_within_a_second(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    p = build_shop(sandbox)
    keep = sandbox.write("work", SLUG, "same-size.md", "AAAA version one\n", 3)
    mount = mounts()
    mnt = sandbox.mnt(SLUG)
    # Warm every cache the kernel has: entries, attributes, pages.
    for name in ("deploys.md", "same-size.md", "notes.md"):
        sandbox.out("cat", mnt / name)
        os.stat(mnt / name)
    assert errno_of(os.stat, mnt / "new.md") == errno.ENOENT
    before = mount.status()["invalidations"]
    took: dict[str, float] = {}

    def soon(what: str, condition: Callable[[], object]) -> None:
        _, took[what] = wait_until(condition, SOON, what)

    # Add.
    sandbox.write("work", SLUG, "new.md", "brand new\n")
    soon("add: listed", lambda: "new.md" in os.listdir(mnt))
    soon("add: read", lambda: read(mnt / "new.md") == b"brand new\n")
    assert sandbox.out("cat", mnt / "new.md") == b"brand new\n"

    # Modify: a longer body, in place.
    p["work_deploys"].write_bytes(b"Fridays, never. Mondays, carefully.\n")
    soon("modify: stat size", lambda: os.stat(mnt / "deploys.md").st_size == 36)
    soon(
        "modify: read", lambda: read(mnt / "deploys.md") == b"Fridays, never. Mondays, carefully.\n"
    )
    assert int(sandbox.out("stat", "-c", "%s", mnt / "deploys.md")) == 36
    # Modify: same size, other bytes: only the page cache could hide this one.
    keep.write_bytes(b"BBBB version two\n")
    soon("modify same size", lambda: read(mnt / "same-size.md") == b"BBBB version two\n")
    # Touch: agents rank memory by mtime.
    os.utime(keep, ns=(10**18, 10**18))
    soon("touch: mtime", lambda: os.stat(mnt / "same-size.md").st_mtime_ns == 10**18)
    # Modify: an atomic replace, as agents write (temp file, then rename).
    tmp = p["pi_notes"].with_name("notes.md.tmp.123.456")
    tmp.write_bytes(b"PI notes, replaced atomically\n")
    os.replace(tmp, p["pi_notes"])
    soon("atomic replace", lambda: read(mnt / "notes.md") == b"PI notes, replaced atomically\n")
    # An open checks its version on disk (§5.4), so the new bytes may show a moment before
    # the watcher takes in the rename's events, and with them the temp name's going.
    soon("atomic replace: temp name gone", lambda: "notes.md.tmp.123.456" not in os.listdir(mnt))

    # Delete.
    p["work_deploys"].unlink()
    soon("delete: unlisted", lambda: "deploys.md" not in os.listdir(mnt))
    soon("delete: ENOENT", lambda: errno_of(os.stat, mnt / "deploys.md") == errno.ENOENT)
    done = sandbox.run("cat", mnt / "deploys.md", check=False)
    assert done.returncode != 0
    assert b"No such file" in done.stderr
    assert mount.status()["invalidations"] > before
    print("\nseconds until shown:", {k: round(v, 3) for k, v in took.items()})


def test_out_of_band_changes_reach_memory_and_preamble(sandbox: Sandbox, mounts: Mounts) -> None:
    p = build_shop(sandbox)
    mounts()
    mnt = sandbox.mnt(SLUG)
    memory = sandbox.out("cat", mnt / "MEMORY.md")
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    assert b"](ops.md)" not in memory

    # Another account's index gains a link: the union shows it, with its new size.
    with open(p["work_memory"], "a", encoding="utf-8") as f:
        f.write("- [Ops](ops.md) - the pager rota\n")

    def union_has_ops() -> bool:
        body = read(mnt / "MEMORY.md")
        return b"](ops.md)" in body and os.stat(mnt / "MEMORY.md").st_size == len(body)

    wait_until(union_has_ops, SOON, "MEMORY.md union updated")

    # A newer dated handoff lands in a source: PREAMBLE.md inlines it.
    sandbox.write("pi", PI_SLUG, "handoff-c_20261129.md", "LATER-HANDOFF nov 29\n")

    def preamble_has_it() -> bool:
        body = read(mnt / "PREAMBLE.md")
        return b"LATER-HANDOFF" in body and os.stat(mnt / "PREAMBLE.md").st_size == len(body)

    wait_until(preamble_has_it, SOON, "PREAMBLE.md shows the new handoff")
    assert sandbox.out("cat", mnt / "PREAMBLE.md") != preamble
    size = int(sandbox.out("stat", "-c", "%s", mnt / "PREAMBLE.md"))
    assert int(sandbox.out("wc", "-c", mnt / "PREAMBLE.md").split()[0]) == size


def test_new_project_folder_appears_at_the_root(sandbox: Sandbox, mounts: Mounts) -> None:
    build_shop(sandbox)
    mounts()
    assert os.listdir(sandbox.mountpoint)  # the root has been listed once
    late = slug_of(Path("/home/u/src/late"))
    # No source has it yet: an empty folder holding only PREAMBLE.md, not listed (§4).
    assert os.listdir(sandbox.mnt(late)) == ["PREAMBLE.md"]
    assert late not in os.listdir(sandbox.mountpoint)

    # Claude Code makes projects/<slug>/ first and memory/ later; nothing looks the
    # project up before its file is complete (see test_mount_bugs.py for that race).
    slug_folder = sandbox.source("work").folder(late).parent
    slug_folder.mkdir()
    wait_until(lambda: late in os.listdir(sandbox.mountpoint), SOON, "new project listed")
    sandbox.write("work", late, "MEMORY.md", "- [Late](late.md)\n")
    wait_until(
        lambda: read(sandbox.mnt(late, "MEMORY.md")) == b"- [Late](late.md)\n",
        SOON,
        "file in a new project",
    )
    # A second source folder of an already loaded project (pi spells the slug its way),
    # moved in whole.
    ready = sandbox.base / "pi-ready"
    ready.mkdir()
    (ready / "pi.md").write_text("from pi\n")
    ready.rename(sandbox.source("pi").root / "-home-u-src-late")
    wait_until(lambda: read(sandbox.mnt(late, "pi.md")) == b"from pi\n", SOON, "pi folder")
    # A project folder removed from its only source leaves the root.
    shutil.rmtree(slug_folder)
    (sandbox.source("pi").root / "-home-u-src-late" / "pi.md").unlink()
    (sandbox.source("pi").root / "-home-u-src-late").rmdir()
    wait_until(lambda: late not in os.listdir(sandbox.mountpoint), SOON, "project gone")
    # Its name is a project with no memory again: an empty folder (§4).
    wait_until(lambda: os.listdir(sandbox.mnt(late)) == ["PREAMBLE.md"], SOON, "empty again")


# --- caching -----------------------------------------------------------------------------


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {op: after.get(op, 0) - before.get(op, 0) for op in sorted({*before, *after})}


def nonzero(d: dict[str, int]) -> dict[str, int]:
    return {op: n for op, n in d.items() if n}


def test_second_read_of_an_unchanged_file_reaches_no_read(sandbox: Sandbox, mounts: Mounts) -> None:
    build_shop(sandbox)
    mount = mounts()
    mnt = sandbox.mnt(SLUG)
    seen: dict[str, dict[str, int]] = {}

    def measure(label: str, *cmd: str | Path) -> dict[str, int]:
        before = mount.requests()
        sandbox.out(*cmd)
        seen[label] = nonzero(delta(before, mount.requests()))
        return seen[label]

    measure("cat merged, nothing cached", "cat", mnt / "notes.md")
    measure("cat PREAMBLE.md, nothing cached", "cat", mnt / "PREAMBLE.md")
    measure("stat cold", "stat", "-c", "%s", mnt / "testing.md")
    warm_stat = measure("stat warm", "stat", "-c", "%s", mnt / "testing.md")
    measure("ls -l cold", "ls", "-l", mnt)
    measure("ls -l warm", "ls", "-l", mnt)
    measure("cat merged cold", "cat", mnt / "architecture.md")
    second_cat = measure("cat merged warm", "cat", mnt / "architecture.md")
    warm_cat = measure("cat merged warm 3rd", "cat", mnt / "architecture.md")
    measure("cat MEMORY.md cold", "cat", mnt / "MEMORY.md")
    second_memory = measure("cat MEMORY.md warm", "cat", mnt / "MEMORY.md")
    warm_memory = measure("cat MEMORY.md warm 3rd", "cat", mnt / "MEMORY.md")
    measure("cat PREAMBLE.md cold", "cat", mnt / "PREAMBLE.md")
    warm_preamble = measure("cat PREAMBLE.md warm", "cat", mnt / "PREAMBLE.md")
    print("\nrequests per operation:")
    for label, counts in seen.items():
        print(f"  {label:<32} {sum(counts.values()):>3}  {counts}")

    assert warm_stat == {}
    for counts in (second_cat, second_memory):
        assert counts.get("read", 0) == 0, counts
        assert counts.get("lookup", 0) == 0, counts
        assert counts.get("open", 0) == 1, counts
        # After a read that reached the daemon, the kernel asks one getattr at the next
        # fstat (seen with noatime too: fuse_invalidate_atime); from then on, nothing.
        assert counts.get("getattr", 0) <= 1, counts
    # Entries, attributes and pages cached: open, flush, release and nothing else.
    for counts in (warm_cat, warm_memory):
        assert counts == {"open": 1, "flush": 1, "release": 1}, counts
    # PREAMBLE.md is served like a plain file (§6): pages kept, the same three requests.
    assert warm_preamble == {"open": 1, "flush": 1, "release": 1}, warm_preamble


def test_warm_cats_still_see_every_change(sandbox: Sandbox, mounts: Mounts) -> None:
    p = build_shop(sandbox)
    mount = mounts()
    arch = sandbox.mnt(SLUG, "architecture.md")

    def mount_reads() -> int:
        return mount.requests().get("read", 0)

    def warm(body: bytes) -> None:
        """cat until the kernel serves the file from its cache: a cat that reaches memfs
        with no read (open, flush, release only)."""
        assert sandbox.out("cat", arch) == body

        def cached() -> bool:
            before = mount_reads()
            assert sandbox.out("cat", arch) == body
            return mount_reads() == before

        wait_until(cached, SOON, "a warm cat served from the page cache")

    def shows(old: bytes, new: bytes, what: str) -> None:
        """Within §5.4's second; every read meanwhile is one version, whole."""

        def seen() -> bool:
            got = read(arch)
            assert got in (old, new), (what, got)
            return got == new

        wait_until(seen, SOON, what)

    warm(b"OWN architecture\n")
    # Through the mount, in place (a shell's O_TRUNC): the same inode, seen at once.
    sandbox.run("sh", "-c", 'printf "rewritten through the mount\\n" > "$0"', arch)
    assert read(arch) == b"rewritten through the mount\n"
    warm(b"rewritten through the mount\n")
    # On disk, in place, the same size: the kept descriptor's file changed under the share.
    p["own_arch"].write_bytes(b"REWRITTEN THROUGH THE MOUNT\n")
    shows(b"rewritten through the mount\n", b"REWRITTEN THROUGH THE MOUNT\n", "in place on disk")
    warm(b"REWRITTEN THROUGH THE MOUNT\n")
    # On disk, a sync tool's rename onto the name: the view's version changes.
    tmp = p["own_arch"].with_name(".architecture.md.sync")
    tmp.write_bytes(b"as another machine wrote it\n")
    os.replace(tmp, p["own_arch"])
    shows(b"REWRITTEN THROUGH THE MOUNT\n", b"as another machine wrote it\n", "renamed onto")
    warm(b"as another machine wrote it\n")


def test_a_warm_cat_sees_the_head_move_to_another_source(sandbox: Sandbox, mounts: Mounts) -> None:
    """The file read warm stays as it was on disk while the head moves to another source's
    newer version: the warm open (kernel.py) must see that the view changed."""
    build_shop(sandbox)
    mounts()
    deploys = sandbox.mnt(SLUG, "deploys.md")
    for _ in range(3):  # the third open is a warm one
        assert sandbox.out("cat", deploys) == b"Fridays, never.\n"
    sandbox.write("pi", PI_SLUG, "deploys.md", "Thursdays now.\n", 0)

    def seen() -> bool:
        got = sandbox.out("cat", deploys)
        assert got in (b"Fridays, never.\n", b"Thursdays now.\n"), got
        return got == b"Thursdays now.\n"

    wait_until(seen, SOON, "pi's newer deploys.md as the head")
    for _ in range(3):
        assert sandbox.out("cat", deploys) == b"Thursdays now.\n"


def test_inode_numbers_are_stable_across_walks(sandbox: Sandbox, mounts: Mounts) -> None:
    p = build_shop(sandbox)
    for i in range(20):
        sandbox.write("work", SLUG, f"sub/dir{i % 3}/topic-{i}.md", f"topic {i}\n")
    mounts()

    def walk() -> dict[str, int]:
        found = {}
        for folder, dirs, files in os.walk(sandbox.mnt(SLUG)):
            for name in dirs + files:
                path = os.path.join(folder, name)
                found[path] = os.lstat(path).st_ino
        return found

    first = walk()
    assert len(first) > 30
    assert len(set(first.values())) == len(first)  # one number per path
    assert walk() == first
    # `find` sees the same numbers as stat.
    out = lines(sandbox.out("find", sandbox.mnt(SLUG), "-printf", "%i %p\n"))
    by_find = {path: int(ino) for ino, path in (line.split(" ", 1) for line in out)}
    assert {k: v for k, v in by_find.items() if k in first} == first
    # A change in a source drops entries from the kernel's cache; looked up again, the
    # paths keep their numbers.
    p["work_arch"].write_text("WORK architecture, changed\n")
    p["work_deploys"].write_text("Changed deploys\n")
    deploys = sandbox.mnt(SLUG, "deploys.md")
    wait_until(lambda: read(deploys) == b"Changed deploys\n", SOON, "change shown")
    # PREAMBLE.md's rendering changed with them: a new rendering is a new inode (§6:
    # no cached page of one may mix with another). The kernel's entry of the name is
    # dropped by the invalidation task, which may come a moment after the new bytes show.
    preamble = str(sandbox.mnt(SLUG, "PREAMBLE.md"))
    wait_until(lambda: os.lstat(preamble).st_ino != first[preamble], SOON, "new rendering")
    again = walk()
    assert again.pop(preamble) != first.pop(preamble)
    common = {k: v for k, v in again.items() if k in first}
    assert common == {k: v for k, v in first.items() if k in again}
    # The work history of architecture.md has a new stamp, so a new name: the rest stays.
    assert len(common) >= len(first) - 1


# --- lifecycle -----------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_unmounts_and_exits_zero(
    sandbox: Sandbox, mounts: Mounts, signum: signal.Signals
) -> None:
    build_shop(sandbox)
    mount = mounts()
    assert sandbox.out("cat", sandbox.mnt(SLUG, "deploys.md")) == b"Fridays, never.\n"
    mount.signal(signum)
    assert mount.wait_exit() == 0, mount.log_text()
    assert not os.path.ismount(sandbox.mountpoint)
    assert not in_mountinfo(mount.mountpoint)
    assert os.listdir(sandbox.mountpoint) == []  # the plain, empty folder again
    assert "Traceback" not in mount.log_text()


def test_sigterm_with_a_file_open_in_the_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    build_shop(sandbox)
    mount = mounts()
    hold = "import sys; f = open(sys.argv[1]); sys.stdin.read()"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(sandbox.mnt(SLUG, "deploys.md"))],
        cwd=sandbox.mnt(SLUG),
        stdin=subprocess.PIPE,
        env=sandbox.env,
    )
    try:
        wait_until(lambda: mount.status()["open_handles"] >= 1, 10, "the holder opened it")
        mount.signal(signal.SIGTERM)
        assert mount.wait_exit() == 0, mount.log_text()
        assert not in_mountinfo(mount.mountpoint)
    finally:
        holder.kill()
        holder.communicate(timeout=10)


def test_background_mount_returns_live_and_umount_stops_it(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    build_shop(sandbox)
    done = sandbox.memfs("mount", sandbox.mountpoint, "--config", sandbox.config_path)
    pid = mounts.adopt_output(done.stdout)
    assert done.returncode == 0, done.stderr
    assert pid is not None, done.stdout
    # Live on return: no waiting.
    assert os.path.ismount(sandbox.mountpoint)
    assert read(sandbox.mnt(SLUG, "deploys.md")) == b"Fridays, never.\n"

    again = sandbox.memfs("mount", sandbox.mountpoint, "--config", sandbox.config_path)
    assert again.returncode == 2
    assert "already a mount point" in again.stderr
    assert "Traceback" not in again.stderr

    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert not in_mountinfo(sandbox.mountpoint)
    wait_until(lambda: not alive(pid), 10, "the daemon exits")
    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 2
    assert "nothing is mounted" in done.stderr


def test_umount_clears_a_stale_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    build_shop(sandbox)
    crashed = mounts()
    crashed.signal(signal.SIGKILL)
    assert crashed.wait_exit() == -signal.SIGKILL
    # A stat of the root may be answered from the kernel's attribute cache; a listing
    # always reaches the (dead) connection.
    assert errno_of(os.listdir, sandbox.mountpoint) == errno.ENOTCONN
    assert in_mountinfo(crashed.mountpoint)
    done = sandbox.memfs("umount", sandbox.mountpoint)
    assert done.returncode == 0, done.stderr
    assert not in_mountinfo(sandbox.mountpoint)
    assert os.listdir(sandbox.mountpoint) == []


# --- odd inputs ----------------------------------------------------------------------


def test_odd_inputs_do_not_crash_the_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    limit = 4096
    sandbox.write_config(limits={"max_file_bytes": limit})
    folder = sandbox.folder("work", SLUG)
    sandbox.write("work", SLUG, "good.md", "fine\n")
    outside = sandbox.base / "outside.md"
    outside.write_text("SECRET outside every source\n")
    (folder / "link.md").symlink_to(outside)
    (folder / "inner-link.md").symlink_to("good.md")
    (folder / "linkdir").symlink_to(sandbox.base)
    os.mkfifo(folder / "pipe.md")
    sandbox.write("work", SLUG, "big.md", b"x" * (limit + 1))
    sandbox.write("work", SLUG, "edge.md", b"y" * limit)
    latin1 = os.fsdecode(b"caf\xe9.md")
    sandbox.write("work", SLUG, latin1, "a latin-1 name\n")
    bad_body = b"---\ndescription: \xff\xfe bad\n---\n\xc3\x28 invalid \xe2\x82 utf-8\n"
    sandbox.write("work", SLUG, "bad.md", bad_body)
    sandbox.write("personal", SLUG, "MEMORY.md", b"# Own \xff index\n- [Good](good.md)\n")
    sandbox.write("work", SLUG, "MEMORY.md", b"# Work \xfe index\n- [Bad](bad.md) \xc3\x28\n", 1)
    # A project folder whose name is not UTF-8, and one that is a link to a folder of the
    # user's: both show, the link followed (issue 38; nothing inside a source is).
    sandbox.write("work", os.fsdecode(b"-home-u-caf\xe9"), "x.md", "odd slug\n")
    (sandbox.source("pi").root / "-home-u-linked").symlink_to(sandbox.folder("work", SLUG))
    mount = mounts()
    mnt = sandbox.mnt(SLUG)

    names = set(os.listdir(os.fsencode(mnt)))
    assert names == {
        b".history",
        b"MEMORY.md",
        b"PREAMBLE.md",
        b"bad.md",
        b"caf\xe9.md",
        b"edge.md",
        b"good.md",
    }
    for name in ("link.md", "inner-link.md", "linkdir", "pipe.md", "big.md"):
        assert errno_of(os.lstat, mnt / name) == errno.ENOENT, name
    # A FIFO is neither served nor waited on.
    done = sandbox.run("cat", mnt / "pipe.md", check=False)
    assert done.returncode != 0
    left_out = mount.status()["left_out"]
    assert {"big.md", "pipe.md"} <= {item["path"] for item in left_out}, left_out
    assert sandbox.out("cat", os.fsencode(mnt) + b"/caf\xe9.md") == b"a latin-1 name\n"
    assert sandbox.out("cat", mnt / "bad.md") == bad_body
    assert os.stat(mnt / "edge.md").st_size == limit
    memory = sandbox.out("cat", mnt / "MEMORY.md")
    assert memory.startswith(b"# Own \xff index\n- [Good](good.md)\n")
    assert b"- [Bad](bad.md) \xc3\x28" in memory
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    assert len(preamble) == os.stat(mnt / "PREAMBLE.md").st_size
    assert b"SECRET" not in preamble
    # Only text is inlined (§6): a file that is not valid UTF-8 is indexed, not inlined,
    # and PREAMBLE.md stays valid UTF-8 (tests/test_preamble.py).
    assert b"# Own \xff index" not in preamble
    assert b"not text, not inlined" in preamble
    preamble.decode("utf-8")

    root = set(os.listdir(sandbox.mountpoint))
    assert "-home-u-caf-" in root
    assert "-home-u-linked" in root
    assert read(sandbox.mnt("-home-u-linked", "edge.md")) == b"y" * limit
    assert read(sandbox.mnt("-home-u-caf-", "x.md")) == b"odd slug\n"

    # Names over NAME_MAX: ENAMETOOLONG, at the root and in a project; 255 bytes is fine.
    assert errno_of(os.stat, mnt / ("n" * 256)) == errno.ENAMETOOLONG
    assert errno_of(os.stat, sandbox.mnt("-" + "n" * 300)) == errno.ENAMETOOLONG
    assert errno_of(os.stat, mnt / ("é" * 128)) == errno.ENAMETOOLONG  # 256 bytes
    assert errno_of(os.stat, mnt / ("n" * 255)) == errno.ENOENT
    done = sandbox.run("ls", mnt / ("n" * 300), check=False)
    assert b"File name too long" in done.stderr

    # Still serving, same daemon.
    assert mount.proc is not None
    assert mount.proc.poll() is None
    assert read(mnt / "good.md") == b"fine\n"
    assert mount.status()["projects_loaded"] >= 1


# --- the harness itself --------------------------------------------------------------


def test_harness_frees_a_stuck_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    """A stopped daemon hangs every request; teardown must still leave nothing mounted."""
    build_shop(sandbox)
    mount = mounts()
    mount.signal(signal.SIGSTOP)
    stuck = subprocess.Popen(
        ["stat", str(sandbox.mnt(SLUG, "notes.md"))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: stuck.poll() is not None, 0.3, must=False)
        assert stuck.poll() is None  # hung on the stopped daemon
        forced = mount.close(deadline=2.0)
        assert forced, "a stopped daemon cannot exit on SIGTERM"
        assert not in_mountinfo(mount.mountpoint)
        assert stuck.wait(10) != 0  # released with an error, not left hanging
    finally:
        if stuck.poll() is None:
            stuck.kill()
            stuck.wait(10)


def test_no_fuse_skips_outside_ci_and_fails_in_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "fuse"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="missing on this machine"):
        require_fuse(missing)
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require_fuse(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_fuse(missing)


def test_mount_helper_reports_a_daemon_that_cannot_start(sandbox: Sandbox) -> None:
    """The mount fails visibly with the log when the config is refused."""
    require_fuse()
    sandbox.config_path.write_text('[[source]]\nname = "x"\npath = "/nowhere"\n')
    mount = Mount(sandbox)
    try:
        with pytest.raises(pytest.fail.Exception, match="before the mount was live"):
            mount.start()
    finally:
        mount.close()
    assert "{slug}" in mount.log_text()


def test_reserved_names_in_a_source_show_as_history_only(sandbox: Sandbox, mounts: Mounts) -> None:
    build_shop(sandbox)
    own = sandbox.write("personal", SLUG, "PREAMBLE.md", "A SOURCE FILE NAMED PREAMBLE\n", 1)
    sandbox.write("work", SLUG, ".history/old.md", "SOURCE HISTORY FOLDER\n", 1)
    big = bytes(range(256)) * 2000  # 512,000 bytes: many read requests
    sandbox.write("work", SLUG, "big-but-allowed.md", big)
    mounts()
    mnt = sandbox.mnt(SLUG)
    preamble = sandbox.out("cat", mnt / "PREAMBLE.md")
    assert preamble.startswith(b"# ")
    assert b"A SOURCE FILE NAMED PREAMBLE" not in preamble
    names = history_names(sandbox, "PREAMBLE.md")
    assert names == [f"personal@{history_stamp(mtime_ns(own))}.md"]
    assert sandbox.out("cat", mnt / ".history/PREAMBLE.md" / names[0]) == own.read_bytes()
    assert sandbox.out("cat", mnt / ".history/old.md") == b"SOURCE HISTORY FOLDER\n"
    assert "old.md" not in os.listdir(mnt)
    assert sandbox.out("cat", mnt / "big-but-allowed.md") == big
    assert int(sandbox.out("wc", "-c", mnt / "big-but-allowed.md").split()[0]) == len(big)


def test_out_of_band_folder_moves_links_and_growth(sandbox: Sandbox, mounts: Mounts) -> None:
    sandbox.write_config(limits={"max_file_bytes": 4096})
    p = build_shop(sandbox)
    other = slug_of(Path("/home/u/src/other"))
    sandbox.write("work", other, "o.md", "other project\n")
    mounts()
    mnt = sandbox.mnt(SLUG)
    for name in ("notes.md", "deploys.md", "architecture.md"):
        sandbox.out("cat", mnt / name)
    assert sandbox.out("cat", sandbox.mnt(other, "o.md")) == b"other project\n"

    # A head replaced by a symlink out of band is never served, not even for a moment.
    secret = sandbox.base / "secret.md"
    secret.write_text("SECRET\n")
    p["pi_notes"].unlink()
    p["pi_notes"].symlink_to(secret)
    wait_until(lambda: read(mnt / "notes.md") == b"WORK notes, older\n", SOON, "link not served")
    # A file that grows over the cap leaves the view.
    p["work_deploys"].write_bytes(b"d" * 5000)
    wait_until(lambda: errno_of(os.stat, mnt / "deploys.md") == errno.ENOENT, SOON, "too big")
    # A whole project folder renamed in its source: the old slug goes, the new one comes.
    moved = slug_of(Path("/home/u/src/moved"))
    old_folder = sandbox.source("work").folder(other).parent
    old_folder.rename(old_folder.with_name(moved))
    wait_until(lambda: moved in os.listdir(sandbox.mountpoint), SOON, "moved project listed")
    wait_until(lambda: other not in os.listdir(sandbox.mountpoint), SOON, "old slug gone")
    assert read(sandbox.mnt(moved, "o.md")) == b"other project\n"
    # A source's memory folder removed whole: its versions go, the others stay.
    shutil.rmtree(sandbox.source("work").folder(SLUG))
    wait_until(
        lambda: (
            read(mnt / "architecture.md") == b"OWN architecture\n"
            and not os.path.exists(mnt / ".history" / "architecture.md")
        ),
        SOON,
        "work's versions gone",
    )
    assert "notes.md" not in os.listdir(mnt)  # pi's is a link, work's is gone


# --- regressions: bugs the tests above did not reach ------------------------------


def read_fd(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    return data


def test_stale_mount_is_cleared_by_the_next_mount(sandbox: Sandbox, mounts: Mounts) -> None:
    """§9. A stat of the crashed root is answered from the kernel's attribute cache, so
    staleness must be probed with a call that reaches the connection (statfs)."""
    sandbox.write("work", "-p", "a.md", "a\n")
    crashed = mounts()
    crashed.signal(signal.SIGKILL)
    assert crashed.wait_exit() == -signal.SIGKILL
    assert errno_of(os.statvfs, sandbox.mountpoint) == errno.ENOTCONN

    done = sandbox.memfs("mount", sandbox.mountpoint, "--config", sandbox.config_path)
    mounts.adopt_output(done.stdout)
    assert done.returncode == 0, done.stderr
    assert read(sandbox.mnt("-p", "a.md")) == b"a\n"
    assert len(mount_entries(crashed.mountpoint)) == 1  # cleared, not stacked
    assert sandbox.memfs("umount", sandbox.mountpoint).returncode == 0
    assert not in_mountinfo(sandbox.mountpoint)


def test_files_written_into_a_new_memory_folder_show(sandbox: Sandbox, mounts: Mounts) -> None:
    """§5.4. A folder scanned before it is watched loses, for good, a file created or
    written in between: memory/ made and written right after its project was looked up."""
    mounts()
    misses = []
    for n in range(40):
        if len(misses) >= 3:
            break
        slug = f"-home-u-late{n}"
        os.makedirs(sandbox.source("work").folder(slug).parent)
        wait_until(lambda s=slug: s in os.listdir(sandbox.mountpoint), SOON, "listed")
        os.listdir(sandbox.mnt(slug))  # looked up while memory/ does not exist yet
        for i in range(10):
            sandbox.write("work", slug, f"topic-{i}.md", f"topic {i}\n")
        for i in range(10):
            path = sandbox.mnt(slug, f"topic-{i}.md")
            ok, _ = wait_until(
                lambda p=path, i=i: read(p) == f"topic {i}\n".encode(), SOON, "shown", must=False
            )
            if not ok:
                misses.append(f"{slug}/topic-{i}.md")
    assert misses == [], f"{len(misses)} files in new memory folders never showed: {misses}"


def test_files_written_into_a_new_subfolder_show(sandbox: Sandbox, mounts: Mounts) -> None:
    """The same race for a sub-folder made in a loaded project (mkdir -p, then write)."""
    sandbox.write("work", "-p", "a.md", "a\n")
    mounts()
    os.listdir(sandbox.mnt("-p"))
    misses = []
    for n in range(40):
        if len(misses) >= 3:
            break
        for i in range(10):
            sandbox.write("work", "-p", f"new{n}/sub/f{i}.md", f"hello {i}\n")
        for i in range(10):
            path = sandbox.mnt("-p", f"new{n}", "sub", f"f{i}.md")
            ok, _ = wait_until(
                lambda p=path, i=i: read(p) == f"hello {i}\n".encode(), SOON, "shown", must=False
            )
            if not ok:
                misses.append(f"new{n}/sub/f{i}.md")
    assert misses == [], f"{len(misses)} files in new sub-folders never showed: {misses}"


def test_future_dated_file_coming_due_does_not_truncate_preamble(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """§6. PREAMBLE.md grows by itself when a future-dated file comes due; a size the
    kernel cached from before must not cut `cat` short (mid-line, with no marker)."""
    sandbox.write("work", "-p", "a.md", "a\n")
    mounts()
    preamble = sandbox.mnt("-p", "PREAMBLE.md")
    os.listdir(sandbox.mnt("-p"))
    future = sandbox.write("work", "-p", "future.md", "F" * 300 + "\n")
    due = time.time_ns() + 2 * 10**9
    os.utime(future, ns=(due, due))
    wait_until(lambda: "future.md" in os.listdir(sandbox.mnt("-p")), SOON, "listed")
    assert b"FFFF" not in sandbox.out("cat", preamble)
    os.stat(preamble)  # the kernel now holds the size of today's preamble
    wait_until(lambda: time.time_ns() > due + 10**8, 5, "the file comes due")
    body = sandbox.out("cat", preamble)
    assert b"FFFF" in body, body[-120:]


def test_open_preamble_reads_its_whole_snapshot(sandbox: Sandbox, mounts: Mounts) -> None:
    """§6: one open reads one consistent snapshot, even when the preamble shrinks between
    open and read (the kernel bounds cached reads by the inode's current size)."""
    sandbox.write("work", "-p", "a.md", "a\n")
    big = sandbox.write("work", "-p", "big.md", "B" * 2000 + "\n")
    mounts()
    preamble = sandbox.mnt("-p", "PREAMBLE.md")
    snapshot = read(preamble)
    fd = os.open(preamble, os.O_RDONLY)
    try:
        big.unlink()
        wait_until(lambda: os.stat(preamble).st_size < len(snapshot), SOON, "shrunk")
        assert read_fd(fd) == snapshot
    finally:
        os.close(fd)


def test_source_folder_named_here_does_not_shadow_the_here_link(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """§4: slugs begin with '-'. A folder `here` in a source root is no project: listed,
    its directory entry would hide the `here` link from every caller for an hour."""
    alpha = Path(os.path.realpath(sandbox.project_dir("alpha")))
    sandbox.write("work", slug_of(alpha), "a.md", "ALPHA\n")
    sandbox.write("pi", "here", "h.md", "not a project\n")
    mounts()
    names = sandbox.out("ls", sandbox.mountpoint).decode().split()
    assert names.count("here") == 1, names
    link = subprocess.run(
        ["readlink", str(sandbox.mnt("here"))],
        cwd=alpha,
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    assert link.stdout.strip() == slug_of(alpha), link


def test_under_a_low_descriptor_limit_every_read_and_writer_works(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """kernel.version_fd_limit: a daemon whose hard limit is 1,024 keeps 384 versions'
    descriptors; the files past them are opened anew at each read, and the rest of the
    limit leaves room for 100 writers open at once while every file is read again."""
    topics = {f"topic-{i:04}.md": f"topic {i}\n".encode() for i in range(1000)}
    for name, body in topics.items():
        sandbox.write("personal", SLUG, name, body)
    mount = mounts(nofile=1024)
    limits = Path(f"/proc/{mount.pid}/limits").read_text()
    assert re.search(r"^Max open files\s+1024\s+1024\s", limits, re.M), limits
    folder = mount.mountpoint / SLUG
    for _ in range(2):
        for name, body in topics.items():
            assert read(folder / name) == body
    news = {f"new-{i:03}.md": f"new {i}\n".encode() for i in range(100)}
    writers = []
    try:
        for name, body in news.items():
            writers.append(open(folder / name, "wb"))  # noqa: SIM115
            writers[-1].write(body)
            writers[-1].flush()
        for name, body in topics.items():
            assert read(folder / name) == body
    finally:
        for f in writers:
            f.close()
    for name, body in news.items():
        assert read(folder / name) == body
        assert (sandbox.folder("personal", SLUG) / name).read_bytes() == body
