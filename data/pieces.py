"""Pieces of data files, the unit a worker takes when it is free: a byte range of a plain text file, or a whole file.

A plain file is cut at line starts into ranges of about `piece_bytes` (data/line_ranges.py: each line in exactly
one range, found by reading a few bytes near each cut, so cutting is cheap at any size). A gzip or TFRecord
file cannot be entered in the middle, so it is one piece, `end` -1. Pure Python: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from data.line_ranges import ByteRange, cut

WHOLE = -1  # `end` of a piece that is a whole file


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [begin, end) of the file `name` (under the data folder), or the whole file when end is WHOLE."""

    name: str
    begin: int
    end: int

    @property
    def whole(self) -> bool:
        return self.end == WHOLE


def cut_into_pieces(root: Path, name: str, size: int, piece_bytes: int) -> list[Piece]:
    """A plain text file's pieces in file order: `size` bytes in ranges of about `piece_bytes` (none when empty)."""
    if size == 0:
        return []
    count = max(1, math.ceil(size / piece_bytes))
    ranges = cut((ByteRange(str(root / name), 0, size, size),), count)
    return [Piece(name, part.begin, part.end) for parts in ranges for part in parts]


def whole_file(name: str) -> list[Piece]:
    """A gzip or TFRecord file's one piece: it cannot be entered in the middle."""
    return [Piece(name, 0, WHOLE)]
