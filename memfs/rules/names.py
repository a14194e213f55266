"""Names that are not memory: sync tools', editors' and agents' own files, conflict copies, and
what PREAMBLE.md may draw on (§2, §5.1, §6).

Layer rules: imports neither pyfuse3 nor trio, touches no disk; every function is safe from
any thread.

One list, `RULES`, says which names in a project folder are not memory, and each rule says
which of two ways it goes (`Way`):

- ``Way.REFUSED``: a tool's own file or a sync tool's name in flight (memfs's stage files,
  Syncthing's temp names and markers, ``.git``, AppleDouble ``._*``, ``.DS_Store``,
  Dropbox, Nextcloud's journals, rsync's ``.~tmp~`` folder, Gemini CLI's ``.inbox/``,
  lock and temp names, ...). Never shown from any source, and refused with ``EINVAL``
  when a writer creates one through the mount (create, mkdir, or a rename onto it): a
  name that would be accepted and then vanish at the next mount is worse than an error
  at once. So no name an agent might keep memory under is ever on this list.
- ``Way.WRITERS``: a writer's own temporary, swap or backup file (rsync's
  ``.<name>.XXXXXX``, vim's ``.<name>.swp``, ``<name>~``, emacs's ``#<name>#``, rclone's
  ``.partial``, ...). A writer through the mount must be able to make, reopen and rename
  it, so it is accepted, lands in the own source, and is shown from the own source for as
  long as it is on disk, across remounts. Only a read-only source's such files are left
  out: nothing written through the mount lands there, so those are another writer's
  files in flight. Shown or not, they never feed PREAMBLE.md.

A name both ways match is refused. A conflict copy is different: it is a real version of
another name, so `conflict_original` maps it to that name and the project shows it under
``.history/``; a file of such a name is refused through the mount all the same
(view/writes.py `check_new_name`), since it would never show under its own name.

Claude Code's own temporary name, ``<file>.tmp.<pid>.<12 hex>``, is deliberately on no
list: it is an ordinary name, shown from every source.

What PREAMBLE.md draws on is narrower than what the view shows: Markdown and plain text
outside dot folders (`feeds_preamble`), which no name a rule matches passes.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

# memfs's own stage files (staging.py): never served, swept by the next mount.
STAGE_PREFIX = ".memfs-stage."


class Applies(enum.Enum):
    FILE = "file"  # a regular file (or anything not a folder)
    FOLDER = "folder"
    ANY = "any"


class Way(enum.Enum):
    """What a rule's names get through the mount and in each kind of source."""

    REFUSED = "refused"  # refused through the mount (EINVAL); left out of every source
    WRITERS = "writers"  # accepted; shown from the own source, left out of read-only ones


@dataclass(frozen=True)
class Rule:
    key: str  # a stable id, for tests and status
    pattern: re.Pattern[str]  # matched against one name, in full
    applies: Applies
    why: str  # shown in status next to the left-out path
    way: Way


def _rule(key: str, way: Way, pattern: str, applies: Applies, why: str) -> Rule:
    return Rule(key, re.compile(pattern, re.DOTALL), applies, why, way)


F, D, A = Applies.FILE, Applies.FOLDER, Applies.ANY
NO, OK = Way.REFUSED, Way.WRITERS
IN_FLIGHT = "in flight"
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
TOOL_FILE = "sync tool's file"

# Every name rule, in one place; tests/test_names.py holds a case for each key.
RULES: tuple[Rule, ...] = (
    _rule("memfs-stage", NO, re.escape(STAGE_PREFIX) + ".*", A, f"{IN_FLIGHT}: memfs stage file"),
    # Syncthing pulls into a temp name, then renames it over the target.
    _rule("syncthing-tmp", NO, r"\.syncthing\..+\.tmp", F, f"{IN_FLIGHT}: Syncthing temp file"),
    _rule("syncthing-tmp-win", NO, r"~syncthing~.+\.tmp", F, f"{IN_FLIGHT}: Syncthing temp file"),
    _rule("syncthing-marker", NO, r"\.stfolder", A, f"{TOOL_FILE}: Syncthing folder marker"),
    _rule("syncthing-versions", NO, r"\.stversions", A, f"{TOOL_FILE}: Syncthing versions"),
    _rule("syncthing-ignore", NO, r"\.stignore", F, f"{TOOL_FILE}: Syncthing ignore list"),
    # What `memfs sync init` publishes beside each shared folder's memory: the machine's home
    # and hostname, for the other machines to map its slugs (§12; disk/machines.py).
    _rule(
        "memfs-machine", NO, r"\.memfs-machine\.json", F, f"{TOOL_FILE}: memfs sync's machine file"
    ),
    # rsync: mkstemp's `.<name>.XXXXXX` (six letters or digits) next to the target (rsync
    # through the mount writes it), and the folder --delay-updates collects files in.
    _rule("rsync-tmp", OK, r"\..+\.[A-Za-z0-9]{6}", F, f"{IN_FLIGHT}: rsync temp file"),
    _rule("rsync-delay", NO, r"\.~tmp~", D, f"{IN_FLIGHT}: rsync --delay-updates folder"),
    # rclone's copy in progress: `<name>.<random>.partial` (and older `<name>.partial`).
    _rule("rclone-partial", OK, r".+\.partial", F, f"{IN_FLIGHT}: rclone partial file"),
    _rule("unison-tmp", NO, r"\.unison\..+\.unison\.tmp", F, f"{IN_FLIGHT}: Unison temp file"),
    # Nextcloud/ownCloud download into `.<name>.~<hex>`; their sync journal is a database.
    _rule("nextcloud-tmp", NO, r"\..+\.~[0-9a-f]+", F, f"{IN_FLIGHT}: Nextcloud temp file"),
    _rule(
        "nextcloud-db",
        NO,
        r"\._?sync_[0-9a-f]+\.db(?:-wal|-shm|-journal)?",
        F,
        f"{TOOL_FILE}: Nextcloud/ownCloud journal",
    ),
    _rule(
        "nextcloud-log",
        NO,
        r"\.(?:owncloud|nextcloud)sync\.log",
        F,
        f"{TOOL_FILE}: sync client log",
    ),
    _rule("dropbox", NO, r"\.dropbox(?:\.attr|\.cache)?", A, f"{TOOL_FILE}: Dropbox"),
    _rule("git", NO, r"\.git", A, f"{TOOL_FILE}: git repository"),
    # Editors: vim's and nano's swap (`.<name>.swp`, then .swo, .swn ... for a second
    # session), kate's swap, emacs' auto-save and lock, backups `<name>~` (vim, emacs,
    # nano -B, gedit), JetBrains' safe-write pair and GIO's atomic-replace temp.
    _rule("vim-swap", OK, r"\..+\.sw[a-p]", F, f"{IN_FLIGHT}: editor swap file"),
    _rule("kate-swap", OK, r"\..+\.kate-swp", F, f"{IN_FLIGHT}: editor swap file"),
    _rule("emacs-autosave", OK, r"#.+#", F, f"{IN_FLIGHT}: emacs auto-save file"),
    _rule("emacs-lock", OK, r"\.#.+", F, f"{IN_FLIGHT}: emacs lock file"),
    _rule("backup", OK, r".+~", F, f"{IN_FLIGHT}: editor backup file"),
    _rule("jetbrains", OK, r".+___jb_(?:tmp|old)___", F, f"{IN_FLIGHT}: JetBrains temp file"),
    _rule("gio-tmp", OK, r"\.goutputstream-[A-Za-z0-9]{6}", F, f"{IN_FLIGHT}: GIO temp file"),
    # Claude Code's index backfill: `.MEMORY.md.backfill-<pid>-<hex>.tmp`, then link().
    _rule(
        "claude-backfill",
        OK,
        r"\.MEMORY\.md\.backfill-[0-9]+-[0-9a-z]+\.tmp",
        F,
        f"{IN_FLIGHT}: Claude Code index backfill",
    ),
    # Gemini CLI's bookkeeping in its memory folder (tmp/<id>/memory; its source at 0.56,
    # 0.61 the same): patches its extraction proposes, waiting in `.inbox/{private,global}/`
    # for the user's review; the lock of a run (O_EXCL, unlinked at its end); its state
    # file's fixed temp name; and applying a patch, `.<file>.<uuid v4>.patch-tmp` (then a
    # rename over the file) and `.<file>.<uuid v4>.rollback`. Gemini CLI makes them in its
    # own folder only (through the mount it writes memory: a handoff, a topic), and no
    # agent keeps memory under such a name. Its `.extraction-state.json` and `skills/`
    # drafts are shown, and kept out of PREAMBLE.md (`feeds_preamble`, `gemini_draft`).
    _rule("gemini-inbox", NO, r"\.inbox", D, f"{IN_FLIGHT}: Gemini CLI's proposed patches"),
    _rule("gemini-lock", NO, r"\.extraction\.lock", F, f"{IN_FLIGHT}: Gemini CLI's run lock"),
    _rule(
        "gemini-state-tmp",
        NO,
        r"\.extraction-state\.json\.tmp",
        F,
        f"{IN_FLIGHT}: Gemini CLI temp file",
    ),
    _rule(
        "gemini-patch-tmp",
        NO,
        r"\..+\." + _UUID + r"\.(?:patch-tmp|rollback)",
        F,
        f"{IN_FLIGHT}: Gemini CLI patch file",
    ),
    # Kilo Code's memory folder (Kilo Memory, 7.7): each save writes
    # `.<name>.<pid>.<ms>.<rand>.tmp` (0600) and renames it over the file, and a file it
    # could not parse is set aside as `<name>.bad-<ms>`. A Kilo source reads its memory
    # names only (config.KILO_MEMORY); these catch its files below them (sessions/).
    _rule(
        "kilo-tmp",
        NO,
        r"\..+\.[0-9]+\.[0-9]+\.[0-9a-z]+\.tmp",
        F,
        f"{IN_FLIGHT}: Kilo Code temp file",
    ),
    _rule("kilo-bad", NO, r".+\.bad-[0-9]{10,}", F, f"{TOOL_FILE}: Kilo Code's unreadable copy"),
    # Desktop litter: Finder's folder settings and AppleDouble resource forks.
    _rule("macos-ds-store", NO, r"\.DS_Store", F, f"{TOOL_FILE}: macOS folder settings"),
    _rule("macos-appledouble", NO, r"\._.+", F, f"{TOOL_FILE}: macOS resource fork"),
)


# Refused rules first: a name both ways match (`._x.backup`) is a tool's, and refused.
_BY_WAY = tuple(r for r in RULES if r.way is Way.REFUSED) + tuple(
    r for r in RULES if r.way is Way.WRITERS
)


def matching_rule(name: str, *, folder: bool = False) -> Rule | None:
    """The rule that says ``name`` (one path component) is not memory, or None; a refused
    rule before a writers' one."""
    for rule in _BY_WAY:
        if rule.applies is not Applies.ANY and (rule.applies is Applies.FOLDER) != folder:
            continue
        if rule.pattern.fullmatch(name):
            return rule
    return None


def left_out_reason(name: str, *, folder: bool = False) -> str:
    """Why ``name`` is never shown as memory from a read-only source, or '' when it may be."""
    rule = matching_rule(name, folder=folder)
    return "" if rule is None else rule.why


def refused(name: str, *, folder: bool = False) -> Rule | None:
    """The rule that refuses creating ``name`` (a folder's, if ``folder``) through the
    mount, or None when a writer may create it."""
    rule = matching_rule(name, folder=folder)
    return rule if rule is not None and rule.way is Way.REFUSED else None


def is_stage(name: str) -> bool:
    return name.startswith(STAGE_PREFIX)


def project_folder(name: str) -> bool:
    """Whether a folder name at a source's slug level may be a project (§2).

    A name beginning with '.' (`.stfolder`, `.stversions`, `.git`, `.DS_Store`) never is,
    and is never canonicalised into one (`.git` would become the slug `-git`).
    """
    return not name.startswith(".")


# --- what PREAMBLE.md draws on (§6) ---------------------------------------------

# What every agent memfs serves keeps its memory in: Markdown (Claude Code, Gemini CLI,
# Codex, Kilo, pi, orchestrators' handoffs) or plain text (goose's `<category>.txt`).
MEMORY_EXTENSIONS = frozenset({"md", "markdown", "txt"})
# Gemini CLI's folder of draft skills (`skills/<name>/SKILL.md`, `skills/*.patch`), which
# its extraction proposes and the user has not reviewed; Codex's `skills/` is memory.
GEMINI_DRAFTS = "skills"


def feeds_preamble(path: str) -> bool:
    """Whether a file at ``path`` (relative to its project folder) may be inlined or
    indexed in PREAMBLE.md, by its name alone: no component begins with '.' (a tool's
    folder or a hidden file: Gemini CLI's `.inbox/`, `.extraction-state.json`; Claude
    Code's index backfill and Gemini CLI's loader skip them too) and the name ends in
    `.md`, `.markdown` or `.txt`, in any case. A name without an extension does not:
    no agent keeps memory under one, and the ones seen in tools' folders are their
    bookkeeping (locks, markers, a pid). The view shows every such file all the same."""
    parts = path.split("/")
    if any(part.startswith(".") for part in parts):
        return False
    _, dot, extension = parts[-1].rpartition(".")
    return bool(dot) and extension.lower() in MEMORY_EXTENSIONS


def gemini_draft(path: str) -> bool:
    """Whether ``path`` lies in Gemini CLI's draft skills folder, were its version Gemini
    CLI's (the caller knows which source it comes from): never in PREAMBLE.md."""
    return path.startswith(GEMINI_DRAFTS + "/")


# --- conflict copies -----------------------------------------------------------------------

# Syncthing: `<stem>.sync-conflict-<YYYYMMDD>-<HHMMSS>-<7-character device id>.<ext>`,
# the extension as Go's filepath.Ext sees it (from the last dot); releases before 0.14.4x
# wrote no device id.
_SYNCTHING = re.compile(
    r"(?P<stem>.*)\.sync-conflict-\d{8}-\d{6}(?:-[A-Z0-9]{7})?(?P<ext>\.[^.]*)?", re.DOTALL
)
# Dropbox: `<stem> (<who>'s conflicted copy <YYYY-MM-DD>[ (n)]).<ext>`, also without the
# owner; Nextcloud and ownCloud 2.5+: `<stem> (conflicted copy <YYYY-MM-DD> <HHMMSS>).<ext>`.
_CONFLICTED_COPY = re.compile(
    r"(?P<stem>.+?) \((?:[^()/]+ )?conflicted copy \d{4}-\d{2}-\d{2}(?: \d{6})?(?: \(\d+\))?\)"
    r"(?P<ext>\.[^.]*)?",
    re.DOTALL,
)
# ownCloud before 2.5: `<stem>_conflict-<YYYYMMDD>-<HHMMSS>.<ext>`.
_OWNCLOUD_OLD = re.compile(r"(?P<stem>.+)_conflict-\d{8}-\d{6}(?P<ext>\.[^.]*)?", re.DOTALL)

CONFLICT_PATTERNS = {
    "syncthing": _SYNCTHING,
    "dropbox-nextcloud": _CONFLICTED_COPY,
    "owncloud-old": _OWNCLOUD_OLD,
}


def conflict_original(name: str) -> str | None:
    """The name a conflict copy ``name`` is a version of, or None if it is not one.

    A conflict copy of a conflict copy maps to the first original.
    """
    original = None
    current = name
    while True:
        for pattern in CONFLICT_PATTERNS.values():
            found = pattern.fullmatch(current)
            if found is not None:
                current = found["stem"] + (found["ext"] or "")
                break
        else:
            return original
        if not current:
            return original
        original = current


def path_rule(path: str) -> Rule | None:
    """The rule that says a file at ``path`` (relative to a project folder) is not memory,
    or None.

    Every folder on the way is checked with the folder rules (a file inside `.git/` or
    `.stversions/` is a tool's too), the last component with the file rules.
    """
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        rule = matching_rule(part, folder=i < len(parts) - 1)
        if rule is not None:
            return rule
    return None


def path_reason(path: str) -> str:
    """Why a file at ``path`` is not memory (`path_rule`), or ''."""
    rule = path_rule(path)
    return "" if rule is None else rule.why


# Claude Code's temporary name (§7.3): ``<file>.tmp.<pid>.<12 hex digits>``.
_TEMP_NAME = re.compile(r".+\.tmp\.[0-9]+\.[0-9a-f]{12}", re.DOTALL)


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is a writer's temporary name, renamed over its target a moment after
    it is written. Its first commit makes its bytes durable but not its name: the name
    that matters is the final one, and the rename through the mount fsyncs the folder.
    Lost in a power cut before that rename, it leaves the target as it was, the same as
    the writer's own sequence on a local disk (which fsyncs no folder at all)."""
    return _TEMP_NAME.fullmatch(name) is not None
