"""What a dynamic table costs on a ps beside its rows and optimizer slots: the one account that the capacity plan
(tables/memory.py), the per-ps report (Partition.nbytes, tables/shard_report.py) and
docs/dynamic-embeddings.md give.

Per row of capacity: its bookkeeping (owner id 8 bytes, generation 4, last step 8, a place in the queue of free rows
4) and, with `admit_after` above 1, the admission sketch's share (4 int32 cells per column, the sketch as wide as
the partition's rows, at least 4,096 columns). Per held id: its entry in the id -> row index, a TensorFlow
MutableHashTable in the ps's heap that no variable shows. INDEX_BYTES_PER_ID was measured (bench/tables/index_bytes.py:
the resident memory of one process inserting random int64 ids; TF 2.21, 2-core AMD EPYC, 2026-11-27): 43.7, 46.3,
43.2, 43.2 and 43.6 bytes per id at 1.0, 1.6, 2.1, 4.2 and 8.4 million ids (a node per id and a bucket array that
doubles when it fills), so 48 covers it just after a doubling. Pure arithmetic (the launcher reads it without
TensorFlow): the sketch's shape is defined here, and sketch.py takes it.
"""

from __future__ import annotations

INDEX_BYTES_PER_ID = 48
BOOKKEEPING_BYTES_PER_ROW = 8 + 4 + 8 + 4  # owner id, generation, last step, free queue
DEPTH, MIN_WIDTH, BYTES_PER_CELL = 4, 4096, 4  # the admission sketch's shape (sketch.py): int32 cells, 4 rows
SKETCH_BYTES_PER_COLUMN = DEPTH * BYTES_PER_CELL
PARTITION_BYTES = 256  # a partition's counters, queue ends, sweep clock and sketch window (at most)


def width_for(rows: int) -> int:
    """The admission sketch's width for a partition of `rows` rows."""
    return max(MIN_WIDTH, rows)


def sketch_bytes(rows: int, admit_after: int) -> int:
    """The admission sketch of a partition of `rows` rows (none at admit_after 1)."""
    return width_for(rows) * SKETCH_BYTES_PER_COLUMN if admit_after > 1 else 0


def bookkeeping_bytes(rows: int, admit_after: int) -> int:
    """A partition's bookkeeping variables and sketch: what its variables hold beside rows and slots."""
    return rows * BOOKKEEPING_BYTES_PER_ROW + sketch_bytes(rows, admit_after) + PARTITION_BYTES


def index_bytes(ids: int) -> int:
    """The id -> row index holding `ids` ids."""
    return ids * INDEX_BYTES_PER_ID
