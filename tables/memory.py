"""What dynamic embedding tables hold on each ps, worked out for any ps count before the run: rows, optimizer
slots, the id index, bookkeeping and admission sketch, and the ids a step looks up and may insert.

The rows (`embedding_capacity` in all) are split over the ps as the strategy splits them (step_traffic.placed);
each row carries the table optimizer's slots (as many rows again per slot), its bookkeeping and share of the
admission sketch and, once an id holds it, one entry of the id -> row index: the bytes of each are
cluster/dynamic_table_memory.py's, the account the per-ps report and the docs give too.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cluster import dynamic_table_memory as memory
from tables.dynamic.layer import DynamicTables
from tables.fused import table_layers


@dataclasses.dataclass(frozen=True)
class PsTables:
    """One ps's share of the dynamic tables at full capacity, in bytes."""

    rows: int
    row_bytes: int
    slot_bytes: int
    index_bytes: int  # the id -> row index, every row held
    bookkeeping_bytes: int  # the rows' bookkeeping and the admission sketch

    @property
    def total(self) -> int:
        return self.row_bytes + self.slot_bytes + self.index_bytes + self.bookkeeping_bytes


def dynamic_layers(model) -> list:
    return [layer for layer in table_layers(model) if isinstance(layer, DynamicTables)]


def slots_per_row(model) -> int:
    """How many slot values the table optimizer keeps per row value (Adagrad 1, FTRL 2, SGD 0)."""
    optimizer = getattr(model, "embedding_optimizer", None)
    return len(optimizer.get_slot_names()) if optimizer is not None else 0


def per_ps(model, shards_of) -> dict[int, PsTables]:
    """{ps index: PsTables} with every dynamic table full; `shards_of(variable)` gives the planned shards."""
    slots, found = slots_per_row(model), {}
    for layer in dynamic_layers(model):
        for shard in shards_of(layer.rows_variable):
            ps = int(shard.device.split("task:")[1].split("/")[0])
            rows, values = int(shard.shape[0]), int(np.prod(shard.shape))
            earlier = found.get(ps, PsTables(0, 0, 0, 0, 0))
            found[ps] = PsTables(rows=earlier.rows + rows,
                                 row_bytes=earlier.row_bytes + values * shard.dtype.size,
                                 slot_bytes=earlier.slot_bytes + slots * values * shard.dtype.size,
                                 index_bytes=earlier.index_bytes + memory.index_bytes(rows),
                                 bookkeeping_bytes=earlier.bookkeeping_bytes
                                 + memory.bookkeeping_bytes(rows, layer.admit_after))
    return found


def ids_per_step(batches: list[np.ndarray]) -> tuple[float, float, float]:
    """(ids looked up, distinct ids, ids not in any earlier sampled batch) per step, averaged over the batches;
    the last is the inserts a step makes once the tables hold what came before (the first batch counts all)."""
    seen: set[int] = set()
    lookups, distinct, new = [], [], []
    for batch in batches:
        unique = set(np.unique(batch).tolist())
        lookups.append(batch.size)
        distinct.append(len(unique))
        new.append(len(unique - seen))
        seen |= unique
    later = new[1:] or new
    return float(np.mean(lookups)), float(np.mean(distinct)), float(np.mean(later))
