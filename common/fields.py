"""Settings sections as frozen dataclasses: each field checked by a predicate with its own problem and fix."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple

from common.errors import Problem, UserError


INT32_MAX = 2**31 - 1  # TensorFlow keeps sizes, steps and counts in int32 or int64; beyond this they overflow
MAX_SECONDS = 10_000_000  # about 116 days; time.sleep and subprocess timeouts overflow on far larger values


class Check(NamedTuple):
    """Accepts a value, or says what it must be and how to fix it."""

    accepts: Callable[[Any], bool]
    problem: str
    fix: str


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a finite float (JSON text may hold NaN or Infinity, or 1e999, which Python reads as inf)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive_int(value: Any) -> bool:
    return is_int(value) and 0 < value <= INT32_MAX


def int_in(low: int, high: int) -> Callable[[Any], bool]:
    return lambda value: is_int(value) and low <= value <= high


def seconds(value: Any) -> bool:
    """A positive duration that sleeps and timeouts accept."""
    return is_number(value) and 0 < value <= MAX_SECONDS


def optional_positive_int(value: Any) -> bool:
    return value is None or positive_int(value)


def positive_number(value: Any) -> bool:
    return is_number(value) and value > 0


def seconds_check(example: str) -> Check:
    return Check(seconds, f"must be a positive number of seconds, at most {MAX_SECONDS}", f"use e.g. {example}")


def field_help(cls) -> str:
    """One docstring `Args:` line per field (from its `help` metadata), for --help."""
    return "\n".join(f"  {f.name}: {f.metadata.get('help', '')}" for f in dataclasses.fields(cls))


def parse_section(cls, raw: Mapping[str, Any], checks: Mapping[str, Check], field_prefix: str,
                  problems: list[Problem]):
    """Builds `cls` from `raw`; unknown keys and failed checks go to `problems` and those fields keep defaults."""
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in raw.items():
        if key not in names:
            problems.append(Problem(f"{field_prefix}{key}", value, "unknown setting",
                                    f"use one of: {', '.join(names)}"))
        elif key in checks and not checks[key].accepts(value):
            problems.append(Problem(f"{field_prefix}{key}", value, checks[key].problem, checks[key].fix))
        else:
            values[key] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


def parse_or_raise(cls, raw: Mapping[str, Any], checks: Mapping[str, Check], field_prefix: str):
    """Builds `cls` from `raw`, raising one UserError that lists every bad field."""
    problems: list[Problem] = []
    parsed = parse_section(cls, raw, checks, field_prefix, problems)
    if problems:
        raise UserError(problems)
    return parsed
