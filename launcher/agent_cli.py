"""The agent's command line, `COMMAND --name value ... [--flag]`, read without fire: a launcher runs the agent once
per host at every look at its tasks, and importing fire was a third of the agent's import (docs/performance.md)."""

from __future__ import annotations

import inspect
import sys


class CommandLineError(ValueError):
    pass


def call(target, argv: list[str]) -> None:
    """Runs `target`'s public method argv[0] with the options after it: `--name value`, `--name=value`, or `--name`
    alone for a bool parameter; a mistake is one line on stderr and exit 2, `--help` lists the commands."""
    if not argv or "--help" in argv or "-h" in argv:
        print(usage(target))
        return
    try:
        method, options = parse(target, argv)
    except CommandLineError as error:
        print(f"launcher.agent: {error}; `python -m launcher.agent --help` lists the commands", file=sys.stderr)
        raise SystemExit(2) from None
    method(**options)


def commands(target) -> dict:
    return {name: getattr(target, name) for name in dir(target)
            if not name.startswith("_") and callable(getattr(target, name))}


def parse(target, argv: list[str]) -> tuple:
    """The method argv[0] names and its keyword arguments (strings, True for a bool flag)."""
    method = commands(target).get(argv[0])
    if method is None:
        raise CommandLineError(f"unknown command {argv[0]!r}")
    parameters, options, rest = inspect.signature(method).parameters, {}, list(argv[1:])
    while rest:
        name, given, value = rest.pop(0).removeprefix("--").partition("=")
        parameter = parameters.get(name.replace("-", "_"))
        if parameter is None:
            raise CommandLineError(f"{argv[0]} takes no option {name!r}")
        if parameter.annotation in (bool, "bool") and not given:
            options[parameter.name] = True
            continue
        if not given and not rest:
            raise CommandLineError(f"--{name} needs a value")
        options[parameter.name] = value if given else rest.pop(0)
    missing = [p.name for p in parameters.values() if p.default is inspect.Parameter.empty and p.name not in options]
    if missing:
        raise CommandLineError(f"{argv[0]} needs --{', --'.join(missing)}")
    return method, options


def usage(target) -> str:
    lines = [f"usage: python -m launcher.agent COMMAND [--option value ...]; {inspect.getdoc(target)}", "commands:"]
    lines += [f"  {name} {' '.join(_option(p) for p in inspect.signature(method).parameters.values())}"
              for name, method in commands(target).items()]
    return "\n".join(lines)


def _option(parameter) -> str:
    shown = f"--{parameter.name}" + ("" if parameter.annotation in (bool, "bool") else f" {parameter.name.upper()}")
    return shown if parameter.default is inspect.Parameter.empty else f"[{shown}]"
