"""The interface of one table of a model as exported (each kind's `served`, tables/table_kind.py): its weights and
their keys in a training checkpoint, the stand-in that reads only the rows a check looks up (tables/row_source.py),
and the rows a serving delta writes into it in place."""

from __future__ import annotations

import abc
import contextlib

import tensorflow as tf


class ServedTable(abc.ABC):
    """One table of an exported model."""

    @abc.abstractmethod
    def weights(self) -> list:
        """The variables that hold its rows (read a row at a time, written by deltas as rows, not whole)."""

    def training_keys(self, keys: dict) -> dict:
        """Keys in a training checkpoint of its weights that `keys` (streaming.entries' `variable_keys` of the
        model) does not give as they are, by `ref()`; None for a weight with no value there."""
        return {}

    def earlier_keys(self, reader, keys: dict) -> tuple[dict, list]:
        """For a checkpoint `reader` reads of an earlier form: (keys changed, weights read through lookups)."""
        return {}, []

    @abc.abstractmethod
    def streamed(self, placed: set) -> bool:
        """Whether a check reads it through lookups: one of its weights is among the table placeholders `placed`
        (`ref()`s)."""

    @abc.abstractmethod
    def stand_in(self, reader, keys: dict):
        """A stand-in that notes the rows lookups ask for, `fetch(chunk_bytes)`es them from the bundle `reader`
        reads (`keys`: each weight's key there), then answers with them."""

    @abc.abstractmethod
    def standing_in(self, stand_in) -> contextlib.AbstractContextManager:
        """Inside: this table's lookups go to `stand_in`."""

    def loaded(self) -> None:
        """Called once its weights were set from a bundle (a kind with something to build from them does it)."""
        return None

    @abc.abstractmethod
    def delta_key(self, keys: dict) -> str:
        """The checkpoint key that names it in a delta (delta_format.short_name of it)."""

    @abc.abstractmethod
    def delta_inputs(self, name: str) -> dict[str, tf.TensorSpec]:
        """The `apply_delta` inputs its rows come in (row_fields.field_key(name, field) each)."""

    @abc.abstractmethod
    def apply_delta(self, name: str, inputs: dict) -> list:
        """The ops writing a delta's rows of it from `inputs`."""
