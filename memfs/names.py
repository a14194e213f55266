"""Names that are not memory: sync tools' and editors' files, and conflict copies (SPEC 2, 5.1).

Pure core: imports neither pyfuse3 nor trio, touches no disk; every function is safe from
any thread.

One list, `RULES`, says which names in a project folder are never a head: files in flight
(a sync tool's or a writer's temporary name, which becomes another name or vanishes) and a
sync tool's own files (markers, ignore lists, databases, archives of old versions). A
conflict copy is different: it is a real version of another name, so `conflict_original`
maps it to that name and the project shows it under ``.history/``.

Claude Code's own temporary name, ``<file>.tmp.<pid>.<12 hex>``, is deliberately on no
list: a writer through the mount must be able to create it, close it and rename it.
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


@dataclass(frozen=True)
class Rule:
    key: str  # a stable id, for tests and status
    pattern: re.Pattern[str]  # matched against one name, in full
    applies: Applies
    why: str  # shown in status next to the left-out path


def _rule(key: str, pattern: str, applies: Applies, why: str) -> Rule:
    return Rule(key, re.compile(pattern, re.DOTALL), applies, why)


F, D, A = Applies.FILE, Applies.FOLDER, Applies.ANY
IN_FLIGHT = "in flight"
TOOL_FILE = "sync tool's file"

# Every name rule, in one place; tests/test_names.py holds a case for each key.
RULES: tuple[Rule, ...] = (
    _rule("memfs-stage", re.escape(STAGE_PREFIX) + ".*", A, f"{IN_FLIGHT}: memfs stage file"),
    # Syncthing pulls into a temp name, then renames it over the target.
    _rule("syncthing-tmp", r"\.syncthing\..+\.tmp", F, f"{IN_FLIGHT}: Syncthing temp file"),
    _rule("syncthing-tmp-win", r"~syncthing~.+\.tmp", F, f"{IN_FLIGHT}: Syncthing temp file"),
    _rule("syncthing-marker", r"\.stfolder", A, f"{TOOL_FILE}: Syncthing folder marker"),
    _rule("syncthing-versions", r"\.stversions", A, f"{TOOL_FILE}: Syncthing versions"),
    _rule("syncthing-ignore", r"\.stignore", F, f"{TOOL_FILE}: Syncthing ignore list"),
    # rsync: mkstemp's `.<name>.XXXXXX` (six letters or digits) next to the target, and
    # the folder --delay-updates collects files in.
    _rule("rsync-tmp", r"\..+\.[A-Za-z0-9]{6}", F, f"{IN_FLIGHT}: rsync temp file"),
    _rule("rsync-delay", r"\.~tmp~", D, f"{IN_FLIGHT}: rsync --delay-updates folder"),
    # rclone's copy in progress: `<name>.<random>.partial` (and older `<name>.partial`).
    _rule("rclone-partial", r".+\.partial", F, f"{IN_FLIGHT}: rclone partial file"),
    _rule("unison-tmp", r"\.unison\..+\.unison\.tmp", F, f"{IN_FLIGHT}: Unison temp file"),
    # Nextcloud/ownCloud download into `.<name>.~<hex>`; their sync journal is a database.
    _rule("nextcloud-tmp", r"\..+\.~[0-9a-f]+", F, f"{IN_FLIGHT}: Nextcloud temp file"),
    _rule(
        "nextcloud-db",
        r"\._?sync_[0-9a-f]+\.db(?:-wal|-shm|-journal)?",
        F,
        f"{TOOL_FILE}: Nextcloud/ownCloud journal",
    ),
    _rule(
        "nextcloud-log", r"\.(?:owncloud|nextcloud)sync\.log", F, f"{TOOL_FILE}: sync client log"
    ),
    _rule("dropbox", r"\.dropbox(?:\.attr|\.cache)?", A, f"{TOOL_FILE}: Dropbox"),
    _rule("git", r"\.git", A, f"{TOOL_FILE}: git repository"),
    # Editors: vim's and nano's swap (`.<name>.swp`, then .swo, .swn ... for a second
    # session), kate's swap, emacs' auto-save and lock, backups `<name>~` (vim, emacs,
    # nano -B, gedit), JetBrains' safe-write pair and GIO's atomic-replace temp.
    _rule("vim-swap", r"\..+\.sw[a-p]", F, f"{IN_FLIGHT}: editor swap file"),
    _rule("kate-swap", r"\..+\.kate-swp", F, f"{IN_FLIGHT}: editor swap file"),
    _rule("emacs-autosave", r"#.+#", F, f"{IN_FLIGHT}: emacs auto-save file"),
    _rule("emacs-lock", r"\.#.+", F, f"{IN_FLIGHT}: emacs lock file"),
    _rule("backup", r".+~", F, f"{IN_FLIGHT}: editor backup file"),
    _rule("jetbrains", r".+___jb_(?:tmp|old)___", F, f"{IN_FLIGHT}: JetBrains temp file"),
    _rule("gio-tmp", r"\.goutputstream-[A-Za-z0-9]{6}", F, f"{IN_FLIGHT}: GIO temp file"),
    # Desktop litter: Finder's folder settings and AppleDouble resource forks.
    _rule("macos-ds-store", r"\.DS_Store", F, f"{TOOL_FILE}: macOS folder settings"),
    _rule("macos-appledouble", r"\._.+", F, f"{TOOL_FILE}: macOS resource fork"),
)


def matching_rule(name: str, *, folder: bool = False) -> Rule | None:
    """The first rule that says ``name`` (one path component) is not memory, or None."""
    for rule in RULES:
        if rule.applies is not Applies.ANY and (rule.applies is Applies.FOLDER) != folder:
            continue
        if rule.pattern.fullmatch(name):
            return rule
    return None


def left_out_reason(name: str, *, folder: bool = False) -> str:
    """Why ``name`` is never shown as memory, or '' when it may be."""
    rule = matching_rule(name, folder=folder)
    return "" if rule is None else rule.why


def is_stage(name: str) -> bool:
    return name.startswith(STAGE_PREFIX)


def project_folder(name: str) -> bool:
    """Whether a folder name at a source's slug level may be a project (SPEC 2).

    A name beginning with '.' (`.stfolder`, `.stversions`, `.git`, `.DS_Store`) never is,
    and is never canonicalised into one (`.git` would become the slug `-git`).
    """
    return not name.startswith(".")


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


def path_reason(path: str) -> str:
    """Why a file at ``path`` (relative to a project folder) is not memory, or ''.

    Every folder on the way is checked with the folder rules (a file inside `.git/` or
    `.stversions/` is a tool's too), the last component with the file rules.
    """
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        why = left_out_reason(part, folder=i < len(parts) - 1)
        if why:
            return why
    return ""
