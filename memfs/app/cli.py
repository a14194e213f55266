"""The `memfs` command: argument parsing, one-line user errors, and dispatch (§8).

Its role: turn a command line into calls of the core (config, slug, catalog, adopt) and
of the mount modules (mount, service, demo), and every failure into one line on stderr
naming the cause and the fix, exit code 2 for a user error; never a traceback.

Must not import pyfuse3, trio, fs or mount at module level: those are imported inside the
commands that mount, so that slug, sources, preamble, status and adopt work (and start
fast) without pyfuse3 loaded. ``format_status`` is pure, so status output is testable with
a made-up status.

Threading: plain synchronous code on the caller's one thread. The daemon itself runs in
``mount.run_foreground`` (the same process with --foreground, a child otherwise); the only
signal handlers set here are the foreground demo's, for the time it waits.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from memfs import __version__
from memfs.adapter.status import STATUS_XATTR
from memfs.app import offline
from memfs.disk import config, roots, state
from memfs.rules import slug
from memfs.view import userlevel

log = logging.getLogger("memfs")

USER_ERROR = 2


class UserError(Exception):
    """Printed as one line; exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (cause and fix), like every other error."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message}; see '{self.prog} --help'")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="memfs",
        description="One FUSE mount where every coding agent's per-project memory appears once.",
    )
    p.add_argument("--version", action="version", version=f"memfs {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def cmd(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help)

    m = cmd("mount", "mount the merged view at MOUNTPOINT")
    m.add_argument("mountpoint", type=Path)
    m.add_argument("--config", type=Path, help="config file (default: ~/.config/memfs/config.toml)")
    m.add_argument("-o", dest="options", action="append", default=[], help="FUSE options")
    m.add_argument("--foreground", "-f", action="store_true", help="stay in the foreground")
    m.add_argument("--debug", action="store_true", help="log every FUSE request")

    u = cmd("umount", "unmount a memfs mount")
    u.add_argument("mountpoint", type=Path, nargs="?", default=None)
    u.add_argument(
        "-z",
        "--lazy",
        action="store_true",
        help="detach it now even while busy; memfs exits once the last process lets go",
    )

    s = cmd("status", "figures from a running mount")
    s.add_argument("mountpoint", type=Path, nargs="?", default=None)
    s.add_argument("--json", action="store_true")

    src = cmd("sources", "list the memory sources and which one is own")
    src.add_argument("--config", type=Path)

    sl = cmd("slug", "the project slug of PATH (default: the current folder)")
    sl.add_argument("path", nargs="?", default=None)

    pr = cmd("preamble", "print PREAMBLE.md for the project of PATH without a mount")
    pr.add_argument("path", nargs="?", default=None)
    pr.add_argument("--budget", type=int, default=None)
    pr.add_argument("--config", type=Path)

    d = cmd("demo", "mount a sample of several accounts in a temporary folder")
    d.add_argument(
        "--background", action="store_true", help="leave it mounted and return (no Ctrl-C)"
    )

    sv = cmd("service", "install or remove the systemd user unit")
    svs = sv.add_subparsers(dest="action", metavar="ACTION", required=True)
    si = svs.add_parser("install", help="write ~/.config/systemd/user/memfs.service")
    si.add_argument("--mountpoint", default=None)
    si.add_argument("--now", action="store_true", help="also daemon-reload and enable --now")
    su = svs.add_parser("uninstall", help="remove the unit")
    su.add_argument("--now", action="store_true", help="also disable --now first")

    r = cmd("restore", "put back the file as it was: its own version kept last, or at a time")
    r.add_argument("path", type=Path, help="the file in the mount, e.g. ~/memfs/here/notes.md")
    r.add_argument(
        "--at", default=None, help="the newest own version no later than TIME (UTC), as named"
    )
    r.add_argument(
        "--from",
        dest="source",
        default=None,
        metavar="SOURCE",
        help="another source's version instead, landing as an own copy",
    )

    lg = cmd("log", "every change through the mount, newest first: what, by which process")
    lg.add_argument("path", type=Path, nargs="?", default=None)
    lg.add_argument("--json", action="store_true")
    lg.add_argument("-n", type=int, default=50, help="at most N changes (0: all)")
    lg.add_argument("--config", type=Path)

    sy = cmd("sync", "memory on every machine, through your Syncthing (README: machines)")
    sys_ = sy.add_subparsers(dest="action", metavar="ACTION", required=True)
    sync_init = sys_.add_parser("init", help="share this machine's memory send-only")
    sync_add = sys_.add_parser("add", help="pair a machine; receive its memory read-only")
    sync_add.add_argument("device_id")
    sync_add.add_argument("--name", default=None, help="the machine's name (history names)")
    sync_add.add_argument("--address", default=None, help="tcp://HOST:PORT, if not discovered")
    sync_add.add_argument(
        "--wait", type=float, default=5.0, help="seconds to wait for its folders (default 5)"
    )
    sync_status = sys_.add_parser("status", help="each machine: connected, left to sync")
    sync_status.add_argument("--json", action="store_true")
    sync_remove = sys_.add_parser("remove", help="stop sharing with a machine")
    sync_remove.add_argument("name")
    for q in (sync_init, sync_add, sync_status, sync_remove):
        q.add_argument(
            "--syncthing",
            default=None,
            metavar="DIR_OR_URL",
            help="Syncthing's config folder or GUI URL (default: found)",
        )
        q.add_argument("--api-key", default=None, help="with a URL: its API key")
        q.add_argument("--config", type=Path)
    sync_init.add_argument(
        "--name", default=None, help="what other machines call this one (default: hostname)"
    )

    a = cmd("adopt", "adopt an old account's memory into the own source (README: Adopting)")
    ads = a.add_subparsers(dest="action", metavar="ACTION", required=True)
    al = ads.add_parser("list", help="offer the other sources' folders of a project")
    al.add_argument("path", nargs="?", default=None)
    al.add_argument("--config", type=Path)
    at = ads.add_parser("take", help="adopt one listed folder")
    at.add_argument("list_id")
    at.add_argument("index", type=int)
    at.add_argument("hash")
    at.add_argument("--config", type=Path)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except UserError as exc:
        print(f"memfs: {exc}", file=sys.stderr)
        return USER_ERROR
    debug = getattr(args, "debug", False)
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="memfs: %(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        _parser().print_help()
        return USER_ERROR
    try:
        return int(COMMANDS[args.command](args, os.environ) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our output went (`memfs log | head`): nothing to report. Python
        # would report the pipe once more as it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        print(f"memfs: {_one_line(exc)}", file=sys.stderr)
        if debug or not _is_user_error(exc):
            log.debug("details", exc_info=True)
        return USER_ERROR if _is_user_error(exc) else 1


def _is_user_error(exc: Exception) -> bool:
    # Each layer has its own error class carrying one line with the cause and the fix.
    if isinstance(exc, UserError | config.ConfigError | state.StateError):
        return True
    return type(exc).__name__ in (
        "MountError",
        "ServiceError",
        "AdoptError",
        "HistoryError",
        "SyncError",
        "SyncthingError",
    )


def _one_line(exc: Exception) -> str:
    if _is_user_error(exc):
        text = str(exc)
    elif isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        text = f"{exc.strerror or exc}{where}; check the path and its permissions"
    else:
        text = f"internal error: {type(exc).__name__}: {exc}; run with --debug and report it"
    return " ".join(text.split())


def _load(args: argparse.Namespace, env: Mapping[str, str]) -> config.Config:
    return config.load(env, getattr(args, "config", None))


def default_mountpoint(env: Mapping[str, str]) -> Path:
    return config.home_dir(env) / "memfs"


def cmd_slug(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    print(slug.project_slug(args.path or os.getcwd()))
    return 0


def cmd_sources(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    cfg = _load(args, env)
    where = f"config {cfg.path}" if cfg.path else "discovered (no config file)"
    if not cfg.sources:
        raise UserError(
            "no memory sources found (no ~/.claude, ~/.claude-*, $CLAUDE_CONFIG_DIR, "
            "~/.pi/agent/memory, ~/.gemini, ~/.codex, Kilo Memory or goose); create one or write "
            "~/.config/memfs/config.toml"
        )
    print(f"sources: {where}")
    for s in cfg.sources:
        mark = "own " if s.own else "    "
        print(f"  {mark}{s.name:<12} {s.template}")
        print(f"       {'':<12} why: {s.why}")
        # A mapped source's folders (Gemini CLI's ids, Kilo Code's hashed names, goose's in
        # the projects): which project each is, or why none.
        for line in roots.describe(cfg, s) if s.mapped else ():
            print(f"       {'':<12} {line}")
    # User-level memory (§4.1): which folders each global/<kind> shows, the own one first.
    for kind in userlevel.kinds(cfg):
        where = userlevel.slug_of(kind)
        for origin in userlevel.origins(cfg, where):
            only = f" ({', '.join(sorted(origin.only))})" if origin.only else ""
            name = cfg.sources[origin.source].name
            print(f"  {where:<16} {name}: {origin.folder}{only}")
    if cfg.own is None:
        print("no own source: a mount is read-only (writes get EROFS)")
    return 0


def cmd_preamble(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    cfg = _load(args, env)
    if args.budget is not None:
        if args.budget < 0:
            raise UserError(f"--budget must be >= 0, got {args.budget}")
        cfg = dataclasses.replace(
            cfg, preamble=dataclasses.replace(cfg.preamble, budget=args.budget)
        )
    project_slug = slug.project_slug(args.path or os.getcwd())
    project = offline.load_project(cfg, project_slug)
    if project is None:
        raise UserError(
            f"no source has project {project_slug}; check 'memfs sources' and the PATH given"
        )
    sys.stdout.buffer.write(project.preamble(files_at=None))
    sys.stdout.flush()
    return 0


def cmd_mount(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import mount

    cfg = _load(args, env)
    if args.foreground:
        return mount.run_foreground(cfg, args.mountpoint, args.options, args.debug)
    mountpoint = mount.prepare(cfg, args.mountpoint)
    argv = ["mount", "--foreground", str(mountpoint)]
    if args.config:
        argv += ["--config", str(args.config.absolute())]
    for option in args.options:
        argv += ["-o", option]
    if args.debug:
        argv.append("--debug")
    pid = mount.start_background(argv, cfg.state_dir)
    print(f"memfs mounted at {mountpoint} (pid {pid}); 'memfs umount {mountpoint}' to stop")
    return 0


def cmd_umount(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import demo, mount
    from memfs.app import mountpoint as bare

    mountpoint = Path(os.path.abspath(args.mountpoint or default_mountpoint(env)))
    if mount.clear_stale(mountpoint):  # dead or hung: detached (and aborted if hung)
        bare.seal(mountpoint)
    elif bare.fuse_connection(mountpoint) is None and not mount.is_mounted(mountpoint):
        raise UserError(f"nothing is mounted at {mountpoint}; check the path")
    else:
        # Returns once the daemon has exited; lazily detached while held, at once.
        held = mount.stop(mountpoint, lazy=args.lazy)
        if held:
            print(
                f"detached {mountpoint}; memfs serves {', '.join(held)} until they let go "
                "of it, then exits"
            )
            return 0  # a demo's sample folder is still in use: left for its daemon's end
    removed = demo.remove_if_sample(mountpoint)
    if removed is not None:
        print(f"removed the demo's sample folder {removed}")
    return 0


def read_status(mountpoint: Path) -> dict[str, object]:
    try:
        raw = os.getxattr(mountpoint, STATUS_XATTR)
    except OSError as exc:
        raise UserError(
            f"no running memfs at {mountpoint} ({exc.strerror}); start it with "
            f"'memfs mount {mountpoint}'"
        ) from None
    data: dict[str, object] = json.loads(raw)
    return data


def cmd_status(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    status = read_status(args.mountpoint or default_mountpoint(env))
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    print("\n".join(format_status(status)))
    return 0


# Claude Code loads this much of MEMORY.md at session start (constants in its binary).
CLAUDE_LINES = 200
CLAUDE_BYTES = 25_000
SHOWN = 20  # items of one list printed by `memfs status`; --json has them all


def format_status(status: Mapping[str, Any]) -> list[str]:
    """The lines of `memfs status` for a status as the daemon reports it.

    Parts a daemon does not report (an older memfs) are left out, not an error.
    """
    lines = [f"mountpoint: {status['mountpoint']} (pid {status['pid']})"]
    for s in status["sources"]:
        lines.append(f"  source {'own ' if s['own'] else ''}{s['name']}: {s['path']}")
    lines.append(
        f"projects: {status['projects_listed']} listed, {status['projects_loaded']} loaded"
    )
    left_out = status["left_out"]
    n_left = status.get("left_out_count", len(left_out))
    lines.append(f"files: {status['files']} shown, {n_left} left out")
    lines += _listed(
        left_out,
        lambda i: f"  left out {i['project']}/{i['path']} ({i['source']}): {i['why']}",
        n_left,
    )
    over = status.get("memory_over_limit") or []
    if over:
        n_over = status.get("memory_over_limit_count", len(over))
        lines.append(
            f"MEMORY.md longer than Claude Code loads ({CLAUDE_LINES} lines or "
            f"{CLAUDE_BYTES:,} bytes) in {n_over} project{'s' if n_over != 1 else ''}:"
        )
        lines += _listed(
            over,
            lambda i: (
                f"  {i['project']}: {i['lines']} lines, {i['bytes']:,} bytes; "
                f"{i['beyond']} linked topic{'s' if i['beyond'] != 1 else ''} beyond the limit"
            ),
            n_over,
        )
    followed = status.get("moves") or []
    if followed:
        lines.append(f"moved projects followed: {len(followed)}")
        lines += [f"  {m['old_path']} ({m['from']}) -> {m['to']}" for m in followed]
    stale = status.get("stale_own_heads") or []
    if stale:
        n_stale = status.get("stale_own_heads_count", len(stale))
        lines.append(f"own files older than another source's version: {n_stale}")
        lines += _listed(
            stale,
            lambda i: f"  {i['project']}/{i['path']}: newer is {i['project']}/{i['newer']}",
            n_stale,
        )
    lines.append(f"requests: {status['requests_total']} {status['requests']}")
    lines.append(
        f"invalidations: {status['invalidations']} (errors {status['invalidation_errors']})"
    )
    lines.append(f"commits: {status['commits']}, inodes: {status['inodes']}")
    return lines


def _listed(
    items: Sequence[Any], line: Callable[[Any], str], total: int | None = None
) -> list[str]:
    """The first items of a list; ``total`` is its full length (the daemon cuts long lists
    to fit in an xattr, status.LISTED)."""
    total = len(items) if total is None else total
    shown = [line(item) for item in items[:SHOWN]]
    if total > SHOWN:
        more = f"--json lists the first {len(items)}" if total > len(items) else "--json lists all"
        shown.append(f"  ... and {total - SHOWN} more (memfs status {more})")
    return shown


class _Stop(Exception):
    """A signal asked the foreground demo to stop."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def cmd_demo(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import demo, mount

    base = demo.make_base()
    mnt = base / demo.MOUNT_NAME
    pid: int | None = None
    keep = False
    # Ctrl-C, a closed terminal or a kill all clean up, even while the demo is starting.
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGHUP, signal.SIGTERM)}
    try:
        home = base / "home"
        places = demo.build(home)
        cfg_path = base / "config.toml"
        cfg_path.write_text(demo.config_text(home), encoding="utf-8")
        child_env = dict(env, HOME=str(home), XDG_STATE_HOME=str(base / "state"))
        child_env.pop("XDG_CONFIG_HOME", None)
        cfg = config.load(child_env, cfg_path)
        argv = ["mount", "--foreground", str(mnt), "--config", str(cfg_path)]
        pid = mount.start_background(argv, cfg.state_dir, base_env=child_env)
        print(_demo_text(mnt, home, mnt / str(places["slug"]), places["personal"], pid))
        if args.background:
            keep = True
            print(f"Stop it with: memfs umount {mnt}   # also removes {base}")
            return 0
        print("Press Ctrl-C to unmount and clean up.")
        sys.stdout.flush()
        signal.pause()
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if not keep:
            _stop_demo(mnt, pid, base)
    return 0


def _demo_text(mnt: Path, home: Path, project: Path, own: Path, pid: int) -> str:
    return (
        f"memfs demo mounted at {mnt} (pid {pid})\n"
        f"  three sources: {home}/.claude (own), {home}/.claude-work, {home}/.pi\n\n"
        "Try:\n"
        f"  ls {mnt}\n"
        f"  cat {project}/PREAMBLE.md\n"
        f"  cat {project}/MEMORY.md          # the union of both accounts' indexes\n"
        f"  ls -R {project}/.history         # every other version\n"
        f"  echo 'Next: canary checks' > {project}/handoff-me_20261130.md\n"
        f"  ls {own}          # the write landed in the own account\n"
        f"  echo 'make test-fast for a quick run' >> {project}/testing.md\n"
        f"  memfs log {project}          # every change through the mount, and by whom\n"
        f"  memfs restore {project}/testing.md   # the version before the edit, back\n"
        f"  memfs status {mnt}\n"
    )


def _stop_demo(mnt: Path, pid: int | None, base: Path) -> None:
    """Stop the demo's daemon, then remove its folder.

    The daemon unmounts on SIGTERM, so the unmount is its own: libfuse closes the
    connection first and unmounts after, and in between the mount answers ENOTCONN. A look
    at the mount then took it for a dead one, and a `fusermount3 -uz` run here raced the
    daemon's own unmount ("failed to unmount ...: Invalid argument" from the second). So
    this waits for the daemon to exit, and detaches only what is still mounted after
    that: the daemon died without unmounting, or did not exit in time.
    """
    from memfs.app import mount
    from memfs.app import mountpoint as bare

    if pid is not None:
        mount.end_daemon(pid)
    if bare.fuse_connection(mnt) is not None:
        try:
            mount.unmount(mnt, lazy=True)
        except mount.MountError as exc:
            print(f"memfs: {exc}", file=sys.stderr)
    shutil.rmtree(base, ignore_errors=True)
    print(f"\nunmounted and removed {base}")


def cmd_service(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import service

    if args.action == "install":
        lines = service.install(args.mountpoint, args.now, env)
    else:
        lines = service.uninstall(env, now=args.now)
    print("\n".join(lines))
    return 0


def cmd_restore(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import history

    print(history.restore_file(args.path, args.at, args.source, env))
    return 0


def cmd_log(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import history

    if args.n < 0:
        raise UserError(f"-n must be >= 0, got {args.n}")
    found = history.changes(args.path, env, limit=args.n)
    _print_all(history.render(found, as_json=args.json))
    return 0


def _print_all(text: str) -> None:
    """Print all of it now: a reader that stops reading (`memfs log | head -1`) ends the
    command quietly (`main`)."""
    print(text, flush=True)


def cmd_adopt(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import adopt  # AdoptError reaches main() as a one-line user error

    cfg = _load(args, env)
    if args.action == "list":
        from memfs.app import moved

        root = slug.project_root(args.path or os.getcwd())
        made = adopt.make_list(cfg, moved.look(cfg, root), root=root)
        print(adopt.format_list(made, args.config))
    else:
        print(adopt.take(cfg, args.list_id, args.index, args.hash).summary())
    return 0


def cmd_sync(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from memfs.app import sync  # SyncError, SyncthingError: one-line user errors
    from memfs.disk import syncthing

    if args.action == "add":
        syncthing.device_id(args.device_id)  # a typo is told first, Syncthing running or not
    cfg = _load(args, env)
    api = syncthing.locate(env, cfg.home, args.syncthing, args.api_key)
    command = sync.Sync(api, cfg, env)
    if args.action == "init":
        command.init(args.name)
    elif args.action == "add":
        command.add(args.device_id, args.name, args.address, args.wait)
    elif args.action == "remove":
        command.remove(args.name)
    else:
        found = command.status()
        command.out = [json.dumps(found, indent=1)] if args.json else sync.format_status(found)
    _print_all("\n".join(command.out))
    return 0


COMMANDS = {
    "mount": cmd_mount,
    "umount": cmd_umount,
    "status": cmd_status,
    "sources": cmd_sources,
    "slug": cmd_slug,
    "preamble": cmd_preamble,
    "demo": cmd_demo,
    "service": cmd_service,
    "adopt": cmd_adopt,
    "sync": cmd_sync,
    "restore": cmd_restore,
    "log": cmd_log,
}
