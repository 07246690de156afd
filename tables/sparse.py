"""Sparse training of embedding tables: a model whose tables and dense layers have separate optimizers, and refusals.

The tables are updated by an optimizer that touches only the rows a batch looked up (legacy tf_keras Adagrad,
SGD or FTRL, as TensorFlow's parameter-server tutorial recommends); the dense layers by the configured one
(e.g. Adam). Settings that would make table traffic dense are refused with one line: Adam-like optimizers on
tables (their dense slots decay the whole table on the ps every step: measured 80x slower) and regularizers on
tables (a full-table loss term, hence a full-table gradient).
"""

from __future__ import annotations

import functools

import tensorflow as tf
import tf_keras

from tables.dynamic.guard import GuardedRows
from tables.row_stamps import StampedRows
from tables.initializers import filled
from tables.kinds import kind_layers, table_layers
from common.errors import Problem, UserError


class StableShardedSlots:
    """Gives a split table's slot (e.g. its Adagrad accumulator) one Python object for the optimizer's lifetime.

    A legacy optimizer keeps slots per shard and `get_slot(table, name)` wraps them in a new ShardedVariable at
    every call. A checkpoint lists slots through `get_slot` and restores them through another call, so the
    object restored was never the object listed: `assert_existing_objects_matched` refused every restore of a
    split table with a slotted optimizer ("1 Python objects that were not bound"), which is why dlrm and
    wide_deep could not resume. Returning the same wrapper each time makes the listed object the restored one.
    """

    def get_slot(self, var, slot_name):
        slot = super().get_slot(var, slot_name)
        if not isinstance(slot, tf.__internal__.distribute.ShardedVariable):
            return slot
        made = self.__dict__.setdefault("_sharded_slot_wrappers", {})
        key = (id(var), slot_name)
        if key not in made or [v.ref() for v in made[key][1].variables] != [v.ref() for v in slot.variables]:
            made[key] = (var, slot)  # the variable is kept too, so its id cannot be reused while cached
        return made[key][1]


class LeanAdagrad(StampedRows, GuardedRows, StableShardedSlots, tf_keras.optimizers.legacy.Adagrad):
    """Legacy Adagrad whose accumulators are filled in one graph on their ps: the eager constant initializer made
    a full-size temporary beside each accumulator, doubling a ps's memory peak while the slots were created."""

    def _create_slots(self, var_list):
        for var in var_list:
            self.add_slot(var, "accumulator", functools.partial(filled, value=self._initial_accumulator_value))


class StableSGD(StampedRows, GuardedRows, StableShardedSlots, tf_keras.optimizers.legacy.SGD):
    """Legacy SGD (a momentum slot when momentum is set) with one slot object per split table."""


class StableFtrl(StampedRows, GuardedRows, StableShardedSlots, tf_keras.optimizers.legacy.Ftrl):
    """Legacy FTRL (accumulator and linear slots) with one slot object per split table."""


SPARSE_OPTIMIZERS = {"adagrad": LeanAdagrad, "sgd": StableSGD, "ftrl": StableFtrl}
DENSE_SLOT_OPTIMIZERS = ("adam", "adamw", "adamax", "nadam", "rmsprop", "adadelta", "lion")


def make_embedding_optimizer(name: str, learning_rate: float, field: str = "training.embedding_optimizer"):
    """The tables' optimizer; one that would update every row each step is refused with a fix."""
    if name in DENSE_SLOT_OPTIMIZERS:
        raise UserError(Problem(field, name, "updates every row of a table on each step (its slots are dense), so "
                                "a step costs the whole table, not the looked-up rows",
                                f"use one of {', '.join(SPARSE_OPTIMIZERS)} for tables (the dense layers keep "
                                "training.optimizer)"))
    if name not in SPARSE_OPTIMIZERS:
        raise UserError(Problem(field, name, "unknown table optimizer", f"use one of {', '.join(SPARSE_OPTIMIZERS)}"))
    return SPARSE_OPTIMIZERS[name](learning_rate=learning_rate)


def check_tables_sparse(model: tf_keras.Model) -> None:
    """Refuses a regularizer on any table: its loss term spans the whole table, so its gradient is dense."""
    problems = []
    for layer in table_layers(model):
        regularizer = getattr(layer, "embeddings_regularizer", None) or getattr(layer, "regularizer", None)
        if regularizer is not None:
            problems.append(Problem(f"model layer {layer.name}", type(regularizer).__name__,
                                    "regularizes a whole embedding table: its gradient becomes dense and every "
                                    "step moves and updates the full table",
                                    "remove the regularizer from the table (regularize the dense layers, or use "
                                    "the ftrl table optimizer's l2_regularization_strength, which is applied "
                                    "only to looked-up rows)"))
    if problems:
        raise UserError(problems)


class SparseDenseModel(tf_keras.Model):
    """A functional model trained with two optimizers: `embedding_optimizer` for tables, `optimizer` for the rest.

    `embedding_optimizer` is an attribute, so the model's checkpoint holds its slots and step (under
    `model/embedding_optimizer`); the compiled `optimizer` is saved beside the model as usual.
    """

    def __init__(self, *args, embedding_optimizer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.embedding_optimizer = embedding_optimizer

    def split_variables(self) -> tuple[list, list]:
        """(table variables, dense variables): split variables are listed as their shards."""
        tables = [v for layer in table_layers(self) for v in layer.trainable_weights]
        table_refs = {v.ref() for v in tables}
        return tables, [v for v in self.trainable_weights if v.ref() not in table_refs]

    def build_optimizers(self) -> None:
        """Creates both optimizers' slots now, so a restore fills them instead of being deferred."""
        tables, dense = self.split_variables()
        self.embedding_optimizer._create_all_weights(tables)
        self.optimizer.build(dense)
        for layer, kind in kind_layers(self):
            kind.bind(layer, self.embedding_optimizer)

    def train_step(self, data):
        x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
        tables, dense = self.split_variables()
        with tf.GradientTape() as tape:
            predictions = self(x, training=True)
            loss = self.compute_loss(x, y, predictions, sample_weight)
        gradients = tape.gradient(loss, tables + dense)
        self.embedding_optimizer.apply_gradients(zip(gradients[:len(tables)], tables, strict=True))
        self.optimizer.apply_gradients(zip(gradients[len(tables):], dense, strict=True))
        return self.compute_metrics(x, y, predictions, sample_weight)
