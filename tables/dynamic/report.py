"""What dynamic tables hold, per ps: the chief's progress-line segment, per-ps report and summary.json entry.

Per ps: the tables' rows, rows in use, ids held, and ids admitted, expired and turned away (the partition full)
since the run began, e.g. `tables | rows 1234/2000 (ps:0 610, ps:1 624) | admitted 1300 | expired 66 | turned
away 0` (the sweeps that expire rows run in the training steps: tables/dynamic/partition.py).
"""

from __future__ import annotations

from cluster import dynamic_table_memory as memory
from tables.placement import ps_of

FIELDS = ("rows", "rows_in_use", "ids_held", "admitted", "expired", "turned_away", "misdirected")


def table_stats(layers) -> dict[str, dict[str, int]]:
    """Per ps: the FIELDS summed over the partitions of dynamic tables `layers` on it, and `index_bytes`, the id
    index's memory for the ids held (cluster/dynamic_table_memory.py)."""
    per_ps: dict[str, dict[str, int]] = {}
    for layer in layers:
        for partition, numbers in zip(layer.partitions, layer.stats().numpy(), strict=True):
            entry = per_ps.setdefault(ps_of(partition.device), dict.fromkeys(FIELDS, 0))
            for field, number in zip(FIELDS, numbers, strict=True):
                entry[field] += int(number)
    for entry in per_ps.values():
        entry["index_bytes"] = memory.index_bytes(entry["ids_held"])
    return dict(sorted(per_ps.items()))


def stats_line(per_ps: dict[str, dict[str, int]]) -> str:
    """`tables | rows 1234/2000 (ps:0 610, ps:1 624) | admitted 1300 | expired 66 | turned away 0`."""
    total = {field: sum(entry[field] for entry in per_ps.values()) for field in FIELDS}
    shares = ", ".join(f"{name} {entry['rows_in_use']}" for name, entry in per_ps.items())
    return (f"tables | rows {total['rows_in_use']}/{total['rows']} ({shares}) | admitted {total['admitted']} | "
            f"expired {total['expired']} | turned away {total['turned_away']} | misdirected {total['misdirected']}")


class TableReport:
    """The rows of a model's dynamic tables, read from their ps when asked."""

    def __init__(self, layers: list):
        self.layers = layers

    def line(self) -> str:
        return stats_line(table_stats(self.layers))

    def summary(self) -> dict[str, dict[str, int]]:
        return table_stats(self.layers)
