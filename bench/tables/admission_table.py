"""What a dynamic table admits against its configured threshold, at one batch size, in one process (no cluster).

A table with room for every id (so none is turned away), `admit_after` N within windows of `window` steps, gets
`steps` training steps of `batch` ids each: ids seen once ever (a flood), `probes` "due" ids seen N times within
one window (they must all be admitted), and `probes` "once a window" ids seen once in each window (they never
reach N in one). For bench.tables.dynamic_drift.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tables.dynamic.layer import DynamicTables
from tables.sparse import make_embedding_optimizer

FEATURES = 2


def admission_shares(batch: int, *, admit_after: int, window: int, steps: int, probes: int,
                     halve_by_load: bool = True) -> dict[str, float]:
    capacity = 4 * batch * steps
    layer = DynamicTables(capacity, 4, admit_after=admit_after, admit_window_steps=window, halve_by_load=halve_by_load)
    layer.build(tf.TensorShape([None, FEATURES]))
    optimizer = make_embedding_optimizer("sgd", 0.01)
    optimizer._create_all_weights(layer.trainable_weights)
    layer.bind_optimizer(optimizer)
    step_fn = _step(layer, optimizer)
    due = np.arange(probes, dtype=np.int64) + 10**12  # N sightings at the first N steps of each probe's window
    once = np.arange(probes, dtype=np.int64) + 2 * 10**12  # at the first step of every window
    flood_seen = 0
    for step in range(steps):
        in_window = step % window
        wanted = [due + step // window * probes * 10] if in_window < admit_after else []
        wanted += [once] if in_window == 0 else []
        filler = batch - sum(len(w) for w in wanted)
        flood = np.arange(filler, dtype=np.int64) + 3 * 10**12 + step * batch
        flood_seen += filler
        ids = np.concatenate([*wanted, flood])
        step_fn(tf.constant(ids[: len(ids) // FEATURES * FEATURES].reshape(-1, FEATURES)))
    held = set(layer.snapshot()["ids"].tolist())
    windows = (steps + window - 1) // window
    due_all = {int(d) + w * probes * 10 for w in range(windows) for d in due
               if w * window + admit_after <= steps}
    flood_held = sum(1 for i in held if i >= 3 * 10**12)
    return {"due": len(held & due_all) / max(1, len(due_all)), "once_a_window": len(held & set(once.tolist())) / probes,
            "flood": flood_held / max(1, flood_seen)}


def _step(layer, optimizer):
    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids, training=True))
        weights = layer.trainable_weights
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))

    return step
