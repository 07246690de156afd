"""The one contract every data source meets: splits of (image, label), their sizes, and a sharded dataset_fn."""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import tensorflow as tf

SPLITS = ("train", "validation", "test")
SHUFFLE_BUFFER = 2048


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSource:
    """A data set as the coordinator and evaluator need it.

    `split(name)` returns the unbatched, unshuffled examples of a split as (float32 image, int32 label).
    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    sizes: Mapping[str, int]
    split: Callable[[str], tf.data.Dataset]

    def train_dataset_fn(self, global_batch: int, seed: int) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
        """The dataset_fn for DatasetCreator: each input pipeline reads its own shard, shuffled with its own seed."""

        def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = self.split("train").shard(context.num_input_pipelines, context.input_pipeline_id)
            dataset = dataset.cache().shuffle(SHUFFLE_BUFFER, seed=seed + context.input_pipeline_id,
                                              reshuffle_each_iteration=True)
            batch = context.get_per_replica_batch_size(global_batch)
            return dataset.repeat().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

        return dataset_fn

    def eval_dataset(self, split: str, batch: int) -> tf.data.Dataset:
        """Every example of `split` once, in order, batched for evaluation."""
        return self.split(split).batch(batch).prefetch(tf.data.AUTOTUNE)

    def steps_per_epoch(self, global_batch: int) -> int:
        """Full global batches in one pass over the training split (the global batch already spans all workers)."""
        return max(1, self.sizes["train"] // global_batch)
