"""Tables behind one seam: no module outside tables/ asks which kind a table is (no import of a kind's own modules,
no isinstance on a table layer, no comparison of `embedding_kind` outside the configuration checks); every kind
gives the whole interface."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from clusterkit import ROOT
from common.layers import LAYERS

KIND_MODULES = ("tables.dynamic", "tables.hashed", "tables.fused")  # a kind's own: seen only through tables.kinds
TABLE_LAYERS = ("DynamicTables", "ServingTables", "FusedTables", "SeparateTables")
CONFIGURATION = ("cluster",)  # the options are checked per kind before any table exists
KIND_COMPARED = re.compile(r"embedding_kind\s*(==|!=|\bin\b)|(==|!=)\s*\S*embedding_kind")


def product_modules(skip: tuple[str, ...]) -> list[Path]:
    return sorted(path for layer in LAYERS if layer not in ("tables", "bench", *skip)
                  for path in (ROOT / layer).rglob("*.py") if not path.is_symlink())


def _imports(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_no_module_outside_tables_imports_a_kinds_own_modules_or_names_a_table_layer():
    found = []
    for path in product_modules(()):
        text = path.read_text()
        kinds = sorted(name for name in _imports(ast.parse(text)) if name.startswith(KIND_MODULES))
        layers = sorted(name for name in TABLE_LAYERS if re.search(rf"\b{name}\b", text))
        if kinds or layers:
            found.append(f"{path.relative_to(ROOT)}: {kinds + layers}")
    assert not found, found


def test_embedding_kind_is_compared_only_by_the_configuration_checks():
    found = [f"{path.relative_to(ROOT)}:{number}" for path in product_modules(CONFIGURATION)
             for number, line in enumerate(path.read_text().splitlines(), 1) if KIND_COMPARED.search(line)]
    assert not found, found


def test_the_checks_see_a_comparison_and_an_import_of_a_kind():
    assert KIND_COMPARED.search('if options.embedding_kind == "dynamic":')
    assert KIND_COMPARED.search('if "dynamic" != run.options.embedding_kind:')
    assert not KIND_COMPARED.search("kinds.named(options.embedding_kind)")
    assert _imports(ast.parse("from tables.dynamic.layer import DynamicTables")) == {"tables.dynamic.layer"}


def test_cluster_json_offers_the_registered_kinds():
    from cluster.dynamic_table_options import EMBEDDING_KINDS
    from tables.kinds import KINDS

    assert sorted(EMBEDDING_KINDS) == sorted(KINDS)


def test_every_kind_gives_the_whole_interface():
    from tables.kinds import KINDS
    from tables.table_kind import TableKind

    for name, kind in KINDS.items():
        assert kind.name == name and isinstance(kind, TableKind)
        assert not inspect.isabstract(type(kind)), f"{name} leaves {sorted(type(kind).__abstractmethods__)}"
