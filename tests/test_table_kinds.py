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

KIND_MODULES = ("tables.dynamic", "tables.hashed", "tables.fused", "tables.plain")  # seen only through tables.kinds
TABLE_LAYERS = ("DynamicTables", "ServingTables", "FusedTables", "SeparateTables")
CONFIGURATION = ("cluster",)  # the options are checked per kind before any table exists
KIND_NAMES = "|".join(("hashed", "dynamic", "plain"))
KIND_COMPARED = re.compile(r"embedding_kind\s*(==|!=|\bin\b)|(==|!=)\s*\S*embedding_kind"  # a kind asked by name:
                           rf"|named\(\s*[\"'](?:{KIND_NAMES})|KINDS\[\s*[\"']|\.name\s*(==|!=)\s*[\"'](?:{KIND_NAMES})")


def product_modules(skip: tuple[str, ...]) -> list[Path]:
    found = sorted(path for layer in LAYERS if layer not in ("tables", "bench", *skip)
                   for path in (ROOT / layer).rglob("*.py") if not path.is_symlink())
    assert len(found) > 100, f"only {len(found)} modules found under {ROOT}"
    return found


def _imports(tree: ast.AST) -> set[str]:
    """Modules imported, and `package.name` for each name taken from a package (`from tables import dynamic`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
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
    assert KIND_COMPARED.search('kinds.named("dynamic").build(options)')
    assert KIND_COMPARED.search("if kind.name == 'hashed':")
    assert not KIND_COMPARED.search("kinds.named(options.embedding_kind)")
    assert "tables.dynamic.layer" in _imports(ast.parse("from tables.dynamic.layer import DynamicTables"))
    assert "tables.dynamic" in _imports(ast.parse("from tables import dynamic, kinds"))


def test_cluster_json_offers_the_registered_kinds():
    from cluster.dynamic_table_options import EMBEDDING_KINDS
    from tables.kinds import KINDS

    assert sorted(EMBEDDING_KINDS) == sorted(KINDS)


def test_cluster_json_schema_offers_the_registered_kinds():
    import json

    from tables.kinds import KINDS

    schema = json.loads((ROOT / "roles" / "cluster.schema.json").read_text())
    assert sorted(schema["properties"]["training"]["properties"]["embedding_kind"]["enum"]) == sorted(KINDS)


def test_every_kind_and_each_of_its_tables_gives_the_whole_interface():
    from tables import changed_rows, served_table
    from tables.kinds import KINDS
    from tables.plain import PlainKind
    from tables.table_kind import TableKind

    for kind in [*KINDS.values(), PlainKind()]:
        assert isinstance(kind, TableKind) and not inspect.isabstract(type(kind)), \
            f"{kind.name} leaves {sorted(type(kind).__abstractmethods__)}"
    for base in (changed_rows.TrackedTable, served_table.ServedTable):
        made = _subclasses(base)
        assert len(made) >= 2 and not [cls for cls in made if inspect.isabstract(cls)], made


def _subclasses(base) -> list:
    found, waiting = [], list(base.__subclasses__())
    while waiting:
        cls = waiting.pop()
        found.append(cls)
        waiting += cls.__subclasses__()
    return found
