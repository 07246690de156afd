"""Criteo-format TSV files for tests: rows with known values (some fields empty), written plain or gzipped."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np

NUMERIC, CATEGORICAL = 13, 26


def rows(count: int, *, first: int = 0, seed: int = 0, empty_every: int = 5) -> list[tuple]:
    """(label, 13 ints or None, 26 hex strings or None); integer I1 is the row's number `first + i` (never
    empty), so an example can be told apart from every other one after preprocessing."""
    random = np.random.default_rng(seed + first)
    made = []
    for offset in range(count):
        number = first + offset
        ints = [number] + [None if (number + k) % empty_every == 0 else int(random.integers(-3, 1000))
                           for k in range(1, NUMERIC)]
        cats = [None if (number + k) % empty_every == 1 else f"{int(random.integers(0, 40)):08x}"
                for k in range(CATEGORICAL)]
        made.append((number % 2, ints, cats))
    return made


def line(row: tuple) -> str:
    label, ints, cats = row
    fields = [str(label), *("" if v is None else str(v) for v in ints), *("" if c is None else c for c in cats)]
    return "\t".join(fields)


def write(path: Path, written_rows: list[tuple], *, gz: bool = False,
          extra_lines: dict[int, str] | None = None) -> Path:
    """Writes rows as Criteo lines; `extra_lines` puts raw text at given 1-based line numbers (e.g. a bad row)."""
    lines = [line(r) for r in written_rows]
    for number, text in sorted((extra_lines or {}).items()):
        lines.insert(number - 1, text)
    data = ("\n".join(lines) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def expected_dense(row: tuple) -> list[float]:
    """What the reader makes of the integer features: log(1 + max(x, 0)), empty as 0."""
    return [math.log1p(max(v or 0, 0)) for v in row[1]]


def row_number(dense) -> int:
    """The row number carried by integer I1 (see `rows`)."""
    return int(round(math.expm1(float(dense[0]))))
