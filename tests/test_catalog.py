"""Tier 1: the catalog of projects: a project made through the mount (§4, §7.1, §7a)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.app import offline
from memfs.disk import config as cfg
from memfs.disk import state
from memfs.view.catalog import Catalog

SLUG = "-home-a-new"


def catalog_of(tmp_path: Path) -> Catalog:
    own = tmp_path / "own" / "projects"
    own.mkdir(parents=True)
    path = tmp_path / "config.toml"
    path.write_text(f'[[source]]\nname = "own"\npath = "{own}/{{slug}}/memory"\nown = true\n')
    env = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    return offline.listed(cfg.load(env, path))


def test_a_project_made_through_the_mount_takes_its_whiteouts_from_disk(
    tmp_path: Path,
) -> None:
    catalog = catalog_of(tmp_path)
    state.save_whiteouts(catalog.config.state_dir, SLUG, {("old.md", "work", 7)})
    project = catalog.own_folder_made(SLUG, state.load_project(catalog.config.state_dir, SLUG))
    assert project.whiteouts == {("old.md", "work", 7)}
    assert catalog.loaded()[SLUG] is project
    catalog._check()


def test_a_project_made_through_the_mount_takes_whiteouts_read_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # §7a: the adapter reads the state file in the worker that made the folder, so the
    # request thread reads nothing here.
    catalog = catalog_of(tmp_path)

    def refuse(state_dir: Path, slug: str) -> set[state.Whiteout]:
        raise AssertionError("state read on the request thread")

    for name in ("load_whiteouts", "load_hidden_lines", "load_project"):
        monkeypatch.setattr(state, name, refuse)
    project = catalog.own_folder_made(SLUG, ({("a.md", "work", 1)}, frozenset({"x"})))
    assert project.whiteouts == {("a.md", "work", 1)}
    assert project.hidden_lines == {"x"}
    assert catalog.has(SLUG)
    catalog._check()
