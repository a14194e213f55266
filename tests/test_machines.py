"""Other machines' folders (§12): their slugs mapped through the homes, found on disk, and
served while the mount runs (tiers 1 and 2; the two-machine mount test is
test_sync_machines.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio
from helpers import eventually

from memfs.adapter.machines import MachineWatch
from memfs.adapter.watch import Watcher
from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import machines
from memfs.rules import names
from memfs.rules.slug import claude_slug, rehome
from memfs.view.project import Project

# --- tier 1: the rule --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slug", "expected"),
    [
        ("-home-al-src-shop", "-home-alice-src-shop"),  # below the home: the home swapped
        ("-home-al", "-home-alice"),  # the home itself
        ("-srv-shared-app", "-srv-shared-app"),  # outside the home: only when equal
        ("-home-alex-src", "-home-alex-src"),  # another home that begins alike
        ("-home-bob-src-shop", "-home-bob-src-shop"),
    ],
)
def test_a_slug_maps_through_the_two_homes(slug: str, expected: str) -> None:
    assert rehome(slug, "/home/al", "/home/alice") == expected


def test_the_same_path_below_each_home_is_one_slug() -> None:
    theirs = claude_slug("/home/al/src/my_shop.v2")
    assert rehome(theirs, "/home/al/", "/home/alice") == claude_slug("/home/alice/src/my_shop.v2")


def test_the_machine_file_is_never_memory() -> None:
    assert names.path_reason(machines.MACHINE_FILE)


def env_of(tmp_path: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }


def receive(
    env: dict[str, str], machine: str, source: str, kind: str, home: str, files: dict[str, str]
) -> Path:
    """What Syncthing leaves after receiving ``machine``'s folder of ``source``."""
    folder = machines.received_folder(machines.machines_dir(env), machine, source, kind)
    for path, body in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(body)
    published = machines.Published("desk.example", home, source, kind)
    assert machines.publish(folder, published)
    assert not machines.publish(folder, published)  # the same again: nothing written
    return folder


def test_a_received_folder_is_a_read_only_source_named_after_its_machine(tmp_path: Path) -> None:
    env = env_of(tmp_path)
    (tmp_path / "home" / ".claude" / "projects").mkdir(parents=True)
    theirs = "-home-al-src-shop"
    receive(env, "desktop", "claude", "claude", "/home/al", {f"{theirs}/memory/a.md": "x\n"})
    receive(env, "desktop", "pi", "pi", "/home/al", {f"{theirs}/b.md": "y\n"})
    # A folder whose machine file has not arrived yet is not served: its slugs mean nothing.
    (machines.machines_dir(env) / "desktop" / "work" / theirs).mkdir(parents=True)
    config = cfg.load(env)
    received = {s.name: s for s in config.sources if s.their_home}
    assert sorted(received) == ["desktop-claude", "desktop-pi"]
    assert not any(s.own for s in received.values())
    assert received["desktop-claude"].tail == ("memory",)
    assert received["desktop-pi"].tail == ()
    # Their project is ours, under our home's slug.
    ours = claude_slug(str(tmp_path / "home" / "src" / "shop"))
    catalog = offline.listed(config)
    assert catalog.slugs() == [ours]
    project = offline.load_project(config, ours)
    assert project is not None
    assert sorted(project.tree.children("") or []) == ["PREAMBLE.md", "a.md", "b.md"]


def test_a_file_that_is_no_machine_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / machines.MACHINE_FILE).write_text(json.dumps({"home": "relative", "kind": "pi"}))
    assert machines.read_published(folder) is None
    (folder / machines.MACHINE_FILE).write_text("{not json")
    assert machines.read_published(folder) is None


# --- tier 2: served while the mount runs -------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.roots: list[str] = []

    def project_changed(self, project: Project) -> None:
        pass

    def root_changed(self, slug: str) -> None:
        self.roots.append(slug)


async def test_a_machine_that_arrives_while_serving_is_served_without_a_remount(
    tmp_path: Path,
) -> None:
    env = env_of(tmp_path)
    own = tmp_path / "home" / ".claude" / "projects"
    ours = claude_slug(str(tmp_path / "home" / "src" / "shop"))
    (own / ours / "memory").mkdir(parents=True)
    (own / ours / "memory" / "notes.md").write_text("mine\n")
    config = cfg.load(env)
    before = len(config.sources)
    catalog = offline.listed(config)
    watcher = Watcher(catalog, Recorder())
    project = await _loaded(watcher, ours)
    # `memfs sync add` made the machine's folder already; Syncthing makes the rest later.
    (machines.machines_dir(env) / "desktop").mkdir(parents=True)
    machine_watch = MachineWatch(watcher)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            nursery.start_soon(machine_watch.run)
            await eventually(lambda: machine_watch.looks > 0, "a first look (nothing yet)")
            theirs = "-home-al-src-shop"
            receive(
                env,
                "desktop",
                "claude",
                "claude",
                "/home/al",
                {f"{theirs}/memory/notes.md": "theirs\n", f"{theirs}/memory/t.md": "t\n"},
            )
            await eventually(
                lambda: "t.md" in (project.tree.children("") or []), "their file shows"
            )
            assert [s.name for s in config.sources[before:]] == ["desktop-claude"]
            history = project.tree.children(".history/notes.md") or []
            assert [n.split("@")[0] for n in history] == ["desktop-claude"]
            # A file that arrives later in a folder served already shows too (inotify).
            (
                machines.machines_dir(env) / "desktop" / "claude" / theirs / "memory" / "u.md"
            ).write_text("u\n")
            await eventually(
                lambda: "u.md" in (project.tree.children("") or []), "a later file shows"
            )
            # The same look again adds nothing.
            assert machine_watch.added == 1
            # `memfs sync remove desktop` takes its folders: its files leave the project,
            # the own one stays.
            shutil.rmtree(machines.machines_dir(env) / "desktop")
            await eventually(lambda: "t.md" not in (project.tree.children("") or []), "gone")
            assert "notes.md" in (project.tree.children("") or [])
            assert project.tree.children(".history/notes.md") in (None, [])
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()


async def _loaded(watcher: Watcher, slug: str) -> Project:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watcher.listing)
    project = await watcher.load(slug)
    assert project is not None
    return project


def test_a_received_gemini_folder_maps_through_the_homes_too(tmp_path: Path) -> None:
    env = env_of(tmp_path)
    (tmp_path / "home" / ".claude" / "projects").mkdir(parents=True)
    receive(
        env,
        "desktop",
        "gemini",
        "gemini",
        "/home/al",
        {"a1b2/.project_root": "/home/al/src/shop", "a1b2/memory/g.md": "g\n"},
    )
    config = cfg.load(env)
    [spec] = [s for s in config.sources if s.their_home]
    assert (spec.name, spec.mapped) == ("desktop-gemini", True)
    ours = claude_slug(str(tmp_path / "home" / "src" / "shop"))
    assert offline.listed(config).slugs() == [ours]
    project = offline.load_project(config, ours)
    assert project is not None
    assert "g.md" in (project.tree.children("") or [])


async def test_a_gemini_folder_that_arrives_while_serving_joins_its_project(
    tmp_path: Path,
) -> None:
    env = env_of(tmp_path)
    (tmp_path / "home" / ".claude" / "projects").mkdir(parents=True)
    ours = claude_slug(str(tmp_path / "home" / "src" / "shop"))
    config = cfg.load(env)
    catalog = offline.listed(config)
    watcher = Watcher(catalog, Recorder())
    machine_watch = MachineWatch(watcher)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            nursery.start_soon(machine_watch.run)
            await eventually(lambda: machine_watch.looks > 0, "a first look (nothing yet)")
            assert not catalog.has(ours)
            files = {"a1b2/.project_root": "/home/al/src/shop\n", "a1b2/memory/g.md": "g\n"}
            receive(env, "desktop", "gemini", "gemini", "/home/al", files)
            await eventually(lambda: catalog.has(ours), "their Gemini project is ours")
            project = await watcher.load(ours)
            assert project is not None
            assert "g.md" in (project.tree.children("") or [])
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()
