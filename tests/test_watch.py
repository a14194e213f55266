"""The inotify watcher on real folders, without a mount (tier 2).

The watcher changes the catalog and its projects and tells a listener what to invalidate;
here the listener records. Waits poll a condition under a deadline.
"""

from __future__ import annotations

import errno
import gc
import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from gemini_layout import GeminiCli
from helpers import eventually

from memfs.adapter import watch, workers
from memfs.adapter.turns import Turns
from memfs.adapter.watch import Watcher, read_events
from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import sources, staging
from memfs.disk.inotify import IN_CREATE, IN_DELETE, Inotify
from memfs.rules.slug import claude_slug
from memfs.view.catalog import Catalog
from memfs.view.project import MEMORY, Project

SLUG = "-home-a-proj"


class Recorder:
    def __init__(self) -> None:
        self.roots: list[str] = []
        self.projects: list[str] = []

    def project_changed(self, project: Project) -> None:
        self.projects.append(project.slug)

    def root_changed(self, slug: str) -> None:
        self.roots.append(slug)


def load(tmp_path: Path, roots: dict[str, Path]) -> cfg.Config:
    text = "".join(
        f'[[source]]\nname = "{name}"\npath = "{root}/{{slug}}/memory"\n'
        + ("own = true\n" if i == 0 else "")
        for i, (name, root) in enumerate(roots.items())
    )
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    env = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    return cfg.load(env, path)


async def test_a_source_root_created_after_the_mount_is_watched_and_listed(
    tmp_path: Path,
) -> None:
    own = tmp_path / "own" / "projects"
    own.mkdir(parents=True)
    late = tmp_path / "home" / ".claude-work" / "projects"  # nothing of it exists yet
    config = load(tmp_path, {"own": own, "work": late})
    catalog = offline.listed(config)
    assert catalog.slugs() == []
    recorder = Recorder()
    watcher = Watcher(catalog, recorder)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            (late / SLUG / "memory").mkdir(parents=True)
            (late / SLUG / "memory" / "a.md").write_text("a\n")
            await eventually(lambda: catalog.has(SLUG), "the new root's project is listed")
            assert SLUG in recorder.roots
            # The root is watched from now on: a second project shows too.
            (late / "-home-a-other").mkdir()
            await eventually(lambda: catalog.has("-home-a-other"), "a later project")
            project = offline.load(catalog, SLUG)
            assert project is not None
            assert project.tree.leaf("a.md") is not None
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_a_loaded_project_moved_away_at_the_root_tells_what_it_lost(
    tmp_path: Path,
) -> None:
    """A project folder moved out of the source's root (no event for its files): the
    catalog lets the loaded project go, and its files' changes still reach the listener,
    which the kernel needs for a process whose working folder is in that project."""
    own = tmp_path / "own" / "projects"
    (own / SLUG / "memory").mkdir(parents=True)
    (own / SLUG / "memory" / "a.md").write_text("a\n")
    catalog = Catalog(load(tmp_path, {"own": own}))
    recorder = Recorder()
    watcher = Watcher(catalog, recorder)
    project = await watcher.load(SLUG)
    assert project is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            await watcher.listing()
            recorder.projects.clear()
            os.rename(own / SLUG, tmp_path / "away")
            await eventually(lambda: not catalog.has(SLUG), "the project leaves the listing")
            await eventually(lambda: SLUG in recorder.projects, "its changes are told")
            assert project.tree.leaf("a.md") is None
            assert SLUG not in catalog.loaded()
            assert catalog.take_dropped() == []  # told once
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_files_in_a_new_folder_of_a_loaded_project_are_seen(tmp_path: Path) -> None:
    own = tmp_path / "own" / "projects"
    (own / SLUG / "memory").mkdir(parents=True)
    config = load(tmp_path, {"own": own})
    catalog = Catalog(config)
    recorder = Recorder()
    watcher = Watcher(catalog, recorder)
    # The first load runs in a worker thread: every folder is watched before it is scanned.
    project = await watcher.load(SLUG)
    assert project is not None
    assert catalog.loaded()[SLUG] is project
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            sub = own / SLUG / "memory" / "new" / "deeper"
            sub.mkdir(parents=True)
            for i in range(20):  # written at once, before memfs could watch the folders
                (sub / f"f{i}.md").write_text(f"{i}\n")
            paths = [f"new/deeper/f{i}.md" for i in range(20)]
            await eventually(
                lambda: all(project.tree.leaf(p) is not None for p in paths), "every file"
            )
            os.unlink(sub / "f0.md")
            await eventually(lambda: project.tree.leaf(paths[0]) is None, "a deletion")
            project._check()
            assert SLUG in recorder.projects
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_a_memory_folder_made_while_its_way_is_being_watched_is_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync tool makes ``<slug>/memory/`` and its files in one go: the folder may come
    after memfs found it missing and before the watch on its way (the slug folder) is in
    place, which then never reports it. memfs looks for it once more with that watch in
    place: its files, then and later, show."""
    own, work = tmp_path / "own" / "projects", tmp_path / "work" / "projects"
    (own / SLUG / "memory").mkdir(parents=True)
    (work / SLUG).mkdir(parents=True)  # a project folder with no memory yet
    catalog = Catalog(load(tmp_path, {"own": own, "work": work}))
    watcher = Watcher(catalog, Recorder())
    on_the_way = watcher.watches.pending

    def memory_made_meanwhile(slug: str, i: int, origin: object) -> object:
        memory = work / SLUG / "memory"
        if not memory.exists():
            memory.mkdir()
            (memory / "early.md").write_text("came with the folder\n")
        return on_the_way(slug, i, origin)  # type: ignore[arg-type]

    monkeypatch.setattr(watcher.watches, "pending", memory_made_meanwhile)
    project = await watcher.load(SLUG)
    assert project is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            await eventually(lambda: project.tree.leaf("early.md") is not None, "early.md")
            (work / SLUG / "memory" / "later.md").write_text("synced a moment later\n")
            await eventually(lambda: project.tree.leaf("later.md") is not None, "later.md")
            project._check()
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_one_load_per_project_however_many_wait(tmp_path: Path) -> None:
    own = tmp_path / "own" / "projects"
    for i in range(200):
        path = own / SLUG / "memory" / f"d{i % 7}" / f"f{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{i}\n")
    catalog = Catalog(load(tmp_path, {"own": own}))
    watcher = Watcher(catalog, Recorder())
    found: list[object] = []

    async def ask() -> None:
        found.append(await watcher.load(SLUG))

    try:
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(ask)
        assert watcher.loads == 1
        assert len(found) == 10
        assert all(p is found[0] for p in found)
        project = catalog.loaded()[SLUG]
        assert len([p for p, _ in project.tree.leaves() if p.startswith("d")]) == 200
        # Nothing of a project just loaded is for the kernel to forget (it holds none of
        # it): no set of its every path stays until its first change.
        assert project.tree.changes == set()
        assert await watcher.load("-nobody-has-this") is None
    finally:
        watcher.close()


async def test_a_load_leaves_the_interpreter_as_it_was_and_freezes_the_project(
    tmp_path: Path,
) -> None:
    """Issue 24: the interpreter is tuned once, never per load; a load freezes what it
    built out of later full collections."""
    own = tmp_path / "own" / "projects"
    for i in range(50):
        path = own / SLUG / "memory" / f"f{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{i}\n")
    catalog = Catalog(load(tmp_path, {"own": own}))
    watcher = Watcher(catalog, Recorder())
    seen: list[tuple[float, tuple[int, int, int]]] = []
    # Called in the worker, in the middle of the build.
    watcher.warm = lambda project: seen.append((sys.getswitchinterval(), gc.get_threshold()))
    before = (sys.getswitchinterval(), gc.get_threshold())
    gc.unfreeze()  # what earlier loads froze, and may free meanwhile, is out of the count
    frozen = gc.get_freeze_count()
    try:
        project = await watcher.load(SLUG)
        assert project is not None
        assert seen == [before]
        assert (sys.getswitchinterval(), gc.get_threshold()) == before
        assert watcher.turns.freezes == 1
        assert gc.get_freeze_count() > frozen
    finally:
        watcher.close()
        gc.unfreeze()  # the rest of the test run is collected as usual


def test_turns_tune_the_interpreter_once() -> None:
    before = (sys.getswitchinterval(), gc.get_threshold())
    try:
        Turns(switch_s=0.0003).tune()
        assert sys.getswitchinterval() == pytest.approx(0.0003)
        assert gc.get_threshold() == before[1]  # the collector keeps its thresholds
    finally:
        sys.setswitchinterval(before[0])


async def test_a_change_on_disk_is_read_ahead_for_the_renderings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§7a: once the watcher took a change in and told the adapter, it reads the bodies
    the next PREAMBLE.md and MEMORY.md need (in a worker): rendering them reads nothing on
    this thread."""
    own, work = tmp_path / "own" / "projects", tmp_path / "work" / "projects"
    for root in (own, work):
        (root / SLUG / "memory").mkdir(parents=True)
        (root / SLUG / "memory" / "MEMORY.md").write_text(f"- [{root.parent.name}](x.md)\n")
    catalog = Catalog(load(tmp_path, {"own": own, "work": work}))
    recorder = Recorder()
    watcher = Watcher(catalog, recorder)
    project = await watcher.load(SLUG)
    assert project is not None

    def kept(path: str, text: bytes) -> bool:
        """Some version of ``path`` holding ``text`` is read ahead."""
        bodies = project.documents._bodies
        return any(text in bodies.get(v, (0, b""))[1] for v in project.versions(path))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            (work / SLUG / "memory" / "MEMORY.md").write_text("- [later](later.md)\n")
            (own / SLUG / "memory" / "new.md").write_text("a new topic\n")
            await eventually(lambda: kept("new.md", b"a new topic"), "the new file read")
            await eventually(lambda: kept(MEMORY, b"later"), "the changed MEMORY.md read")
            assert SLUG in recorder.projects  # told first
            request_thread = threading.current_thread()
            disk_read = sources.read_file

            def read_file(root: Path, parts: Sequence[str], path: str, limit: int) -> bytes:
                assert threading.current_thread() is not request_thread, f"{path} read here"
                return disk_read(root, parts, path, limit)

            monkeypatch.setattr(sources, "read_file", read_file)
            assert b"[later](later.md)" in project.memory_index()
            assert b"a new topic" in project.preamble("/mnt/x")
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_a_change_through_the_mount_is_read_ahead_when_the_adapter_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own, work = tmp_path / "own" / "projects", tmp_path / "work" / "projects"
    for root in (own, work):
        name = root.parent.name
        (root / SLUG / "memory").mkdir(parents=True)
        (root / SLUG / "memory" / "MEMORY.md").write_text(f"- [{name}]({name}.md)\n")
    catalog = Catalog(load(tmp_path, {"own": own, "work": work}))
    recorder = Recorder()
    watcher = Watcher(catalog, recorder)
    project = await watcher.load(SLUG)  # the adapter changed it since: nothing read ahead
    assert project is not None
    head = project.head(MEMORY)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            watcher.ahead.soon(project)
            await eventually(lambda: head in project.documents._bodies, "read ahead")
            monkeypatch.setattr(sources, "read_file", None)  # nothing is read any more
            assert project.memory_index() == b"- [own](own.md)\n- [work](work.md)\n"
            assert b"[work](work.md)" in project.preamble("/mnt/x")
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()
    assert recorder.projects == []  # the adapter publishes its own changes


async def loaded_own(tmp_path: Path, files: dict[str, str]) -> tuple[Watcher, Project]:
    """A watcher over one own source holding ``files`` (path -> text), the project loaded."""
    own = tmp_path / "own" / "projects"
    for path, text in files.items():
        (own / SLUG / "memory" / path).parent.mkdir(parents=True, exist_ok=True)
        (own / SLUG / "memory" / path).write_text(text)
    watcher = Watcher(Catalog(load(tmp_path, {"own": own})), Recorder())
    project = await watcher.load(SLUG)
    assert project is not None
    return watcher, project


def own_place(tmp_path: Path) -> tuple[Path, staging.Place]:
    """The folder `loaded_own` fills, and its place for staging."""
    own = tmp_path / "own" / "projects"
    return own / SLUG / "memory", staging.Place(own, (SLUG, "memory"))


async def own_commit_then(tmp_path: Path, change: Callable[[Path], object]) -> None:
    """memfs commits a.md (as a plan does, which would read it back itself), then
    ``change(folder)`` changes it on disk at once: the change shows."""
    watcher, project = await loaded_own(tmp_path, {"a.md": "old\n"})
    folder, place = own_place(tmp_path)
    try:
        stage = staging.Stage(place, "a.md", initial_fd=None, mode=0o644)
        stage.write(0, b"committed\n")
        stage.commit()
        stage.abort()
        size = change(folder)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)  # reads both only now, queued one after the other
            await eventually(lambda: project.head("a.md").size == size, "the change")
            assert watcher.own_renames == 1  # the commit's rename was skipped
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_an_append_right_after_an_own_commit_shows(tmp_path: Path) -> None:
    def append(folder: Path) -> int:
        fd = os.open(folder / "a.md", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"appended\n")
        os.close(fd)
        return len(b"committed\nappended\n")

    await own_commit_then(tmp_path, append)


async def test_a_rename_onto_the_target_right_after_an_own_commit_shows(tmp_path: Path) -> None:
    """inotify merges the second of two alike IN_MOVED_TO events (cookies aside): without
    the commit's mark between them, this agent's replace would vanish into memfs's."""

    def replace(folder: Path) -> int:
        elsewhere = tmp_path / "agent.tmp"  # not in any watched folder: no IN_MOVED_FROM
        elsewhere.write_bytes(b"the agent's version\n")
        os.replace(elsewhere, folder / "a.md")
        return len(b"the agent's version\n")

    await own_commit_then(tmp_path, replace)


async def test_an_own_commit_s_kept_version_shows_and_its_rename_is_skipped(
    tmp_path: Path,
) -> None:
    """A commit that keeps the version it replaces: its rename is marked and skipped (the
    plan reads it back); the link into .history/ is read as anyone's, and shows."""
    older = ".history/a.md/own@20250101T000000Z.md"
    watcher, project = await loaded_own(tmp_path, {"a.md": "old\n", older: "older\n"})
    folder, place = own_place(tmp_path)
    try:
        stage = staging.Stage(place, "a.md", initial_fd=None, mode=0o644)
        stage.write(0, b"committed\n")
        keep = staging.Keep(place.below(".history", "a.md"), "own", 20, "a.md", place)
        stage.commit(keep)
        stage.abort()
        (mine,) = set(os.listdir(folder / ".history" / "a.md")) - {older.rsplit("/")[-1]}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            kept = f".history/a.md/{mine}"
            await eventually(lambda: project.tree.leaf(kept) is not None, "the kept version")
            assert watcher.own_renames == 1  # the rename; not the link
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_memfs_s_own_renames_are_skipped_but_not_what_follows_them(tmp_path: Path) -> None:
    """A rename through the mount (staging.rename, as a plan runs it) is read back by its
    plan: the watcher skips it. A replace of the new name right after it still shows, and a
    folder's rename is never skipped (its files are watched anew)."""
    watcher, project = await loaded_own(tmp_path, {"a.tmp": "renamed\n", "d/x.md": "x\n"})
    folder, place = own_place(tmp_path)
    try:
        staging.rename(place, "a.tmp", place, "a.md")
        elsewhere = tmp_path / "agent.tmp"
        elsewhere.write_bytes(b"the agent's version\n")
        os.replace(elsewhere, folder / "a.md")
        staging.rename(place, "d", place, "e")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            size = len(b"the agent's version\n")
            head = project.head
            await eventually(lambda: (v := head("a.md")) is not None and v.size == size, "a.md")
            assert watcher.own_renames == 1  # a.tmp -> a.md; not the folder's
            (folder / "e" / "new.md").write_text("in the renamed folder\n")
            await eventually(lambda: head("e/new.md") is not None, "a file in the new folder")
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


@pytest.mark.parametrize("by", ["descriptor", "name", "folder"])
async def test_the_mark_after_an_own_rename_is_one_name_made_and_removed_leaving_the_file(
    tmp_path: Path, by: str
) -> None:
    """What `read_events` looks for after memfs's rename: IN_CREATE then IN_DELETE of an
    own mark name, nothing under the renamed name; the file keeps its bytes and its one
    link. A folder cannot be linked: an empty file is the mark then, with the same
    events."""
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "a.md").write_bytes(b"committed\n")
    (folder / "d").mkdir()
    inotify = Inotify()
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open(folder / "a.md", os.O_RDONLY)
    try:
        inotify.add(folder, 0xFFF)  # every event, so one under the file's name would show
        renamed: int | str = {"descriptor": fd, "name": "a.md", "folder": "d"}[by]
        staging.mark_commit(dfd, renamed)
        events, _ = await read_events(inotify)
    finally:
        os.close(fd)
        os.close(dfd)
        inotify.close()
    names = {name for _, _, name in events}
    assert len(names) == 1, events  # the mark's name only
    assert names.pop().startswith(sources.OWN_MARK_PREFIX)
    entries = [m & (IN_CREATE | IN_DELETE) for _, m, _ in events if m & (IN_CREATE | IN_DELETE)]
    assert entries == [IN_CREATE, IN_DELETE], events
    # A link opens nothing; the empty file made instead is opened and closed.
    assert len(events) == (4 if by == "folder" else 2), events
    assert sorted(os.listdir(folder)) == ["a.md", "d"]
    assert (folder / "a.md").read_bytes() == b"committed\n"
    assert os.stat(folder / "a.md").st_nlink == 1


async def test_events_made_while_a_worker_call_runs_are_read_once_it_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit's events (the kept link, the prune, the rename, the mark) come while its
    worker runs: the watcher reads them all once it is done, in one batch, and waits no
    longer than EVENTS_WAIT_S for it."""
    folder = tmp_path / "memory"
    folder.mkdir()
    inotify = Inotify()
    inotify.add(folder, IN_CREATE)
    release, made = threading.Event(), threading.Event()

    def commit() -> None:  # a worker's disk work, each step an event
        (folder / "a.md").write_bytes(b"a\n")
        made.set()
        release.wait(5)
        (folder / "b.md").write_bytes(b"b\n")

    read: list[list[str]] = []

    async def read_batch() -> None:
        events, _ = await read_events(inotify)
        read.append(sorted(name for _, _, name in events))

    try:
        monkeypatch.setattr(watch, "EVENTS_WAIT_S", 30.0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(workers.run, commit)
            await eventually(made.is_set, "the first event is made")
            nursery.start_soon(read_batch)
            await trio.testing.wait_all_tasks_blocked()
            assert read == []  # the worker still runs: not read yet
            release.set()
        assert read == [["a.md", "b.md"]]
        # With no call in flight an event is read at once; with one, after EVENTS_WAIT_S.
        monkeypatch.setattr(watch, "EVENTS_WAIT_S", 0.05)
        release.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(workers.run, release.wait, 5)
            (folder / "c.md").write_bytes(b"c\n")
            with trio.fail_after(2):
                await read_batch()
            release.set()
        assert read[-1] == ["c.md"]
    finally:
        release.set()
        inotify.close()


async def test_a_folder_that_cannot_be_watched_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own" / "projects"
    (own / SLUG / "memory" / "deeper").mkdir(parents=True)
    catalog = Catalog(load(tmp_path, {"own": own}))
    recorder = Recorder()
    watcher = Watcher(catalog, recorder)
    add = watcher.inotify.add

    def full(path: Path, mask: int) -> int:
        if path.name == "deeper":
            raise OSError(errno.ENOSPC, "inotify_add_watch: no space left on device")
        return add(path, mask)

    monkeypatch.setattr(watcher.inotify, "add", full)
    try:
        assert await watcher.load(SLUG) is not None
    finally:
        watcher.close()
    assert watcher.watches.failures == 1


async def test_gemini_folders_and_markers_show_without_a_remount(tmp_path: Path) -> None:
    """§3: a Gemini CLI folder is mapped by its marker; a new id folder, a marker written
    after its folder, a marker that names another root, a folder removed: each shows live,
    from a Gemini folder that had no tmp/ yet when the watcher started."""
    own = tmp_path / "own" / "projects"
    gemini_dir = tmp_path / "home" / ".gemini"
    gemini_dir.mkdir(parents=True)
    text = (
        f'[[source]]\nname = "own"\npath = "{own}/{{slug}}/memory"\nown = true\n'
        f'[[source]]\nname = "gemini"\nkind = "gemini"\npath = "{gemini_dir}"\n'
    )
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    env = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    catalog = Catalog(cfg.load(env, path))
    shop = tmp_path.resolve() / "src" / "shop"  # noqa: ASYNC240 (nothing else runs yet)
    other = shop.parent / "other"
    for root in (shop, other):
        root.mkdir(parents=True)
    slug, other_slug = claude_slug(str(shop)), claude_slug(str(other))
    (own / slug / "memory").mkdir(parents=True)
    (own / slug / "memory" / "a.md").write_text("claude's\n")
    cli = GeminiCli(tmp_path / "home")
    watcher = Watcher(catalog, Recorder())
    project = await watcher.load(slug)
    assert project is not None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            # Gemini's first session in the project: tmp/, the id folder, its marker.
            (cli.memory(shop) / "g.md").write_text("gemini's\n")
            await eventually(lambda: project.tree.leaf("g.md") is not None, "g.md")
            (cli.tmp / "shop" / "memory" / "h.md").write_text("later\n")
            await eventually(lambda: project.tree.leaf("h.md") is not None, "h.md")
            # A project only Gemini has.
            (cli.memory(other) / "o.md").write_text("other\n")
            await eventually(lambda: catalog.has(other_slug), "a project only Gemini has")
            # A folder whose marker comes later maps then.
            (cli.tmp / "late" / "memory").mkdir(parents=True)
            (cli.tmp / "late" / "memory" / "l.md").write_text("late\n")
            # Nothing to map: every task idle (the watcher's batch read and its worker
            # calls done) for a while, and still no third project.
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert catalog.slugs() == sorted([slug, other_slug])
            (cli.tmp / "late" / ".project_root").write_text(str(other))
            await eventually(
                lambda: len([o for o in catalog.origins(other_slug) if not o.kept]) == 2,
                "the late marker",
            )
            # A marker rewritten to name another root moves its folder there.
            (cli.tmp / "late" / ".project_root").write_text(str(shop))
            await eventually(lambda: project.tree.leaf("l.md") is not None, "moved in")
            assert len([o for o in catalog.origins(other_slug) if not o.kept]) == 1
            # A removed id folder leaves its project; the last one takes the project along.
            shutil.rmtree(cli.tmp / "other")
            await eventually(lambda: not catalog.has(other_slug), "removed")
            shutil.rmtree(cli.tmp / "late")
            await eventually(lambda: project.tree.leaf("l.md") is None, "moved out")
            assert project.tree.leaf("g.md") is not None
            project._check()
            catalog._check()
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_events_that_come_during_a_pass_are_taken_in_by_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file appended to all the time on disk (a log, a sync tool) while a pass waits for
    its worker: what came meanwhile is one pass, one look per path, not one pass per
    batch read. One pass per batch fell further behind the disk with every write and held
    every batch in memory (the soak's RSS grew without end)."""
    watcher, project = await loaded_own(tmp_path, {"a.md": "0\n", "b.md": "0\n"})
    folder, _ = own_place(tmp_path)
    gate = threading.Event()
    passes: list[int] = []
    read_jobs = watcher._read_jobs

    def slow_read_jobs(jobs: list[Any]) -> list[Any]:
        passes.append(len(jobs))
        gate.wait(10)  # the first pass waits here while the appends come
        return read_jobs(jobs)

    monkeypatch.setattr(watcher, "_read_jobs", slow_read_jobs)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            (folder / "a.md").write_text("1\n")
            await eventually(lambda: passes == [1], "the first pass waits in its worker")
            for i in range(60):  # each append read as a batch of its own
                read = watcher.events
                with (folder / ("a.md" if i % 2 else "b.md")).open("a") as f:
                    f.write(f"{i}\n")
                await eventually(lambda n=read: watcher.events > n, "the append read")
            assert watcher.events >= 60, "the reader went on reading during the pass"
            gate.set()
            # Both files' last appends: the first pass, let go, reads a.md as it is by
            # then, so a.md alone could be up to date before a second pass began.
            sizes = {name: (folder / name).stat().st_size for name in ("a.md", "b.md")}
            await eventually(
                lambda: all(project.head(n).size == size for n, size in sizes.items()),
                "the last appends",
            )
            # One more pass looks at each of the two files once (a third when the reader
            # had not read the last append yet as the second began), never one per batch.
            assert passes[:2] == [1, 2], passes
            assert len(passes) <= 3, passes
            nursery.cancel_scope.cancel()
    finally:
        gate.set()
        watcher.close()


async def test_a_missing_root_waits_in_the_home_unmoved_by_its_other_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool not installed yet waits in the home (discovery names it all the same), where
    other tools rewrite their files all day: only a name on the way to the root makes the
    watcher look again."""
    own = tmp_path / "own" / "projects"
    own.mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    late = home / ".pi" / "agent" / "memory"
    watcher = Watcher(Catalog(load(tmp_path, {"own": own, "pi": late})), Recorder())
    looks: list[int] = []
    pending = watcher._pending_roots
    monkeypatch.setattr(watcher, "_pending_roots", lambda wd: (looks.append(wd), pending(wd)))
    await watcher.listing()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            for n in range(20):  # Claude Code's way of saving ~/.claude.json
                (home / f".claude.json.tmp.{n}").write_text("{}")
                (home / f".claude.json.tmp.{n}").rename(home / ".claude.json")
            # Events come in order: once a later one's change shows, the home's are in.
            (own / "-home-a-other").mkdir()
            await eventually(lambda: watcher.catalog.has("-home-a-other"), "a later event")
            assert looks == []
            (late / SLUG).mkdir(parents=True)
            await eventually(lambda: watcher.catalog.has(SLUG), "pi's first project")
            assert 1 <= len(looks) <= 3  # .pi made, then agent/ and memory/ in its folders
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def test_a_folder_made_moved_or_gone_is_scanned_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first version a path keeps makes a folder under .history/ (§7.2): a scan of the
    whole origin for each would cost O(the project's files) a write. A folder made, moved
    in or out, or removed is scanned by itself, with what lies below it; what it holds
    shows, moves or goes with it."""
    files = {f"f{k:03d}.md": "x\n" for k in range(100)}
    watcher, project = await loaded_own(tmp_path, {**files, "old/o.md": "o\n"})
    folder, _ = own_place(tmp_path)
    scanned: list[str] = []
    whole_scan = sources.scan

    def scan(
        root: Path, parts: Sequence[str], limit: int, only: Any = None, under: str = ""
    ) -> sources.Scan:
        scanned.append(under)
        return whole_scan(root, parts, limit, only, **({"under": under} if under else {}))

    monkeypatch.setattr(sources, "scan", scan)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            (folder / ".history" / "f001.md").mkdir(parents=True)
            os.link(folder / "f001.md", folder / ".history" / "f001.md" / "own@1.md")
            kept = ".history/f001.md/own@1.md"
            await eventually(lambda: project.tree.leaf(kept) is not None, "the kept version")
            (folder / "new" / "deep").mkdir(parents=True)
            (folder / "new" / "deep" / "n.md").write_text("n\n")
            await eventually(lambda: project.tree.leaf("new/deep/n.md") is not None, "new/")
            (folder / "old").rename(folder / "moved")
            await eventually(lambda: project.tree.leaf("moved/o.md") is not None, "moved/")
            assert project.tree.leaf("old/o.md") is None
            shutil.rmtree(folder / "moved")
            await eventually(lambda: not project.tree.is_dir("moved"), "moved/ gone")
            assert project.tree.leaf("moved/o.md") is None
            assert "" not in scanned, scanned  # never the whole origin
            assert {".history", "new", "old", "moved"} <= set(scanned)
            assert project.tree.leaf("f099.md") is not None
            project._check()
            # A folder made there since is watched: what lands in it shows too.
            (folder / "new" / "deep" / "later.md").write_text("later\n")
            await eventually(lambda: project.tree.leaf("new/deep/later.md") is not None, "later")
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()
