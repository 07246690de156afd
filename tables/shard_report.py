"""Per-ps report of a recommendation model: bytes held, and rows looked up and bytes moved per step, so a hot ps shows.

Bytes held count every variable on the ps: model weights and both optimizers' slots (and a dynamic table's
bookkeeping, reported apart: `bookkeeping_bytes`; its index's own memory is measured in bench/). Per-step
figures come from a sample batch of ids: the rows each shard of each table serves (after de-duplication when
the model de-duplicates), times the row size twice (rows out, gradient rows back) plus the ids both ways, plus
every dense variable on that ps read and its gradient written back once per step. A dynamic table's rows in use
and ids admitted, expired and turned away per ps are merged in by the chief (tables/dynamic/report.py).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tables.dynamic.layer import DynamicTables
from tables.dynamic.mixing import partition_of
from tables.fused import FusedTables, hashed_rows, table_layers

ID_BYTES = 8


def ps_of(device: str) -> str:
    """`/job:ps/replica:0/task:1/device:CPU:0` -> `ps:1`; a variable with no remote device -> `local`."""
    parts = dict(p.split(":", 1) for p in device.split("/") if ":" in p)
    return f"{parts['job']}:{parts.get('task', 0)}" if "job" in parts else "local"


def _shards(variable) -> list:
    return list(getattr(variable, "variables", [variable]))


def _nbytes(variable) -> int:
    return int(np.prod(variable.shape)) * variable.dtype.size


def bytes_held(model) -> dict[str, int]:
    """Bytes of every variable (weights, both optimizers' slots) per ps."""
    held: dict[str, int] = {}
    optimizers = [model.optimizer, getattr(model, "embedding_optimizer", None)]
    variables = list(model.variables) + [v for o in optimizers if o is not None for v in o.variables()]
    seen = set()
    for variable in variables:
        for shard in _shards(variable):
            if shard.ref() not in seen:
                seen.add(shard.ref())
                held[ps_of(shard.device)] = held.get(ps_of(shard.device), 0) + _nbytes(shard)
    return held


def _table_traffic(layer, sample_ids: np.ndarray, report: dict, shards_of=_shards) -> None:
    """Adds the rows each shard of the layer's tables serves for one batch of ids [batch, tables]."""
    if isinstance(layer, DynamicTables):
        _dynamic_traffic(layer, sample_ids, report, shards_of)
        return
    rows = hashed_rows(sample_ids, layer.table_rows)
    if isinstance(layer, FusedTables):
        pairs = [(layer.table, (rows + layer.offsets).reshape(-1))]
    else:
        pairs = [(table, rows[:, k]) for k, table in enumerate(layer.tables)]
    for table, ids in pairs:
        ids = np.unique(ids) if layer.deduplicate else ids
        first = 0
        for shard in shards_of(table):
            rows = int(np.count_nonzero((ids >= first) & (ids < first + shard.shape[0])))
            first += shard.shape[0]
            entry = report.setdefault(ps_of(shard.device), {"lookups_per_step": 0, "bytes_moved_per_step": 0})
            entry["lookups_per_step"] += rows
            entry["bytes_moved_per_step"] += rows * (2 * shard.shape[1] * shard.dtype.size + 2 * ID_BYTES)


def _dynamic_traffic(layer, sample_ids: np.ndarray, report: dict, shards_of) -> None:
    """A dynamic table's rows per shard for one batch: each id is looked up on the partition its hash names (the
    index sends its row number back beside the row), and held bytes add the index's bookkeeping."""
    shards = shards_of(layer.rows_variable)
    ids = np.unique(sample_ids) if layer.deduplicate else sample_ids.reshape(-1)
    owners = partition_of(tf.constant(ids, tf.int64), len(shards)).numpy()
    for number, shard in enumerate(shards):
        rows = int(np.count_nonzero(owners == number))
        entry = report.setdefault(ps_of(shard.device), {"lookups_per_step": 0, "bytes_moved_per_step": 0})
        entry["lookups_per_step"] += rows
        entry["bytes_moved_per_step"] += rows * (2 * shard.shape[1] * shard.dtype.size + 3 * ID_BYTES)
    for partition in layer.partitions:
        entry = report.setdefault(ps_of(partition.device), {"lookups_per_step": 0, "bytes_moved_per_step": 0})
        entry["bookkeeping_bytes"] = entry.get("bookkeeping_bytes", 0) + partition.nbytes()


def shard_report(model, sample_ids: np.ndarray, shards_of=_shards) -> dict[str, dict[str, int]]:
    """Per ps: bytes held, rows looked up per step and bytes moved per step (for one sample batch of ids).

    `shards_of(variable)` lists a variable's shards (each with shape, dtype and device): by default the ones
    the strategy made; `plan` passes the shards it works out for a ps count, on a model built without a cluster.
    """
    report: dict[str, dict[str, int]] = {}
    for layer in table_layers(model):
        _table_traffic(layer, np.asarray(sample_ids, dtype=np.int64), report, shards_of)
    _, dense = model.split_variables()
    for shard in (s for variable in dense for s in shards_of(variable)):
        entry = report.setdefault(ps_of(shard.device), {"lookups_per_step": 0, "bytes_moved_per_step": 0})
        entry["bytes_moved_per_step"] += 2 * _nbytes(shard)
    for name, held in bytes_held(model).items():
        report.setdefault(name, {"lookups_per_step": 0, "bytes_moved_per_step": 0})["bytes_held"] = held
    return dict(sorted(report.items()))


def report_lines(report: dict[str, dict[str, int]]) -> list[str]:
    """One aligned line per ps, for the log and `run.sh status` (with dynamic tables, their rows on that ps)."""
    return [f"{name:>6} | held {_held(entry) / 2 ** 20:9.1f} "
            f"MiB | lookups/step {entry['lookups_per_step']:7d} | moved/step "
            f"{entry['bytes_moved_per_step'] / 2 ** 20:7.2f} MiB" + _table_segment(entry)
            for name, entry in report.items()]


def _held(entry: dict) -> int:
    """Variables, and with dynamic tables their bookkeeping, sketch and id index (cluster/dynamic_table_memory.py)."""
    return entry.get("bytes_held", 0) + entry.get("bookkeeping_bytes", 0) + entry.get("index_bytes", 0)


def _table_segment(entry: dict) -> str:
    if "rows" not in entry:
        return ""
    return (f" | table rows {entry['rows_in_use']}/{entry['rows']}, ids admitted {entry['admitted']}, expired "
            f"{entry['expired']}, turned away {entry['turned_away']}, misdirected updates dropped "
            f"{entry.get('misdirected', 0)}")
