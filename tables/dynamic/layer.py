"""DynamicTables: an embedding layer whose rows are given to ids as they come, with no hashing into buckets.

Ids are 64-bit values keyed by feature and value (the data's hashing, no modulo). The rows (`capacity` in all)
are one variable, split by the strategy's partitioner into shards spread evenly over the ps; each shard is a
partition (tables/dynamic/partition.py) whose index, bookkeeping and lock live on the shard's ps, and an
id belongs to the partition a mixing hash of it names. A training lookup admits new ids (at their `admit_after`th
sighting) into free rows; until then, and when the partition is full, an id reads and trains its feature's
shared row. Training lookups sweep every `expire_after_steps // SWEEPS_PER_EXPIRY` steps (or every eighth of
`expire_after_s` seconds): rows not looked up for that long are freed (tables/dynamic/expiry.py).

The rows and their optimizer slots are saved by the layer's `state` in a form that does not depend on the
partitioning (tables/dynamic/checkpoint.py), so they are deliberately not Keras weights of the checkpoint:
the layer lists them as trainable weights (for gradients) without tracking them.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf
import tf_keras

from tables.dynamic.checkpoint import TableState
from tables.dynamic.guard import gather_carrying
from tables.dynamic.mixing import partition_of
from tables.dynamic.partition import Partition
from tables.dynamic.rows_io import row_reader
from cluster.dynamic_table_options import DEFAULT_ADMIT_WINDOW_STEPS as DEFAULT_WINDOW
from tables.initializers import filled, uniform_table


@tf.custom_gradient
def gather_summing_gradients(params: tf.Tensor, indices: tf.Tensor):
    """tf.gather whose gradient is summed per row of `params` at once (dense), where tf.gather hands one slice per
    index down the graph, to be split and summed again at every concat on the way to the ps."""
    def gradient(upstream):
        return tf.math.unsorted_segment_sum(upstream, indices, tf.shape(params, out_type=indices.dtype)[0]), None

    return tf.gather(params, indices), gradient


class _Rows:
    """Holds the rows variable and the partitions out of Keras' and the checkpoint's sight (a plain object)."""

    def __init__(self, variable, partitions):
        self.variable, self.partitions = variable, partitions


class DynamicTables(tf_keras.layers.Layer):
    """Rows of width `dim` for int64 ids [batch, features] -> [batch, features, dim] (split into a list along the
    last axis when `splits` is given, e.g. (1, 16): wide_deep's weights and embeddings from one row)."""

    skips_padding = True  # takes `present` (tables/pooling.py): padding is no id and takes no row

    def __init__(self, capacity: int, dim: int, *, admit_after: int = 1, admit_window_steps: int = DEFAULT_WINDOW,
                 halve_by_load: bool = True, expire_after_steps: int = 0, expire_after_s: float = 0.0,
                 deduplicate: bool = True, splits=None, **kwargs):
        super().__init__(**kwargs)
        self.capacity, self.dim, self.admit_after = int(capacity), int(dim), int(admit_after)
        self.admit_window_steps, self.halve_by_load = int(admit_window_steps), bool(halve_by_load)
        self.expire_after_steps, self.expire_after_s = int(expire_after_steps), float(expire_after_s)
        self.deduplicate = deduplicate
        self.splits = tuple(int(s) for s in splits) if splits else None
        self._optimizer = None

    def build(self, input_shape):
        self.features = int(input_shape[-1])
        self.shared = self.add_weight(name="shared", shape=(self.features, self.dim), dtype=tf.float32,
                                      initializer=uniform_table)
        # rows start at zero: each gets its random initial vector when it is given to an id
        variable = tf.Variable(initial_value=functools.partial(filled, (self.capacity, self.dim), tf.float32, 0.0),
                               shape=(self.capacity, self.dim), dtype=tf.float32, name="rows")
        shards = list(getattr(variable, "variables", [variable]))
        self._rows = _Rows(variable, [Partition(shard, admit_after=self.admit_after,
                                                admit_window_steps=self.admit_window_steps,
                                                halve_by_load=self.halve_by_load,
                                                expire_after_steps=self.expire_after_steps,
                                                expire_after_s=self.expire_after_s) for shard in shards])
        self._trainable_weights.extend(shards)
        self.state = TableState(self)
        super().build(input_shape)

    @property
    def partitions(self) -> list[Partition]:
        return self._rows.partitions

    @property
    def rows_variable(self):
        """The rows: one variable, or a ShardedVariable of one shard per partition."""
        return self._rows.variable

    def bind_optimizer(self, optimizer) -> None:
        """The table optimizer (its slots already made): new rows get its slots' initial values, the checkpoint
        saves the slots of every held row, and its step counts steps for expiry."""
        if not hasattr(optimizer, "guard"):
            raise ValueError(f"{self.name}: the table optimizer must apply updates only to rows still their ids' "
                             "(tables.sparse.make_embedding_optimizer makes one)")
        self._optimizer = optimizer
        for partition in self.partitions:
            slots = {name: optimizer.get_slot(partition.shard, name) for name in optimizer.get_slot_names()}
            partition.bind(slots, {name: slot[0].numpy() for name, slot in slots.items()})
            optimizer.guard(partition.shard, partition)

    def call(self, ids, training=None, present=None):
        """Rows for `ids`; where `present` (bool, ids' shape) is False the position is padding: it is not looked
        up (nor admitted, nor stamped) and reads zeros."""
        flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
        features = tf.tile(tf.range(self.features), tf.shape(ids)[:1])
        if present is None:
            vectors = self._vectors(flat, features, training)
        else:
            real = tf.where(tf.reshape(present, [-1]))[:, 0]
            vectors = tf.scatter_nd(real[:, tf.newaxis], self._vectors(tf.gather(flat, real), tf.gather(
                features, real), training), tf.stack([tf.size(flat, out_type=tf.int64), self.dim]))
        vectors = tf.reshape(vectors, tf.concat([tf.shape(ids), [self.dim]], axis=0))
        vectors.set_shape(ids.shape.concatenate([self.dim]))
        return tf.split(vectors, self.splits, axis=-1) if self.splits else vectors

    def _vectors(self, flat, features, training) -> tf.Tensor:
        """[n, dim]: the row of each id of `flat` (of feature `features`), or its feature's shared row."""
        unique, positions, sightings = tf.unique_with_counts(flat)
        parts = partition_of(unique, len(self.partitions))
        chosen = tf.dynamic_partition(tf.range(tf.size(unique)), parts, len(self.partitions))
        units = tf.size(unique) if self.deduplicate else tf.size(flat)  # a unit moves its row once
        held, vectors = [], []
        for number, (partition, picked) in enumerate(zip(self.partitions, chosen, strict=True)):
            picked_ids = tf.gather(unique, picked)
            if training:
                rows, generations = partition.train_lookup(picked_ids, tf.gather(sightings, picked), self._step())
            else:
                rows, generations = partition.lookup(picked_ids), None
            wanted, slots = (tf.cast(picked, tf.int64), None) if self.deduplicate else self._occurrences(
                picked, tf.equal(tf.gather(parts, positions), number), positions, tf.size(unique))
            with tf.device(partition.device):  # on the ps: only held rows, and which units they serve, come back
                wanted_rows = rows if slots is None else tf.gather(rows, slots)
                with_row = tf.where(wanted_rows >= 0)[:, 0]
                found = tf.gather(wanted_rows, with_row)
                if generations is None:
                    vectors.append(tf.gather(partition.shard, found))
                else:  # its update carries the rows' generations: it lands only in rows still their ids'
                    wanted_generations = generations if slots is None else tf.gather(generations, slots)
                    vectors.append(gather_carrying(partition.shard, found, tf.gather(wanted_generations, with_row)))
            held.append(tf.gather(wanted, with_row))
        unit_of_occurrence = positions if self.deduplicate else tf.range(tf.size(flat))
        return self._per_occurrence(tf.concat(held, 0), tf.concat(vectors, 0), units, unit_of_occurrence, features)

    @staticmethod
    def _occurrences(picked, mine, positions, unique_count):
        """Without de-duplication: this partition's occurrences, and each one's place among `picked` (the
        partition's distinct ids), so that a row moves once per use."""
        occurrences = tf.where(mine)[:, 0]
        slot_of_unique = tf.scatter_nd(picked[:, tf.newaxis], tf.range(tf.size(picked)), tf.reshape(unique_count, [1]))
        return occurrences, tf.gather(slot_of_unique, tf.gather(positions, occurrences))

    def _per_occurrence(self, held, vectors, units, unit_of_occurrence, features) -> tf.Tensor:
        """Row vectors per occurrence, in one gather from the held rows followed by each feature's shared row:
        an occurrence of a unit with a row reads it, one of a unit without reads its feature's shared row."""
        slot_of_unit = tf.scatter_nd(held[:, tf.newaxis], tf.range(1, tf.size(held, out_type=tf.int64) + 1),
                                     tf.reshape(tf.cast(units, tf.int64), [1])) - 1
        slot = tf.gather(slot_of_unit, unit_of_occurrence)  # -1: no row
        shared_slot = tf.size(held, out_type=tf.int64) + tf.cast(features, tf.int64)
        return gather_summing_gradients(tf.concat([vectors, self.shared], 0), tf.where(slot >= 0, slot, shared_slot))

    def _step(self):
        """The table optimizer's step counter (the variable: each partition reads it on its own ps)."""
        if self._optimizer is None:
            raise ValueError(f"{self.name}: a training lookup needs the table optimizer: call "
                             "bind_optimizer(optimizer) after creating its slots (SparseDenseModel does)")
        return self._optimizer.iterations

    @tf.function
    def stats(self):
        """Per partition: [rows, rows in use, ids held, admitted, expired, turned away] (int64)."""
        return tf.stack([partition.stats() for partition in self.partitions])

    def locate(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """For int64 ids (a vector): each one's partition and row in it (-1: none), by an inference lookup."""
        ids = tf.constant(ids, tf.int64)
        parts = partition_of(ids, len(self.partitions)).numpy()
        rows = np.full(len(parts), -1, np.int64)
        for number, partition in enumerate(self.partitions):
            mine = np.flatnonzero(parts == number)
            rows[mine] = partition.lookup(tf.gather(ids, mine)).numpy()
        return parts, rows

    def snapshot(self) -> dict[str, np.ndarray]:
        """Every held id (sorted) with its row vector, optimizer slot rows and last step: `ids`, `vectors`,
        `slot-<name>`, `last_seen` (what an exported model holds, and what a restore must give back); the id index
        must point each held id at its row and hold nothing else. Read whole: for tests and small tables."""
        names = ["ids", "last_seen", "vectors", *(f"slot-{name}" for name in self.partitions[0].slots)]
        held_rows = []
        for partition in self.partitions:  # read by the checkpoint's reader: what a restore must give back
            held, *fields = (field.numpy() for field in row_reader(partition)(0, partition.rows))
            held_rows.append([field[held] for field in fields])
            indexed = partition.lookup(tf.constant(held_rows[-1][0], tf.int64)).numpy()
            if not np.array_equal(indexed, np.flatnonzero(held)) or int(partition.index.size()) != int(held.sum()):
                raise AssertionError(f"{self.name}: the id index of {partition.device} disagrees with its rows")
        arrays = {name: np.concatenate([part[number] for part in held_rows]) for number, name in enumerate(names)}
        order = np.argsort(arrays["ids"], kind="stable")
        return {name: array[order] for name, array in arrays.items()}

    def get_config(self):
        return {**super().get_config(), "capacity": self.capacity, "dim": self.dim, "admit_after": self.admit_after,
                "admit_window_steps": self.admit_window_steps, "halve_by_load": self.halve_by_load,
                "expire_after_steps": self.expire_after_steps, "expire_after_s": self.expire_after_s,
                "deduplicate": self.deduplicate,
                "splits": list(self.splits) if self.splits else None}
