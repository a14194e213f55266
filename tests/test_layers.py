"""The house's walls, read from the code (tier 1): layers import only downwards, pyfuse3 and
trio stay in the adapter and above, and no module or class grows past what one job needs.

The layers, lowest first, are memfs's subpackages (memfs/__init__.py says what each holds).
Every module's imports are read with `ast`, so an import inside a function or under
``if TYPE_CHECKING:`` counts as much as one at the top.
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


def test_no_module_over_700_lines_and_no_class_over_500(
    capsys: pytest.CaptureFixture[str],
) -> None:
    modules, classes = sizes()
    with capsys.disabled():
        print(f"\nlargest modules: {modules[:3]}\nlargest classes: {classes[:3]}")
    assert [m for m in modules if m[0] > MAX_MODULE_LINES] == []
    assert [c for c in classes if c[0] > MAX_CLASS_LINES] == []
