"""Per-ps report of a recommendation model: bytes held, and rows looked up and bytes moved per step, so a hot ps shows.

Bytes held count every variable on the ps: model weights and both optimizers' slots (and a dynamic table's
bookkeeping, reported apart: `bookkeeping_bytes`; its index's own memory is measured in bench/). Per-step
figures come from a sample batch of ids: the rows each shard of each table serves (after de-duplication when
the model de-duplicates, as each table's kind counts them: its `traffic`), times the row size twice (rows out,
gradient rows back) plus the ids both ways, plus every dense variable on that ps read and its gradient written back
once per step. A dynamic table's rows in use
and ids admitted, expired and turned away per ps are merged in by the chief (tables/dynamic/report.py).
"""

from __future__ import annotations

import numpy as np

from tables.kinds import kind_layers
from tables.placement import ps_of


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


def add_traffic(report: dict, device: str, lookups: int = 0, moved: int = 0, bookkeeping: int | None = None) -> None:
    """Adds to the entry of `device`'s ps: rows looked up and bytes moved per step, bytes of a table's bookkeeping
    (kept apart from the variables')."""
    entry = report.setdefault(ps_of(device), {"lookups_per_step": 0, "bytes_moved_per_step": 0})
    entry["lookups_per_step"] += lookups
    entry["bytes_moved_per_step"] += moved
    if bookkeeping is not None:
        entry["bookkeeping_bytes"] = entry.get("bookkeeping_bytes", 0) + bookkeeping


def shard_report(model, sample_ids: np.ndarray, shards_of=_shards) -> dict[str, dict[str, int]]:
    """Per ps: bytes held, rows looked up per step and bytes moved per step (for one sample batch of ids).

    `shards_of(variable)` lists a variable's shards (each with shape, dtype and device): by default the ones
    the strategy made; `plan` passes the shards it works out for a ps count, on a model built without a cluster.
    """
    report: dict[str, dict[str, int]] = {}
    for layer, kind in kind_layers(model):
        for device, lookups, moved, bookkeeping in kind.traffic(layer, np.asarray(sample_ids, np.int64), shards_of):
            add_traffic(report, device, lookups, moved, bookkeeping)
    _, dense = model.split_variables()
    for shard in (s for variable in dense for s in shards_of(variable)):
        add_traffic(report, shard.device, moved=2 * _nbytes(shard))
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
