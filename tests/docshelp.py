"""The entry points' `--help` texts against the schema, for tests/test_docs_agree.py: every option a help text names
exists, and a help text that describes an option uses the schema's words. Pure: the entry points are imported (none
imports TensorFlow at import time) and read, never run."""

from __future__ import annotations

import ast
import dataclasses
import re

import docskit

OPTION_REFERENCE = "a reference (in parentheses) or `section.option: <the schema's description>`"


@dataclasses.dataclass(frozen=True)
class HelpText:
    """What `--help` shows for one command; `section`: the schema section its Args lines describe, if any."""

    where: str
    text: str
    section: str | None = None


def _fire_helps() -> list[HelpText]:
    from coordinator.train import train
    from evaluator.sidecar import evaluate
    from roles.launch import Launcher
    from roles.server import serve

    found = [HelpText("coordinator.train", train.__doc__, "training"), HelpText("evaluator.sidecar", evaluate.__doc__),
             HelpText("roles.server", serve.__doc__), HelpText("roles.launch", Launcher.__doc__)]
    return found + [HelpText(f"roles.launch {name}", method.__doc__ or "") for name, method in vars(Launcher).items()
                    if callable(method) and not name.startswith("_")]


def argparse_helps(source: str, where: str) -> list[HelpText]:
    """The `help=` texts of an argparse command's flags, read from its source (the module may import TensorFlow)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flag = next((arg.value for arg in node.args if isinstance(arg, ast.Constant)), "?")
            found += [HelpText(f"{where} {flag}", keyword.value.value) for keyword in node.keywords
                      if keyword.arg == "help" and isinstance(keyword.value, ast.Constant)]
    return found


def help_texts() -> list[HelpText]:
    """Every `--help` text of the commands the docs give."""
    follower = docskit.ROOT / "online" / "publish" / "follower.py"
    return _fire_helps() + argparse_helps(follower.read_text(), "online.publish.follower")


def flat(text: str) -> str:
    return " ".join(text.split())


def named_options(text: str, schema: dict) -> list[tuple[int, str, str]]:
    """(position, section, option) of every `section.option` (or `hosts.<name>.option`) the text names."""
    sections = "|".join(docskit.sections(schema))
    pattern = rf"(?<![\w./<-])({sections})\.(?:(<name>|[A-Za-z0-9_-]+)\.)?([a-z_]\w*)\b(?![.\w])"
    return [(match.start(), match[1], match[3]) for match in re.finditer(pattern, text)
            if (match[1] == "hosts") == bool(match[2]) and match[3] not in docskit.FILE_SUFFIXES]


def _depth(text: str, position: int) -> int:
    """How many parentheses are open at `position`."""
    before = text[:position]
    return before.count("(") - before.count(")")


def args_lines(docstring: str) -> dict[str, str]:
    """An `Args:` section's entries, each with its continuation lines (indented deeper) joined: {name: text}."""
    _, _, section = docstring.partition("\nArgs:\n")
    entries, name, indent = {}, None, None
    for line in section.split("\n\n")[0].splitlines():
        depth = len(line) - len(line.lstrip())
        entry = re.match(r"^\s+(\w+): (.*)$", line)
        if entry and (indent is None or depth <= indent):
            indent, (name, entries[entry[1]]) = depth, entry.groups()
        elif name:
            entries[name] += " " + line.strip()
    return {key: flat(value) for key, value in entries.items()}


def problems(helps: list[HelpText], schema: dict) -> list[str]:
    """What the help texts say about options that the schema does not: unknown options, Args entries of a section's
    options in other words than the schema's, options described in prose (not in parentheses) in other words."""
    known = {(option.section, option.name): flat(option.node.get("description", ""))
             for option in docskit.options(schema)}
    found = []
    for help_text in helps:
        text = flat(help_text.text)
        for position, section, name in named_options(text, schema):
            described = known.get((section, name))
            if described is None:
                found.append(f"{help_text.where}: names {section}.{name}, which the schema does not have")
            elif _depth(text, position) == 0 and not text[position:].split(name, 1)[1].startswith(f": {described}"):
                found.append(f"{help_text.where}: describes {section}.{name} in other words than the schema's "
                             f"({described!r}); name it as {OPTION_REFERENCE}")
        for name, said in args_lines(help_text.text).items() if help_text.section else ():
            described = known.get((help_text.section, name))
            if described is not None and said != described:
                found.append(f"{help_text.where} --{name}: {said!r}, but the schema says {described!r}")
    return found
