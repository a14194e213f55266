"""The commands that need no mount, and the table of user errors (tier 1).

Every user error of every command is one line on stderr naming the cause and the fix,
exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from gemini_layout import GeminiCli
from mounting import release_mountpoint

from memfs.app import cli, demo
from memfs.rules.slug import claude_slug


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("CONFIG", "STATE", "DATA", "CACHE", "RUNTIME"):
        folder = tmp_path / f"xdg-{var.lower()}"
        folder.mkdir()
        monkeypatch.setenv(
            f"XDG_{var}_HOME" if var != "RUNTIME" else "XDG_RUNTIME_DIR", str(folder)
        )
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    yield home
    # A refusal test that fails by mounting leaves no mount behind: a stray mount outlives
    # the test and its folder, and hangs whatever touches it once its daemon is gone.
    for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
        point = line.split()[4]
        if point.startswith(f"{tmp_path}/"):
            release_mountpoint(point)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_slug_of_the_reference_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "slug", "/home/a/my_proj.v2") == (0, "-home-a-my-proj-v2\n", "")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("memfs ")


def test_sources_lists_accounts_pi_and_the_own_source(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo.build(home)
    code, out, err = run(capsys, "sources")
    assert (code, err) == (0, "")
    assert "discovered" in out
    lines = out.splitlines()
    own = [line for line in lines if line.strip().startswith("own ")]
    assert len(own) == 1
    assert "/.claude/projects/{slug}/memory" in own[0]
    assert any("/.claude-work/projects/{slug}/memory" in line for line in lines)
    assert any("/.pi/agent/memory/{slug}" in line for line in lines)
    assert "why: ~/.claude is Claude Code's default" in out


def test_sources_says_what_each_gemini_folder_maps_to(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (home / ".claude" / "projects").mkdir(parents=True)
    cli_ = GeminiCli(home)
    shop = tmp_path / "src" / "shop"
    shop.mkdir(parents=True)
    cli_.memory(shop)
    gone = tmp_path / "src" / "gone"
    gone.mkdir()
    cli_.memory(gone)
    gone.rmdir()
    (cli_.tmp / "orphan").mkdir()
    code, out, err = run(capsys, "sources")
    assert (code, err) == (0, "")
    lines = [line.strip() for line in out.splitlines()]
    assert f"gemini       {home}/.gemini/tmp/<id>/memory" in lines
    assert f"why: {home}/.gemini exists" in lines
    assert f"shop -> {shop} -> {claude_slug(str(shop))} (from .project_root)" in lines
    assert f"gone: not mapped: its root {gone} (.project_root) does not exist" in lines
    assert "orphan: not mapped: no .project_root, and not in projects.json" in lines


def test_preamble_budgets(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = "/home/demo/src/webshop"
    demo.build(home, project)
    code, small, _ = run(capsys, "preamble", project, "--budget", "1200")
    assert code == 0
    assert len(small.encode()) <= 1200
    assert "Background from earlier sessions" in small
    assert "handoff-cyberine_20261125.md" in small  # the newest dated handoff
    code, large, _ = run(capsys, "preamble", project, "--budget", "8192")
    assert code == 0
    assert len(large.encode()) <= 8192
    assert "[Deploys](deploys.md)" in large  # only the work account links it: the union
    assert "[Testing](testing.md)" in large  # only the own account links it
    assert "## Recent: deploys.md" in large  # the newest file after the handoff


USER_ERRORS: list[tuple[list[str], str]] = [
    (["bogus"], "invalid choice"),
    (["mount"], "required"),
    (["preamble", "--budget", "-1", "/x"], "--budget must be >= 0"),
    (["preamble", "/nowhere/at/all"], "no source has project"),
    (["sources", "--config", "/nonexistent.toml"], "no such config file"),
    (["status", "{home}/nothing-mounted"], "no running memfs"),
    (["umount", "{home}/nothing-mounted"], "nothing is mounted"),
    (["mount", "{home}/.claude/projects/mnt"], "lies inside source"),
    (["mount", "--config", "{bad}", "{home}/mnt"], "unknown key"),
]


@pytest.mark.parametrize(("argv", "cause"), USER_ERRORS)
def test_user_errors_are_one_line(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], cause: str
) -> None:
    demo.build(home)
    bad = tmp_path / "bad.toml"
    bad.write_text("[preamble]\nbudgt = 3\n")
    argv = [a.format(home=home, bad=bad) for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith("memfs: ")
    assert cause in err
    assert "Traceback" not in err


def test_no_sources_refuses_to_mount_and_touches_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "mount", str(home / "mnt"))
    assert code == 2
    assert "no memory sources found" in err
    assert err.count("\n") == 1
    assert not (home / "mnt").exists()


def test_mountpoint_in_a_git_work_tree_is_refused(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo.build(home)
    (home / "repo" / ".git").mkdir(parents=True)
    code, _, err = run(capsys, "mount", str(home / "repo" / "mnt"))
    assert code == 2
    assert "git work tree" in err


def test_python_dash_m_runs_the_cli(home: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memfs", "slug", "/tmp/x:y@z#w"],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ),
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        claude_slug("/tmp/x:y@z#w") + "\n",
        "",
    )


# --- memfs status: the lines printed for a status the daemon reports --------------------


def status_of(**extra: object) -> dict[str, object]:
    """A status as an older daemon reports it (no memory_over_limit, no stale_own_heads)."""
    status: dict[str, object] = {
        "mountpoint": "/h/memfs",
        "pid": 42,
        "sources": [
            {"name": "personal", "path": "/h/.claude/projects/{slug}/memory", "own": True},
            {"name": "work", "path": "/h/.claude-work/projects/{slug}/memory", "own": False},
        ],
        "projects_listed": 3,
        "projects_loaded": 1,
        "files": 7,
        "left_out": [],
        "requests": {"read": 5},
        "requests_total": 5,
        "invalidations": 2,
        "invalidation_errors": 0,
        "commits": 1,
        "inodes": 9,
    }
    status.update(extra)
    return status


def test_status_of_an_older_daemon_prints_without_the_new_parts() -> None:
    lines = cli.format_status(status_of())
    assert lines[0] == "mountpoint: /h/memfs (pid 42)"
    assert "  source own personal: /h/.claude/projects/{slug}/memory" in lines
    assert "projects: 3 listed, 1 loaded" in lines
    assert "files: 7 shown, 0 left out" in lines
    assert not any("MEMORY.md" in line or "older than" in line for line in lines)


def test_status_with_empty_new_parts_prints_nothing_for_them() -> None:
    quiet = cli.format_status(status_of(memory_over_limit=[], stale_own_heads=[]))
    assert quiet == cli.format_status(status_of())


def test_status_names_memory_past_claude_codes_limit() -> None:
    over = [{"project": "-home-u-shop", "lines": 210, "bytes": 26_500, "beyond": 10}]
    lines = cli.format_status(status_of(memory_over_limit=over))
    at = lines.index(
        "MEMORY.md longer than Claude Code loads (200 lines or 25,000 bytes) in 1 project:"
    )
    assert lines[at + 1] == (
        "  -home-u-shop: 210 lines, 26,500 bytes; 10 linked topics beyond the limit"
    )


def test_status_names_own_heads_older_than_another_version() -> None:
    stale = [
        {
            "project": "-home-u-shop",
            "path": "notes.md",
            "newer": ".history/notes.md/work@2026-11-30T10:00Z.md",
        }
    ]
    lines = cli.format_status(status_of(stale_own_heads=stale))
    at = lines.index("own files older than another source's version: 1")
    assert lines[at + 1] == (
        "  -home-u-shop/notes.md: newer is -home-u-shop/.history/notes.md/work@2026-11-30T10:00Z.md"
    )


def test_status_lists_are_cut_at_twenty_and_say_how_many_more() -> None:
    over = [{"project": f"-p{i}", "lines": 300, "bytes": 1000, "beyond": 1} for i in range(23)]
    lines = cli.format_status(status_of(memory_over_limit=over))
    shown = [line for line in lines if line.startswith("  -p")]
    assert len(shown) == cli.SHOWN
    assert "1 linked topic beyond the limit" in shown[0]
    assert "  ... and 3 more (memfs status --json lists all)" in lines


def test_status_json_is_the_raw_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = status_of(memory_over_limit=[{"project": "-p", "lines": 1, "bytes": 2, "beyond": 3}])
    monkeypatch.setattr(cli, "read_status", lambda mountpoint: raw)
    code, out, err = run(capsys, "status", "/h/memfs", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == raw
    code, out, _ = run(capsys, "status", "/h/memfs")
    assert code == 0
    assert out.splitlines() == cli.format_status(raw)


# --- the demo's sample folder -----------------------------------------------------------


def test_only_a_marked_demo_folder_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    base = demo.make_base()
    assert base.parent == tmp_path
    try:
        (base / demo.MOUNT_NAME).mkdir()
        assert demo.sample_base(base / demo.MOUNT_NAME) == base
        assert demo.sample_base(base / "other") is None
        (base / demo.MARKER).unlink()
        assert demo.remove_if_sample(base / demo.MOUNT_NAME) is None
        assert base.exists()
        (base / demo.MARKER).write_text("")
        assert demo.remove_if_sample(base / demo.MOUNT_NAME) == base
        assert not base.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    look_alike = tmp_path / "memfs-demo-x" / "mnt"
    look_alike.mkdir(parents=True)  # the right names but no marker
    assert demo.remove_if_sample(look_alike) is None
    assert look_alike.exists()


def test_log_piped_into_head_prints_no_broken_pipe(home: Path) -> None:
    # Issue 36: `memfs log -n0 | head -1` printed "Broken pipe" once head had its line.
    from memfs.disk import journal, store
    from memfs.disk.config import state_dir

    state = state_dir(os.environ)
    for n in range(2000):  # far more than a pipe holds
        journal.record(state, journal.Change("-p", f"notes-{n}.md", "write"))
    store.close_all()
    done = subprocess.run(
        ["sh", "-c", f"{sys.executable} -m memfs log -n0 | head -1"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.count(b"\n") == 1
    assert done.stderr == b"", done.stderr
