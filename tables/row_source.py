"""Where a table layer's lookups read rows from: the table itself, or, for a check that must not hold the table, a
stand-in that serves only the rows (a dynamic table as exported: the ids) asked for (online/publish/partial.py
installs one per table)."""

from __future__ import annotations

import contextlib

import tensorflow as tf

_STAND_INS: dict = {}  # a table variable's ref() -> callable(rows) giving those rows; empty outside a check


def gather_rows(table, rows: tf.Tensor) -> tf.Tensor:
    """`tf.nn.embedding_lookup(table, rows)`, or the rows from the table's stand-in while one is installed."""
    stand_in = _STAND_INS.get(table.ref()) if _STAND_INS and hasattr(table, "ref") else None
    return tf.nn.embedding_lookup(table, rows) if stand_in is None else stand_in(rows)


@contextlib.contextmanager
def stand_ins(by_table: dict):
    """Inside: lookups of each table (by `ref()`) in `by_table` read through its callable (eager only)."""
    _STAND_INS.update(by_table)
    try:
        yield
    finally:
        for ref in by_table:
            _STAND_INS.pop(ref, None)


_ID_STAND_INS: dict = {}  # a layer's id() -> callable(ids) giving (found, vectors); empty outside a check


def id_stand_in(layer):
    """The stand-in answering `layer`'s id lookups (a dynamic table as exported), or None."""
    return _ID_STAND_INS.get(id(layer)) if _ID_STAND_INS else None


@contextlib.contextmanager
def id_stand_ins(by_layer: dict):
    """Inside: each layer (by id()) in `by_layer` looks ids up through its callable (eager only)."""
    _ID_STAND_INS.update(by_layer)
    try:
        yield
    finally:
        for key in by_layer:
            _ID_STAND_INS.pop(key, None)
