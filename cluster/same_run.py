"""Whether an output_dir holds this run: the options that change what is trained must match for it to resume.

More epochs, another learning-rate schedule, other checkpoint or progress settings resume the run already
there; another model, data set, shape, loss, optimizer, batch or strategy would train something else on top
of it, so they are refused, naming each difference and the way to start over. Under parameter_server the worker
count is the run's shape, not what it trains: the global batch stays the one the run started with, so a run
resized by `sh run.sh reload`, by a dropped worker or by an edited worker list goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cluster.config import ClusterConfig
from cluster.strategies import StrategyName
from cluster.topic_address import resume_identity
from cluster.training_options import TrainingOptions

WHAT_IS_TRAINED = ("model", "dataset", "data_dir", "image_size", "synthetic_shape", "synthetic_examples",
                   "tfrecord_image_key", "tfrecord_label_key", "tfrecord_num_classes", "tfrecord_features",
                   "numeric_features", "categorical_features", "num_classes", "loss", "metrics",
                   "optimizer", "per_worker_batch", "strategy", "loop", "embedding_kind", "embedding_optimizer",
                   "follow_data")  # the tables' optimizer: its slots are in the checkpoint


def _comparable(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else resume_identity(value)


def differences(previous: dict, current: TrainingOptions, *, previous_workers: int | None = None,
                current_workers: int | None = None) -> list[str]:
    """`option: before → now` for each option that changes what is trained; [] when the run may resume.

    `previous` is the options dict a run summary recorded; options it lacks (older versions) are not compared.
    """
    now = dataclasses.asdict(current)
    found = [f"{name}: {previous[name]!r} → {now[name]!r}" for name in WHAT_IS_TRAINED
             if name in previous and _comparable(previous[name]) != _comparable(now[name])]
    if previous_workers and current_workers and previous_workers != current_workers:
        found.append(f"workers (global batch): {previous_workers} → {current_workers}")
    return found


def batch_workers(config: ClusterConfig, previous_workers: int | None) -> int:
    """The workers the global batch is counted for (`per_worker_batch` x this).

    Under parameter_server, those the run started with (`previous_workers`, from its summary), or every listed
    worker for a new run: workers that leave or join change the speed of training, never its batch, steps or
    learning-rate schedule. Under the synchronous strategies each worker's replicas take their share of the batch
    in every step, so the batch follows the workers that train, and a new count is another run.
    """
    if config.training.strategy == StrategyName.PARAMETER_SERVER:
        return previous_workers or len(config.jobs["worker"])
    return config.input_pipelines
