"""A chief that drives dynamic tables on a real cluster for tests/test_dynamic_tables.py and prints its findings.

`python tests/dynamic_chief.py scenarios CHECKPOINT` (TF_CONFIG of a chief) runs each scenario on tables of
its own and writes CHECKPOINT; `... resume CHECKPOINT` is the next chief: it restores the checkpoint over the
cluster and trains on. The last stdout line is `RESULT {json}`.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import tensorflow as tf

from common.graph_style import trace_toolkit_code_as_written
from tables.dynamic.layer import DynamicTables
from tables.dynamic.mixing import partition_of
from tables.pooling import MeanPooled
from tables.placement import BalancedPartitioner
from tables.sparse import LeanAdagrad
from tables.streaming import checkpoint_io

CHIEF_CPU = "/job:chief/replica:0/task:0/device:CPU:0"
CHUNK = 64 << 10  # bytes: the 4000-row tables here go in several chunks


class Table:
    """A DynamicTables layer (features ids per example) with its Adagrad, trained by steps scheduled on workers
    (loss: the sum of the rows looked up, so every looked-up element has gradient 1)."""

    def __init__(self, strategy, coordinator, capacity: int, *, features: int = 2, dim: int = 16, **options):
        self.coordinator = coordinator
        with strategy.scope():
            self.layer = DynamicTables(capacity, dim, **options)
            self.layer.build(tf.TensorShape([None, features]))
            self.optimizer = LeanAdagrad(learning_rate=0.1)
            self.optimizer._create_all_weights(self.layer.trainable_weights)
        self.layer.bind_optimizer(self.optimizer)

        def replica_step(ids):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(self.layer(ids, training=True))
            weights = self.layer.trainable_weights
            self.optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
            return loss

        self._step = tf.function(lambda ids: strategy.run(replica_step, args=(ids,)))

    def train(self, *batches) -> None:
        """Schedules one step per batch (int64 [n, features]) back to back, then waits for them all."""
        for ids in batches:
            self.coordinator.schedule(self._step, args=(tf.constant(ids, tf.int64),))
        self.coordinator.join()

    def stats(self) -> dict:
        return self.stats_of(self.layer)

    @staticmethod
    def stats_of(layer) -> dict:
        totals = layer.stats().numpy().sum(axis=0)
        return dict(zip(("rows", "rows_in_use", "ids_held", "admitted", "expired", "turned_away", "misdirected"),
                        (int(n) for n in totals), strict=True))

    def slot_rows(self, ids) -> np.ndarray:
        """The Adagrad accumulator rows of `ids` (all must hold rows)."""
        parts, rows = self.layer.locate(ids)
        return np.stack([self.layer.partitions[p].slots["accumulator"][r].numpy() for p, r in zip(parts, rows)])


def pairs(ids: np.ndarray, features: int = 2) -> np.ndarray:
    return ids.reshape(-1, features)


def concurrency(strategy, coordinator) -> dict:
    """Two steps at once (one per worker) meet the same 4000 new ids, 15 rounds."""
    table = Table(strategy, coordinator, 200_000)
    for round_number in range(15):
        ids = pairs(np.arange(4000, dtype=np.int64) + round_number * 1_000_000)
        table.train(ids, ids)
    owners_agree, rows_distinct = True, True
    for partition in table.layer.partitions:
        ids, rows = (t.numpy() for t in partition.index.export())
        owners_agree &= bool(np.array_equal(partition.owner.numpy()[rows], ids))
        rows_distinct &= len(np.unique(rows)) == len(rows)
    return {**table.stats(), "owners_agree": owners_agree, "rows_distinct": rows_distinct, "distinct_ids": 60_000}


def admission(strategy, coordinator) -> dict:
    """admit_after 3: one id seen in three steps; its row appears at the third."""
    table = Table(strategy, coordinator, 64, admit_after=3)
    ids = np.array([[11, 12]], np.int64)
    held, reads_shared = [], []
    for _ in range(3):
        table.train(ids)
        held.append(table.stats()["ids_held"])
        out = table.layer(tf.constant(ids), training=False).numpy()[0]
        reads_shared.append(bool(np.array_equal(out, table.layer.shared.numpy())))
    return {"held": held, "reads_shared": reads_shared}


def spread(base: int, per_partition: int, partitions: int = 2) -> np.ndarray:
    """Ids from `base` up, `per_partition` of them in each partition (by the partitions' hash), as pairs."""
    candidates = np.arange(base, base + 64 * per_partition * partitions, dtype=np.int64)
    parts = partition_of(tf.constant(candidates), partitions).numpy()
    return pairs(np.concatenate([candidates[parts == p][:per_partition] for p in range(partitions)]))


def expiry(strategy, coordinator) -> dict:
    """expire_after_steps 3 (a sweep every step), 8 rows in each of 2 partitions, ids A and B 4 in each: A trained
    at steps 0-2 and B at steps 3-7 fill the table; the step 6 sweep expires A (idle since step 2) and frees its
    rows at once (into the queue of free rows); C at step 8 finds no row never used, so it takes A's rows."""
    table = Table(strategy, coordinator, 16, expire_after_steps=3)
    a, b, c = (spread(base, 4) for base in (100, 20_000, 40_000))
    for _ in range(3):
        table.train(a)
    a_parts, a_rows = table.layer.locate(a.reshape(-1))
    in_use = []
    for _ in range(5):
        table.train(b)
        in_use.append(table.stats()["rows_in_use"])
    a_after = table.layer.locate(a.reshape(-1))[1]
    table.train(c)
    c_parts, c_rows = table.layer.locate(c.reshape(-1))
    vectors = table.layer(tf.constant(c), training=False).numpy().reshape(-1)
    freed, taken = set(zip(a_parts.tolist(), a_rows.tolist())), set(zip(c_parts.tolist(), c_rows.tolist()))
    return {"a_held_after": int((a_after >= 0).sum()), "in_use_after_each_b": in_use,
            "c_took_a_rows": taken == freed and len(taken) == 8,
            "c_accumulators": np.unique(table.slot_rows(c.reshape(-1)).round(4)).tolist(),
            "c_vector_range": [float(vectors.min()), float(vectors.max())], **table.stats()}


def race(strategy, coordinator) -> dict:
    """A slowed worker: its step looks ids A up, then waits on a gate (a variable on a ps) while the other worker's
    steps expire A (expire_after_steps 2, a full table of 8 rows) and give A's rows to B; then the gate opens and
    its update for A arrives: it must land in none of B's rows, and count as misdirected."""
    table = Table(strategy, coordinator, 8, expire_after_steps=2)
    with strategy.scope():
        gate = tf.Variable(0, trainable=False, name="gate")

    def slowed(ids):
        with tf.GradientTape() as tape:
            vectors = table.layer(ids, training=True)
            with tf.control_dependencies([vectors]):  # waits once the lookup is done (bounded: about a minute)
                polls, opened = tf.while_loop(lambda n, value: (value < 1) & (n < 200_000),
                                              lambda n, value: (n + 1, gate.read_value()), [0, gate.read_value()])
            loss = tf.reduce_sum(vectors) * tf.cast(opened, tf.float32)  # the update waits for the gate too
        weights = table.layer.trainable_weights
        table.optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return opened

    slowed_step = tf.function(lambda ids: strategy.run(slowed, args=(ids,)))
    a, b = spread(100, 4), spread(20_000, 4)
    table.train(a)  # step 0
    waiting = coordinator.schedule(slowed_step, args=(tf.constant(a),))  # looks A up at step 1, then waits
    looked_up = _wait_until(lambda: (table.layer.snapshot()["last_seen"] == 1).all())

    def b_holds_a_rows() -> bool:
        return set(table.layer.snapshot()["ids"].tolist()) == set(b.reshape(-1).tolist())

    steps = 0  # the other worker: B turned away while the table is full, A expires at step 4, B takes its rows
    while looked_up and steps < 10 and not b_holds_a_rows():
        coordinator.schedule(table._step, args=(tf.constant(b),)).fetch()
        steps += 1
    before = table.layer.snapshot()
    gate.assign(1)
    opened = int(waiting.fetch())
    coordinator.join()
    after = table.layer.snapshot()
    return {"looked_up_then_waited": bool(looked_up) and opened == 1, "b_took_a_rows": b_holds_a_rows(),
            "b_rows_untouched": all(bool(np.array_equal(before[k], after[k])) for k in before), **table.stats()}


def _wait_until(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def pooled(strategy, coordinator) -> dict:
    """Ragged ids (2 features of 0 to 3 values, negative ids included) from a per-worker dataset whose feature axis is
    unknown, as ParameterServerStrategy's may be, pooled by mean: the padding (0) takes no row."""
    with strategy.scope():
        layer = MeanPooled(DynamicTables(64, 4), 2)
        layer.build(None)
        optimizer = LeanAdagrad(learning_rate=0.1)
        optimizer._create_all_weights(layer.layer.trainable_weights)
    layer.layer.bind_optimizer(optimizer)
    def dataset_fn():  # [[[5, -1], []], [[-2], [7, 8, 9]], [[], [5]]]: ragged in features too (unknown count)
        ids = tf.RaggedTensor.from_nested_row_lengths(
            tf.constant([5, -1, -2, 7, 8, 9, 5], tf.int64), [[2, 2, 2], [2, 0, 1, 3, 0, 1]])
        return tf.data.Dataset.from_tensors(ids).repeat()

    def replica_step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids, training=True))
        weights = layer.layer.trainable_weights
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return loss

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    step = tf.function(lambda iterator: strategy.run(replica_step, args=(next(iterator),)))
    for _ in range(4):
        coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    return {"held": sorted(layer.layer.snapshot()["ids"].tolist()), **Table.stats_of(layer.layer)}


def capacity(strategy, coordinator) -> dict:
    """16 rows in all; 40 then 40 more new ids: the rest are turned away, read the shared rows, and nothing fails."""
    table = Table(strategy, coordinator, 16)
    first, second = pairs(np.arange(40, dtype=np.int64) + 1000), pairs(np.arange(40, dtype=np.int64) + 2000)
    table.train(first, second)
    out = table.layer(tf.constant(second), training=False).numpy()
    _, rows = table.layer.locate(second.reshape(-1))
    shared = table.layer.shared.numpy()
    without = rows.reshape(second.shape) < 0
    reads_shared = all(np.array_equal(out[i, k], shared[k]) for i, k in zip(*np.nonzero(without), strict=True))
    return {**table.stats(), "partitions": len(table.layer.partitions), "turned_away_read_shared": reads_shared}


def flood(strategy, coordinator) -> dict:
    """admit_after 2 within windows of 2 steps: 100 frequent ids in every step, then 20 steps that also bring 1000
    ids seen once each (20,000 in all, 5 times the capacity; 1000 per partition and window, a quarter of the
    sketch's width: the load it is sized for)."""
    table = Table(strategy, coordinator, 4000, admit_after=2, admit_window_steps=2)  # 1000 new ids a partition
    frequent = pairs(np.arange(100, dtype=np.int64) + 10_000_000)
    table.train(frequent, frequent)
    rows_before, slots_before = table.layer.locate(frequent.reshape(-1))[1], table.slot_rows(frequent.reshape(-1))
    for number in range(20):
        junk = pairs(np.arange(1000, dtype=np.int64) + 50_000_000 + number * 1000)
        table.train(np.concatenate([frequent, junk]))
    rows_after = table.layer.locate(frequent.reshape(-1))[1]
    grew = bool((table.slot_rows(frequent.reshape(-1)) > slots_before).all())
    return {**table.stats(), "frequent_kept_rows": bool(np.array_equal(rows_before, rows_after)),
            "frequent_slots_grew": grew, "junk": 20_000}, table


def save(table: Table, path: str) -> dict:
    """The checkpoint a next chief resumes from, and what it must give back."""
    probe = pairs(np.concatenate([np.arange(100, dtype=np.int64) + 10_000_000, [77, 78]]))
    written = checkpoint_io.save(tf.train.Checkpoint(layer=table.layer, optimizer=table.optimizer), path,
                                 device=CHIEF_CPU, chunk_bytes=CHUNK)
    np.savez(path + "-expected.npz", probe=probe, outputs=table.layer(tf.constant(probe), training=False).numpy(),
             **table.layer.snapshot())
    return {"checkpoint": written, "stats": table.stats()}


def resume(strategy, coordinator, path: str) -> dict:
    """A new chief: the same table restored over the cluster gives the same rows, outputs and counters."""
    table = Table(strategy, coordinator, 4000, admit_after=2, admit_window_steps=2)
    checkpoint_io.restore(tf.train.Checkpoint(layer=table.layer, optimizer=table.optimizer), path, device=CHIEF_CPU,
                          chunk_bytes=CHUNK)
    expected = np.load(path + "-expected.npz")
    outputs = table.layer(tf.constant(expected["probe"]), training=False).numpy()
    snapshot = table.layer.snapshot()
    same = {name: bool(np.array_equal(snapshot[name], expected[name])) for name in snapshot}
    restored = table.stats()
    table.train(pairs(np.arange(50, dtype=np.int64) + 90_000_000), pairs(np.arange(50, dtype=np.int64) + 90_000_000))
    return {"outputs_differ": float(np.abs(outputs - expected["outputs"]).max()), "same": same,
            "restored": restored, "after_training": table.stats()}


def main(action: str, path: str) -> None:
    trace_toolkit_code_as_written()  # as the chief does (common/graph_style.py)
    num_ps = len(json.loads(__import__("os").environ["TF_CONFIG"])["cluster"]["ps"])
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver(),
        variable_partitioner=BalancedPartitioner(num_ps, min_shard_bytes=256))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    if action == "resume":
        result = resume(strategy, coordinator, path)
    else:
        flooded, table = flood(strategy, coordinator)
        result = {"concurrency": concurrency(strategy, coordinator), "admission": admission(strategy, coordinator),
                  "expiry": expiry(strategy, coordinator), "race": race(strategy, coordinator),
                  "capacity": capacity(strategy, coordinator), "pooled": pooled(strategy, coordinator),
                  "flood": flooded, "saved": save(table, path)}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
