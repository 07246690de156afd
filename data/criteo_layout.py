"""The Criteo click-log layout on disk (train-*, validation-*, test-* TSV, plain or gzipped), checked in pure Python.

A Criteo line is tab-separated: the label (0 or 1), 13 integer features, 26 categorical features written as
hexadecimal hashes (8 characters in the published logs); any feature may be empty. The toolkit reads a
directory of files named by split, as for TFRecords:

    train-*        training lines (e.g. day_0 ... day_22 renamed train-00 ... train-22, or split with `split -l`)
    validation-*   validation lines (e.g. the first half of day_23)
    test-*         test lines (optional; the validation files stand in when there are none)

Any suffix is allowed; a name ending in `.gz` is read as gzip. Several training files let workers shard by file.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from common.errors import Problem, UserError

NUMERIC_FEATURES = 13
CATEGORICAL_FEATURES = 26
FIELDS = 1 + NUMERIC_FEATURES + CATEGORICAL_FEATURES
PATTERNS = {"train": "train-*", "validation": "validation-*", "test": "test-*"}
INTEGER = re.compile(r"-?[0-9]*")  # empty allowed
HEX = re.compile(r"[0-9a-fA-F]*")
LABEL = re.compile(r"[01]")
COUNT_CHUNK_BYTES = 1 << 22


def open_text(path: str | Path):
    """A Criteo file opened as binary lines, through gzip when its name ends in .gz."""
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def line_problem(line: str) -> str | None:
    """What is wrong with one Criteo line (without its newline), or None when it is well formed."""
    fields = line.split("\t")
    if len(fields) != FIELDS:
        return f"has {len(fields)} tab-separated fields, not {FIELDS} (label, 13 integers, 26 categories)"
    if not LABEL.fullmatch(fields[0]):
        return f"label {fields[0]!r} is not 0 or 1"
    for number, value in enumerate(fields[1:1 + NUMERIC_FEATURES], start=1):
        if not INTEGER.fullmatch(value):
            return f"integer feature I{number} is {value!r}, not an integer"
    for number, value in enumerate(fields[1 + NUMERIC_FEATURES:], start=1):
        if not HEX.fullmatch(value):
            return f"categorical feature C{number} is {value!r}, not hexadecimal"
    return None


def count_lines(path: str) -> int:
    """Lines in a file (a last line without a newline counts), read in chunks: no per-line Python work."""
    count, last = 0, b"\n"
    with open_text(path) as handle:
        while chunk := handle.read(COUNT_CHUNK_BYTES):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def _first_line_problem(path: str) -> Problem | None:
    """The first line must parse: a file of another format fails here, naming itself, before TensorFlow starts."""
    try:
        with open_text(path) as handle:
            first = handle.readline().decode("utf-8", errors="replace").rstrip("\r\n")
    except (OSError, EOFError) as error:
        return Problem("data file", path, f"cannot be read ({error})", "copy the file again")
    problem = line_problem(first)
    if problem:
        return Problem("data file", f"{path}:1", problem, "give Criteo TSV lines (see data/criteo_layout.py), "
                       "or remove the file from training.data_dir")
    return None


def criteo_files(root: Path) -> dict[str, tuple[str, ...]]:
    """train-* and validation-* files whose first line is a Criteo line; without test-* the test split is validation."""
    files = {split: tuple(sorted(str(p) for p in root.glob(pattern) if p.is_file()))
             for split, pattern in PATTERNS.items()}
    problems = [Problem("data folder", str(root), f"has no {PATTERNS[split]} files",
                        f"put the {split} lines there in files named like {split}-00 or {split}-00.gz")
                for split in ("train", "validation") if not files[split]]
    problems += [p for paths in files.values() for p in map(_first_line_problem, paths) if p]
    if problems:
        raise UserError(problems)
    return {**files, "test": files["test"] or files["validation"]}


def criteo_counts(files: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Lines per split (each line is one example)."""
    return {split: sum(count_lines(path) for path in paths) for split, paths in files.items()}
