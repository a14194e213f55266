"""Mounting: FUSE init, the trio main loop, signals, sd_notify, stale mounts, background mode.

§8, §9. Its role: everything between a checked Config and a serving mount, and back:
ready the mountpoint (containment, stale mounts, an empty sealed folder, see
memfs.app.mountpoint), mount it, serve until stopped, unmount; start and stop a daemon for
`memfs mount` and `memfs umount`. The contract with systemd and with `memfs mount`: READY=1
is sent only once the mount answers a real stat through the kernel; SIGTERM and SIGINT
unmount cleanly and exit 0; a crash leaves the mount dead (ENOTCONN) rather than an empty
folder an agent might refill; a refused mount says fusermount3's reason and the fix.

Imports: with fs.py, the only module that knows pyfuse3 and trio's main loop; nothing of
the core imports it, and cli.py imports it only inside the commands that mount. It must not
import cli (no cycle: the daemon reports errors by raising MountError).

Threading: ``run_foreground`` owns the process's main thread: ``pyfuse3.init`` there, then
``trio.run`` of ``_serve``, whose tasks (invalidator, watcher, signals, readiness) all run
on that one trio thread; blocking work (the readiness stat, the stale-stage sweep) goes to
``workers.run``. Stop signals are blocked from just before the mount until the signal
task listens. ``probe`` runs its statfs in a daemon thread so that a hung mount costs a
timeout, not the caller. One more thread, started first, answers SIGUSR1 with every
thread's traceback (memfs.app.tracebacks). Everything else here is synchronous and runs
before or after the trio loop (or in the parent process, for background mode).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import resource
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pyfuse3
import trio

from memfs.adapter import workers
from memfs.adapter.fs import STATUS_XATTR, MemFS
from memfs.adapter.keeper import Keeper
from memfs.adapter.machines import MachineWatch
from memfs.adapter.watch import Watcher
from memfs.app import mountpoint as bare
from memfs.app import notify, tracebacks
from memfs.app.mountpoint import fuse_connection
from memfs.disk import procs, sources, staging, state
from memfs.disk.config import Config, ConfigError, check_mount
from memfs.rules.index import AGENT_MEMORY

log = logging.getLogger(__name__)

FUSERMOUNT = "fusermount3"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# The one-shot readiness socket of `memfs mount` without --foreground: private, so that the
# child never mistakes it for systemd's NOTIFY_SOCKET (which it keeps for STOPPING=1).
READY_SOCKET_VAR = "MEMFS_READY_SOCKET"


class MountError(Exception):
    """A mount that cannot start: one line naming the cause and the fix."""


FUSECTL = Path("/sys/fs/fuse/connections")
PROBE_SECONDS = 3.0


def probe(mountpoint: Path, timeout: float = PROBE_SECONDS) -> str:
    """'ok', 'dead' (ENOTCONN) or 'hung' (no answer in time) for a FUSE mount.

    statfs always reaches the connection (a stat may be answered from the kernel's cache).
    It runs in a daemon thread, so a hung connection costs ``timeout``, not the caller.
    """
    outcome: list[str] = []

    def look() -> None:
        try:
            os.statvfs(mountpoint)
            outcome.append("ok")
        except OSError as exc:
            outcome.append("dead" if exc.errno == errno.ENOTCONN else "ok")

    worker = threading.Thread(target=look, daemon=True)
    worker.start()
    worker.join(timeout)
    return outcome[0] if outcome else "hung"


def abort_connection(minor: int) -> bool:
    """Abort a FUSE connection: its pending and later requests fail with ENOTCONN."""
    abort = FUSECTL / str(minor) / "abort"
    if abort.exists():
        try:
            abort.write_text("1")
            return True
        except OSError as exc:
            log.warning("cannot abort FUSE connection %d: %s", minor, exc)
            return False
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        log.warning("cannot abort FUSE connection %d: fusectl is not mounted", minor)
        return False
    # fusectl is one superblock for the whole kernel: mounted in a private mount namespace
    # it shows the same connections, and the machine's mounts stay as they are.
    script = f"mount -t fusectl fusectl {FUSECTL} && echo 1 > {abort}"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        timeout=10,
        check=False,
    )
    return done.returncode == 0


def clear_stale(mountpoint: Path) -> bool:
    """Unmount a dead or hung FUSE mount at ``mountpoint``; True if one was cleared.

    A daemon killed while one of its threads waited in the kernel can hold its hung
    connection open for ever: aborting the connection frees it.
    """
    minor = fuse_connection(mountpoint)
    if minor is None:
        return False
    state = probe(mountpoint)
    if state == "ok":
        return False
    log.warning("clearing a %s mount at %s", state, mountpoint)
    if state == "hung":
        abort_connection(minor)
    unmount(mountpoint, lazy=True)
    return True


def is_stale(mountpoint: Path) -> bool:
    """A dead or hung FUSE mount at ``mountpoint``."""
    return fuse_connection(mountpoint) is not None and probe(mountpoint) != "ok"


def is_mounted(mountpoint: Path) -> bool:
    return os.path.ismount(mountpoint)


def unmount(mountpoint: Path, *, lazy: bool = False, daemon: int | None = None) -> None:
    """fusermount3 -u (or -uz); raises MountError with its message.

    A busy mount's error names the processes that hold it (``daemon``, the memfs serving
    it, is not one of them) and the way out: close them, or the lazy unmount.
    """
    args = [FUSERMOUNT, "-uz" if lazy else "-u", str(mountpoint)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise MountError(f"{FUSERMOUNT} not found; install the fuse3 package") from None
    if done.returncode != 0:
        if not lazy and os.strerror(errno.EBUSY) in done.stderr:
            raise MountError(busy_message(mountpoint, holders(mountpoint, daemon)))
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        raise MountError(f"cannot unmount {mountpoint}: {why}")


def holders(mountpoint: Path, daemon: int | None = None) -> list[procs.Holder]:
    """The processes that keep ``mountpoint`` busy, as far as /proc shows them."""
    # /proc spells paths with no link in them: the parent's links resolved, never the
    # mount itself (resolving it would stat into it).
    real = os.path.join(os.path.realpath(mountpoint.parent), mountpoint.name)
    return procs.holders(real, skip={os.getpid(), *([daemon] if daemon else [])})


HOLDERS_SHOWN = 5  # a busy message names this many processes, then counts the rest


def busy_message(mountpoint: Path, held: Sequence[procs.Holder]) -> str:
    """One line: who holds ``mountpoint``, and how to unmount it anyway."""
    lazy = f"'memfs umount -z {shlex.quote(str(mountpoint))}'"
    if not held:
        who = "held by a process memfs cannot see (another user's, or a file mapped in memory)"
        fix = "close it"
    else:
        who = "held by " + ", ".join(f"{h.name} (pid {h.pid})" for h in held[:HOLDERS_SHOWN])
        if len(held) > HOLDERS_SHOWN:
            who += f" and {len(held) - HOLDERS_SHOWN} more"
        fix = "close them" if len(held) > 1 else "close it"
    return f"{mountpoint} is busy: {who}; {fix}, or run {lazy} to detach it now (lazy unmount)"


def prepare(config: Config, mountpoint: Path) -> Path:
    """Check and ready the mountpoint: containment, stale mounts, existence, emptiness.

    The folder is created, or left, without write permission (see memfs.app.mountpoint).
    """
    mountpoint = Path(os.path.abspath(mountpoint))
    clear_stale(mountpoint)  # first: a hung mount would hang every check below
    check_mount(config, mountpoint)
    if is_mounted(mountpoint):
        raise MountError(
            f"{mountpoint} is already a mount point; run 'memfs umount {mountpoint}' first"
        )
    try:
        mountpoint.parent.mkdir(parents=True, exist_ok=True)
        # Born sealed: no moment in which an agent could write onto the bare disk.
        os.mkdir(mountpoint, 0o555)
    except FileExistsError:
        pass
    except OSError as exc:
        raise MountError(f"cannot create mountpoint {mountpoint}: {exc.strerror}") from None
    if not mountpoint.is_dir():
        raise MountError(f"mountpoint {mountpoint} is not a folder; choose a folder")
    # First: refused or not, nothing more may land there.
    if not bare.seal(mountpoint) and os.access(mountpoint, os.W_OK):
        log.warning(
            "cannot take write permission away from %s (not your folder): while memfs is "
            "not mounted, writes there land on the bare disk; prefer a folder you own",
            mountpoint,
        )
    try:
        bare.refuse_if_not_empty(config, mountpoint)
    except bare.NotEmptyError as exc:
        raise MountError(str(exc)) from None
    except OSError as exc:
        raise MountError(f"cannot list mountpoint {mountpoint}: {exc.strerror}") from None
    if not os.path.exists("/dev/fuse"):
        raise MountError("/dev/fuse is missing; load the fuse module (modprobe fuse)")
    return mountpoint


def mount_kernel(config: Config, ops: MemFS, mountpoint: Path, options: set[str]) -> None:
    """pyfuse3.init with the bare folder writable only for that moment.

    fusermount3 refuses a normal user a mountpoint without write permission, so the owner's
    write bit is given back just before and taken away through a descriptor right after,
    which reaches the bare folder under the new mount. Anything written into it in between
    is found through the same descriptor, and the mount is undone rather than hide it.
    """
    fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        bare.unseal(fd)
        try:
            with _stderr_captured() as said:
                pyfuse3.init(ops, str(mountpoint), options)
        except RuntimeError as exc:
            raise MountError(refusal(mountpoint, said.text, str(exc))) from None
        finally:
            bare.seal(fd)
        if said.text.strip():
            log.warning("while mounting: %s", " ".join(said.text.split()))
        found = bare.entries(fd)
        if found:
            pyfuse3.close(unmount=True)
            raise MountError(bare.not_empty_message(config, mountpoint, found))
    finally:
        os.close(fd)


class _Captured:
    text = ""


@contextlib.contextmanager
def _stderr_captured() -> Iterator[_Captured]:
    """File descriptor 2 into a temporary file: libfuse runs fusermount3 with the daemon's
    stderr, and that is the only place its reason for a refusal appears."""
    captured = _Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.text = tmp.read().decode("utf-8", "replace")


# What fusermount3 or libfuse said -> the fix, first match wins.
_FIXES = (
    (
        "no write access to mountpoint",
        "choose a mountpoint folder you own, such as ~/memfs (memfs makes it writable "
        "only for the moment of mounting)",
    ),
    (
        "failed to open /dev/fuse",
        "your user may not use FUSE: /dev/fuse should be crw-rw-rw- "
        "(sudo chmod 0666 /dev/fuse); in a container, pass --device /dev/fuse",
    ),
    (
        "user_allow_other",
        "add the line user_allow_other to /etc/fuse.conf, or mount without -o allow_other",
    ),
    ("failed to exec", "install the fuse3 package (fusermount3)"),
    ("device not found", "load the fuse module (sudo modprobe fuse)"),
    (
        "Operation not permitted",
        "this system lets no FUSE mount happen here; in a container, run it with "
        "--device /dev/fuse --cap-add SYS_ADMIN",
    ),
)


def refusal(mountpoint: Path, said: str, fallback: str) -> str:
    """One line: why the kernel mount failed, in fusermount3's words, and the fix."""
    lines = [" ".join(line.split()) for line in said.splitlines() if line.strip()]
    ranked = [ln for ln in lines if ln.startswith(("fusermount3:", "fusermount:"))]
    ranked = ranked or [ln for ln in lines if ln.startswith("fuse:")] or lines
    reason = ranked[-1] if ranked else fallback
    fix = next(
        (fix for key, fix in _FIXES if key in reason),
        "see README 'Troubleshooting'; 'memfs mount --foreground --debug' shows more",
    )
    return f"cannot mount {mountpoint}: {reason}; {fix}"


def fuse_options(extra: Sequence[str], debug: bool) -> set[str]:
    options = set(pyfuse3.default_options)  # default_permissions
    # noatime: memfs keeps no access times. (The kernel still marks a file's atime stale
    # after each read, so the next stat of it costs one getattr; only a read-only mount
    # avoids that, see README "Performance".)
    options |= {"fsname=memfs", "subtype=memfs", "noatime"}
    for item in extra:
        options |= {o.strip() for o in item.split(",") if o.strip()}
    if debug:
        options.add("debug")
    return options


def run_foreground(
    config: Config, mountpoint: Path, options: Sequence[str] = (), debug: bool = False
) -> int:
    """Mount and serve until unmounted or signalled; returns the exit code."""
    # Started by start_background, which holds them back while it forks: until the mount
    # exists, a stop signal needs no cleanup and may end the process at once.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    tracebacks.answer_dump_signal()  # first: every thread started later blocks SIGUSR1
    state.make_private(config.state_dir)  # first: whiteouts saved while serving land there
    mountpoint = prepare(config, mountpoint)
    state.remember_mount(config.state_dir, mountpoint, config.path)  # for a restore when down
    _raise_descriptor_limit()  # before MemFS: its kept descriptors are shares of the limit
    ops = MemFS(config, mountpoint)
    # From the mount on, a stop must unmount cleanly: hold stop signals back until the
    # trio task that handles them listens (see _signals), instead of dying in between.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        mount_kernel(config, ops, mountpoint, fuse_options(options, debug))
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        raise
    try:
        trio.run(_serve, ops, mountpoint)
    except BaseException:
        # Leave the mount dead (ENOTCONN) rather than an empty folder an agent might refill.
        log.exception("memfs crashed; the mount is left dead until 'memfs umount'")
        pyfuse3.close(unmount=False)
        raise
    notify.notify(notify.STOPPING)
    pyfuse3.close(unmount=True)
    bare.seal(mountpoint)  # sealed since the mount already; again for an older memfs's folder
    return 0


DESCRIPTORS_WANTED = 1 << 20  # with no hard limit: the kernel's default nr_open


def _raise_descriptor_limit() -> None:
    """The soft RLIMIT_NOFILE up to the hard one (systemd's soft default is 1024): memfs
    keeps source folders and versions' descriptors open, each a share of the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = DESCRIPTORS_WANTED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError) as exc:
            log.info("descriptor limit stays at %d: %s", soft, exc)


async def _serve(ops: MemFS, mountpoint: Path) -> None:
    watcher = Watcher(ops.catalog, ops.publisher)
    watcher.turns.tune()
    ops.attach(watcher)
    await ops.moves.load()  # the moves followed before (§4.2), before the first request
    keeper = Keeper(ops.config, ops.stats)
    # Other machines' folders, served and kept as they arrive (§12).
    machine_watch = MachineWatch(watcher, keeper)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ops.kernel.run)
            nursery.start_soon(watcher.run)
            nursery.start_soon(machine_watch.run)
            nursery.start_soon(_signals, nursery.cancel_scope)
            nursery.start_soon(_ready_then_keep, ops, mountpoint, keeper)
            nursery.start_soon(ops.moves.learn, ops.config)  # roots for moves later (§4.2)
            await pyfuse3.main()
            nursery.cancel_scope.cancel()
    finally:
        watcher.close()
        keeper.close()


async def _signals(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(*STOP_SIGNALS) as received:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a pending stop lands now
        async for signum in received:
            log.info("received %s; unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()  # STOPPING=1 is sent once, on the way out
            return


async def _ready_then_keep(ops: MemFS, mountpoint: Path, keeper: Keeper) -> None:
    """READY, then the work that waits for it: the stale-stage sweep, and the keeper."""
    await _announce_ready(ops, mountpoint)
    # After READY, so a large own source does not delay the mount; `memfs status` says
    # when it is done (stale_swept).
    ops.stats.stale_removed = await workers.run(_sweep_stale_stages, ops.config, ops.started_ns)
    ops.stats.stale_swept = True
    # After the sweep: a stale stage is no memory, and the keeper would read it.
    await keeper.run()


async def _announce_ready(ops: MemFS, mountpoint: Path) -> None:
    """READY=1 once a stat through the kernel is answered by this very loop."""
    # Abandoned if the mount stops first: the loop that would answer it is gone.
    await workers.run(os.stat, mountpoint, abandon_on_cancel=True)
    config = ops.config
    own = config.own.name if config.own else "none (read-only)"
    status = f"STATUS=serving {len(config.sources)} sources (own: {own}) at {mountpoint}"
    notify.notify(f"{notify.READY}\n{status}")
    ready_socket = os.environ.pop(READY_SOCKET_VAR, None)
    if ready_socket:
        notify.notify(notify.READY, {"NOTIFY_SOCKET": ready_socket})
    log.info("memfs ready at %s", mountpoint)


def _sweep_stale_stages(config: Config, started_ns: int) -> int:
    """Remove temp files a crashed memfs left in the own source (§7.5).

    Only files whose inode changed before this mount started: a write through the mount
    may be staging already while the sweep runs.
    """
    own = config.own
    if own is None:
        return 0
    removed = 0
    for name in sources.list_slug_folders(own.root):
        removed += _sweep_project(staging.Place(own.root, (name, *own.tail)), started_ns)
    home = own.claude_config
    if home is not None:  # global/claude's stages (§4.1): beside CLAUDE.md, in agent-memory/
        removed += _sweep_project(staging.Place(home.parent, (home.name,)), started_ns, 0)
        top = staging.Place(home.parent, (home.name, AGENT_MEMORY))
        removed += _sweep_project(top, started_ns)
    if removed:
        log.warning("removed %d temp files left by an earlier crash", removed)
    return removed


def _sweep_project(top: staging.Place, started_ns: int, depth_max: int = sources.MAX_DEPTH) -> int:
    removed = 0
    todo = [(top, 0)]
    while todo:
        place, depth = todo.pop()
        try:
            fd = staging.open_dir(place, create=False)
        except OSError:
            continue
        try:
            stale, subdirs = [], []
            for entry in os.scandir(fd):
                st = entry.stat(follow_symlinks=False)
                if entry.name.startswith(sources.STAGE_PREFIX):
                    if stat.S_ISREG(st.st_mode) and st.st_ctime_ns < started_ns:
                        stale.append(entry.name)
                elif stat.S_ISDIR(st.st_mode) and sources.valid_name(entry.name):
                    subdirs.append(entry.name)
        except OSError as exc:
            log.warning("cannot sweep %s for stale temp files: %s", place, exc)
            continue
        finally:
            os.close(fd)
        removed += staging.remove_stale(place, stale)
        if depth < depth_max:
            todo.extend((place.below(sub), depth + 1) for sub in subdirs)
    return removed


def start_background(
    argv: Sequence[str],
    state_dir: Path,
    timeout: float = 30.0,
    base_env: Mapping[str, str] | None = None,
) -> int:
    """Run ``memfs mount --foreground`` detached; return once it reports READY=1.

    The child reports through the same sd_notify datagram systemd would read.
    """
    state.make_private(state_dir)  # before the log: an older memfs left it world-readable
    log_path = state.log_path(state_dir)
    with tempfile.TemporaryDirectory(prefix="memfs-ready-") as tmp:
        sock_path = os.path.join(tmp, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        sock.bind(sock_path)
        outer = os.environ if base_env is None else base_env
        env = {k: v for k, v in outer.items() if k != "NOTIFY_SOCKET"}
        env[READY_SOCKET_VAR] = sock_path
        # A Ctrl-C (or the demo's SIGTERM/SIGHUP) while Popen forks and execs would leave a
        # child nobody knows of, which then mounts on its own: hold stop signals back until
        # `child` is known. The child inherits the mask; run_foreground lifts it first thing.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            with state.open_log(state_dir) as log_file:
                child = subprocess.Popen(
                    daemon_command(argv),
                    cwd="/",
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    env=env,
                    start_new_session=True,
                )
        except BaseException:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a pending one lands here
            _wait_ready(sock, child, timeout, log_path)
        except BaseException:
            # Interrupted or failed: the child must not mount on its own afterwards, nor
            # outlive this call (a caller cleaning up its folders would race it).
            _stop_child(child)
            raise
        finally:
            sock.close()
    return child.pid


def daemon_command(argv: Sequence[str]) -> list[str]:
    """``python -P -m memfs ARGV``: this interpreter's memfs, whatever the current folder.

    Plain ``-m`` puts the current folder first on sys.path, and in the home folder that
    holds ``memfs/``, the empty default mountpoint, which Python imports as the package.
    ``-P`` (Python 3.11) leaves it off; the child also runs in ``/``, so that it holds no
    folder of the user's busy (an unmount of a disk the user was in, say).
    """
    return [sys.executable, "-P", "-m", "memfs", *argv]


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    child.terminate()  # a mounted child unmounts cleanly on SIGTERM
    try:
        child.wait(timeout=15)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _wait_ready(
    sock: socket.socket, child: subprocess.Popen[bytes], timeout: float, log_path: Path
) -> None:
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            message = sock.recv(4096).decode(errors="replace")
        except TimeoutError:
            message = ""
        if "READY=1" in message.split("\n"):
            return
        if child.poll() is not None:
            last = _last_line(log_path)
            if last.startswith(CHILD_ERROR):  # the child's own one-line cause and fix
                raise MountError(last.removeprefix(CHILD_ERROR))
            raise MountError(f"memfs exited with {child.returncode}: {last}")
    raise MountError(f"memfs did not become ready within {timeout:.0f}s; see {log_path}")


CHILD_ERROR = "memfs: "  # how cli.main prints a one-line error


def _last_line(log_path: Path) -> str:
    """The child's own one-line error, so `memfs mount` says why, not only where."""
    return state.last_log_line(log_path) or f"see {log_path}"


STOP_WAIT = 15.0


def stop(mountpoint: Path, timeout: float = STOP_WAIT, *, lazy: bool = False) -> list[str]:
    """Unmount a live memfs and wait until its daemon has exited; then seal the folder.

    Waiting makes ``memfs umount`` mean done: state saved, the process gone, and a demo's
    sample folder removed (see demo.remove_if_sample), by the time it returns.

    ``lazy`` detaches the mount even while processes hold it (fusermount3 -uz): the daemon
    then serves them until the last one lets go, and nothing waits for it. Returns those
    processes' descriptions (``vim (pid 123)``); empty when the daemon is gone.
    """
    pid = _daemon_pid(mountpoint)
    held = holders(mountpoint, pid) if lazy else []
    unmount(mountpoint, lazy=lazy, daemon=pid)
    if held:
        bare.seal(mountpoint)  # detached: the path reaches the bare folder again
        return [f"{h.name} (pid {h.pid})" for h in held]
    deadline = time.monotonic() + timeout
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if pid is not None and _alive(pid):
        log.warning("memfs (pid %d) still runs %.0fs after the unmount", pid, timeout)
    bare.seal(mountpoint)
    return []


def end_daemon(pid: int, timeout: float = STOP_WAIT) -> bool:
    """SIGTERM a memfs daemon and wait until it has exited: it unmounts on its way out.
    False if it still runs after ``timeout``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)


def _daemon_pid(mountpoint: Path) -> int | None:
    """The pid a live memfs reports in its status; None for anything else mounted there."""
    try:
        pid = json.loads(os.getxattr(mountpoint, STATUS_XATTR)).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie of a parent that has not reaped it yet counts as gone
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


__all__ = ["ConfigError", "MountError", "prepare", "run_foreground", "start_background"]
