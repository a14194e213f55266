"""Tier 3: PREAMBLE-<N>.md through a real mount (§6, §4, §7.4).

`PREAMBLE-<N>.md`, for N from 256 to 1,048,576, is the rendering `PREAMBLE.md` is under a
budget of N bytes: found by name in every project folder and through `here`, never listed,
read-only, served like PREAMBLE.md (real size, page cache, mmap).

The sources here lie at ``<base>/own/<slug>`` and ``<base>/wrk/<slug>`` beside the
mountpoint ``<base>/mnt``, so that a real file's path has the length of its path in the
mount: `memfs preamble --budget N` (which names real files) and the mount's
PREAMBLE-<N>.md (which names the mount's) then cut at the same bytes, and are equal once
the folder names are swapped. Nothing else may differ.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

from mounting import MOUNT_MARKS, Mounts, Sandbox, SourceDef, errno_of, slug_of, wait_until

from memfs.view.project import history_stamp

pytestmark = MOUNT_MARKS

SOON = 1.0  # §5.4
BAD = ("255", "1048577", "0256", "abc", "+300", "-300", "1200.0", "")


def project(box: Sandbox) -> tuple[Path, str]:
    """A git checkout in the sandbox (its slug is what `here` names) and its slug; its
    memory in both sources, every section present, wide characters where a cut may fall."""
    box.sources = [
        SourceDef("own", f"{box.base}/own/{{slug}}", own=True),
        SourceDef("wrk", f"{box.base}/wrk/{{slug}}"),
    ]
    for source in box.sources:
        source.root.mkdir(parents=True, exist_ok=True)
    box.write_config()
    root = Path(os.path.realpath(box.project_dir("shop")))
    (root / ".git").mkdir()
    slug = slug_of(root)
    wide = "Déploiement ✓ 📝 le mardi.\n"
    box.write("own", slug, "MEMORY.md", "".join(f"- [T{i}](t{i}.md) é\n" for i in range(60)), 3)
    box.write("wrk", slug, "MEMORY.md", "- [Deploys](deploys.md)\n- [T1](t1.md)\n", 2)
    box.write("wrk", slug, "handoff-w_20261125.md", wide * 120, 1)
    for i in range(6):
        source = ("own", "wrk")[i % 2]
        body = f"---\ndescription: topic {i}\n---\n" + wide * (40 * i + 1)
        box.write(source, slug, f"t{i}.md", body, 2 + i / 10)
    box.write("wrk", slug, "deploys.md", wide * 3, 0.5)
    return root, slug


def real_to_mount(box: Sandbox, data: bytes) -> bytes:
    """`memfs preamble`'s output as the mount names things (same lengths, see above)."""
    for source in ("own", "wrk"):
        data = data.replace(f"{box.base}/{source}/".encode(), f"{box.base}/mnt/".encode())
    return data


def cli_preamble(box: Sandbox, root: Path, budget: int) -> bytes:
    done = box.memfs("preamble", root, "--budget", str(budget), "--config", box.config_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.encode()


def test_preamble_n_is_the_preamble_under_a_budget_of_n(sandbox: Sandbox, mounts: Mounts) -> None:
    root, slug = project(sandbox)
    mounts()
    folder = sandbox.mnt(slug)
    whole = sandbox.out("cat", folder / "PREAMBLE-1048576.md")
    assert len(whole) > 4000  # so that the budgets below cut
    for n in (256, 300, 1200, 2500, 8192, 1 << 20):
        name = f"PREAMBLE-{n}.md"
        body = sandbox.out("cat", folder / name)
        assert len(body) <= n, n
        body.decode("utf-8")  # cut between characters only
        # The same rendering as `memfs preamble --budget N`, byte for byte.
        assert body == real_to_mount(sandbox, cli_preamble(sandbox, root, n)), n
        # Served like a file: its real size, and a read-only mmap of it.
        assert int(sandbox.out("stat", "-c", "%s", folder / name)) == len(body)
        assert int(sandbox.out("wc", "-c", folder / name).split()[0]) == len(body)
        fd = os.open(folder / name, os.O_RDONLY)
        try:
            with mmap.mmap(fd, len(body), flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as view:
                assert view[:] == body
        finally:
            os.close(fd)
        # From the project's own folder, through `here`, the same file.
        assert sandbox.out("cat", sandbox.mnt("here", name), cwd=root) == body
    assert sandbox.out("cat", folder / "PREAMBLE.md") == sandbox.out(
        "cat", folder / "PREAMBLE-8192.md"
    )  # the configured budget is 8192
    # Never listed; any other N, or spelling, is no file, through `here` as well.
    listed = sandbox.out("ls", "-a", folder).decode().split()
    assert [n for n in listed if n.startswith("PREAMBLE")] == ["PREAMBLE.md"]
    here = sandbox.out("ls", "-a", sandbox.mnt("here") / ".", cwd=root).decode().split()
    assert [n for n in here if n.startswith("PREAMBLE")] == ["PREAMBLE.md"]
    for bad in BAD:
        assert errno_of(os.stat, folder / f"PREAMBLE-{bad}.md") == errno.ENOENT, bad
        through_here = sandbox.mnt("here", f"PREAMBLE-{bad}.md")
        done = sandbox.run("cat", through_here, cwd=root, check=False)
        assert b"No such file or directory" in done.stderr, bad
        assert sandbox.run("cat", through_here.parent / "t1.md", cwd=root).returncode == 0
    assert errno_of(os.stat, folder / ".history" / "PREAMBLE-1200.md") == errno.ENOENT


def test_preamble_n_follows_changes_and_an_open_keeps_its_snapshot(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    root, slug = project(sandbox)
    mounts()
    path = sandbox.mnt(slug, "PREAMBLE-3000.md")
    before = sandbox.out("cat", path)  # warm: whatever the kernel keeps of it
    fd = os.open(path, os.O_RDONLY)
    try:
        sandbox.write("own", slug, "fresh-finding.md", "FRESH FINDING\n", 0)
        found, _ = wait_until(
            lambda: b"FRESH FINDING" in sandbox.out("cat", path), SOON, "a change in PREAMBLE-N"
        )
        assert found
        after = sandbox.out("cat", path)
        assert len(after) <= 3000
        assert int(sandbox.out("stat", "-c", "%s", path)) == len(after)
        # The open from before reads its own rendering, whole.
        data = b""
        while chunk := os.read(fd, 4096):
            data += chunk
        assert data == before
    finally:
        os.close(fd)
    assert sandbox.out("cat", sandbox.mnt("here", "PREAMBLE-3000.md"), cwd=root) == after


def test_preamble_n_is_read_only_and_a_source_file_of_its_name_is_history(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    root, slug = project(sandbox)
    own = sandbox.write("own", slug, "PREAMBLE-1200.md", "A SOURCE FILE OF THAT NAME\n", 1)
    ordinary = sandbox.write("own", slug, "PREAMBLE-0256.md", "AN ORDINARY FILE\n", 1)
    mounts()
    folder = sandbox.mnt(slug)
    body = sandbox.out("cat", folder / "PREAMBLE-1200.md")
    assert body.startswith(b"# Project memory: ")
    assert b"A SOURCE FILE OF THAT NAME" not in body
    kept = (
        folder / ".history" / "PREAMBLE-1200.md" / f"own@{history_stamp(own.stat().st_mtime_ns)}.md"
    )
    assert sandbox.out("cat", kept) == own.read_bytes()
    assert sandbox.out("cat", folder / "PREAMBLE-0256.md") == ordinary.read_bytes()
    on_disk = {p: p.read_bytes() for p in sandbox.base.joinpath("own").rglob("*") if p.is_file()}
    target = folder / "PREAMBLE-1200.md"
    for flags in (os.O_WRONLY, os.O_RDWR | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
        assert errno_of(os.open, target, flags) == errno.EACCES, flags
    assert errno_of(os.open, folder / "PREAMBLE-300.md", os.O_WRONLY | os.O_CREAT) == errno.EACCES
    assert errno_of(os.unlink, target) == errno.EACCES
    assert errno_of(os.rename, folder / "t0.md", target) == errno.EACCES
    assert errno_of(os.rename, target, folder / "mine.md") == errno.EACCES
    # The kernel answers EEXIST itself for a name its lookup found; either is right.
    assert errno_of(os.mkdir, folder / "PREAMBLE-400.md") in (errno.EEXIST, errno.EACCES)
    here = sandbox.mnt("here", "PREAMBLE-1200.md")
    assert sandbox.run("sh", "-c", f"echo x > {here}", cwd=root, check=False).returncode != 0
    assert {p: p.read_bytes() for p in sandbox.base.joinpath("own").rglob("*") if p.is_file()} == (
        on_disk
    )
