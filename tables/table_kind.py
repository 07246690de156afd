"""The interface a kind of embedding table gives the rest of the toolkit (hashed.py, dynamic/kind.py; a new kind is
one module and its line in kinds.py): the layers training builds, their rows for deltas, the served form, the
memory account and the report, so that no module outside tables/ asks which kind a table is."""

from __future__ import annotations

import abc
from typing import Callable

import tf_keras

ID_BYTES = 8


def row_trip_bytes(shard, ids: int) -> int:
    """Bytes a step moves per row of `shard` it looks up: the row out and its gradient back, and `ids` int64 values
    (the id both ways, and a row number where the kind sends one back)."""
    return 2 * int(shard.shape[1]) * shard.dtype.size + ids * ID_BYTES


class TableKind(abc.ABC):
    """One kind of table: `name` is how `training.embedding_kind` names it."""

    name: str

    @abc.abstractmethod
    def build(self, options, features: int, dim: int, *, splits, name: str, serving: bool) -> tf_keras.layers.Layer:
        """The table layer of `features` categorical features and rows of width `dim` as the recommender options
        `options` set it (split along the last axis by `splits` where the kind joins parts), in its exported form
        with `serving`."""

    @abc.abstractmethod
    def layers(self, model) -> list:
        """The layers of this kind that `model` (as training or export built it) holds, nested ones too."""

    @abc.abstractmethod
    def served(self, model) -> list:
        """The ServedTables (tables/served_table.py) of this kind in `model` as export built it."""

    @abc.abstractmethod
    def track(self, layer, optimizer, strategy, clock_beside: Callable) -> list:
        """Stamps on every row of `layer` (tables/changed_rows.py; `clock_beside(variable)` is the stamp clock of
        the variable's ps); its TrackedTables, one per checkpoint key of rows."""

    @abc.abstractmethod
    def saved_layers(self) -> dict[str, type]:
        """The layer classes of this kind an exported model names, by name (what Keras' load needs)."""

    @abc.abstractmethod
    def traffic(self, layer, sample_ids, shards_of: Callable) -> list[tuple[str, int, int, int | None]]:
        """For one batch of ids [batch, features] (numpy): (device, rows looked up, bytes moved, bytes of the
        table's own bookkeeping there or None) per shard of `layer` (`shards_of(variable)` lists a variable's
        shards)."""

    def bind(self, layer, optimizer) -> None:
        """Tells `layer` the table optimizer, once its slots exist (a kind whose new rows start from the slots'
        initial values needs it)."""
        return None

    def joins_parts(self) -> bool:
        """Whether one row can hold several parts of an id (wide&deep's weight and embedding), split on lookup."""
        return False

    def report(self, layers: list):
        """What `layers` hold per ps for the progress line and summary (a TableReport of dynamic/report.py's
        form), or None when the kind has nothing to say beyond the per-ps report."""
        return None

    def ps_account(self, layer, shards_of: Callable, slots_per_row: int) -> list:
        """[(ps index, PsTables of tables/memory.py)] per shard of `layer` at full capacity, its rows split as
        `shards_of(variable)` gives; [] when cluster/ps_memory.py's account from the options covers it."""
        return []

    def earlier_form(self, checkpoint_keys) -> bool:
        """Whether a checkpoint with these keys holds a table of this kind in a form that restores but cannot be
        exported a chunk at a time (write a checkpoint first)."""
        return False

    def check_restored(self, layer, reader, keys: dict, chunk_bytes: int) -> tuple[str, float] | None:
        """(what was compared, said for the log; the largest difference) between `layer` just restored and the
        checkpoint `reader` reads, where predictions alone would not show a lost row; None when they do."""
        return None
