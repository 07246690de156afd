"""Every command the docs give is one the project has: each `python -m MODULE` answers `--help` (run once per module,
side by side) and takes the command and flags the docs give it; each `sh SCRIPT` is a script here, given words it
knows, and each file a command names exists."""

from __future__ import annotations

import ast
import concurrent.futures
import importlib.util
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

import docskit
from clusterkit import run_python

HELP_TIMEOUT_S = 180
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:sudo\s+)?(?P<program>(?:\.venv/bin/)?python|sh)\s+(?P<words>.+)$")


def commands() -> list[tuple[str, str, list[str]]]:
    """(page, program, words) of each command a code line or span starts with (cut at ` #`, `&&`, `|`)."""
    found = []
    for page in docskit.pages():
        for code in docskit.code_texts(page.read_text()):
            for line in code.splitlines():
                for part in re.split(r"&&|\|", re.split(r"\s#", line)[0]):
                    match = COMMAND.match(part.strip())
                    if match:
                        words = [word.strip("[](),'\"") for word in match["words"].split()]
                        found.append((page.name, match["program"].rsplit("/", 1)[-1], [w for w in words if w]))
    return found


def python_modules() -> dict[str, list[tuple[str, list[str]]]]:
    """For each module run with `python -m`, the (page, words after the module) of each command giving it."""
    modules: dict[str, list[tuple[str, list[str]]]] = {}
    for page, program, words in commands():
        if program == "python" and words[:1] == ["-m"] and len(words) > 1:
            modules.setdefault(words[1], []).append((page, words[2:]))
    return modules


def source_of(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin)
    return origin.parent / "__main__.py" if origin.name == "__init__.py" else origin


def fire_target(source: Path) -> ast.AST | None:
    """The class or function the module hands to `fire.Fire(...)`, as its syntax tree."""
    tree = ast.parse(source.read_text())
    defined = {node.name: node for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Fire":
            target = node.args[0].func if isinstance(node.args[0], ast.Call) else node.args[0]
            return defined.get(getattr(target, "id", None))
    return None


def parameters(function: ast.FunctionDef) -> set[str]:
    arguments = function.args
    return {a.arg for a in arguments.args + arguments.kwonlyargs + arguments.posonlyargs} - {"self"}


def problems_of(module: str, uses: list[tuple[str, list[str]]], help_text: str) -> list[str]:
    """What the docs give `python -m module` that it does not take: a command its Fire class lacks, or a flag."""
    target, found = fire_target(source_of(module)), []
    methods = {n.name: n for n in getattr(target, "body", []) if isinstance(n, ast.FunctionDef)}
    for page, words in uses:
        flags = {word[2:].split("=")[0] for word in words if word.startswith("--")} - {"help"}
        function = target if isinstance(target, ast.FunctionDef) else None
        if isinstance(target, ast.ClassDef):
            bare = [word for word in words if re.fullmatch(r"[a-z_]+", word)]
            function = methods.get(bare[0]) if bare else None
            if bare and function is None:
                found.append(f"{page}: python -m {module} {bare[0]}: no such command")
        taken = parameters(function) if function else set()
        found += [f"{page}: python -m {module} --{flag}: no such flag" for flag in sorted(flags)
                  if flag not in taken and f"--{flag}" not in help_text]
    return found


def script_words(script: Path) -> set[str]:
    """The words a script acts on: those of its code outside comments and quoted text (an error message naming a
    word does not take it); for a script handing its arguments to pytest (or tests/lanes.py), pytest's markers
    too, and for one installing pyproject.toml's extras, their names."""
    text = script.read_text()
    code = "\n".join(line.split(" #")[0] for line in text.splitlines() if not line.lstrip().startswith("#"))
    words = set(re.findall(r"[\w-]+", re.sub(r"\"[^\"]*\"|'[^']*'", " ", code)))
    project = tomllib.loads((docskit.ROOT / "pyproject.toml").read_text())
    if re.search(r"(-m pytest|tests/lanes\.py\") \"\$@\"", text):  # pytest's arguments, directly or by lanes
        markers = project["tool"]["pytest"]["ini_options"]["markers"]
        words |= {"-m", "not", "and", "or", *(marker.split(":")[0] for marker in markers)}
    if "pyproject.toml" in text:
        words |= set(project["project"]["optional-dependencies"])
    return words


def help_of(module: str) -> subprocess.CompletedProcess:
    """`python -m module --help`, forked from the session's fork server (several modules import TensorFlow)."""
    return run_python("-m", module, "--help", cwd=docskit.ROOT, timeout_s=HELP_TIMEOUT_S)


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """`python -m MODULE --help` once for every module the docs run, one per core at a time (some import
    TensorFlow, and more at once only contend for the cores)."""
    modules = [module for module in python_modules() if source_of(module)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(modules, pool.map(help_of, modules)))


def test_the_docs_give_commands_of_every_kind():
    programs = {program for _, program, _ in commands()}
    assert programs == {"python", "sh"} and len(python_modules()) >= 5, commands()


def test_every_python_module_the_docs_run_answers_help_and_takes_what_they_give(helps):
    missing = [f"{page}: python -m {module}: no such module" for module, uses in python_modules().items()
               for page, _ in uses if source_of(module) is None]
    assert not missing, missing
    silent = {module: answer.stderr[-1000:] for module, answer in helps.items() if answer.returncode != 0}
    assert not silent, f"--help failed: {silent}"
    wrong = [problem for module, uses in python_modules().items()
             for problem in problems_of(module, uses, helps[module].stdout + helps[module].stderr)]
    assert not wrong, f"the docs give commands the project does not take: {wrong}"


def test_every_script_the_docs_run_exists_and_knows_the_words_given():
    wrong = []
    for page, program, words in commands():
        script = docskit.ROOT / words[0] if program == "sh" or words[0] != "-m" else None
        if script is None:
            continue
        if not script.is_file():
            wrong.append(f"{page}: {program} {words[0]}: no such script")
            continue
        known = script_words(script)
        for word in words[1:]:
            if "/" in word and not word.startswith(("/", "~", "$")) and not (docskit.ROOT / word).exists():
                wrong.append(f"{page}: {program} {words[0]} {word}: no such file")
            elif re.fullmatch(r"-{1,2}[a-z][\w-]*|[a-z_]+", word) and word not in known:
                wrong.append(f"{page}: {program} {words[0]} {word}: {words[0]} knows no {word}")
    assert not wrong, f"the docs give script calls the project does not take: {wrong}"
