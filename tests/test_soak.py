"""The soak (§5.4, §7.1, issue 13): writers, readers and out-of-band changes at once.

Tier 1 checks the checker: a whole body passes and every kind of tear the issue describes
is caught; a real render of PREAMBLE.md, whole or cut, passes, and a short or spliced one
does not. Tier 3 runs ``tests/bench/soak.py`` for about a minute on a real mount (four
writers of both patterns on the same names, four readers, one out-of-band writer renaming
into the read-only and the own source, one `touch` loop and one append loop on disk in both
sources, on names the readers read) and asserts that no read failed (a file changing under
a reader, on disk or through the mount, never turns a read into an error) and what §7.1
promises: no torn read, no failed operation, every head whole on disk and through the
mount, no temporary file left, memfs alive with a steady RSS. ``MEMFS_SOAK_SECONDS`` changes
the length (the benchmark command ``python -m tests.bench.soak`` is the long run).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from bench import soak
from mounting import Mount, Mounts, Sandbox, slug_of

from memfs.rules import preamble

SECONDS = float(os.environ.get("MEMFS_SOAK_SECONDS", "60"))
# The harness's limits are for tests of a few seconds: this one soaks a minute, then checks.
SOAK_TIMEOUT = SECONDS + 90.0
WATCHDOG = SECONDS + 75.0


# --- tier 1: the checker catches what the issue saw ------------------------------------


def test_whole_bodies_pass_and_every_tear_is_caught() -> None:
    rng = random.Random(1)
    sizes = [100, 3_000, 5_000, 20_000, *(None for _ in range(50))]
    bodies = [soak.make_body(rng, size) for size in sizes]
    for body in bodies:
        assert soak.check_body(body) is None
        assert soak.MIN_BODY <= len(body) <= soak.MAX_BODY
    old, new = bodies[1], bodies[3]  # 3,000 then 20,000 bytes
    tears = {
        "the old size, the new bytes": new[: len(old) + 31],
        "the first page of one, the rest of another": old[:4096] + new[4096:],
        "an empty read": b"",
        "a version and a few bytes more": old + new[len(old) : len(old) + 32],
        "one byte changed": new[:100] + bytes([new[100] ^ 1]) + new[101:],
    }
    for what, data in tears.items():
        assert soak.check_body(data) is not None, what


def test_an_appended_name_passes_with_whole_lines_only() -> None:
    first = soak.APPEND_FIRST
    lines = [soak.appended_line(k) for k in range(300)]
    assert len(first) % soak.APPEND_LINE == 0
    assert {len(line) for line in lines} == {soak.APPEND_LINE}
    for k in (0, 1, 127, 300):
        assert soak.check_appended(first + b"".join(lines[:k])) is None
    whole = first + b"".join(lines[:10])
    tears = {
        "a line cut short": whole[:-5],
        "a line missing": first + b"".join(lines[:3] + lines[4:10]),
        "the first version cut": first[:-1],
        "an empty read": b"",
        "zeros where a line was": whole[:-32] + bytes(32),
    }
    for what, data in tears.items():
        assert soak.check_appended(data) is not None, what
    assert soak.check_named(soak.APPENDED[0], whole) is None
    assert soak.check_named(soak.SHARED[0], whole) is not None


def _render(rng: random.Random, budget: int) -> tuple[bytes, list[bytes]]:
    bodies = [soak.make_body(rng, size) for size in (6_000, 800, 12_000, 300)]
    docs = [preamble.Doc(f"/m/p/f{i}.md", f"f{i}.md", b) for i, b in enumerate(bodies)]
    inp = preamble.PreambleInput(
        project="/home/soak/src/project",
        files_at="/m/p",
        handoff=docs[0],
        index=preamble.Doc("/m/p/MEMORY.md", "MEMORY.md", b"# Memory\n\n- [f1](f1.md)\n"),
        newest=docs[1:],
        rest=[preamble.IndexEntry("g.md", 10, None)],
        more=0,
    )
    return preamble.render(inp, budget=budget, file_cap=4096), bodies


@pytest.mark.parametrize("budget", [8192, 3000, 60_000])
def test_a_render_passes_whole_or_cut_and_a_part_of_one_does_not(budget: int) -> None:
    rendered, bodies = _render(random.Random(budget), budget)
    assert soak.check_preamble(rendered, len(rendered)) is None
    # What a torn read of PREAMBLE.md looks like: a cached size of another render, pages of
    # two renders, an inlined body of another version.
    other, _ = _render(random.Random(budget + 1), budget)
    assert soak.check_preamble(rendered[:-10], len(rendered)) is not None
    assert soak.check_preamble(rendered[:-10], len(rendered) - 10) is not None
    spliced = rendered[:300] + other[300 : len(rendered)]
    assert soak.check_preamble(spliced, len(spliced)) is not None
    swapped = rendered.replace(bodies[1][60:120], bodies[1][60:119] + b"x", 1)
    assert swapped != rendered, "the 800-byte body is inlined at this budget"
    assert soak.check_preamble(swapped, len(swapped)) is not None


def test_the_end_check_finds_leftovers_and_bodies_not_whole(tmp_path: Path) -> None:
    layout = soak.Layout(tmp_path / "mnt" / "p", tmp_path / "own", tmp_path / "ro", tmp_path / "t")
    soak.seed_project(layout, random.Random(2))
    assert soak.check_disk(layout) == []
    (layout.own / "note-1.md.tmp.12.0123456789ab").write_bytes(b"x")
    (layout.own / f"{soak.STAGE_PREFIX}abcd").write_bytes(b"x")
    body = (layout.readonly / "ro-0.md").read_bytes()
    (layout.readonly / "ro-0.md").write_bytes(body[:-1])
    problems = soak.check_disk(layout)
    assert len(problems) == 3, problems


def test_rss_is_steady_unless_it_keeps_growing() -> None:
    flat = [(i * 0.5, 60_000 + (i % 3) * 100) for i in range(120)]
    growing = [(i * 0.5, 60_000 + i * 1_000) for i in range(120)]
    assert soak.rss_summary(flat)["steady"]
    assert not soak.rss_summary(growing)["steady"]
    assert not soak.rss_summary([])["steady"]


# --- tier 3: the soak on a real mount --------------------------------------------------


def _layout(sandbox: Sandbox) -> soak.Layout:
    slug = slug_of(sandbox.project_dir("soak"))
    return soak.Layout(
        view=sandbox.mnt(slug),
        own=sandbox.folder("personal", slug),
        readonly=sandbox.folder("work", slug),
        scratch=sandbox.base / "scratch",
    )


def _mount(sandbox: Sandbox, mounts: Mounts) -> Mount:
    """A mount under the fixture (unmounted at teardown) whose watchdog outlasts the soak."""
    mount = Mount(sandbox, watchdog=WATCHDOG, name="memfs-soak")
    mounts.started.append(mount)
    mounts._logs.append(mount.log_path)  # the list mounts() feeds: the log joins a failure
    return mount.start()


@pytest.mark.mount
@pytest.mark.timeout(SOAK_TIMEOUT)
def test_soak_no_torn_read_no_error_every_head_whole(sandbox: Sandbox, mounts: Mounts) -> None:
    layout = _layout(sandbox)
    soak.seed_project(layout, random.Random(3))
    mount = _mount(sandbox, mounts)
    for name in (*soak.SHARED, *soak.OWN_OOB, *soak.RO_OOB, *soak.APPENDED, soak.PREAMBLE):
        soak.read_whole(layout.view / name)  # loaded and warm, as an agent finds a project
    report = soak.run(layout, SECONDS, daemon_pid=mount.pid)
    print(report.render())
    t = report.tally
    assert set(t.reads) == {"through", "own-oob", "ro-oob", "appended", "preamble"}, report.render()
    writes = {"claude", "shell", "out-of-band", "touch on disk", "append on disk"}
    assert set(t.writes) == writes, report.render()
    assert report.hung == [], report.render()
    # A touch, an append or a rename on disk, or a write through the mount, never fails a read.
    assert report.failed_reads == 0, report.render()
    assert report.torn == 0, report.render()
    assert report.errors == 0, report.render()
    assert report.end_problems == [], report.render()
    assert report.rss["steady"], report.render()
