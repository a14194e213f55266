"""The house's walls, read from the code (tier 1): layers import only downwards, pyfuse3 and
trio stay in the adapter and above, the view does no I/O, and no module or class grows past
what one job needs.

The layers, lowest first, are memfs's subpackages (memfs/__init__.py says what each holds).
Every module's imports are read with `ast`, so an import inside a function or under
``if TYPE_CHECKING:`` counts as much as one at the top.

The view is memory only (docs/ARCHITECTURE.md): it imports the disk layer for its values,
never to call its I/O, and does none itself. `io_violations` reads every name a view module
uses, resolved through its imports: of ``memfs.disk``, only those in `VIEW_USES_OF_DISK`
(values a plan or a read is made of, constants, pure helpers) and, never called, those in
`VIEW_NAMES_OF_DISK`; no call of ``os`` but its pure helpers, of a module that is all I/O
(`IO_MODULES`), of ``open``, ``print`` or ``input``, or of a pathlib method that reads or
writes the disk (`PATH_IO`; the names other objects share, `PATH_IO_ON_PATHS`, only on a
``Path(...)``). It reads names, not types: a disk object's method called through a value
(a Stage's) is beyond it, and so is a function the view is given (a project's
``read_body``, which its owner supplies).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memfs"
LAYERS = ("rules", "disk", "view", "adapter", "app")  # lowest first
FUSE_FROM = LAYERS.index("adapter")  # the lowest layer that may import pyfuse3 or trio
MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 500

# What view/ may use of memfs.disk, by module: the dataclasses a plan's steps and a read's
# results are made of (making one does no I/O), types, constants and pure helpers. Anything
# else of the disk layer is I/O, which the view asks for through plans and takes the
# results of (sources.Scan, state.Saved, roots.Listing, ...), never calls.
VIEW_USES_OF_DISK = {
    "baselines": {"Folder", "OwnFolder", "kept_root"},
    "config": {"CODEX", "GEMINI", "GOOSE", "Config"},
    "index_save": {
        "FromBytes", "FromFile", "FromStage", "ReadIndex", "RestoreHidden", "SaveIndex",
        "Written",
    },
    "journal": {"Change"},
    "roots": {"Listing", "Reals"},
    "sources": {
        "BodyRead", "FileStat", "NAME_MAX", "NOT_READ", "STAGE_PREFIX", "Scan", "split",
        "valid_name",
    },
    "staging": {"FILE_MODE", "Keep", "Place", "RENAME_NOREPLACE", "Times"},
    "state": {"SaveWhiteouts", "Saved"},
    "steps": {
        "Applied", "Commit", "CopyUp", "KeepStage", "MakeDir", "MakeStage", "RemoveDir",
        "Rename", "SetAttrs", "Source", "Step", "Unlink", "Where",
    },
}  # fmt: skip
# Named by view/, never called there: a type whose making does I/O (a Stage opens its
# file), and the plan's one worker call, handed to the adapter (`writes.Plan.application`).
VIEW_NAMES_OF_DISK = {"staging": {"Stage"}, "steps": {"apply"}}
# os's helpers that touch nothing: names and paths as values.
OS_PURE = {
    "os.fsencode", "os.fsdecode", "os.fspath", "os.strerror", "os.path.join",
    "os.path.basename", "os.path.dirname", "os.path.split", "os.path.splitext",
    "os.path.normpath", "os.path.isabs",
}  # fmt: skip
IO_MODULES = {
    "io", "shutil", "subprocess", "tempfile", "glob", "fcntl", "mmap", "socket", "sqlite3",
    "ctypes", "select",
}  # fmt: skip
IO_BUILTINS = {"open", "print", "input"}
NOT_ALLOWED = "disk I/O, or a disk name VIEW_USES_OF_DISK does not list"
# pathlib's methods that read or write the disk, whatever they are called on ...
PATH_IO = {
    "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob",
    "stat", "lstat", "exists", "is_file", "is_symlink", "is_mount", "resolve", "readlink",
    "touch", "samefile", "owner", "symlink_to", "hardlink_to", "lchmod", "expanduser",
    "absolute", "cwd", "home", "walk",
}  # fmt: skip
# ... and those other objects share (Planner.rename, Tree.is_dir, str.replace): on a
# ``Path(...)`` only.
PATH_IO_ON_PATHS = {"open", "mkdir", "rmdir", "unlink", "rename", "replace", "chmod", "is_dir"}


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name under memfs, or None (memfs itself, __main__)."""
    parts = module.split(".")
    if parts[0] != "memfs" or len(parts) < 2 or parts[1] not in LAYERS:
        return None
    return LAYERS.index(parts[1])


def module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything a module imports; ``from memfs.x import y`` gives
    ``memfs.x.y`` as well, since y may be a module. memfs imports absolutely: a relative
    import is named as such, and refused."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                yield node.lineno, f"relative import of {'.' * node.level}{base}"
                continue
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def violations(root: Path = PACKAGE) -> list[str]:
    """Every import that climbs a layer or brings pyfuse3/trio below the adapter."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        own = layer_of(module)
        if own is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        told: set[int] = set()  # one finding per import statement
        for line, name in imported(tree):
            if line in told:
                continue
            top = name.split(".")[0]
            where = f"{path.relative_to(root.parent)}:{line}"
            before = len(found)
            if name.startswith("relative import"):
                found.append(f"{where}: a {name}")
            if top in ("pyfuse3", "trio") and own < FUSE_FROM:
                found.append(f"{where}: {LAYERS[own]} imports {top}")
            target = layer_of(name)
            if target is not None and target > own:
                found.append(f"{where}: {LAYERS[own]} imports {name} ({LAYERS[target]})")
            if len(found) > before:
                told.add(line)
    return found


def _bindings(tree: ast.Module) -> dict[str, str]:
    """Each name a module's imports bind, to the dotted name it stands for."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _resolved(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The dotted name an expression names through the imports (``sources.scan`` ->
    ``memfs.disk.sources.scan``); None for anything else (a local, a call's result)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolved(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _disk_name(name: str, root: Path) -> tuple[str, str] | None:
    """(module, name) of a dotted name of a disk module's member; None for any other."""
    parts = name.split(".")
    if parts[:2] != ["memfs", "disk"] or len(parts) < 4:
        return None
    return (parts[2], parts[3]) if (root / "disk" / f"{parts[2]}.py").exists() else None


def _is_path(node: ast.expr, bound: dict[str, str]) -> bool:
    """Whether ``node`` is visibly a path: ``Path(...)``, or the Path class itself."""
    target = node.func if isinstance(node, ast.Call) else node
    return _resolved(target, bound) in ("pathlib.Path", "pathlib.PurePath")


def _io_of(node: ast.AST, bound: dict[str, str], root: Path) -> str | None:
    """What makes ``node`` I/O in a view module, or None."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        found = sorted({str(n).split(".")[0] for n in names if n} & IO_MODULES)
        return f"imports {found[0]}" if found else None
    if isinstance(node, ast.Call):
        func = node.func
        name = _resolved(func, bound)
        if isinstance(func, ast.Name) and name is None and func.id in IO_BUILTINS:
            return f"calls {func.id}"
        if name is not None:
            disk = _disk_name(name, root)
            if disk is not None and disk[1] not in VIEW_USES_OF_DISK.get(disk[0], ()):
                return f"calls memfs.disk.{disk[0]}.{disk[1]}: {NOT_ALLOWED}"
            top = name.split(".")[0]
            if top == "os" and name not in OS_PURE:
                return f"calls {name}"
            if top in IO_MODULES:
                return f"calls {name}"
        if isinstance(func, ast.Attribute):
            if func.attr in PATH_IO:
                return f"calls {func.attr} (pathlib I/O)"
            if func.attr in PATH_IO_ON_PATHS and _is_path(func.value, bound):
                return f"calls Path.{func.attr}"
        return None
    if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
        name = _resolved(node, bound)
        if name in ("os.environ", "os.environb"):
            return f"reads {name}"
        disk = None if name is None else _disk_name(name, root)
        if disk is not None and not (
            disk[1] in VIEW_USES_OF_DISK.get(disk[0], ())
            or disk[1] in VIEW_NAMES_OF_DISK.get(disk[0], ())
        ):
            return f"uses memfs.disk.{disk[0]}.{disk[1]}: {NOT_ALLOWED}"
    return None


def io_violations(root: Path = PACKAGE) -> list[str]:
    """Every I/O a view module does or asks the disk layer for by calling it (see the
    module's docstring)."""
    found: set[tuple[str, int, str]] = set()
    for path in sorted((root / "view").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = _bindings(tree)
        # A call's function (``os.environ.get``, and the names it is reached through) is
        # judged with the call, not again as a name.
        called = set()
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            while isinstance(func, ast.Attribute | ast.Name):
                called.add(id(func))
                func = func.value if isinstance(func, ast.Attribute) else None
        for node in ast.walk(tree):
            if id(node) in called:
                continue
            why = _io_of(node, bound, root)
            if why is not None:
                found.add((str(path.relative_to(root.parent)), getattr(node, "lineno", 0), why))
    return [f"{where}:{line}: view {why}" for where, line, why in sorted(found)]


def sizes(root: Path = PACKAGE) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(lines, module) of every module and (lines, class) of every class, largest first."""
    modules, classes = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = module_name(path, root)
        modules.append((len(text.splitlines()), name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                end = node.end_lineno or node.lineno
                classes.append((end - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(modules, reverse=True), sorted(classes, reverse=True)


def test_every_module_lives_in_a_layer() -> None:
    loose = [
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if layer_of(module_name(p)) is None and module_name(p) not in ("memfs", "memfs.__main__")
    ]
    assert loose == [], f"modules outside the layers {LAYERS}: {loose}"


def test_layers_import_only_downwards_and_fuse_stays_in_the_adapter() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    ("layer", "line", "why"),
    [
        ("rules", "from memfs.view.project import Project", "rules imports memfs.view.project"),
        ("disk", "from memfs.adapter import fs", "disk imports memfs.adapter"),
        ("view", "import trio", "view imports trio"),
        ("rules", "import pyfuse3", "rules imports pyfuse3"),
        ("adapter", "from memfs.app.cli import main", "adapter imports memfs.app.cli"),
    ],
)
def test_an_upward_import_is_found(tmp_path: Path, layer: str, line: str, why: str) -> None:
    """The check itself: a copy of the package with one bad import injected fails it."""
    copy = tmp_path / "memfs"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    assert violations(copy) == []
    bad = copy / layer / "injected.py"
    bad.write_text(f"def late() -> None:\n    {line}\n", encoding="utf-8")
    found = violations(copy)
    assert len(found) == 1, found
    assert why in found[0], found


def test_the_view_does_no_io_and_calls_none_of_the_disk_layers() -> None:
    assert io_violations() == []


def _copy_of_package(tmp_path: Path) -> Path:
    copy = tmp_path / "memfs"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return copy


@pytest.mark.parametrize(
    ("imports", "line", "why"),
    [
        (
            "from memfs.disk import sources",
            "sources.scan(root, (), 1)",
            "calls memfs.disk.sources.scan",
        ),
        (
            "from memfs.disk.sources import scan",
            "scan(root, (), 1)",
            "calls memfs.disk.sources.scan",
        ),
        (
            "import memfs.disk.state",
            "memfs.disk.state.load_project(root, 's')",
            "calls memfs.disk.state.load_project",
        ),
        (
            "from memfs.disk import sources",
            "read = sources.read_file",
            "uses memfs.disk.sources.read_file",
        ),
        ("from memfs.disk import steps", "steps.apply([], [])", "calls memfs.disk.steps.apply"),
        ("import os", "os.stat(root)", "calls os.stat"),
        ("from os import listdir", "listdir(root)", "calls os.listdir"),
        ("import os", "os.environ.get('HOME')", "calls os.environ.get"),
        ("from pathlib import Path", "Path(root).read_text()", "calls read_text (pathlib I/O)"),
        ("from pathlib import Path", "Path(root).mkdir()", "calls Path.mkdir"),
        ("import shutil", "pass", "imports shutil"),
        ("", "open(root)", "calls open"),
    ],
)
def test_io_in_the_view_is_found(tmp_path: Path, imports: str, line: str, why: str) -> None:
    """The check itself: a copy of the package with one I/O injected in a view module
    fails it, once."""
    copy = _copy_of_package(tmp_path)
    assert io_violations(copy) == []
    bad = copy / "view" / "injected.py"
    bad.write_text(f"{imports}\n\n\ndef late(root: str) -> None:\n    {line}\n", encoding="utf-8")
    found = io_violations(copy)
    assert len(found) == 1, found
    assert why in found[0], found


def test_no_module_over_700_lines_and_no_class_over_500(
    capsys: pytest.CaptureFixture[str],
) -> None:
    modules, classes = sizes()
    with capsys.disabled():
        print(f"\nlargest modules: {modules[:3]}\nlargest classes: {classes[:3]}")
    assert [m for m in modules if m[0] > MAX_MODULE_LINES] == []
    assert [c for c in classes if c[0] > MAX_CLASS_LINES] == []
