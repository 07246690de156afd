"""The Criteo line format (tab-separated label, 13 integers, 26 hex categories), checked and counted in pure Python.

A Criteo line is tab-separated: the label (0 or 1), 13 integer features, 26 categorical features written as
hexadecimal hashes (8 characters in the published logs); any feature may be empty. Which files hold which
split is data/criteo_splits.py. A name ending in `.gz` is read as gzip. Counting the lines of an 11 GB file
would delay the start by minutes, so files above EXACT_BYTES are estimated from a sample instead.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import zlib
from pathlib import Path

from common.errors import Problem

NUMERIC_FEATURES = 13
CATEGORICAL_FEATURES = 26
FIELDS = 1 + NUMERIC_FEATURES + CATEGORICAL_FEATURES
INTEGER = re.compile(r"-?[0-9]{0,18}")  # empty allowed; 18 digits always fit an int64
HEX = re.compile(r"[0-9a-fA-F]*")
LABEL = re.compile(r"[01]")
COUNT_CHUNK_BYTES = 1 << 22
EXACT_BYTES = 64 << 20  # plain files up to this size are counted, larger ones estimated
SAMPLES, SAMPLE_BYTES = 16, 1 << 16
GZ_SAMPLE_BYTES = 4 << 20


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
            return f"integer feature I{number} is {value!r}, not an integer of at most 18 digits"
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


def lines_before(path: str, offset: int) -> int:
    """Newlines in the first `offset` bytes of a plain file (to name a line found by its byte offset)."""
    count = 0
    with open(path, "rb") as handle:
        while offset > 0 and (chunk := handle.read(min(COUNT_CHUNK_BYTES, offset))):
            count, offset = count + chunk.count(b"\n"), offset - len(chunk)
    return count


@functools.lru_cache(maxsize=None)
def _bytes_per_line(path: str, size: int) -> float:
    """Mean line length from SAMPLES windows spread over a plain file."""
    sampled, newlines = 0, 0
    with open(path, "rb") as handle:
        for k in range(SAMPLES):
            handle.seek(size * k // SAMPLES)
            window = handle.read(SAMPLE_BYTES)
            sampled, newlines = sampled + len(window), newlines + window.count(b"\n")
    return sampled / max(newlines, 1)


def lines_in_bytes(path: str, begin: int, end: int, size: int) -> tuple[int, bool]:
    """Lines beginning in bytes [begin, end) of a plain file (both line starts): counted in a file of up to
    EXACT_BYTES, else estimated from the mean line length of a sample (one second for any size)."""
    if size > EXACT_BYTES:
        return round((end - begin) / _bytes_per_line(path, size)), False
    with open(path, "rb") as handle:
        handle.seek(begin)
        data = handle.read(end - begin)
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n")), True


@functools.lru_cache(maxsize=None)
def lines_in_gz(path: str) -> tuple[int, bool]:
    """Lines of a gzipped file: counted when it is at most EXACT_BYTES / 4 compressed, else estimated from its
    first GZ_SAMPLE_BYTES: lines per compressed byte there, times the file's size."""
    size = os.path.getsize(path)
    if size <= EXACT_BYTES // 4:
        return count_lines(path), True
    inflate, newlines = zlib.decompressobj(wbits=31), 0
    with open(path, "rb") as handle:
        newlines = inflate.decompress(handle.read(GZ_SAMPLE_BYTES)).count(b"\n")
    return round(newlines * size / GZ_SAMPLE_BYTES), False


def first_line_problem(path: str) -> Problem | None:
    """The first line must parse: a file of another format fails here, naming itself, before TensorFlow starts."""
    try:
        with open_text(path) as handle:
            first = handle.readline().decode("utf-8", errors="replace").rstrip("\r\n")
    except (OSError, EOFError) as error:
        return Problem("data file", path, f"cannot be read ({error})", "copy the file again")
    problem = line_problem(first)
    if problem:
        return Problem("data file", f"{path}:1", problem, "give Criteo TSV lines (see data/criteo_splits.py), "
                       "or remove the file from training.data_dir")
    return None
