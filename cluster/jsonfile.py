"""cluster.json as a strict JSON document: UTF-8 (a byte-order mark is fine), no NaN, no repeated keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common.errors import Problem, UserError


def read_document(path: Path) -> Any:
    """The decoded document, or a UserError with one line saying what is wrong with the file."""
    return _decode(_read_text(path), path)


def _read_text(path: Path) -> str:
    """The file as text: UTF-8, with or without a byte-order mark."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(Problem("file", str(path), f"cannot be read ({error.strerror})",
                                "pass --cluster with the path of an existing cluster.json")) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(Problem(f"byte {error.start}", data[error.start:error.start + 4], "is not UTF-8 text",
                                "save the file as UTF-8 (JSON files must be UTF-8)"), source=str(path)) from None


def _decode(text: str, path: Path) -> Any:
    if not text.strip():
        raise UserError(Problem("content", text, "the file is empty", "start from the shipped cluster.json"),
                        source=str(path))
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_repeated_keys)
    except json.JSONDecodeError as error:
        raise UserError(Problem(f"line {error.lineno} column {error.colno}", error.msg, "invalid JSON",
                                "fix the JSON syntax there (a trailing comma or a missing quote?)"),
                        source=str(path)) from None
    except (ValueError, RecursionError) as error:  # the constants and keys refused below, 4300-digit numbers, nesting
        raise UserError(Problem("content", str(error)[:200], "is not plain JSON",
                                "write plain JSON: no NaN or Infinity, no repeated keys, ordinary numbers"),
                        source=str(path)) from None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"key {repeated[0]!r} appears twice in one object, and JSON keeps only the last")
    return dict(pairs)
