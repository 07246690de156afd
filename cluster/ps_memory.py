"""What each ps holds at its peak, from the options alone: the account `sh run.sh` and `plan` hold against memory.

A recommender's tables (dlrm, wide_deep) are split evenly over the ps (tables/placement.py): hashed ones
`table_rows` rows for each categorical feature, a dynamic one `embedding_capacity` rows for all; a row holds
`embedding_dim` float32 values (wide_deep: one more, its wide part), and as many again per slot of the table
optimizer (adagrad 1, ftrl 2, sgd 0). A dynamic table's rows also carry their bookkeeping, admission sketch and id
index (cluster/dynamic_table_memory.py). Beside its share a ps holds, at its peak, the larger of what a streamed
checkpoint adds (two chunks of `stream_chunk_mb`) and a shard being created (its initial value beside it, shards
of at most MAX_SHARD_BYTES), its own buffers (gRPC's, a step's rows: 110-215 MB measured beside a 952 MB share,
docs/memory.md) and the server itself (TensorFlow loaded: 560 MB measured idle). Pure arithmetic: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math

from cluster.data_options import table_count
from cluster.recommender_options import RECOMMENDER_MODELS
from common.errors import Problem
from cluster import dynamic_table_memory as memory

MIB = 1 << 20
GIB = 1 << 30
MAX_SHARD_BYTES = 256 * MIB  # tables/placement.py's (a test checks they agree)
BUFFER_BYTES = 256 * MIB  # a ps's own buffers beyond its share and two chunks (tests/test_bounded_memory.py)
SERVER_BYTES = 600 * MIB  # a ps server at rest: Python and TensorFlow (559 MiB resident measured, TF 2.21)
SLOTS = {"adagrad": 1, "ftrl": 2, "sgd": 0}  # slot values per table value (tf_keras' legacy optimizers)
VALUE_BYTES = 4  # float32


@dataclasses.dataclass(frozen=True)
class PsPeak:
    """One ps's memory at its peak, in bytes, by part."""

    rows: int
    slots: int
    dynamic: int  # a dynamic table's bookkeeping, sketch and id index
    transient: int  # a checkpoint's two chunks, or a shard being created: the larger
    buffers: int
    server: int

    @property
    def total(self) -> int:
        return self.rows + self.slots + self.dynamic + self.transient + self.buffers + self.server

    def parts(self) -> str:
        """`rows 119.2 GiB + optimizer slots 119.2 GiB + ...` (the parts that are not zero)."""
        named = (("rows", self.rows), ("optimizer slots", self.slots), ("id index and bookkeeping", self.dynamic),
                 ("a checkpoint's chunks or a shard's creation", self.transient), ("its buffers", self.buffers),
                 ("the server", self.server))
        return " + ".join(f"{name} {gib(size)}" for name, size in named if size)


def gib(size: float) -> str:
    return f"{size / GIB:,.1f} GiB"


def table_field(options) -> str:
    """The option that sets the tables' rows: what a refusal names."""
    return "embedding_capacity" if options.embedding_kind == "dynamic" else "table_rows"


def _table_rows(options) -> int | None:
    """Every table's rows together (None: hashed tables, one per feature of a dataset function's, whose count is not
    known before it is called)."""
    if options.embedding_kind == "dynamic":
        return options.embedding_capacity
    rows = options.table_rows
    if isinstance(rows, (list, tuple)):
        return sum(rows)
    return None if ":" in options.dataset else rows * table_count(options)


def _row_values(options) -> int:
    """Values of one row of every table together: dlrm's embedding; wide_deep's embedding and wide weight (a dynamic
    wide_deep keeps both in one row, a hashed one in two tables of the same rows)."""
    return options.embedding_dim + (1 if options.model == "wide_deep" else 0)


def peak(options, ps: int) -> PsPeak | None:
    """What each of `ps` ps holds at its peak for TrainingOptions `options`; None without recommender tables, or
    when their size is not known before the model is built (a model of your own, a dataset function's features)."""
    total = _table_rows(options) if options.model in RECOMMENDER_MODELS else None
    if total is None or ps < 1:
        return None
    rows = math.ceil(total / ps)
    row_bytes = rows * _row_values(options) * VALUE_BYTES
    slots = SLOTS.get(options.embedding_optimizer, 1) * row_bytes
    dynamic = (memory.index_bytes(rows) + memory.bookkeeping_bytes(rows, options.admit_after)
               if options.embedding_kind == "dynamic" else 0)
    chunks = 2 * int(options.stream_chunk_mb * MIB)
    transient = max(chunks, min(MAX_SHARD_BYTES, row_bytes))
    return PsPeak(rows=row_bytes, slots=slots, dynamic=dynamic, transient=transient, buffers=BUFFER_BYTES,
                  server=SERVER_BYTES)


def fix(options) -> str:
    """What to change when the ps cannot hold their tables."""
    smaller = ("a smaller training.embedding_capacity" if options.embedding_kind == "dynamic"
               else "fewer training.table_rows (ids share rows modulo them)")
    return (f"use more ps on other hosts (each holds 1/N of the tables), hosts with more memory, or {smaller}"
            + ("; embedding_optimizer sgd keeps no slots" if SLOTS.get(options.embedding_optimizer) else ""))


def shortfall(options, ps: int, on_one: int, available: float, *, place: str, has: str) -> str | None:
    """Why `on_one` of the `ps` ps, `place` ("on localhost"), cannot run in `available` bytes (`has`: "localhost
    has 22.8 GiB available"), as the problem of a one-line error; None when they fit."""
    found = peak(options, ps)
    if found is None or on_one * found.total <= available:
        return None
    who = f"the {on_one} ps {place} need" if on_one > 1 else f"a ps {place} needs"
    their = "their peak (each: " if on_one > 1 else "its peak ("
    return f"{who} {gib(on_one * found.total)} at {their}{found.parts()}) and {has}"


def problem(options, why: str) -> Problem:
    """The one-line refusal of tables the ps cannot hold (`why`: a shortfall)."""
    field = table_field(options)
    return Problem(f"training.{field}", getattr(options, field), why, fix(options))
