"""The folders are layers: no import runs upward, modules stay under 300 lines and functions under 50."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clusterkit import ROOT

# bottom to top; a module may import from its own folder and from folders below it
LAYERS = ("common", "cluster", "data", "coordinator", "evaluator", "launcher", "roles", "bench")
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 50


def modules() -> list[Path]:
    return sorted(path for layer in LAYERS for path in (ROOT / layer).rglob("*.py"))


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
