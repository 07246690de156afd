"""The folders are layers in docs/layout.md's order: no import runs upward, no import circle, no folder holds over 30 %
of the product, modules stay under 300 lines and functions under 50."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from clusterkit import ROOT
from common.layers import LAYERS  # bottom to top; a module may import from its own folder and from folders below it

MAX_MODULE_LINES = 300
MAX_FOLDER_SHARE = 0.30  # of the product's lines (every layer but bench/)
MAX_FUNCTION_LINES = 50


def modules() -> list[Path]:
    return sorted(path for layer in LAYERS for path in (ROOT / layer).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Project modules `path` imports, wherever the import statement stands (a late import counts)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                      for alias in node.names}  # a module taken from a package is that module, not the package
    return {name for name in found if name in known} - {module_name(path)}


def test_layout_page_lists_the_layers_in_order():
    page = (ROOT / "docs" / "layout.md").read_text()
    listed = [name for name in re.findall(r"^\| `(\w+)/` \|", page, re.M) if name in LAYERS]
    assert listed == list(LAYERS), f"docs/layout.md lists the layers as {listed}; common/layers.py has {LAYERS}"


def test_no_import_circle():
    paths = [path for path in modules() if not path.is_symlink()]
    known = {module_name(path) for path in paths}
    graph = {module_name(path): imported_modules(path, known) for path in paths}
    circles = sorted({" -> ".join(circle) for circle in _circles(graph)})
    assert not circles, circles


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each module that reaches itself (depth-first, bounded by the graph's size)."""
    found = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    found.append(sorted(trail))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    return found


def test_no_folder_holds_over_its_share_of_the_product():
    lines = {layer: sum(len(path.read_text().splitlines()) for path in (ROOT / layer).rglob("*.py")
                        if not path.is_symlink()) for layer in LAYERS if layer != "bench"}
    total = sum(lines.values())
    over = {layer: f"{count / total:.0%}" for layer, count in lines.items() if count > MAX_FOLDER_SHARE * total}
    assert not over, f"folders over {MAX_FOLDER_SHARE:.0%} of the product's {total} lines: {over}"


def imported_layers(path: Path) -> set[str]:
    """Top-level project folders that `path` imports from, wherever the import statement stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & set(LAYERS)
    return found


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_runs_upward(path):
    layer = path.relative_to(ROOT).parts[0]
    upward = sorted(other for other in imported_layers(path) if LAYERS.index(other) > LAYERS.index(layer))
    assert not upward, f"{path.relative_to(ROOT)} ({layer}) imports from the layers above it: {upward}"


def test_modules_and_functions_stay_short():
    long_modules, long_functions = [], []
    for path in modules():
        name = str(path.relative_to(ROOT))
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not long_modules and not long_functions, long_modules + long_functions
