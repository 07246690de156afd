"""A dynamic table in checkpoints: the held ids with their rows, in a form that does not depend on the ps count.

Saved: every id that holds a row, its row vector, each optimizer slot's row, and the step it was last looked up,
read per partition from one listing of its index (so ids, rows and slots always agree: DeepRec #1023 saved
them from three listings and restored uninitialised slots); the counters; the admission sketches. On restore
each id goes to the partition its hash names under the current partitioning, into rows 0, 1, ... of it: the
same ps count gives the same contents, another one spreads the ids again (`sh run.sh reload` to more or
fewer ps), each id keeping its vector, slots and last step. A partition given more ids than it has rows keeps
the most recently seen (a warning says how many it left out, and they count as turned away). Rows that were
expiring are free after a restore. The sketches, whose cells belong to partitions, come back only into the same
partitioning; else they restart. The restore is made of TensorFlow ops only: TensorFlow runs it inside a
tf.function when the checkpoint's variables live on several tasks. It reads the keys and dtypes the checkpoint
holds (the layer names its path first: `expect_stored`), so a checkpoint of an earlier version restores: last
steps were int32 until they became int64.
"""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf

from coordinator.dynamic.mixing import partition_of
from coordinator.dynamic.partition import COUNTERS, TURNED_AWAY


STATE = "state"  # the layer's attribute, hence the name of the keys' parent in a checkpoint


class TableState(tf.__internal__.tracking.Trackable):
    """The checkpointed state of a DynamicTables layer (the layer's `state`)."""

    def __init__(self, layer):
        self._layer = layer
        self._stored: dict | None = None  # {key: dtype} of the checkpoint about to be restored

    def expect_stored(self, path: str) -> None:
        """Before a restore from `path`: the keys and dtypes that checkpoint holds for a table (TensorFlow restores
        the keys and dtypes `_serialize_to_tensors` gives, and an older checkpoint's last steps are int32)."""
        dtypes = tf.train.load_checkpoint(path).get_variable_to_dtype_map()
        marker = f"/{STATE}/.ATTRIBUTES/"
        self._stored = {key.rsplit(marker, 1)[1]: dtype for key, dtype in dtypes.items()
                        if marker in key and not key.endswith("VARIABLE_VALUE")} or None

    def _serialize_to_tensors(self):
        if self._stored:  # a restore: only the names and dtypes matter (no listing of the index)
            return {name: tf.zeros([0], dtype) for name, dtype in self._stored.items()}
        partitions = self._layer.partitions
        held = [partition.held() for partition in partitions]
        tensors = {"ids": tf.concat([ids for ids, *_ in held], 0),
                   "last_seen": tf.concat([seen for _, seen, *_ in held], 0),
                   "vectors": tf.concat([vectors for _, _, vectors, _ in held], 0),
                   "counters": tf.stack([p.counters.read_value() for p in partitions])}
        for name in partitions[0].slots:
            tensors[f"slot-{name}"] = tf.concat([slots[name] for *_, slots in held], 0)
        if partitions[0].sketch is not None:
            tensors["sketch"] = tf.stack([p.sketch.counts.read_value() for p in partitions])
            tensors["sketch_window"] = tf.stack([p.sketch.window.read_value() for p in partitions])
        return tensors

    def _restore_from_tensors(self, restored):
        """Graph-safe: TensorFlow runs restores inside a tf.function when variables live on several tasks."""
        self._stored = None
        partitions = self._layer.partitions
        ids = restored["ids"]
        last_seen = tf.cast(restored["last_seen"], tf.int64)  # int32 before steps became int64
        owners = partition_of(ids, len(partitions))
        counters = _counters_for(restored["counters"], len(partitions))
        slot_names = [name for name in partitions[0].slots if f"slot-{name}" in restored]
        left_out = []
        for number, partition in enumerate(partitions):
            chosen = tf.where(tf.equal(owners, number))[:, 0]
            seen = tf.gather(last_seen, chosen)
            kept = tf.minimum(tf.size(chosen), partition.rows)  # the most recently looked-up ids first
            chosen = tf.gather(chosen, tf.math.top_k(seen, k=kept).indices)
            left_out.append(tf.size(seen) - kept)
            partition.load(tf.gather(ids, chosen), tf.gather(last_seen, chosen),
                           tf.gather(restored["vectors"], chosen),
                           {name: tf.gather(restored[f"slot-{name}"], chosen) for name in slot_names},
                           counters[number] + tf.cast(tf.equal(tf.range(COUNTERS), TURNED_AWAY), tf.int64) * tf.cast(
                               left_out[-1], tf.int64))
        _restore_sketches(partitions, restored)
        dropped = tf.add_n(left_out)
        return tf.cond(dropped > 0, lambda: _warn_left_out(self._layer.name, dropped), tf.no_op)


def _warn_left_out(name: str, dropped) -> tf.Operation:
    return tf.print(f"[{name}] warning:", dropped, "held ids left out of the restore: their partitions under this ps "
                    "count have fewer rows than ids (counted as turned away; raise training.embedding_capacity)",
                    output_stream=sys.stderr)


def _counters_for(saved: tf.Tensor, partitions: int) -> tf.Tensor:
    """Each partition's counters: as saved for the same partitioning, else the totals on the first partition (a
    checkpoint from before misdirected updates were counted has 3 columns)."""
    saved = tf.pad(saved, [[0, 0], [0, COUNTERS - tf.shape(saved)[1]]])
    totals = tf.reduce_sum(saved, axis=0, keepdims=True)
    spread = tf.concat([totals, tf.zeros([partitions - 1, COUNTERS], saved.dtype)], axis=0)
    return tf.cond(tf.equal(tf.shape(saved)[0], partitions), lambda: saved, lambda: spread)


def _restore_sketches(partitions, restored) -> None:
    """The sketches as saved for the same partitioning, else cleared (partition.load cleared them; so are those
    of a checkpoint from before the sketches decayed by steps, which has `sketch_load` for `sketch_window`)."""
    if partitions[0].sketch is None or "sketch_window" not in restored:
        return
    counts, windows = restored["sketch"], restored["sketch_window"]
    width = partitions[0].sketch.counts.shape[0]
    fits = tf.reduce_all(tf.equal(tf.shape(counts), [len(partitions), width]))
    for number, partition in enumerate(partitions):
        tf.cond(fits, lambda p=partition, n=number: _load_sketch(p, counts, windows, n), tf.no_op)


def _load_sketch(partition, counts, windows, number) -> tf.Operation:
    with tf.control_dependencies([partition.sketch.counts.assign(tf.reshape(counts[number], [-1])),
                                  partition.sketch.window.assign(windows[number])]):
        return tf.no_op()


def held_difference(layer, other) -> tuple[int, float]:
    """(ids `layer` holds, the largest difference between the two layers' rows, slots and last steps for them):
    infinite when they hold different ids. After a restore over another ps count, 0 means nothing was lost."""
    mine, theirs = layer.snapshot(), other.snapshot()
    if mine.keys() != theirs.keys() or not np.array_equal(mine["ids"], theirs["ids"]):
        return len(mine["ids"]), float("inf")
    return len(mine["ids"]), max((float(np.abs(mine[name] - theirs[name]).max(initial=0.0)) for name in mine
                                  if name != "ids"), default=0.0)
