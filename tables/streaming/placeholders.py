"""Tables as placeholders: a model built inside `table_placeholders` allocates no table, so its signatures and shapes
can be traced and its table rows streamed in later (online/publish/template.py)."""

from __future__ import annotations

import contextlib

import tensorflow as tf

from tables.streaming.rows import CHUNK_BYTES, is_table


@contextlib.contextmanager
def table_placeholders(chunk_bytes: int = CHUNK_BYTES):
    """Inside: variables over a quarter of `chunk_bytes` are made `[None, ...]`, one row of zeros (no table is
    allocated); `placed` (yielded) lists them."""
    placed: list[tf.Variable] = []

    def creator(next_creator, **kwargs):
        shape = tf.TensorShape(kwargs.get("shape"))
        dtype = tf.as_dtype(kwargs.get("dtype") or tf.float32)
        if shape.rank and shape.is_fully_defined() and is_table(shape.as_list(), dtype, chunk_bytes):
            kwargs.update(initial_value=tf.zeros([1, *shape.as_list()[1:]], dtype),
                          shape=tf.TensorShape([None, *shape.as_list()[1:]]))
            variable = next_creator(**kwargs)
            placed.append(variable)
            return variable
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield placed
