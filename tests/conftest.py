"""Fixtures shared by test modules: tier 2's sample home, tier 3's sandbox and mounts.

``sample`` is the fake home the adapter tests await handlers on (built by
helpers.make_sample); ``readdir_reply`` stands in for pyfuse3's readdir_reply;
``systemd_analyze`` finds systemd's checker for the unit tests (test_service,
test_mount_unit). The tier-3 harness itself is in mounting.py.

``sandbox`` moves HOME and every XDG folder under ``tmp_path`` (for this process and for
every memfs it starts) and writes a config listing three sources explicitly. ``mounts``
starts foreground daemons and always unmounts them at teardown; when a test fails, the log
of every memfs it started is attached to the report.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import fake_readdir_reply
from helpers import Sample, make_sample
from mounting import (
    ENV_DROPPED,
    ENV_FOLDERS,
    Mounts,
    Sandbox,
    in_mountinfo,
    require_fuse,
    unavailable,
)

from memfs.adapter import fs

LOGS = pytest.StashKey[list[Path]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report: pytest.TestReport = yield
    if report.failed:
        for path in item.stash.get(LOGS, []):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = "(no log written)"
            report.sections.append((f"memfs log {path}", text or "(empty)"))
    return report  # type: ignore[return-value]


@pytest.fixture
def sample(tmp_path: Path) -> Sample:
    """The tier-2 sample home, with a MemFS on it that was never mounted."""
    return make_sample(tmp_path)


@pytest.fixture
def readdir_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs.pyfuse3, "readdir_reply", fake_readdir_reply)


@pytest.fixture
def systemd_analyze() -> str:
    """The path of systemd-analyze, which checks a unit as systemd reads it."""
    program = shutil.which("systemd-analyze")
    if program is None:
        unavailable("systemd-analyze is not installed (apt-get install systemd; .ci/run does)")
    return program


@pytest.fixture
def sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Sandbox:
    """A fake home with sources personal (own), work and pi, and a config listing them."""
    box = Sandbox.create(tmp_path)
    for var in ("HOME", *ENV_FOLDERS):
        monkeypatch.setenv(var, box.env[var])
    for var in ENV_DROPPED:
        monkeypatch.delenv(var, raising=False)
    # Background daemons log to the state folder: attach that log on failure too.
    request.node.stash.setdefault(LOGS, []).append(box.state_dir / "memfs.log")
    return box


@pytest.fixture
def mounts(sandbox: Sandbox, request: pytest.FixtureRequest) -> Iterator[Mounts]:
    """``mounts()`` starts `memfs mount --foreground` and waits until it is live."""
    require_fuse()
    started = Mounts(sandbox, request.node.stash.setdefault(LOGS, []))
    try:
        yield started
    finally:
        forced = started.close()
        if forced:
            print("mount teardown had to force:", *forced, sep="\n  ")
        if in_mountinfo(sandbox.mountpoint):
            pytest.fail(f"{sandbox.mountpoint} is still mounted after teardown: {forced}")
