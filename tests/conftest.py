"""Fixtures for the tier-3 mount tests; the harness itself is in mounting.py.

``sandbox`` moves HOME and every XDG folder under ``tmp_path`` (for this process and for
every memfs it starts) and writes a config listing three sources explicitly. ``mounts``
starts foreground daemons and always unmounts them at teardown; when a test fails, the log
of every memfs it started is attached to the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mounting import ENV_DROPPED, ENV_FOLDERS, Mounts, Sandbox, in_mountinfo, require_fuse

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
