"""A dynamic table in checkpoints: the held ids with their rows, in a form that does not depend on the ps count.

Saved: every id that holds a row, its row vector, each optimizer slot's row, and the step it was last looked up,
read per partition from one listing of its index (so ids, rows and slots always agree: DeepRec #1023 saved
them from three listings and restored uninitialised slots); the counters; the admission sketches. On restore
each id goes to the partition its hash names under the current partitioning, into rows 0, 1, ... of it: the
same ps count gives the same contents, another one spreads the ids again (`sh run.sh reload` to more or
fewer ps), each id keeping its vector, slots and last step. A partition given more ids than it has rows keeps
the most recently seen (a warning says how many it left out). Rows that were expiring are free after a restore.
The sketches, whose cells belong to partitions, come back only into the same partitioning; else they restart.
"""

from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

from coordinator.dynamic.mixing import partition_of

log = logging.getLogger("pscluster")


class TableState(tf.__internal__.tracking.Trackable):
    """The checkpointed state of a DynamicTables layer (the layer's `state`)."""

    def __init__(self, layer):
        self._layer = layer

    def _serialize_to_tensors(self):
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
            tensors["sketch_load"] = tf.stack([p.sketch.load.read_value() for p in partitions])
        return tensors

    def _restore_from_tensors(self, restored):
        partitions = self._layer.partitions
        values = {name: tensor.numpy() for name, tensor in restored.items()}
        owners = partition_of(tf.constant(values["ids"], tf.int64), len(partitions)).numpy()
        counters = _counters_for(values["counters"], len(partitions))
        slot_names = [name.removeprefix("slot-") for name in values if name.startswith("slot-")]
        left_out = 0
        for number, partition in enumerate(partitions):
            chosen = np.flatnonzero(owners == number)
            if len(chosen) > partition.rows:  # the most recently looked-up ids first
                left_out += len(chosen) - partition.rows
                chosen = chosen[np.argsort(-values["last_seen"][chosen], kind="stable")[:partition.rows]]
            partition.load(values["ids"][chosen], values["last_seen"][chosen], values["vectors"][chosen],
                           {name: values[f"slot-{name}"][chosen] for name in slot_names if name in partition.slots},
                           counters[number])
        _restore_sketches(partitions, values)
        if left_out:
            log.warning("%s: %d held ids left out of the restore: their partitions under this ps count have fewer "
                        "rows than ids (raise training.embedding_capacity)", self._layer.name, left_out)
        return tf.no_op()


def _counters_for(saved: np.ndarray, partitions: int) -> np.ndarray:
    """Each partition's counters: as saved for the same partitioning, else the totals on the first partition."""
    if saved.shape[0] == partitions:
        return saved
    counters = np.zeros((partitions, saved.shape[1]), saved.dtype)
    counters[0] = saved.sum(axis=0)
    return counters


def _restore_sketches(partitions, values: dict) -> None:
    if partitions[0].sketch is None:
        return
    counts = values.get("sketch")
    if counts is None or counts.shape != (len(partitions), partitions[0].sketch.counts.shape[0]):
        for partition in partitions:
            partition.sketch.clear()
        return
    for number, partition in enumerate(partitions):
        partition.sketch.load_state(counts[number], values["sketch_load"][number])


def held_difference(layer, other) -> tuple[int, float]:
    """(ids `layer` holds, the largest difference between the two layers' rows, slots and last steps for them):
    infinite when they hold different ids. After a restore over another ps count, 0 means nothing was lost."""
    mine, theirs = layer.snapshot(), other.snapshot()
    if mine.keys() != theirs.keys() or not np.array_equal(mine["ids"], theirs["ids"]):
        return len(mine["ids"]), float("inf")
    return len(mine["ids"]), max((float(np.abs(mine[name] - theirs[name]).max(initial=0.0)) for name in mine
                                  if name != "ids"), default=0.0)
