"""Python names and project files the docs give, for tests/test_docs_agree.py: `from x import y`, `import x`,
dotted names such as `models.compiled.CUSTOM_OBJECTS` and paths such as `tables/dynamic/exported.py` in
code blocks and inline code must exist. Read statically (the project's modules are parsed, never imported, so no
TensorFlow); another package's top-level module must be installed."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from pathlib import Path

import docskit
from common.layers import LAYERS

PACKAGES = LAYERS
FOLDERS = (*PACKAGES, "tests", "docs")
DOTTED = re.compile(rf"(?<![\w./<-])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+\(?([\w\s,]+?)\)?|import\s+([\w.]+)(?:\s+as\s+\w+)?)"
                    r"\s*(?:#.*)?$")
PATH = re.compile(rf"^(?:{'|'.join(FOLDERS)})/[\w./-]*$")


def module_file(dotted: str, root: Path = docskit.ROOT) -> Path | None:
    """The source of a project module or package, its folder for a namespace package, or None."""
    base = root.joinpath(*dotted.split("."))
    found = next((path for path in (base.with_suffix(".py"), base / "__init__.py") if path.is_file()), None)
    return found or (base if base.is_dir() and any(base.glob("*.py")) else None)


@functools.lru_cache(maxsize=None)
def _definitions(path: Path) -> dict[str, ast.AST]:
    return _names_in(ast.parse(path.read_text()).body)


def _names_in(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines (inside `if` and `try` blocks too): {name: the node}."""
    found = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {name.id: node for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0]: node for alias in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *(handler.body for handler in getattr(node, "handlers", []))):
                found |= _names_in(block)
    return found


def resolves(dotted: str, root: Path = docskit.ROOT) -> bool:
    """Whether a project name exists: its longest module prefix, then attributes defined there (a class's own
    attributes; a name imported from another project module, followed there)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]), root)
        if path:
            break
    else:
        return False
    scope = _definitions(path) if path.is_file() else {}
    for position, attribute in enumerate(parts[cut:], start=cut):
        node = scope.get(attribute)
        if node is None:
            return False
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                node.module.split(".")[0] in PACKAGES:
            original = next(alias.name for alias in node.names if (alias.asname or alias.name) == attribute)
            return resolves(".".join([node.module, original, *parts[position + 1:]]), root)
        if not isinstance(node, ast.ClassDef):
            return True  # a value, a function or another package's name: its attributes are not read here
        scope = _names_in(node.body)
    return True


def names_in(code: str) -> list[tuple[str, str]]:
    """(dotted name, how the docs give it) for each import and each project name in a code text."""
    found = []
    for line in code.splitlines():
        imported = IMPORT.match(line)
        if imported and imported[1]:
            found += [(f"{imported[1]}.{name.split()[0]}", line.strip()) for name in imported[2].split(",")
                      if name.strip()]
        elif imported:
            found.append((imported[3], line.strip()))
        else:
            found += [(name, name) for name in DOTTED.findall(line)]
    return found


def missing(code: str, options: set[tuple[str, str]], copied: dict[str, Path] | None = None) -> list[str]:
    """What a code text names that does not exist: a project name that does not resolve, another package not
    installed, a project path that is not there. `options` (section, name) are cluster.json settings such as
    `launcher.logs_dir`, not modules; `copied`: modules the page has you copy (`follower` -> its source)."""
    problems, copied = [], copied or {}
    for dotted, given in names_in(code):
        top, _, rest = dotted.partition(".")
        if (top, rest) in options or rest.split(".")[-1] in docskit.FILE_SUFFIXES:
            continue
        if top in copied:
            ok = not rest or resolves(f"{copied[top].stem}.{rest}", copied[top].parent)
        elif top in PACKAGES:
            ok = resolves(dotted)
        else:
            ok = importlib.util.find_spec(top) is not None
        if not ok:
            problems.append(f"{given}: {dotted} does not exist")
    spans = [code] if PATH.match(code.strip()) else []
    problems += [f"{path}: no such file or folder" for path in spans if not (docskit.ROOT / path.strip()).exists()]
    return problems


def loading_objects() -> str:
    """The custom objects the evaluator loads exports with (`from X import CUSTOM_OBJECTS` in its source)."""
    source = (docskit.ROOT / "evaluator" / "sidecar.py").read_text()
    return next(f"{node.module}.CUSTOM_OBJECTS" for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ImportFrom) and any(alias.name == "CUSTOM_OBJECTS" for alias in node.names))


def other_loading_objects(text: str) -> list[str]:
    """The custom objects a page loads exports with (`custom_objects=x.y.CUSTOM_OBJECTS`, or `from x.y import
    CUSTOM_OBJECTS`) that are not the evaluator's: a model loaded with them may lack a layer."""
    named = re.findall(r"custom_objects=((?:\w+\.)+CUSTOM_OBJECTS)", text)
    named += [f"{module}.CUSTOM_OBJECTS" for module in re.findall(r"from ([\w.]+) import [\w, ]*CUSTOM_OBJECTS", text)]
    return sorted({name for name in named if name != loading_objects()})


def copied_modules(text: str) -> dict[str, Path]:
    """Project modules a page has you copy elsewhere and import by their file's name (`online/publish/
    follower.py` -> `follower`), from the paths its inline code names."""
    paths = [span for span in docskit.code_texts(text) if PATH.match(span) and span.endswith(".py")]
    return {Path(span).stem: docskit.ROOT / span for span in paths if (docskit.ROOT / span).is_file()}


def page_problems(text: str, options: set[tuple[str, str]]) -> list[str]:
    """Everything a page's code blocks and inline code name that does not exist."""
    copied = copied_modules(text)
    return [problem for code in docskit.code_texts(text) for problem in missing(code, options, copied)]
