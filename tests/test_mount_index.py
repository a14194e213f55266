"""Tier 3: MEMORY.md saved through a real mount lands as a change of the own index (§5.3),
and an index backfill never links a synthetic file (§6).

Two accounts hold 60 index lines each: ``personal`` (own) and ``work``. Every way a writer
saves MEMORY.md is played by the real client in a subprocess: Claude Code's Edit (read,
``MEMORY.md.tmp.<pid>.<12 hex>`` with O_EXCL, fsync, close, rename over MEMORY.md), the
shell's ``>`` (the shell itself reads and rewrites: ``mapfile <``, then ``{ ...; } >``),
``sed -i``, vim in each of its ways of saving (in place, ``backupcopy=yes``, and
``backupcopy=no``: MEMORY.md renamed to ``MEMORY.md~``, then created anew), and an
editor's backup-then-write in Python. Writers that read and save at different moments are
stepped through pipes (a line to the child, a line back); nothing sleeps a fixed time.

Each save must leave in the own ``MEMORY.md`` on disk exactly the own lines it kept plus
the lines it added (never a copy of work's lines); a line it removed stays out of the view;
two writers that read the same version both keep their line.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounting import MOUNT_MARKS, Mounts, Sandbox, unavailable, wait_until

from memfs.rules.slug import claude_slug

pytestmark = MOUNT_MARKS

SLUG = claude_slug("/home/u/src/shop")
OWN = [f"- [Own {n}](own-{n}.md): own topic {n}" for n in range(1, 61)]
WORK = [f"- [Work {n}](work-{n}.md): work topic {n}" for n in range(1, 61)]
STEP = 15.0  # seconds for one step of a writer
SHOWN = 5.0  # seconds for a change on disk to show through the mount

# Claude Code's Edit, stepped: it reads MEMORY.md, says "read", waits for a line, saves
# what it read with its change as Claude Code does, says "saved".
CLAUDE_EDIT = r"""
import os, secrets, sys
path, add, remove = sys.argv[1], sys.argv[2], set(sys.argv[3:])
with open(path, "rb") as f:
    lines = f.read().decode().split("\n")[:-1]
print("read", flush=True)
sys.stdin.readline()
body = "".join(f"{l}\n" for l in lines if l not in remove) + f"{add}\n"
temp = f"{path}.tmp.{os.getpid()}.{secrets.token_hex(6)}"
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
os.write(fd, body.encode())
os.fsync(fd)
os.close(fd)
os.rename(temp, path)
print("saved", flush=True)
"""

# An editor's backup-then-write (vim's backupcopy=no, emacs' backup by renaming): the
# index renamed to `MEMORY.md~`, MEMORY.md created and written, the backup removed.
BACKUP_THEN_WRITE = r"""
import os, sys
path, add, remove = sys.argv[1], sys.argv[2], set(sys.argv[3:])
with open(path, "rb") as f:
    lines = f.read().decode().split("\n")[:-1]
print("read", flush=True)
sys.stdin.readline()
body = "".join(f"{l}\n" for l in lines if l not in remove) + f"{add}\n"
os.rename(path, path + "~")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, body.encode())
os.fsync(fd)
os.close(fd)
os.unlink(path + "~")
print("saved", flush=True)
"""

# The shell's `>`: the shell itself reads (a builtin's redirection) and rewrites.
SHELL_REWRITE = r"""
path=$1 add=$2; shift 2
mapfile -t lines < "$path"
echo read
read -r _
{
    for line in "${lines[@]}"; do
        keep=1
        for gone in "$@"; do [[ $line == "$gone" ]] && keep=0; done
        ((keep)) && printf '%s\n' "$line"
    done
    printf '%s\n' "$add"
} > "$path"
echo saved
"""

VIM_SETTINGS = {
    "vim": "set backupskip=",  # 'backupcopy' auto: here a rename, as for any plain file
    "vim-yes": "set backupskip= backupcopy=yes",  # a copy as backup, then a rewrite
    "vim-no": "set backupskip= backupcopy=no",  # MEMORY.md~ by rename, MEMORY.md anew
    "vim-inplace": "set nowritebackup",  # no backup: O_WRONLY, truncate, write
}
PATTERNS = ["claude", "shell", "sed", "backup", *VIM_SETTINGS]
# Writers whose read cannot be stepped apart from their save: sed reads as it writes; vim
# asks before it writes over a file changed since it read it (and in batch mode, whatever
# it is told, keeps the file), so its save follows its read. Claude Code's Edit reads
# before them and saves after them (test_fs_index.py plays vim's calls with a save between).
READS_AT_SAVE = {"sed", *VIM_SETTINGS}


def bre(line: str) -> str:
    """``line`` as a sed/vim regular expression matching it literally."""
    return re.sub(r"([\\.*\[\]^$/])", r"\\\1", line)


class Writer:
    """One writer of MEMORY.md: ``read()`` makes it read, ``save()`` makes it save (a
    writer that reads as it saves does both at ``save()``)."""

    def __init__(self, box: Sandbox, pattern: str, add: str, remove: tuple[str, ...] = ()) -> None:
        self.box, self.pattern, self.add, self.remove = box, pattern, add, remove
        self.path = box.mnt(SLUG, "MEMORY.md")
        self.proc: subprocess.Popen[bytes] | None = None
        self.marker = box.base / f"vim-loaded-{id(self)}"

    def read(self) -> None:
        args = [str(self.path), self.add, *self.remove]
        if self.pattern in ("claude", "backup"):
            script = CLAUDE_EDIT if self.pattern == "claude" else BACKUP_THEN_WRITE
            self._start([sys.executable, "-c", script, *args])
            assert self._line() == "read"
        elif self.pattern == "shell":
            self._start(["bash", "-c", SHELL_REWRITE, "bash", *args])
            assert self._line() == "read"
        elif self.pattern.startswith("vim"):
            vim = ["vim", "-es", "-u", "NONE", "-i", "NONE", "-N", str(self.path)]
            self._start(vim)
            # It has loaded the file once it runs its first command.
            self._send(f'{VIM_SETTINGS[self.pattern]}\ncall writefile(["ok"], "{self.marker}")')
            wait_until(self.marker.exists, STEP, f"{self.pattern} loaded MEMORY.md")

    def save(self) -> None:
        if self.pattern == "sed":
            script = [f"/^{bre(line)}$/d" for line in self.remove] + [f"$a {self.add}"]
            self.box.out("sed", "-i", *(part for s in script for part in ("-e", s)), self.path)
            return
        if self.pattern.startswith("vim") and self.proc is None:
            self.read()
        if self.pattern.startswith("vim"):
            gone = [f"g/^{bre(line)}$/d" for line in self.remove]
            self._send("\n".join([*gone, "$a", self.add, ".", "w", "q"]))
            assert self.proc is not None
            self.proc.stdin.close()  # type: ignore[union-attr]
            assert self.proc.wait(STEP) == 0, self._stderr()
            return
        self._send("")
        assert self._line() == "saved", self._stderr()
        assert self.proc is not None
        assert self.proc.wait(STEP) == 0, self._stderr()

    def _start(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.box.env,
            cwd=self.box.base,
        )

    def _send(self, text: str) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def _line(self) -> str:
        assert self.proc is not None
        assert self.proc.stdout is not None
        poll = select.poll()  # not select(): the suite may hold descriptors past 1024
        poll.register(self.proc.stdout, select.POLLIN)
        if not poll.poll(STEP * 1000):
            pytest.fail(f"{self.pattern} writer silent for {STEP}s: {self._stderr()}")
        return self.proc.stdout.readline().decode().strip()

    def _stderr(self) -> str:
        if self.proc is None or self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(STEP)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@pytest.fixture
def writers(sandbox: Sandbox) -> Iterator[list[Writer]]:
    """Writers made by a test; any still running at the end is killed."""
    made: list[Writer] = []
    yield made
    for writer in made:
        writer.close()


def lines_of(path: Path) -> list[str]:
    with open(path, "rb") as f:
        return f.read().decode().split("\n")[:-1]


def seed(box: Sandbox) -> tuple[Path, Path]:
    """Both accounts' indexes and a topic each; returns (own index, work's index) on disk."""
    own = box.write("personal", SLUG, "MEMORY.md", "".join(f"{line}\n" for line in OWN), 2)
    work = box.write("work", SLUG, "MEMORY.md", "".join(f"{line}\n" for line in WORK), 1)
    box.write("personal", SLUG, "own-1.md", "own topic\n", 2)
    box.write("work", SLUG, "work-1.md", "work topic\n", 1)
    return own, work


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        unavailable(f"{tool} is not installed (.ci/setup-tests installs it)")


def test_claude_codes_edit_leaves_the_own_index_its_lines_and_the_new_one(
    sandbox: Sandbox, mounts: Mounts, writers: list[Writer]
) -> None:
    own, work = seed(sandbox)
    work_before = work.read_bytes()
    mounts()
    memory = sandbox.mnt(SLUG, "MEMORY.md")
    assert lines_of(memory) == OWN + WORK
    edit = Writer(sandbox, "claude", "- [Ops](ops.md): added by an Edit")
    writers.append(edit)
    edit.read()
    edit.save()
    # The own index on disk: exactly its 60 lines and the new one, not the union.
    assert lines_of(own) == [*OWN, "- [Ops](ops.md): added by an Edit"]
    assert lines_of(memory) == [*OWN, "- [Ops](ops.md): added by an Edit", *WORK]
    assert work.read_bytes() == work_before
    assert not [n for n in os.listdir(own.parent) if ".tmp." in n or ".memfs-stage" in n]
    # The other account removes a line in its own folder: it leaves the view.
    gone = WORK[9]
    work.write_text("".join(f"{line}\n" for line in WORK if line != gone))
    wait_until(lambda: gone not in lines_of(memory), SHOWN, "work's removal shown")
    assert lines_of(memory) == [*OWN, "- [Ops](ops.md): added by an Edit", *WORK[:9], *WORK[10:]]
    assert gone not in lines_of(own)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_way_of_saving_lands_the_change_alone(
    sandbox: Sandbox, mounts: Mounts, writers: list[Writer], pattern: str
) -> None:
    if pattern == "sed" or pattern.startswith("vim"):
        need(pattern.split("-")[0])
    own, work = seed(sandbox)
    work_before = work.read_bytes()
    mounts()
    memory = sandbox.mnt(SLUG, "MEMORY.md")

    # One writer removes an own line and one of work's, and adds a line.
    added = f"- [First {pattern}](first.md): added"
    first = Writer(sandbox, pattern, added, (OWN[4], WORK[6]))
    writers.append(first)
    first.read()
    first.save()
    kept_own = [line for line in OWN if line != OWN[4]]
    assert lines_of(own) == [*kept_own, added]
    shown = lines_of(memory)
    assert shown == [*kept_own, added, *(line for line in WORK if line != WORK[6])]
    assert work.read_bytes() == work_before  # work's line is hidden, its file untouched

    # Two writers read the same version; each adds a line; they save one after the other.
    # The one taken against the older read is this pattern (or, for a writer that reads
    # only as it saves, Claude Code's Edit that read before it).
    mine, other = f"- [Mine {pattern}](mine.md): added", "- [Other](other.md): added"
    writer, claude = Writer(sandbox, pattern, mine), Writer(sandbox, "claude", other)
    writers += [writer, claude]
    if pattern in READS_AT_SAVE:
        claude.read()
        writer.save()
        claude.save()
    else:
        writer.read()
        claude.read()
        claude.save()
        writer.save()
    assert sorted(lines_of(own)) == sorted([*kept_own, added, mine, other])
    shown = lines_of(memory)
    assert {mine, other, added} <= set(shown)
    # Lines removed stay removed, from the own index and from the view.
    assert OWN[4] not in shown
    assert WORK[6] not in shown
    assert len(shown) == len(set(shown)) == 59 + 3 + 59
    assert work.read_bytes() == work_before
    kept = (".history", "MEMORY.md", "own-1.md")  # .history: the versions replaced (§7.2)
    leftovers = [n for n in os.listdir(own.parent) if n not in kept]
    assert leftovers == []


# Claude Code 2.1.332's index backfill in a memory folder with no MEMORY.md: its body
# links every file it lists there, PREAMBLE.md included.
BACKFILL = r"""
import errno, os, secrets, sys
memory = sys.argv[1]
body = (
    "# Memory\n"
    "- [PREAMBLE](PREAMBLE.md) - project memory from earlier sessions\n"
    "- [Notes](notes.md) - what was learnt\n"
).encode()
temp = os.path.join(memory, f".MEMORY.md.backfill-{os.getpid()}-{secrets.token_hex(4)}.tmp")
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, body)
os.close(fd)
index = os.path.join(memory, "MEMORY.md")
try:
    os.link(temp, index)
    print("linked")
except OSError as exc:
    print(errno.errorcode[exc.errno])
    fd = os.open(index, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, body)
    os.close(fd)
os.unlink(temp)
with open(index, "rb") as f:
    print(f.read().decode(), end="")
"""


def test_claude_codes_index_backfill_in_a_new_project_never_links_the_preamble(
    sandbox: Sandbox, mounts: Mounts
) -> None:
    project = Path(os.path.realpath(sandbox.project_dir("brand-new")))
    (project / ".git").mkdir()
    slug = claude_slug(str(project))
    sandbox.write("work", SLUG, "MEMORY.md", "- [Work](work.md)\n")  # another project
    mounts()
    here = sandbox.mnt("here")
    done = subprocess.run(
        [sys.executable, "-c", BACKFILL, str(here)],
        cwd=project,
        env=sandbox.env,
        capture_output=True,
        text=True,
        timeout=STEP,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "EPERM\n# Memory\n- [Notes](notes.md) - what was learnt\n"
    own = sandbox.source("personal").folder(slug)
    assert sorted(os.listdir(own)) == ["MEMORY.md"]  # the temp file, a writer's: no version
    assert (own / "MEMORY.md").read_text() == "# Memory\n- [Notes](notes.md) - what was learnt\n"
    assert b"PREAMBLE" not in sandbox.out("cat", sandbox.mnt(slug, "MEMORY.md"))
