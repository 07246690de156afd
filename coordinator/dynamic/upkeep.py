"""The chief's side of dynamic tables: it sweeps them on schedule and reports their rows per ps.

Under ParameterServerStrategy a batch hook runs on the chief when steps are scheduled; the optimizer's step
counter on the ps says how many ran (read at most every CHECK_EVERY_S). Every `expire_after_steps //
SWEEPS_PER_EXPIRY` steps (or, when steps run faster than that, at the first check after) the chief sweeps
each table (coordinator/dynamic/partition.py: rows that expired at the last sweep become free, rows idle for
`expire_after_steps` expire). The report: per ps, the table's rows, rows in use, ids held, and ids admitted,
expired and turned away (the partition full) since the run began; a progress line segment
(`tables | rows 1234/2000 (ps:0 610, ps:1 624) | admitted 1300 | expired 66 | turned away 0`), the per-ps report
and summary.json's `ps_report`.
"""

from __future__ import annotations

import time

import tf_keras

from coordinator.dynamic.layer import DynamicTables
from coordinator.shard_report import ps_of

SWEEPS_PER_EXPIRY = 8
CHECK_EVERY_S = 0.5  # the step counter lives on a ps: read it at most this often
FIELDS = ("rows", "rows_in_use", "ids_held", "admitted", "expired", "turned_away")


def table_stats(layers) -> dict[str, dict[str, int]]:
    """Per ps: the FIELDS summed over the partitions of dynamic tables `layers` on it."""
    per_ps: dict[str, dict[str, int]] = {}
    for layer in layers:
        for partition, numbers in zip(layer.partitions, layer.stats().numpy(), strict=True):
            entry = per_ps.setdefault(ps_of(partition.device), dict.fromkeys(FIELDS, 0))
            for field, number in zip(FIELDS, numbers, strict=True):
                entry[field] += int(number)
    return dict(sorted(per_ps.items()))


def dynamic_layers(model) -> list[DynamicTables]:
    return [layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, DynamicTables)]


def stats_line(per_ps: dict[str, dict[str, int]]) -> str:
    """`tables | rows 1234/2000 (ps:0 610, ps:1 624) | admitted 1300 | expired 66 | turned away 0`."""
    total = {field: sum(entry[field] for entry in per_ps.values()) for field in FIELDS}
    shares = ", ".join(f"{name} {entry['rows_in_use']}" for name, entry in per_ps.items())
    return (f"tables | rows {total['rows_in_use']}/{total['rows']} ({shares}) | admitted {total['admitted']} | "
            f"expired {total['expired']} | turned away {total['turned_away']}")


class TableUpkeep(tf_keras.callbacks.Callback):
    """Sweeps the model's dynamic tables every `expire_after_steps // SWEEPS_PER_EXPIRY` steps (none when they
    never expire) and reports them."""

    def __init__(self, layers: list[DynamicTables]):
        super().__init__()
        self._supports_tf_logs = True  # batch hooks under ParameterServerStrategy; logs are never fetched here
        self.layers = layers
        expiring = [layer.expire_after_steps for layer in layers if layer.expire_after_steps]
        self.every = max(1, min(expiring) // SWEEPS_PER_EXPIRY) if expiring else 0
        self.last_sweep, self.checked_at = None, 0.0

    def on_train_batch_end(self, batch, logs=None):
        if not self.every or time.monotonic() - self.checked_at < CHECK_EVERY_S:
            return
        self.checked_at = time.monotonic()
        step = int(self.model.embedding_optimizer.iterations.numpy())
        if self.last_sweep is None or step - self.last_sweep >= self.every:
            for layer in self.layers:
                if layer.expire_after_steps:
                    layer.sweep()
            self.last_sweep = step

    def line(self) -> str:
        return stats_line(table_stats(self.layers))

    def summary(self) -> dict[str, dict[str, int]]:
        return table_stats(self.layers)


def upkeep_for(model) -> TableUpkeep | None:
    """The upkeep callback of a model with dynamic tables, else None."""
    layers = dynamic_layers(model)
    return TableUpkeep(layers) if layers else None
