"""Tier 1: what global/ is made of (§3, §4.1): codex sources in the config and in
discovery, the origins each global/<kind> reads, and a config folder read for its user
memory only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import DISCOVERED, fake_home, write

from memfs.app import mount
from memfs.disk import config as cfg
from memfs.disk import roots, sources
from memfs.view import userlevel


def _config(tmp_path: Path, text: str) -> cfg.Config:
    fh = fake_home(tmp_path)
    path = tmp_path / "config.toml"
    path.write_text(text.replace("~HOME", str(fh.home)), encoding="utf-8")
    return cfg.load(fh.env, path)


def test_a_codex_source_in_the_config(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        '[[source]]\nname = "me"\npath = "~/.claude/projects/{slug}/memory"\nown = true\n'
        '[[source]]\nname = "pi"\npath = "~/.pi/agent/memory/{slug}"\n'
        '[[source]]\nname = "cx"\nkind = "codex"\n',
    )
    cx = config.sources[2]
    assert (cx.kind, cx.own, cx.projects) == (cfg.CODEX, False, False)
    assert cx.root.joinpath(*cx.tail) == config.home / ".codex" / "memories"
    assert userlevel.kinds(config) == ["claude", "codex"]
    (claude,) = userlevel.origins(config, "global/claude")  # pi's template is no account
    assert claude.folder == config.home / ".claude"
    assert userlevel.own_origin(config, "global/claude") == claude
    assert userlevel.own_origin(config, "global/codex") is None
    # The codex folder is no root of projects.
    assert roots.list_roots(config) == []


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ('name = "c"\nkind = "codex"\nown = true\n', "'own' must be false for a codex source"),
        ('name = "c"\nkind = "codex"\npath = "rel/codex"\n', "must be absolute"),
        ('name = "c"\nkind = "codex"\npath = "~/x/{slug}"\n', "'path' of a codex source"),
        ('name = "c"\nkind = "cortex"\n', '"codex" (Codex\'s folder)'),
    ],
)
def test_bad_codex_sources_are_refused(tmp_path: Path, source: str, key: str) -> None:
    with pytest.raises(cfg.ConfigError) as info:
        _config(tmp_path, "[[source]]\n" + source)
    message = str(info.value)
    assert key in message, message
    assert "source #1" in message, message
    assert "\n" not in message


def test_discovery_finds_codex_at_codex_home(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    assert [s.name for s in cfg.discover(fh.env)] == list(DISCOVERED)
    (fh.home / ".codex").mkdir()
    found = cfg.discover(fh.env)
    assert [(s.name, s.kind, s.why) for s in found][-3] == (
        "codex", cfg.CODEX, f"{fh.home / '.codex'} exists"
    )  # fmt: skip
    elsewhere = tmp_path / "codex-home"
    elsewhere.mkdir()
    found = cfg.discover({**fh.env, "CODEX_HOME": str(elsewhere)})
    assert (found[-3].root, found[-3].why) == (
        elsewhere, f"$CODEX_HOME is set; {elsewhere} exists"
    )  # fmt: skip


def test_a_config_folder_is_read_for_its_user_memory_only(tmp_path: Path) -> None:
    config_dir = tmp_path / ".claude"
    write(config_dir / "CLAUDE.md", "me\n")
    write(config_dir / "agent-memory" / "rev" / "MEMORY.md", "- x\n")
    write(config_dir / "settings.json", "{}\n")
    write(config_dir / "projects" / "-a" / "memory" / "MEMORY.md", "- y\n")
    scan = sources.scan(tmp_path, (".claude",), 1 << 20, userlevel.CLAUDE_NAMES)
    assert sorted(f.path for f in scan.files) == ["CLAUDE.md", "agent-memory/rev/MEMORY.md"]
    assert sorted(scan.dirs) == ["agent-memory", "agent-memory/rev"]


def test_a_crashs_stages_in_the_own_config_folder_are_swept(tmp_path: Path) -> None:
    """§7.5 for global/claude: a write's stage lies beside CLAUDE.md or in agent-memory/;
    nothing else in the config folder is touched (Claude Code's own files)."""
    fh = fake_home(tmp_path)
    home = fh.home / ".claude"
    stale = [
        write(home / ".memfs-stage.a", "x"),
        write(home / "agent-memory" / "rev" / ".memfs-stage.b", "x"),
    ]
    kept = write(home / "todos" / ".memfs-stage.c", "x")  # not a folder memfs writes in
    config = cfg.load(fh.env)
    assert mount._sweep_stale_stages(config, time.time_ns() + 10**9) == 2
    assert [p.exists() for p in stale] == [False, False]
    assert kept.exists()
