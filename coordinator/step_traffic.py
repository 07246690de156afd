"""What one training step costs, read from the model itself: bytes each ps moves (for any ps count) and compute time.

For `plan` the model is built on this machine's CPU, with no cluster, while every variable's creation is
recorded; ParameterServerStrategy's placement is then worked out as the strategy does it: each variable split
by the run's partitioner ("div": the first shards one row longer), each shard on the next ps round-robin in
creation order. Dense variables move twice per step (read, gradient back); tables move the rows a batch looks
up, counted by the per-ps report on real batches of the input. During a run the chief counts the same way on
the variables as the strategy really placed them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np
import tensorflow as tf

from cluster.training_options import TrainingOptions
from models.compiled import build_compiled
from tables.pooling import table_ids
from tables.placement import COLOCATED_SCOPE
from tables.shard_report import shard_report
from tables.sparse import SparseDenseModel
from coordinator.strategy import partitioner_for
from data import contract

SAMPLE_BATCHES = 3
COMPUTE_STEPS = 5  # timed steps at least, over COMPUTE_WINDOW_S at least, COMPUTE_MAX_STEPS at most
COMPUTE_WINDOW_S = 0.5
COMPUTE_MAX_STEPS = 50


@dataclasses.dataclass(frozen=True)
class Shard:
    """A shard as the strategy would make it: its shape, dtype and ps."""

    shape: tuple[int, ...]
    dtype: tf.DType
    device: str


@contextlib.contextmanager
def recording(created: list):
    """Appends every variable created inside the block to `created`, in creation order."""
    def creator(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        created.append(variable)
        return variable

    with tf.variable_creator_scope(creator):
        yield


def built_on_cpu(options: TrainingOptions, source) -> tuple[object, list]:
    """The run's model built and compiled here without a strategy, and its variables in creation order."""
    created: list = []
    with tf.device("/cpu:0"), recording(created):
        model = build_compiled(options, source)
        if isinstance(model, SparseDenseModel):
            model.build_optimizers()
    return model, created


def _rows(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def placed(created: list, partitioner, num_ps: int) -> dict:
    """{variable ref: [Shard]}: where ParameterServerStrategy with `partitioner` would put each variable (a dynamic
    table's bookkeeping is colocated with its rows: it takes no turn)."""
    shards, count = {}, 0
    for variable in created:
        if COLOCATED_SCOPE in variable.name.split("/"):
            continue
        shape = tuple(variable.shape)
        parts = min(partitioner(shape=tf.TensorShape(shape), dtype=variable.dtype)[0], shape[0]) if shape else 1
        rows = _rows(shape[0], parts) if parts > 1 else [shape[0] if shape else None]
        found = []
        for row_count in rows:
            found.append(Shard(((row_count,) + shape[1:]) if shape else (), variable.dtype,
                               f"/job:ps/replica:0/task:{count % num_ps}/device:CPU:0"))
            count += 1
        shards[variable.ref()] = found
    return shards


def _real_shards(variable) -> list:
    return list(getattr(variable, "variables", [variable]))


def _index(device: str) -> int | None:
    parts = dict(p.split(":", 1) for p in device.split("/") if ":" in p)
    return int(parts.get("task", 0)) if parts.get("job") == "ps" else None


def sample_ids(source, global_batch: int, batches: int = SAMPLE_BATCHES) -> list[np.ndarray]:
    """Ids of a few real training batches, for a recommender's lookups."""
    return [table_ids(features["ids"]).numpy()
            for features, _ in contract.batch(source.split("train"), global_batch).take(batches)]


def bytes_per_ps(model, num_ps: int, ids: list[np.ndarray], shards_of=_real_shards) -> tuple[float, ...]:
    """Bytes each ps moves per step, both ways: tables' looked-up rows (mean over `ids`), dense variables twice."""
    moved = [0.0] * num_ps
    if isinstance(model, SparseDenseModel):
        for batch in ids:
            for name, entry in shard_report(model, batch, shards_of).items():
                if name.startswith("ps:"):
                    moved[int(name[3:])] += entry["bytes_moved_per_step"] / len(ids)
        return tuple(moved)
    for shard in (s for variable in model.trainable_variables for s in shards_of(variable)):
        index = _index(shard.device)
        if index is not None:
            moved[index] += 2 * int(np.prod(shard.shape)) * shard.dtype.size
    return tuple(moved)


def planned_bytes(options: TrainingOptions, model, created: list, ids: list[np.ndarray], num_ps: int):
    """Bytes each of `num_ps` ps would move per step, with the run's partitioner for that many ps."""
    shards = placed(created, partitioner_for(options, num_ps), num_ps)
    return bytes_per_ps(model, num_ps, ids, lambda variable: shards[variable.ref()])


def compute_s(model, source, global_batch: int) -> float:
    """Seconds of one training step of `global_batch` examples here, after one that traces: the fastest fifth of
    the steps timed over at least COMPUTE_WINDOW_S (a neighbour's burst lengthens some steps, never shortens one;
    a median of five once read a CNN's 5 ms step as 23 ms)."""
    batches = list(source.eval_dataset("train", global_batch).take(1))
    inputs, labels = batches[0]
    model.train_on_batch(inputs, labels)
    times = []
    window_ends = time.perf_counter() + COMPUTE_WINDOW_S
    while len(times) < COMPUTE_MAX_STEPS and (len(times) < COMPUTE_STEPS or time.perf_counter() < window_ends):
        started = time.perf_counter()
        model.train_on_batch(inputs, labels)
        times.append(time.perf_counter() - started)
    return float(np.percentile(times, 20))
