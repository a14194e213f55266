"""The README's reference material, checked against the code (tier 1)."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

from memfs.app import cli
from memfs.disk import config

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _toml_blocks(section: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", section, flags=re.S)


def test_config_reference_matches_the_defaults_and_parses(tmp_path: Path) -> None:
    (block,) = _toml_blocks(_section("Configuration"))
    data = tomllib.loads(block)
    for name, cls in (("preamble", config.PreambleSettings), ("limits", config.Limits)):
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        assert data[name] == defaults, f"README [{name}] differs from the code's defaults"
    for source in data["source"]:
        assert set(source) <= {"name", "path", "own"}
    path = tmp_path / "config.toml"
    path.write_text(block, encoding="utf-8")
    loaded = config.load({"HOME": str(tmp_path)}, path)
    assert [s.name for s in loaded.sources] == [s["name"] for s in data["source"]]
    assert loaded.own is not None


def test_syncthing_recipe_config_parses(tmp_path: Path) -> None:
    """The manual recipe, moved from the README to docs/SYNC.md when `memfs sync` came."""
    text = (README.parent / "docs" / "SYNC.md").read_text(encoding="utf-8")
    (block,) = _toml_blocks(text[text.index("## The manual recipe\n") :])
    path = tmp_path / "config.toml"
    path.write_text(block, encoding="utf-8")
    loaded = config.load({"HOME": str(tmp_path)}, path)
    assert loaded.own is not None
    assert len(loaded.sources) == 3


def test_every_command_in_the_table_exists() -> None:
    table = _section("Commands")
    named = set(re.findall(r"^\| `memfs (\w+)", table, flags=re.M))
    assert named == set(cli.COMMANDS)


def test_readme_test_command_is_the_ci_one() -> None:
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    (command,) = re.findall(r"^TEST_CMD='(.*)'$", ci, flags=re.M)
    assert command in README.read_text(encoding="utf-8")


def test_the_users_setup_installs_no_test_bench() -> None:
    """The README's first command installs what memfs needs: no mergerfs, stress-ng or
    Syncthing, no test tools, no user, no change to /dev/fuse's mode."""
    setup = (README.parent / ".ci" / "setup").read_text(encoding="utf-8")
    code = "\n".join(line for line in setup.splitlines() if not line.lstrip().startswith("#"))
    for bench in ("mergerfs", "stress-ng", "syncthing", "useradd", "chmod", "[test]", "rsync"):
        assert bench not in code, bench
    assert "bash .ci/setup && " in README.read_text(encoding="utf-8")
