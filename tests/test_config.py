"""Tier 1: configuration, discovery and the containment refusals (§3).

Every test passes an explicit env dict whose HOME and XDG_* folders lie in tmp_path.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FakeHome, fake_home, make_env

from memfs.disk import config as cfg
from memfs.disk.config import ConfigError, Limits, PreambleSettings


def write_config(fh: FakeHome, text: str) -> Path:
    path = cfg.config_path(fh.env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def refusal(fh: FakeHome, text: str) -> str:
    """The message of the ConfigError that loading ``text`` raises; it names the file."""
    path = write_config(fh, text)
    with pytest.raises(ConfigError) as info:
        cfg.load(fh.env)
    message = str(info.value)
    assert str(path) in message, message
    return message


# --- paths and defaults -------------------------------------------------------------


def test_paths_follow_xdg(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    assert cfg.config_path(env) == Path(env["XDG_CONFIG_HOME"]) / "memfs" / "config.toml"
    assert cfg.state_dir(env) == Path(env["XDG_STATE_HOME"]) / "memfs"


def test_paths_default_below_home_and_ignore_relative_xdg(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for env in ({"HOME": str(home)}, {"HOME": str(home), "XDG_CONFIG_HOME": "rel/cfg"}):
        assert cfg.config_path(env) == home / ".config" / "memfs" / "config.toml"
    env = {"HOME": str(home), "XDG_STATE_HOME": "rel"}
    assert cfg.state_dir(env) == home / ".local" / "state" / "memfs"


def test_no_home_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="HOME"):
        cfg.load({})


def test_defaults_without_a_config_file(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    config = cfg.load(fh.env)
    assert config.path is None
    assert config.home == fh.home
    assert config.state_dir == cfg.state_dir(fh.env)
    assert config.preamble == PreambleSettings(budget=8192, newest=3, file_cap=4096, index_max=50)
    assert config.limits == Limits(max_file_bytes=1 << 20, versions=20, history_bytes=32 << 20)


def test_explicit_missing_config_file_is_refused(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        cfg.load(fh.env, missing)
    assert str(missing) in str(info.value)


def test_bad_toml_is_refused_naming_the_file(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    refusal(fh, "[preamble\nbudget = 1\n")


# --- discovery ----------------------------------------------------------------------


def test_discovery_finds_accounts_and_pi_with_own_first(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude-work", ".claude", ".claude-alt"))
    found = cfg.discover(fh.env)
    assert [s.name for s in found] == [
        "claude",
        "alt",
        "work",
        "pi",
        "gemini",
        "codex",
        "kilo",
        "goose",
    ]
    own = found[0]
    assert own.own
    assert not any(s.own for s in found[1:])
    assert own.root == fh.home / ".claude" / "projects"
    assert own.tail == ("memory",)
    assert own.folder("-x") == fh.home / ".claude/projects/-x/memory"
    pi = found[3]
    assert pi.root == fh.pi_root
    assert pi.tail == ()
    assert all(s.why for s in found)


def test_config_file_without_sources_still_discovers_them(tmp_path: Path) -> None:
    # A regression found in review, failed before its fix; the bug as it was:
    # §3: "Every key has a default; the file is optional." A file that only tunes the
    # preamble must not drop every source: `source` defaults to the discovered ones.
    fh = fake_home(tmp_path)
    path = cfg.config_path(fh.env)
    path.parent.mkdir(parents=True)
    path.write_text("[preamble]\nbudget = 4096\n", encoding="utf-8")
    config = cfg.load(fh.env)
    assert config.preamble.budget == 4096
    assert [s.name for s in config.sources] == [s.name for s in cfg.discover(fh.env)]


def test_discovery_skips_accounts_without_projects_and_files(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    (fh.home / ".claude-empty").mkdir()  # no projects/
    (fh.home / ".claude-file").write_text("not a folder")
    (fh.home / ".claude.json").write_text("{}")
    assert [s.name for s in cfg.discover(fh.env)] == [
        "claude",
        "pi",
        "gemini",
        "codex",
        "kilo",
        "goose",
    ]


def test_tools_not_installed_yet_are_sources_that_wait(tmp_path: Path) -> None:
    """pi, Gemini CLI and Codex at their known places are sources before their folders
    exist (their roots wait, §5.4), so installing one while mounted needs no remount; the
    reason says so. With no agent's memory at all there is still nothing found."""
    fh = fake_home(tmp_path, (".claude",), pi=False)
    found = {s.name: s for s in cfg.discover(fh.env)}
    assert found["pi"].root == fh.pi_root
    assert found["gemini"].kind == cfg.GEMINI
    assert found["codex"].kind == cfg.CODEX
    assert found["codex"].why == f"{fh.home / '.codex'} is not there yet: shown once made"
    assert not fh.pi_root.exists()  # discovery makes nothing
    assert cfg.discover(fake_home(tmp_path / "bare", (), pi=False).env) == ()


def test_discovery_keeps_a_fresh_own_account_without_projects(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude-work",), pi=False)
    (fh.home / ".claude").mkdir()  # a fresh account: projects/ comes with the first write
    found = cfg.discover(fh.env)
    assert [(s.name, s.own) for s in found][:2] == [("claude", True), ("work", False)]


def test_discovery_without_default_account_has_no_own_source(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude-work",))
    found = cfg.discover(fh.env)
    assert [s.name for s in found] == ["work", "pi", "gemini", "codex", "kilo", "goose"]
    assert not any(s.own for s in found)
    assert cfg.load(fh.env).own is None


def test_claude_config_dir_is_the_own_source(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    fh.env["CLAUDE_CONFIG_DIR"] = str(fh.home / ".claude-work")
    found = cfg.discover(fh.env)
    assert found[0].name == "work"
    assert found[0].own
    assert "CLAUDE_CONFIG_DIR" in found[0].why
    assert [s.name for s in found] == ["work", "claude", "pi", "gemini", "codex", "kilo", "goose"]
    assert sum(s.own for s in found) == 1


def test_claude_config_dir_elsewhere_gets_a_unique_name(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    elsewhere = fh.home / "identities" / "acct" / "claude"
    (elsewhere / "projects").mkdir(parents=True)
    fh.env["CLAUDE_CONFIG_DIR"] = str(elsewhere)
    found = cfg.discover(fh.env)
    names = [s.name for s in found]
    assert len(set(names)) == len(names), names
    assert found[0].own
    assert found[0].root == elsewhere / "projects"
    assert not any(s.own for s in found[1:])


def test_claude_config_dir_pointing_at_default_is_not_listed_twice(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (".claude",), pi=False)
    fh.env["CLAUDE_CONFIG_DIR"] = "~/.claude"
    found = cfg.discover(fh.env)
    assert [(s.name, s.own) for s in found if s.claude_config] == [("claude", True)]


def test_discovered_names_are_unique(tmp_path: Path) -> None:
    # ".claude-" cleans to "claude", which ~/.claude already uses.
    fh = fake_home(tmp_path, (".claude", ".claude-", ".claude-pi"))
    names = [s.name for s in cfg.discover(fh.env)]
    assert len(set(names)) == len(names), names
    assert names[0] == "claude"


def test_no_sources_at_all(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (), pi=False)
    config = cfg.load(fh.env)
    assert config.sources == ()
    assert config.own is None
    assert config.own_index is None


# --- a valid file -------------------------------------------------------------------


VALID = """
[[source]]
name = "work"
path = "~/.claude-work/projects/{slug}/memory"
own = true

[[source]]
name = "pi"
path = "~/.pi/agent/memory/{slug}"

[[source]]
name = "abs"
path = "/srv/mem/{slug}/a/b"

[preamble]
budget = 4096
newest = 2
file_cap = 1024
index_max = 10

[limits]
max_file_bytes = 1000
versions = 5
history_bytes = 4096
"""


def test_valid_config_file(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    path = write_config(fh, VALID)
    config = cfg.load(fh.env)
    assert config.path == path
    assert [s.name for s in config.sources] == ["work", "pi", "abs"]
    work, pi, abs_ = config.sources
    assert work.own
    assert config.own == work
    assert config.own_index == 0
    assert work.root == fh.home / ".claude-work" / "projects"
    assert work.tail == ("memory",)
    assert not pi.own
    assert pi.root == fh.home / ".pi" / "agent" / "memory"
    assert pi.tail == ()
    assert abs_.root == Path("/srv/mem")
    assert abs_.tail == ("a", "b")
    assert config.preamble == PreambleSettings(budget=4096, newest=2, file_cap=1024, index_max=10)
    assert config.limits == Limits(max_file_bytes=1000, versions=5, history_bytes=4096)


def test_handoff_versions_is_the_old_name_of_versions(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    write_config(fh, SOURCE + "[limits]\nhandoff_versions = 7\n")
    assert cfg.load(fh.env).limits.versions == 7


def test_explicit_config_path_wins(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    write_config(fh, "[preamble\n")  # the default file is broken; it must not be read
    other = tmp_path / "other.toml"
    other.write_text(VALID, encoding="utf-8")
    config = cfg.load(fh.env, other)
    assert config.path == other
    assert config.own is not None
    assert config.own.name == "work"


def test_sections_may_be_partial(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    write_config(fh, VALID.split("[preamble]")[0] + "[preamble]\nbudget = 100\n")
    config = cfg.load(fh.env)
    assert config.preamble == PreambleSettings(budget=100)
    assert config.limits == Limits()


# --- refusals: each names the file and the key ---------------------------------------

SOURCE = '[[source]]\nname = "a"\npath = "~/a/{slug}"\n'


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("colour = 1\n", "colour"),
        ("[extra]\nx = 1\n", "extra"),
        (SOURCE + "[preamble]\nbudgett = 1\n", "preamble.budgett"),
        (SOURCE + "[limits]\nmax_bytes = 1\n", "limits.max_bytes"),
        (SOURCE + '[preamble]\nbudget = "big"\n', "preamble.budget"),
        (SOURCE + "[preamble]\nbudget = -1\n", "preamble.budget"),
        (SOURCE + "[preamble]\nnewest = 1.5\n", "preamble.newest"),
        (SOURCE + "[preamble]\nindex_max = true\n", "preamble.index_max"),
        (SOURCE + "[limits]\nmax_file_bytes = 0\n", "limits.max_file_bytes"),
        (SOURCE + "[limits]\nhandoff_versions = -3\n", "limits.handoff_versions"),
        (SOURCE + "[limits]\nversions = -1\n", "limits.versions"),
        (SOURCE + "[limits]\nhistory_bytes = -1\n", "limits.history_bytes"),
        (SOURCE + "[limits]\nversions = 3\nhandoff_versions = 3\n", "limits.handoff_versions"),
        ("preamble = 3\n" + SOURCE, "preamble"),
        ("limits = []\n" + SOURCE, "limits"),
    ],
)
def test_bad_keys_and_values_are_refused(tmp_path: Path, text: str, key: str) -> None:
    message = refusal(fake_home(tmp_path), text)
    assert key in message, message


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ('name = "a"\npath = "~/a/{slug}"\nowner = true\n', "owner"),
        ('name = "a"\npath = "~/a/memory"\n', "path"),
        ('name = "a"\npath = "~/a/pre{slug}/memory"\n', "path"),
        ('name = "a"\npath = "~/a/{slug}.d/memory"\n', "path"),
        ('name = "a"\npath = "~/a/{slug}/{slug}"\n', "path"),
        ('name = "a"\npath = "a/{slug}/memory"\n', "path"),
        ('name = "a"\npath = "{slug}/memory"\n', "path"),
        ('name = "a"\npath = "~/a/{slug}/../x"\n', "path"),
        ('name = "a"\npath = 3\n', "path"),
        ('path = "~/a/{slug}"\n', "name"),
        ('name = "a b"\npath = "~/a/{slug}"\n', "name"),
        ('name = ""\npath = "~/a/{slug}"\n', "name"),
        ('name = "a"\npath = "~/a/{slug}"\nown = "yes"\n', "own"),
    ],
)
def test_bad_sources_are_refused(tmp_path: Path, source: str, key: str) -> None:
    message = refusal(fake_home(tmp_path), "[[source]]\n" + source)
    assert key in message, message
    assert "source #1" in message, message


def test_a_gemini_source_in_the_config(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    text = (
        VALID.split("[preamble]")[0]
        + '[[source]]\nname = "g"\nkind = "gemini"\n'  # path: ~/.gemini by default
        + '[[source]]\nname = "g2"\nkind = "gemini"\npath = "/srv/gemini"\nown = false\n'
    )
    write_config(fh, text)
    config = cfg.load(fh.env)
    assert [s.name for s in config.sources] == ["work", "pi", "abs", "g", "g2"]
    g, g2 = config.sources[3:]
    assert (g.mapped, g.own, g.kind) == (True, False, cfg.GEMINI)
    assert g.gemini_dir == fh.home / ".gemini"
    assert (g.root, g.tail) == (fh.home / ".gemini" / "tmp", ("memory",))
    assert g2.gemini_dir == Path("/srv/gemini")
    assert g.why == "kind = 'gemini' in the config"
    assert not any(s.mapped for s in config.sources[:3])
    # Listed sources are all there is: no Gemini folder is discovered beside them.
    (fh.home / ".gemini").mkdir()
    write_config(fh, VALID)
    assert not any(s.mapped for s in cfg.load(fh.env).sources)


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ('name = "g"\nkind = "gemini"\nown = true\n', "own"),
        ('name = "g"\nkind = "gemini"\nown = "no"\n', "own"),
        ('name = "g"\nkind = "gemini"\npath = "~/.gemini/tmp/{slug}/memory"\n', "path"),
        ('name = "g"\nkind = "gemini"\npath = "gemini"\n', "path"),
        ('name = "g"\nkind = "gemini"\npath = "~/x/../.gemini"\n', "path"),
        ('name = "g"\nkind = "gemini"\npath = 3\n', "path"),
        ('name = "g"\nkind = "Gemini"\n', "kind"),
        ('name = "g"\nkind = 1\npath = "~/a/{slug}"\n', "kind"),
        ('kind = "gemini"\n', "name"),
        ('name = "g"\nkind = "gemini"\nextra = 1\n', "extra"),
    ],
)
def test_bad_gemini_sources_are_refused(tmp_path: Path, source: str, key: str) -> None:
    message = refusal(fake_home(tmp_path), "[[source]]\n" + source)
    assert key in message, message
    assert "source #1" in message, message
    assert "\n" not in message
    assert "unknown key 'kind'" not in message  # a gemini source is no unknown thing


def test_source_not_an_array_is_refused(tmp_path: Path) -> None:
    message = refusal(fake_home(tmp_path), '[source]\nname = "a"\npath = "~/a/{slug}"\n')
    assert "source" in message


def test_two_own_sources_are_refused(tmp_path: Path) -> None:
    text = (
        '[[source]]\nname = "a"\npath = "~/a/{slug}"\nown = true\n'
        '[[source]]\nname = "b"\npath = "~/b/{slug}"\nown = true\n'
    )
    message = refusal(fake_home(tmp_path), text)
    assert "own" in message


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    text = SOURCE + '[[source]]\nname = "a"\npath = "~/b/{slug}"\n'
    message = refusal(fake_home(tmp_path), text)
    assert "name" in message
    assert "'a'" in message


def test_parse_template_splits_at_the_slug_component(tmp_path: Path) -> None:
    home = tmp_path / "home"
    root, tail = cfg.parse_template("~/.claude/projects/{slug}/memory", home, "here")
    assert (root, tail) == (home / ".claude" / "projects", ("memory",))
    assert cfg.parse_template("/{slug}", home, "here") == (Path("/"), ())
    assert cfg.expand("~", home) == home
    assert cfg.expand("~user/x", home) == Path("~user/x")


# --- check_mount ----------------------------------------------------------------------


def config_with(fh: FakeHome, text: str) -> cfg.Config:
    write_config(fh, text)
    return cfg.load(fh.env)


def test_check_mount_accepts_a_plain_mountpoint(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    config = cfg.load(fh.env)
    cfg.check_mount(config, fh.home / "memfs")
    cfg.check_mount(config, tmp_path / "elsewhere" / "mnt")


def test_check_mount_refuses_no_sources(tmp_path: Path) -> None:
    fh = fake_home(tmp_path, (), pi=False)
    with pytest.raises(ConfigError, match="no memory sources"):
        cfg.check_mount(cfg.load(fh.env), fh.home / "memfs")


@pytest.mark.parametrize(
    "mount",
    [
        ".claude/projects",
        ".claude/projects/-x/memory",
        ".pi/agent/memory/mnt",
        ".claude-work/projects/mnt",
    ],
)
def test_check_mount_refuses_a_mountpoint_inside_a_source(tmp_path: Path, mount: str) -> None:
    fh = fake_home(tmp_path)
    with pytest.raises(ConfigError, match="inside source"):
        cfg.check_mount(cfg.load(fh.env), fh.home / mount)


@pytest.mark.parametrize("mount", [".", ".claude", ".pi", ".pi/agent"])
def test_check_mount_refuses_a_source_inside_the_mountpoint(tmp_path: Path, mount: str) -> None:
    fh = fake_home(tmp_path)
    with pytest.raises(ConfigError, match="inside mountpoint"):
        cfg.check_mount(cfg.load(fh.env), fh.home / mount)


def test_check_mount_sees_through_symlinks(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    link = fh.home / "link"
    link.symlink_to(fh.home / ".claude")
    with pytest.raises(ConfigError, match="inside"):
        cfg.check_mount(cfg.load(fh.env), link / "projects" / "mnt")


def test_check_mount_refuses_own_source_in_a_git_work_tree(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    repo = fh.home / "code" / "repo"
    (repo / ".git").mkdir(parents=True)
    config = config_with(
        fh, '[[source]]\nname = "a"\npath = "~/code/repo/mem/{slug}"\nown = true\n'
    )
    with pytest.raises(ConfigError) as info:
        cfg.check_mount(config, fh.home / "memfs")
    assert "git work tree" in str(info.value)
    assert str(repo) in str(info.value)


def test_check_mount_allows_read_only_source_in_a_git_work_tree(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    repo = fh.home / "code" / "repo"
    repo.mkdir(parents=True)
    (repo / ".git").write_text("gitdir: elsewhere\n", encoding="utf-8")  # a linked worktree
    config = config_with(fh, '[[source]]\nname = "a"\npath = "~/code/repo/mem/{slug}"\n')
    cfg.check_mount(config, fh.home / "memfs")


def test_check_mount_refuses_a_mountpoint_in_a_git_work_tree(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    repo = fh.home / "code" / "repo"
    (repo / ".git").mkdir(parents=True)
    with pytest.raises(ConfigError, match="git work tree"):
        cfg.check_mount(cfg.load(fh.env), repo / "sub" / "memfs")


def test_git_work_tree_outside_home_does_not_count(tmp_path: Path) -> None:
    fh = fake_home(tmp_path)
    outside = tmp_path / "outside"
    (outside / ".git").mkdir(parents=True)
    assert cfg.git_work_tree(outside / "mnt", fh.home) is None
    cfg.check_mount(cfg.load(fh.env), outside / "mnt")
    assert cfg.git_work_tree(fh.home / "x", fh.home) is None
