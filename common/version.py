"""The release this checkout is: pyproject.toml's version, shown in each entry point's --help and each run's summary."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _release() -> str:
    try:
        return tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"  # a checkout without its pyproject.toml: say so rather than guess


VERSION = _release()


def titled(doc: str) -> str:
    """A --help text headed by the release, so a user can tell which one they run."""
    return f"pscluster {VERSION}: {doc}"
