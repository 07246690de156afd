"""What dynamic embedding tables hold on each ps, worked out for any ps count before the run: rows, optimizer
slots, the id index, bookkeeping and admission sketch, and the ids a step looks up and may insert.

The rows (`embedding_capacity` in all) are split over the ps as the strategy splits them (step_traffic.placed);
each row carries the table optimizer's slots (as many rows again per slot), its bookkeeping and share of the
admission sketch and, once an id holds it, one entry of the id -> row index: the bytes of each are
cluster/dynamic_table_memory.py's, the account the per-ps report and the docs give too. Each kind gives its
layers' shares (its `ps_account`); tables/kinds.py sums them per ps.
"""

from __future__ import annotations

import dataclasses

import numpy as np


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

    def __add__(self, other: "PsTables") -> "PsTables":
        return PsTables(*(mine + theirs for mine, theirs in zip(dataclasses.astuple(self), dataclasses.astuple(other),
                                                                strict=True)))


def slots_per_row(model) -> int:
    """How many slot values the table optimizer keeps per row value (Adagrad 1, FTRL 2, SGD 0)."""
    optimizer = getattr(model, "embedding_optimizer", None)
    return len(optimizer.get_slot_names()) if optimizer is not None else 0


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
