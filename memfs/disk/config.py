"""Configuration: the TOML shape, its defaults, source discovery and the containment rules.

§3. Role: turn the config file (or discovery) into a `Config` that every other module
reads, immutable but for `Config.add_sources` (another machine's folders, while serving).
Layer disk: imports no other memfs module but disk/machines.py (other machines' folders,
§12, appended to the sources) and rules/slug.py.
Reads only the config file and a few ``stat`` calls on candidate folders, once,
before a mount serves anything (so it is never on the request thread while serving); every
function takes the environment explicitly so tests never depend on the real home.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfs.disk import machines
from memfs.rules import slug as slugs

log = logging.getLogger(__name__)

SLUG_FIELD = "{slug}"
# Source kinds. A template source's root holds one folder per project, named by its slug;
# a Gemini CLI source's root (`~/.gemini/tmp`) holds one folder per project named by a
# short id, which markers map to a project (disk/gemini.py): read-only, never own.
TEMPLATE = "template"
GEMINI = "gemini"
GEMINI_DEFAULT = "~/.gemini"
# Codex's user-level memory (§4.1): `$CODEX_HOME/memories/`, read-only; it holds no project,
# so its source lists no root (`projects` is False) and shows only under global/codex.
CODEX = "codex"
CODEX_DEFAULT = "~/.codex"
# Kilo Code's Kilo Memory: `$XDG_DATA_HOME/kilo/memory/<name>-<sha1(root)[:12]>/`, each
# folder's manifest.json naming its root (disk/kilo.py): mapped, read-only. Only its memory
# files are read (`memory_names`): its state.json, manifest.json, index.kmem, .lock/ and
# decisions.jsonl are the tool's own.
KILO = "kilo"
KILO_MEMORY = frozenset({"project.md", "environment.md", "corrections.md", "sessions"})
# goose: `<root>/.goose/memory/` inside each project (disk/goose.py maps the project roots
# memfs knows), and the user-level `$XDG_CONFIG_HOME/goose/memory/` (global/goose). Its
# root is goose's config folder; mapped, read-only.
GOOSE = "goose"
MAPPED_KINDS = frozenset({GEMINI, KILO, GOOSE})
# Source names appear in history names (`<source>@<time>.md`) and in folder names.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


class ConfigError(Exception):
    """A user error in the configuration: one line naming the cause and the fix."""


@dataclass(frozen=True)
class SourceSpec:
    """One backing folder per project, given as a template with ``{slug}``, or Gemini CLI's
    folder (``kind`` GEMINI).

    ``root`` is the folder that holds one entry per project (named by its slug, or for
    Gemini CLI by an id its markers map to a project); ``tail`` the path from that entry to
    the memory folder (``("memory",)`` for Claude Code and Gemini CLI, ``()`` for pi).
    """

    name: str
    template: str
    root: Path
    tail: tuple[str, ...]
    own: bool = False
    why: str = ""
    kind: str = TEMPLATE
    # A source received from another machine (§12): that machine's home folder, through
    # which its slugs map to ours (`rules.slug.rehome`); "" for this machine's sources.
    their_home: str = ""

    def folder(self, slug_folder: str) -> Path:
        """The real memory folder of one project in this source."""
        return self.root.joinpath(slug_folder, *self.tail)

    @property
    def mapped(self) -> bool:
        """Whether its folders are named by ids that markers map to projects (Gemini CLI,
        Kilo Code) or found in projects (goose), not named by slugs."""
        return self.kind in MAPPED_KINDS

    @property
    def memory_names(self) -> frozenset[str] | None:
        """The top-level names its project folders hold memory under; None for all."""
        return KILO_MEMORY if self.kind == KILO else None

    @property
    def gemini_dir(self) -> Path:
        """Gemini CLI's folder (``~/.gemini``) of a GEMINI source: its root's parent."""
        return self.root.parent

    @property
    def projects(self) -> bool:
        """Whether its root holds projects (a CODEX source's holds user memory only)."""
        return self.kind != CODEX

    @property
    def claude_config(self) -> Path | None:
        """The Claude Code config folder of a ``<config>/projects/{slug}/memory`` source,
        where that account's user memory lies (§4.1); None for any other template."""
        if self.kind == TEMPLATE and self.tail == ("memory",) and self.root.name == "projects":
            return self.root.parent
        return None


def codex_source(name: str, home: Path, why: str) -> SourceSpec:
    """The read-only source of Codex's folder ``home``: its ``memories/`` is global/codex."""
    return SourceSpec(name, f"{home}/memories", home, ("memories",), False, why, CODEX)


def kilo_source(name: str, folder: Path, why: str) -> SourceSpec:
    """The read-only source of Kilo Memory's folder ``folder`` (``<data>/kilo/memory``)."""
    return SourceSpec(name, f"{folder}/<name>-<hash>", folder, (), False, why, KILO)


def goose_source(name: str, folder: Path, why: str) -> SourceSpec:
    """The read-only source of goose: its config folder ``folder`` (``memory/`` there is
    global/goose) and ``<root>/.goose/memory`` in each project memfs knows."""
    return SourceSpec(name, "<project root>/.goose/memory", folder, ("memory",), False, why, GOOSE)


def pi_source(name: str, folder: Path, home: Path, why: str) -> SourceSpec:
    """The source of pi's memory folder ``folder``: ``<folder>/<slug>``."""
    template = f"{folder}/{SLUG_FIELD}"
    root, tail = parse_template(template, home, "discovered source")
    return SourceSpec(name, template, root, tail, False, why)


def gemini_source(name: str, folder: Path, why: str) -> SourceSpec:
    """The read-only source of Gemini CLI's folder ``folder``: ``<folder>/tmp/<id>/memory``."""
    root = folder / "tmp"
    return SourceSpec(name, f"{root}/<id>/memory", root, ("memory",), False, why, GEMINI)


@dataclass(frozen=True)
class PreambleSettings:
    budget: int = 8192
    newest: int = 3
    file_cap: int = 4096
    index_max: int = 50


@dataclass(frozen=True)
class Limits:
    max_file_bytes: int = 1 << 20
    versions: int = 20  # kept per path (§7.2)
    history_bytes: int = 32 << 20  # kept per project's own history, oldest out first
    # the read-only sources' versions a change on disk replaced, kept in the state folder
    state_bytes: int = 256 << 20


@dataclass(frozen=True)
class Config:
    sources: tuple[SourceSpec, ...]
    state_dir: Path
    home: Path
    preamble: PreambleSettings = field(default_factory=PreambleSettings)
    limits: Limits = field(default_factory=Limits)
    path: Path | None = None  # the config file read, None when sources were discovered
    # where other machines' folders arrive (§12; disk/machines.py): watched while serving
    machines_dir: Path | None = None

    # Asked on hot paths (every entry of a listing): computed once per config.
    @functools.cached_property
    def own(self) -> SourceSpec | None:
        return next((s for s in self.sources if s.own), None)

    @functools.cached_property
    def own_index(self) -> int | None:
        return next((i for i, s in enumerate(self.sources) if s.own), None)

    def moved(self, source: SourceSpec) -> Callable[[str], str] | None:
        """How a path another machine's ``source`` names maps to ours (§12); None for this
        machine's sources."""
        theirs = source.their_home
        if not theirs:
            return None
        return functools.partial(slugs.rehome_path, their_home=theirs, our_home=str(self.home))

    def add_sources(self, added: tuple[SourceSpec, ...]) -> None:
        """Append sources while a mount serves: another machine's folders arrived (§12: no
        remount). Append only, so every source index held anywhere stays true; never own,
        so `own` and `own_index` stay true too. The mount's trio thread only."""
        assert not any(s.own for s in added), "a source added while serving is never own"
        object.__setattr__(self, "sources", self.sources + added)


def received_source(found: machines.Received, taken: set[str]) -> SourceSpec | None:
    """The read-only source of a folder another machine shares, named ``<machine>-<source>``
    (its versions' names say where they came from); None when that name is taken."""
    p = found.published
    name = f"{found.machine}-{p.source}"[:32]
    if name in taken or not _NAME_RE.match(name):
        return None
    why = f"received from machine {found.machine!r} ({p.hostname}, home {p.home})"
    if p.kind == "gemini":
        spec = gemini_source(name, found.folder.parent, why)
    elif p.kind == "codex":
        spec = codex_source(name, found.folder.parent, why)
    else:
        tail = ("memory",) if p.kind == "claude" else ()
        template = str(found.folder.joinpath(SLUG_FIELD, *tail))
        spec = SourceSpec(name, template, found.folder, tail, False, why)
    return dataclasses.replace(spec, their_home=p.home)


def with_machines(
    sources: tuple[SourceSpec, ...], env: Mapping[str, str]
) -> tuple[SourceSpec, ...]:
    """``sources`` and, after them, every folder received from another machine (§12)."""
    taken = {s.name for s in sources}
    added = []
    for found in machines.received(machines.machines_dir(env)):
        spec = received_source(found, taken)
        if spec is None:
            log.warning("%s: its source name is taken; not served", found.folder)
            continue
        taken.add(spec.name)
        added.append(spec)
    return sources + tuple(added)


_SECTIONS: dict[str, dict[str, tuple[type, int]]] = {
    # key -> (type, minimum)
    "preamble": {
        "budget": (int, 0),
        "newest": (int, 0),
        "file_cap": (int, 0),
        "index_max": (int, 0),
    },
    "limits": {
        "max_file_bytes": (int, 1),
        "versions": (int, 0),
        "history_bytes": (int, 0),
        "state_bytes": (int, 0),
        "handoff_versions": (int, 0),  # the old name of versions, from when only handoffs kept
    },
}
_OLD_NAMES = {("limits", "handoff_versions"): "versions"}
_SOURCE_KEYS = {"name", "path", "own", "kind"}


def home_dir(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    if not home:
        raise ConfigError("HOME is not set; set HOME to your home folder")
    return Path(home)


def _xdg(env: Mapping[str, str], var: str, default: str) -> Path:
    value = env.get(var)
    # The XDG spec says relative values are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return home_dir(env) / default


def config_path(env: Mapping[str, str]) -> Path:
    return _xdg(env, "XDG_CONFIG_HOME", ".config") / "memfs" / "config.toml"


def state_dir(env: Mapping[str, str]) -> Path:
    return _xdg(env, "XDG_STATE_HOME", ".local/state") / "memfs"


def expand(path: str, home: Path) -> Path:
    """``~`` and ``~/x`` relative to ``home``; nothing else is expanded."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return home / path[2:]
    return Path(path)


def parse_template(template: str, home: Path, where: str) -> tuple[Path, tuple[str, ...]]:
    """Split a source template at its ``{slug}`` component into (root, tail)."""
    parts = expand(template, home).parts
    hits = [i for i, p in enumerate(parts) if SLUG_FIELD in p]
    if len(hits) != 1 or parts[hits[0]] != SLUG_FIELD:
        raise ConfigError(
            f"{where}: path {template!r} must contain {SLUG_FIELD} exactly once, as one whole "
            f"path component (e.g. '~/.claude/projects/{{slug}}/memory')"
        )
    i = hits[0]
    root = Path(*parts[:i])
    if not root.is_absolute():
        raise ConfigError(f"{where}: path {template!r} must be absolute or start with '~/'")
    tail = parts[i + 1 :]
    if any(p in (".", "..") for p in tail):
        raise ConfigError(f"{where}: path {template!r} may not contain '.' or '..' after {{slug}}")
    return root, tuple(tail)


def load(env: Mapping[str, str], path: Path | None = None) -> Config:
    """The configuration from ``path``, the default file, or discovery when there is none.

    Raises:
        ConfigError: a missing explicit file, bad TOML, an unknown key or a bad value.
    """
    home = home_dir(env)
    explicit = path is not None
    path = path or config_path(env)
    if not path.exists():
        if explicit:
            raise ConfigError(f"{path}: no such config file; fix the --config path")
        return Config(
            sources=with_machines(discover(env), env),
            state_dir=state_dir(env),
            home=home,
            machines_dir=machines.machines_dir(env),
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    return _from_toml(data, path, env)


def _from_toml(data: dict[str, Any], path: Path, env: Mapping[str, str]) -> Config:
    home = home_dir(env)
    for key in data:
        if key != "source" and key not in _SECTIONS:
            raise ConfigError(
                f"{path}: unknown key {key!r}; expected [[source]], [preamble] or [limits]"
            )
    settings = {name: _section(data.get(name, {}), name, path) for name in _SECTIONS}
    if "source" in data:
        raw_sources = data["source"]
        if not isinstance(raw_sources, list):
            raise ConfigError(f"{path}: 'source' must be an array of tables ([[source]])")
        sources = tuple(_source(s, i, path, home) for i, s in enumerate(raw_sources))
        _check_sources(sources, path)
    else:
        sources = discover(env)  # every key has a default, the sources too
    return Config(
        sources=with_machines(sources, env),
        state_dir=state_dir(env),
        home=home,
        preamble=PreambleSettings(**settings["preamble"]),
        limits=Limits(**settings["limits"]),
        path=path,
        machines_dir=machines.machines_dir(env),
    )


def _section(raw: object, name: str, path: Path) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    schema = _SECTIONS[name]
    out: dict[str, int] = {}
    for key, value in raw.items():
        if key not in schema:
            raise ConfigError(
                f"{path}: unknown key '{name}.{key}'; expected one of {', '.join(schema)}"
            )
        _, minimum = schema[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(
                f"{path}: '{name}.{key}' must be an integer >= {minimum}, got {value!r}"
            )
        new_name = _OLD_NAMES.get((name, key))
        if new_name is not None and new_name in raw:
            raise ConfigError(
                f"{path}: '{name}.{key}' is the old name of '{name}.{new_name}'; keep only "
                f"'{name}.{new_name}'"
            )
        out[new_name or key] = value
    return out


def _source(raw: object, i: int, path: Path, home: Path) -> SourceSpec:
    where = f"{path}: source #{i + 1}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    for key in raw:
        if key not in _SOURCE_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r}; expected name, path, own, kind")
    name, template, own = raw.get("name"), raw.get("path"), raw.get("own", False)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(
            f"{where}: 'name' must be 1-32 letters, digits, '_', '.' or '-', got {name!r}"
        )
    kind = raw.get("kind", TEMPLATE)
    if kind in _TOOLS:
        return _tool_folder(raw, name, where, home, kind)
    if kind != TEMPLATE:
        raise ConfigError(
            f'{where}: \'kind\' must be "{GEMINI}" (Gemini CLI\'s folder), "{CODEX}" '
            f'(Codex\'s folder), "{KILO}" (Kilo Memory\'s folder), "{GOOSE}" (goose\'s '
            f"config folder) or left out (a path with {SLUG_FIELD}), got {kind!r}"
        )
    if not isinstance(template, str):
        raise ConfigError(f"{where}: 'path' must be a string with {SLUG_FIELD}, got {template!r}")
    if not isinstance(own, bool):
        raise ConfigError(f"{where}: 'own' must be true or false, got {own!r}")
    root, tail = parse_template(template, home, where)
    why = "own = true in the config" if own else "listed in the config"
    root, why = follow_root(root, why)
    return SourceSpec(name, template, root, tail, own, why)


def _tool_folder(raw: dict[str, Any], name: str, where: str, home: Path, kind: str) -> SourceSpec:
    """A ``kind = "gemini"``, ``"codex"``, ``"kilo"`` or ``"goose"`` source: ``path`` is the
    tool's folder (`_TOOLS` has each default); read-only, since the tool rewrites what memfs
    shows of it."""
    tool, default, _ = _TOOLS[kind]
    if raw.get("own", False) is not False:
        raise ConfigError(
            f"{where}: 'own' must be false for a {kind} source: memfs only reads {tool}'s "
            "memory; remove own = true"
        )
    folder = raw.get("path", default)
    if not isinstance(folder, str) or SLUG_FIELD in folder:
        raise ConfigError(
            f"{where}: 'path' of a {kind} source must be {tool}'s folder without "
            f"{SLUG_FIELD} (e.g. '{default}'), got {folder!r}"
        )
    found = expand(folder, home)
    if not found.is_absolute() or any(p in (".", "..") for p in found.parts):
        raise ConfigError(
            f"{where}: path {folder!r} must be absolute or start with '~/', without '.' or '..'"
        )
    found, why = follow_root(found, f"kind = {kind!r} in the config")
    return _TOOLS[kind][2](name, found, why)


# kind -> (the tool, its folder's default, its source given a name, the folder and why)
_TOOLS: dict[str, tuple[str, str, Callable[[str, Path, str], SourceSpec]]] = {
    GEMINI: ("Gemini CLI", GEMINI_DEFAULT, gemini_source),
    CODEX: ("Codex", CODEX_DEFAULT, codex_source),
    KILO: ("Kilo Code", "~/.local/share/kilo/memory", kilo_source),
    GOOSE: ("goose", "~/.config/goose", goose_source),
}


def follow_root(folder: Path, why: str) -> tuple[Path, str]:
    """A source folder that is a link (or lies below one) to a folder the user owns, as the
    real folder it leads to, and why with that said (issue 38: users link memory folders to
    synced places). Resolved once, here: inotify watches the real folder, and a link met
    below a source's root is never followed. Anything else is kept as given."""
    if folder == _resolved(folder):
        return folder, why
    try:
        real = folder.resolve(strict=True)
        st = real.stat()
    except (OSError, RuntimeError):
        return folder, why  # a dangling link: waited for as a missing folder
    if not real.is_dir() or st.st_uid != os.geteuid():
        return folder, f"{why}; a link to {real}, not a folder of yours: not followed"
    return real, f"{why}; {folder} links to {real}"


def _check_sources(sources: tuple[SourceSpec, ...], path: Path) -> None:
    names = [s.name for s in sources]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{path}: source name {name!r} is used twice; names must be unique")
    if sum(s.own for s in sources) > 1:
        raise ConfigError(f"{path}: more than one source has own = true; mark at most one")


def discover(env: Mapping[str, str]) -> tuple[SourceSpec, ...]:
    """Sources found when there is no config file (§3).

    Claude Code accounts: ``~/.claude``, every ``~/.claude-*`` and ``$CLAUDE_CONFIG_DIR``
    holding a ``projects/`` folder; pi: ``~/.pi/agent/memory``; Gemini CLI: ``~/.gemini``
    (read-only: its ``tmp/<id>/memory`` folders, mapped to projects by disk/gemini.py);
    Codex: ``$CODEX_HOME`` or ``~/.codex`` (read-only: its ``memories/``, §4.1). The
    own source is ``$CLAUDE_CONFIG_DIR`` or ``~/.claude``; it is kept even without
    ``projects/`` yet (a fresh account), since the first write creates that folder. pi,
    Gemini CLI and Codex are sources even before their folders exist, once any agent's
    memory is; another account's folder, named by no fixed path, is found at the next
    mount.
    """
    home = home_dir(env)
    env_dir = env.get("CLAUDE_CONFIG_DIR")
    own_dir = expand(env_dir, home) if env_dir else home / ".claude"
    own_why = "$CLAUDE_CONFIG_DIR is set" if env_dir else "~/.claude is Claude Code's default"
    candidates = [home / ".claude", *sorted(home.glob(".claude-*"))]
    if env_dir:
        candidates.append(own_dir)
    found: list[SourceSpec] = []
    seen: set[Path] = set()
    for config_dir in candidates:
        key = _resolved(config_dir)
        is_own = key == _resolved(own_dir)
        if key in seen or not config_dir.is_dir():
            continue
        if not (config_dir / "projects").is_dir() and not is_own:
            continue
        seen.add(key)
        name = _unique(_account_name(config_dir), found)
        why = own_why if is_own else f"{config_dir} holds projects/"
        config_dir, why = follow_root(config_dir, why)
        template = f"{config_dir}/projects/{SLUG_FIELD}/memory"
        root, tail = parse_template(template, home, "discovered source")
        found.append(SourceSpec(name, template, root, tail, is_own, why))
    # pi, Gemini CLI and Codex live at known places: beside any agent's memory found, each
    # is a source whether or not its folder exists yet, so a tool installed while mounted
    # shows without a remount (a missing root waits in the nearest folder there, §5.4).
    # With no agent's memory at all there is nothing to mount (`check_mount`).
    pi, gemini = home / ".pi" / "agent" / "memory", home / ".gemini"
    codex_env = env.get("CODEX_HOME")
    codex = expand(codex_env, home) if codex_env else home / ".codex"
    # Kilo Memory under the XDG data folder (older builds: ~/.kilo/memory), goose's config
    # folder under the XDG config folder (its memory/ is global/goose).
    kilo = _xdg(env, "XDG_DATA_HOME", ".local/share") / "kilo" / "memory"
    if not kilo.is_dir() and (home / ".kilo" / "memory").is_dir():
        kilo = home / ".kilo" / "memory"
    goose = _xdg(env, "XDG_CONFIG_HOME", ".config") / "goose"
    # (name, folder, the source of it given a folder, a name and why)
    tools: list[tuple[str, Path, Callable[[str, Path, str], SourceSpec]]] = [
        ("pi", pi, lambda name, folder, why: pi_source(name, folder, home, why)),
        ("gemini", gemini, gemini_source),
    ]
    if codex.is_absolute():
        tools.append(("codex", codex, codex_source))
    tools += [("kilo", kilo, kilo_source), ("goose", goose, goose_source)]
    there = {name: folder.is_dir() for name, folder, _ in tools}  # one look each
    if not found and not any(there.values()):
        return ()
    for name, folder, source in tools:
        why = f"{folder} exists" if there[name] else f"{folder} is not there yet: shown once made"
        if name == "codex" and codex_env:
            why = f"$CODEX_HOME is set; {why}"
        real, why = follow_root(folder, why)
        found.append(source(_unique(name, found), real, why))
    # The own source first: it wins ties and receives writes.
    return tuple(sorted(found, key=lambda s: not s.own))


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _account_name(config_dir: Path) -> str:
    if config_dir.name == "claude" and config_dir.parent.parent.name == "identities":
        return _account_name(Path(config_dir.parent.name))  # identities/<acct>/claude
    base = config_dir.name.lstrip(".")
    if base.startswith("claude-") and len(base) > len("claude-"):
        base = base[len("claude-") :]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", base).strip(".-_") or "claude"
    return cleaned[:32]


def _unique(name: str, found: list[SourceSpec]) -> str:
    taken = {s.name for s in found}
    candidate, n = name, 2
    while candidate in taken:
        candidate = f"{name}{n}"
        n += 1
    return candidate


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def git_work_tree(path: Path, home: Path) -> Path | None:
    """The git work tree holding ``path`` whose top lies in ``home``, if there is one."""
    path, home = _resolved(path), _resolved(home)
    if not _inside(path, home):
        return None
    for folder in (path, *path.parents):
        if (folder / ".git").exists():
            return folder
        if folder == home:
            break
    return None


def check_mount(config: Config, mountpoint: Path) -> None:
    """The containment refusals of §3 for a mount at ``mountpoint``.

    Raises:
        ConfigError: no source, nesting between the mountpoint and a source, or the own
            source or the mountpoint inside a git work tree below the home folder.
    """
    if not config.sources:
        raise ConfigError(
            "no memory sources found (no ~/.claude, ~/.claude-*, $CLAUDE_CONFIG_DIR, "
            f"~/.pi/agent/memory, ~/.gemini, ~/.codex, Kilo Memory or goose); create one or "
            "list sources in "
            f"{config_path_hint(config)}"
        )
    mnt = _resolved(mountpoint)
    for source in config.sources:
        root = _resolved(source.root)
        if _inside(mnt, root):
            raise ConfigError(
                f"mountpoint {mountpoint} lies inside source {source.name!r} ({source.root}); "
                "choose a mountpoint outside every source"
            )
        if _inside(root, mnt):
            raise ConfigError(
                f"source {source.name!r} ({source.root}) lies inside mountpoint {mountpoint}; "
                "choose a mountpoint outside every source"
            )
    checks = [("mountpoint", mountpoint)]
    if config.own is not None:
        checks.append((f"own source {config.own.name!r}", config.own.root))
    for what, where in checks:
        tree = git_work_tree(where, config.home)
        if tree is not None:
            raise ConfigError(
                f"{what} {where} lies inside the git work tree {tree}; memory must not be "
                "committed by accident: move it out of the repository"
            )


def config_path_hint(config: Config) -> str:
    return str(config.path) if config.path else "~/.config/memfs/config.toml"
