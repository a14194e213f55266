"""Versions of every source's files, however they are written (§7.2, issue 37): a replace
by temp+rename, a rewrite in place, an `rm` and a consolidation made straight on disk, in
the own source and in a read-only one, each keeps the version it replaced; `memfs log`
lists it as made on disk; `memfs restore` puts it back (a read-only source's as an own
copy); the read-only source stays byte-identical. Real mount (tier 3)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mount, Mounts, Sandbox, set_age, slug_of, wait_until

from memfs.disk import machines

pytestmark = MOUNT_MARKS

SLUG = slug_of(Path("/home/u/src/shop"))
OWN, READ_ONLY = "personal", "work"
STILL = 1.2  # a little more than the second a file must stand still to be read


def _mount(sandbox: Sandbox, mounts: Mounts) -> Mount:
    """Mounted, once the keeper read every file there at the start."""
    m = mounts()
    # (.get: run against a memfs with no keeper, these tests fail on what they check.)
    wait_until(lambda: m.status().get("disk_swept", True), 20, what="the keeper's first pass")
    return m


def _bodies(sandbox: Sandbox, source: str, path: str) -> dict[str, bytes]:
    """``source``'s versions of ``path`` as the mount shows them, by view name."""
    folder = sandbox.mnt(SLUG, ".history", path)
    if not folder.is_dir():
        return {}
    return {n: (folder / n).read_bytes() for n in os.listdir(folder) if n.startswith(source + "@")}


def _wait_bodies(sandbox: Sandbox, source: str, path: str, want: set[bytes]) -> dict[str, bytes]:
    wait_until(
        lambda: set(_bodies(sandbox, source, path).values()) >= want,
        15,
        what=f"{source}'s versions of {path}: {sorted(want)}",
    )
    return _bodies(sandbox, source, path)


def _tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` by its hash (and mode): what byte-identical compares."""
    found = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        if p.is_file():
            found[str(p.relative_to(root))] = (
                f"{st.st_mode:o} " + hashlib.sha256(p.read_bytes()).hexdigest()
            )
        else:
            found[str(p.relative_to(root))] = f"{st.st_mode:o}"
    return found


def _log(sandbox: Sandbox) -> list[dict[str, object]]:
    r = sandbox.memfs("log", "--json", "-n", "0", sandbox.mnt(SLUG))
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout))


def _on_disk(sandbox: Sandbox, source: str, path: str) -> list[dict[str, object]]:
    return [
        c
        for c in _log(sandbox)
        if c["way"] == "disk" and c["source"] == source and c["path"] == path
    ]


def _restore_each(sandbox: Sandbox, source: str, path: str, kept: dict[str, bytes]) -> None:
    """Each kept version, restored by its `.history` path, is what the mount shows after."""
    for name, body in sorted(kept.items()):
        r = sandbox.memfs("restore", sandbox.mnt(SLUG, ".history", path, name))
        assert r.returncode == 0, r.stderr
        assert sandbox.mnt(SLUG, path).read_bytes() == body, name
        # It landed in the own source: a read-only source is never written.
        assert sandbox.folder(OWN, SLUG).joinpath(path).read_bytes() == body


def _replace(target: Path, body: str) -> None:
    temp = target.with_name(f".{target.name}.tmp.{os.getpid()}")
    temp.write_text(body)
    os.rename(temp, target)


def _rewrite_in_place(target: Path, body: str) -> None:
    with open(target, "r+") as f:
        f.truncate(0)
        f.write(body)


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
@pytest.mark.parametrize("way", ["replace", "rewrite"])
def test_three_changes_keep_every_body(
    sandbox: Sandbox, mounts: Mounts, source: str, way: str
) -> None:
    """Three replaces by temp+rename (Claude Code), or three rewrites in place (Gemini CLI)
    of a file there at the start: every body before kept, listed, restorable."""
    target = sandbox.write(source, SLUG, "notes.md", "v0\n", age_days=1)
    _mount(sandbox, mounts)
    for n in range(1, 4):
        if way == "replace":
            _replace(target, f"v{n}\n")
            time.sleep(0.2)
        else:
            time.sleep(STILL)  # each version stood still a second before its rewrite began
            _rewrite_in_place(target, f"v{n}\n")
    kept = _wait_bodies(sandbox, source, "notes.md", {b"v0\n", b"v1\n", b"v2\n"})
    assert sorted(kept.values()) == [b"v0\n", b"v1\n", b"v2\n"]
    wait_until(lambda: len(_on_disk(sandbox, source, "notes.md")) == 3, 10, what="journal")
    changes = _on_disk(sandbox, source, "notes.md")
    assert [c["what"] for c in changes] == [way] * 3
    assert {c["kept"] for c in changes} == {f".history/notes.md/{n}" for n in kept}
    text = sandbox.memfs("log", sandbox.mnt(SLUG)).stdout
    assert "on disk" in text
    assert "unknown" in text
    before = _tree(sandbox.source(READ_ONLY).root)
    _restore_each(sandbox, source, "notes.md", kept)
    assert _tree(sandbox.source(READ_ONLY).root) == before


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_rm_keeps_the_last_body_and_restore_brings_it_back(
    sandbox: Sandbox, mounts: Mounts, source: str
) -> None:
    target = sandbox.write(source, SLUG, "notes.md", "the only copy\n", age_days=1)
    _mount(sandbox, mounts)
    target.unlink()
    kept = _wait_bodies(sandbox, source, "notes.md", {b"the only copy\n"})
    wait_until(lambda: not sandbox.mnt(SLUG, "notes.md").exists(), 5, what="gone from view")
    assert [c["what"] for c in _on_disk(sandbox, source, "notes.md")] == ["remove"]
    before = _tree(sandbox.source(READ_ONLY).root)
    ask: list[str | Path] = ["restore", sandbox.mnt(SLUG, "notes.md")]
    if source == READ_ONLY:
        ask[1:1] = ["--from", READ_ONLY]  # another source's version, as an own copy
    r = sandbox.memfs(*ask)
    assert r.returncode == 0, r.stderr
    assert sandbox.mnt(SLUG, "notes.md").read_bytes() == b"the only copy\n"
    assert sandbox.folder(OWN, SLUG).joinpath("notes.md").read_bytes() == b"the only copy\n"
    assert _tree(sandbox.source(READ_ONLY).root) == before
    assert len(kept) == 1


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_a_consolidation_removing_23_files_keeps_each(
    sandbox: Sandbox, mounts: Mounts, source: str
) -> None:
    """Claude Code's Auto Dream removed 23 memory files with no record: 23 removed within
    100 ms and the index rewritten, every body kept and restorable."""
    names = [f"topic-{i:02}.md" for i in range(23)]
    index = "".join(f"- [{n}]({n}) — about {n}\n" for n in names)
    for n in names:
        sandbox.write(source, SLUG, n, f"# {n}\nwhat {n} knew\n", age_days=1)
    folder = sandbox.write(source, SLUG, "MEMORY.md", index, age_days=1).parent
    _mount(sandbox, mounts)
    started = time.monotonic()
    for n in names:
        (folder / n).unlink()
    assert time.monotonic() - started < 0.1
    _replace(folder / "MEMORY.md", "- [summary.md](summary.md) — all of it, shortened\n")
    for n in names:
        _wait_bodies(sandbox, source, n, {f"# {n}\nwhat {n} knew\n".encode()})
    _wait_bodies(sandbox, source, "MEMORY.md", {index.encode()})
    removed = {c["path"] for c in _log(sandbox) if c["way"] == "disk" and c["what"] == "remove"}
    assert removed >= set(names)
    before = _tree(sandbox.source(READ_ONLY).root)
    for n in names:
        ask: list[str | Path] = ["restore", sandbox.mnt(SLUG, n)]
        if source == READ_ONLY:
            ask[1:1] = ["--from", READ_ONLY]
        r = sandbox.memfs(*ask)
        assert r.returncode == 0, r.stderr
        assert sandbox.mnt(SLUG, n).read_text() == f"# {n}\nwhat {n} knew\n"
    assert _tree(sandbox.source(READ_ONLY).root) == before


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_versions_limit_and_identical_bytes(sandbox: Sandbox, mounts: Mounts, source: str) -> None:
    sandbox.write_config(limits={"versions": 5})
    target = sandbox.write(source, SLUG, "notes.md", "v0\n", age_days=1)
    _mount(sandbox, mounts)
    for n in range(1, 31):
        _replace(target, f"v{n}\n")
        time.sleep(0.02)
    _wait_bodies(sandbox, source, "notes.md", {b"v29\n"})
    time.sleep(0.5)
    kept = _bodies(sandbox, source, "notes.md")
    assert sorted(kept.values()) == [f"v{n}\n".encode() for n in range(25, 30)]
    # The same bytes again, and a touch: no version, no change.
    changes = len(_on_disk(sandbox, source, "notes.md"))
    # Each stands still before the next: a file renamed into place is read at once, so
    # one rewritten in place a moment after its rename may show memfs bytes it never
    # held as a whole version (an extra version, never a lost one; docs/BEHAVIOUR.md).
    for _ in range(2):
        for same in (_replace, _rewrite_in_place):
            time.sleep(STILL)
            same(target, "v30\n")
        os.utime(target)
    time.sleep(STILL + 0.5)
    assert _bodies(sandbox, source, "notes.md") == kept
    assert len(_on_disk(sandbox, source, "notes.md")) == changes


def test_a_change_through_the_mount_is_journaled_once(sandbox: Sandbox, mounts: Mounts) -> None:
    """memfs's own commits into the own source are no change on disk: one row each, its
    version kept once."""
    sandbox.write(OWN, SLUG, "notes.md", "v0\n", age_days=1)
    _mount(sandbox, mounts)
    path = sandbox.mnt(SLUG, "notes.md")
    for n in range(1, 4):
        path.write_text(f"v{n}\n")
    sandbox.mnt(SLUG, "gone.md").write_text("brief\n")
    sandbox.mnt(SLUG, "gone.md").unlink()
    time.sleep(STILL + 0.5)
    log = _log(sandbox)
    assert [c for c in log if c["way"] == "disk"] == []
    assert sorted(_bodies(sandbox, OWN, "notes.md").values()) == [b"v0\n", b"v1\n", b"v2\n"]


def test_a_change_on_disk_right_before_one_through_the_mount_is_kept(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """A tool replaces the own file and memfs commits over it before the keeper looked:
    the tool's replaced version and its own are both kept."""
    target = sandbox.write(OWN, SLUG, "notes.md", "base\n", age_days=1)
    _mount(sandbox, mounts)
    for n in range(5):
        _replace(target, f"tool {n}\n")
        sandbox.mnt(SLUG, "notes.md").write_text(f"mount {n}\n")
    want = {b"base\n"} | {f"tool {n}\n".encode() for n in range(5)}
    want |= {f"mount {n}\n".encode() for n in range(4)}
    assert set(_wait_bodies(sandbox, OWN, "notes.md", want).values()) == want


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_a_project_made_on_disk_while_mounted_is_kept_too(
    sandbox: Sandbox, mounts: Mounts, source: str
) -> None:
    """Claude Code makes `projects/<slug>/` first and its `memory/` later, and a tool makes
    subfolders: each is watched once it comes, so its files' versions are kept."""
    slug = slug_of(Path("/home/u/src/new"))
    _mount(sandbox, mounts)
    folder = sandbox.source(source).folder(slug)
    folder.parent.mkdir(parents=True)
    time.sleep(0.5)
    folder.mkdir()
    (folder / "sub").mkdir()
    notes, deep = folder / "notes.md", folder / "sub" / "deep.md"
    _replace(notes, "first\n")
    _replace(deep, "deep first\n")
    time.sleep(STILL)
    _replace(notes, "second\n")
    _rewrite_in_place(deep, "deep second\n")
    for path, body in (("notes.md", b"first\n"), ("sub/deep.md", b"deep first\n")):
        wait_until(
            lambda p=path, b=body: b in _bodies_of(sandbox, slug, source, p).values(),
            15,
            what=f"{source}'s kept {path}",
        )


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_a_memory_folder_removed_whole_keeps_each_file(
    sandbox: Sandbox, mounts: Mounts, source: str
) -> None:
    """`rm -rf memory/`: the last version of every file it held is kept."""
    names = ["a.md", "b.md", "sub/c.md"]
    for n in names:
        sandbox.write(source, SLUG, n, f"{n} knew\n", age_days=1)
    _mount(sandbox, mounts)
    shutil.rmtree(sandbox.source(source).folder(SLUG))
    for n in names:
        _wait_bodies(sandbox, source, n, {f"{n} knew\n".encode()})
    removed = {c["path"] for c in _on_disk(sandbox, source, "a.md")}
    assert removed == {"a.md"}


def _bodies_of(sandbox: Sandbox, slug: str, source: str, path: str) -> dict[str, bytes]:
    folder = sandbox.mnt(slug, ".history", path)
    if not folder.is_dir():
        return {}
    return {n: (folder / n).read_bytes() for n in os.listdir(folder) if n.startswith(source + "@")}


@pytest.mark.parametrize("source", [OWN, READ_ONLY])
def test_changes_while_no_mount_runs_are_kept_at_the_next(
    sandbox: Sandbox, mounts: Mounts, source: str
) -> None:
    """The mount down: a file replaced, one rewritten in place and one removed meanwhile
    keep what the last mount read of them, at the next mount's first pass."""
    for n in ("replaced.md", "rewritten.md", "removed.md"):
        sandbox.write(source, SLUG, n, f"{n} as read\n", age_days=1)
    _mount(sandbox, mounts).close()
    folder = sandbox.source(source).folder(SLUG)
    _replace(folder / "replaced.md", "new\n")
    _rewrite_in_place(folder / "rewritten.md", "new\n")
    (folder / "removed.md").unlink()
    _mount(sandbox, mounts)
    for n in ("replaced.md", "rewritten.md", "removed.md"):
        _wait_bodies(sandbox, source, n, {f"{n} as read\n".encode()})
    assert {c["path"] for c in _log(sandbox) if c["way"] == "disk"} == {
        "replaced.md",
        "rewritten.md",
        "removed.md",
    }


def test_user_level_memory_changed_on_disk_keeps_its_versions(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """global/: the own CLAUDE.md replaced, the other account's rewritten in place, and
    Codex's summary removed on disk: each kept under its kind's `.history/`."""
    home = sandbox.home
    own = home / ".claude" / "CLAUDE.md"
    work = home / ".claude-work" / "CLAUDE.md"
    codex = home / ".codex" / "memories" / "memory_summary.md"
    for path in (own, work, codex):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{path.parent.name} before\n")
        set_age(path, 1)
    sandbox.write_config()
    with sandbox.config_path.open("a", encoding="utf-8") as out:
        out.write(f'[[source]]\nname = "codex"\nkind = "codex"\npath = "{home}/.codex"\n')
    _mount(sandbox, mounts)
    _replace(own, "own after\n")
    _rewrite_in_place(work, "work after\n")
    codex.unlink()
    for kind, path, source, body in (
        ("claude", "CLAUDE.md", OWN, b".claude before\n"),
        ("claude", "CLAUDE.md", READ_ONLY, b".claude-work before\n"),
        ("codex", "memory_summary.md", "codex", b"memories before\n"),
    ):
        folder = sandbox.mnt("global", kind, ".history", path)
        wait_until(
            lambda f=folder, s=source, b=body: (
                f.is_dir()
                and b in [(f / n).read_bytes() for n in os.listdir(f) if n.startswith(s + "@")]
            ),
            15,
            what=f"global/{kind}'s kept {path} of {source}",
        )


def test_another_machines_folder_arriving_while_mounted_keeps_its_versions(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    """A folder another machine shares (§12) arrives while mounted: served, and a file
    Syncthing then replaces keeps its version, in the state folder (never in the folder),
    journaled under the project as this machine names it (the homes mapped)."""
    _mount(sandbox, mounts)
    data = Path(sandbox.env["XDG_DATA_HOME"])
    folder = machines.received_folder(data / "memfs" / "machines", "desk", "claude", "claude")
    theirs = "-home-al-src-shop"
    memory = folder / theirs / "memory"
    memory.mkdir(parents=True)
    (memory / "t.md").write_text("as it came\n")
    set_age(memory / "t.md", 1)
    machines.publish(folder, machines.Published("desk.example", "/home/al", "claude", "claude"))
    ours = slug_of(sandbox.home / "src" / "shop")
    wait_until(lambda: sandbox.mnt(ours, "t.md").exists(), 15, what="their file served")
    # Read by the keeper's sweep of the new folder (what memfs never read it cannot keep).
    wait_until(lambda: _read_by_keeper(sandbox, memory, "t.md"), 15, what="their file read")
    temp = memory / ".syncthing.t.md.tmp"
    temp.write_text("replaced\n")
    temp.rename(memory / "t.md")
    wait_until(
        lambda: b"as it came\n" in _bodies_of(sandbox, ours, "desk-claude", "t.md").values(),
        15,
        what="their replaced version kept",
    )
    done = sandbox.memfs("log", "--json", "-n", "0", sandbox.mnt(ours))
    assert done.returncode == 0, done.stderr
    changes = json.loads(done.stdout)
    assert [(c["project"], c["path"], c["way"]) for c in changes] == [(ours, "t.md", "disk")]
    assert sorted(os.listdir(memory)) == ["t.md"]


def _read_by_keeper(sandbox: Sandbox, folder: Path, path: str) -> bool:
    """Whether the store holds what the keeper read of ``folder``'s ``path`` (its baseline)."""
    with contextlib.closing(sqlite3.connect(sandbox.state_dir / "memfs.db")) as db:
        row = db.execute(
            "SELECT count(*) FROM files WHERE folder = ? AND path = ?",
            (os.fsencode(folder), os.fsencode(path)),
        ).fetchone()
    return bool(row[0])
