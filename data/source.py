"""The contract every data source meets: each split as read units, records and examples, and a sharded dataset_fn."""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Mapping

import numpy as np
import tensorflow as tf

from data import augment, contract, corrupt

SPLITS = ("train", "validation", "test")
SHUFFLE_BUFFER = 2048
BY_FILE, BY_RANGE, BY_ELEMENT = "file", "range", "element"


def _unchanged(*record):
    return record


def _read_units_as_records(units: tf.data.Dataset) -> tf.data.Dataset:
    return units


def _columns_dataset(columns: tuple) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(tuple(np.asarray(column) for column in columns))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSource:
    """A data set as the coordinator and evaluator need it.

    Each split is a sequence of read units, given as the columns `from_tensor_slices` takes (`units[split]`): a
    file, a record range of a file, or, for in-memory sources, one example. `read` turns a dataset of units into
    raw records in file order; `decode(*record)` turns a record into an example: a float32 image in [0, 1] and
    an int32 label. Where decoding can fail (encoded images), `record_name(*records)` names records (given as
    vectors), and a record that does not decode fails the run naming it, or with `skip_corrupt` is skipped and
    counted. `cache_examples` keeps each worker's examples in memory after the first pass (for examples that
    cost more to make than to keep). `in_order`: training units are read in their order, not shuffled (a stream
    whose content changes over time); examples are still shuffled within SHUFFLE_BUFFER. A line-oriented source
    gives `cut(workers)`: each worker's training units (byte ranges that together hold every line once), used
    when there are fewer units than workers. `note` says for the log which files make which split.

    What a model receives is `feature_spec` (data/contract.py): `features` where given (a dict of specs), else a
    float32 tensor of `input_shape`. A click source reads raw features and turns them into the model's with
    `preprocessing` (data/preprocessing.py); `read_raw` reads the same records without that last step, so
    `split(..., raw=True)` gives the features as they are in the data (what an exported model takes); a source
    of tf.train.Example records says how to parse them (`parse_examples`), for serving.
    """

    name: str
    num_classes: int
    sizes: Mapping[str, int]
    units: Mapping[str, tuple]
    units_are_files: bool = False
    read: Callable[[tf.data.Dataset], tf.data.Dataset] = _read_units_as_records
    decode: Callable[..., tuple] = _unchanged
    record_name: Callable[..., tf.Tensor] | None = None
    one_hot: bool = False
    augment: bool = False
    skip_corrupt: bool = False
    cache_examples: bool = False
    cut: Callable[[int], list[tuple]] | None = None
    in_order: bool = False
    note: str = ""
    input_shape: tuple[int, ...] = ()
    features: object = None  # a dict of per-example tf.TypeSpecs, when examples are not one image tensor
    preprocessing: object = None  # raw features -> the model's, on batches (data/preprocessing.py)
    read_raw: Callable[[tf.data.Dataset], tf.data.Dataset] | None = None
    read_flagged: Callable[[tf.data.Dataset], tf.data.Dataset] | None = None  # see flagged_examples
    parse_examples: Callable[[tf.Tensor], dict] | None = None  # serialized tf.train.Example [n] -> raw features

    @property
    def feature_spec(self):
        """What a model receives for one example (no batch axis): a dict of specs, or one float32 tensor."""
        return self.features if self.features is not None else tf.TensorSpec(self.input_shape, tf.float32)

    @property
    def raw_spec(self):
        """The features as they are in the data, what an exported model takes (the model's own without
        preprocessing)."""
        return self.preprocessing.raw_spec if self.preprocessing is not None else self.feature_spec

    def shard_policy(self, workers: int) -> str:
        """BY_FILE when every worker gets whole files of its own, else BY_RANGE when the files can be cut by bytes,
        else BY_ELEMENT: each reads all, keeps its share."""
        if self.units_are_files and len(self.units["train"][0]) >= workers:
            return BY_FILE
        return BY_RANGE if self.cut is not None else BY_ELEMENT

    def sharding(self, workers: int) -> str:
        """The sharding for `workers` workers, said for the log."""
        files = len(self.units["train"][0])
        if self.shard_policy(workers) == BY_FILE:
            return f"sharded by file: {files} training files over {workers} workers"
        if self.shard_policy(workers) == BY_RANGE:
            return (f"sharded by byte range: {files} training file part(s) for {workers} workers: each reads only "
                    f"its 1/{workers} of the bytes (the lines that begin in it)")
        held = f"{files} training file(s) for {workers} workers" if self.units_are_files else "held in memory"
        return f"sharded by element ({held}): each worker reads every example and keeps 1 in {workers}"

    def split(self, name: str, *, raw: bool = False) -> tf.data.Dataset:
        """Every example of split `name` once, in file order, unbatched; with `raw`, its features as they are in
        the data (before `preprocessing`)."""
        read = self.read_raw if raw and self.read_raw is not None else self.read
        return self._decoded(read(self._unit_dataset(name)))

    def train_dataset_fn(self, global_batch: int, seed: int, *,
                         workers: int | None = None) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
        """The dataset_fn for DatasetCreator: each pipeline reads its own shard, shuffled with its own seed.

        Under ParameterServerStrategy give `workers`: TensorFlow then traces dataset_fn once for all workers,
        with a one-pipeline context, and the shard is `experimental_get_current_worker_index()`, bound when each
        worker runs the traced function. Without `workers` the input context's pipeline id picks the shard.
        """

        def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            if workers is None:
                shards, index = context.num_input_pipelines, context.input_pipeline_id
            else:
                shards, index = workers, tf.distribute.coordinator.experimental_get_current_worker_index()
            examples = self._worker_examples(shards, index, seed).repeat()
            batches = contract.batch(examples, context.get_per_replica_batch_size(global_batch), True)
            if self.augment:
                batches = augment.augment_batches(batches, seed + index)
            return self._labelled(batches).prefetch(tf.data.AUTOTUNE)

        return dataset_fn

    def unit_examples(self, units: tf.data.Dataset, *, raw: bool = False) -> tf.data.Dataset:
        """Every example of these read units (a dataset of unit columns, any units of this source), in order;
        with `raw`, its features as they are in the data (before `preprocessing`)."""
        read = self.read_raw if raw and self.read_raw is not None else self.read
        return self._labelled(self._decoded(read(units)))

    def flagged_examples(self, units: tf.data.Dataset) -> tf.data.Dataset:
        """Every record of these read units as (features, label, well formed?, position): a malformed one (a
        Criteo line, an image that does not decode) with blank features, for the reader to count and drop;
        `position` is the line's byte offset (plain) or number (gzip), else -1. A source that cannot tell a
        malformed record from the others flags every one well formed (its errors fail the reading)."""
        if self.read_flagged is not None:
            flagged = self.read_flagged(units)
        elif self.record_name is not None:
            flagged = corrupt.decode_flagged(self.read(units), self.decode, self.record_name, self.input_shape)
        else:
            flagged = self._decoded(self.read(units)).map(
                lambda features, label: (features, label, tf.constant(True), tf.constant(-1, tf.int64)))
        if not self.one_hot:
            return flagged
        return flagged.map(lambda features, label, ok, position: (features, tf.one_hot(label, self.num_classes), ok,
                                                                  position))

    def eval_dataset(self, split: str, batch: int, *, raw: bool = False) -> tf.data.Dataset:
        """Every example of `split` once, in order, batched for evaluation (`raw`: as an exported model takes them)."""
        return self._labelled(contract.batch(self.split(split, raw=raw), batch)).prefetch(tf.data.AUTOTUNE)

    def steps_per_epoch(self, global_batch: int) -> int:
        """Full global batches in one pass over the training split (the global batch already spans all workers)."""
        return max(1, self.sizes["train"] // global_batch)

    def _worker_examples(self, shards: int, index: int | tf.Tensor, seed: int) -> tf.data.Dataset:
        """Shard `index` of the training examples; a worker index tensor selects one of `shards` built branches, so
        every shard and shuffle seed stays a plain int (in TensorFlow 2.21 a tensor shuffle seed fails under a
        global seed of 0: random_seed.get_seed compares `seeds == (0, 0)` in Python)."""
        units = self._unit_dataset("train")
        if isinstance(index, int):
            return self._shard_examples(units, shards, index, seed + index)
        branches = [functools.partial(self._shard_examples, units, shards, k, seed + k) for k in range(shards)]
        return tf.switch_case(tf.cast(index, tf.int32), branches)

    def _shard_examples(self, units: tf.data.Dataset, shards: int, index: int, seed: int) -> tf.data.Dataset:
        """This shard's examples, reshuffled on every pass (shuffling comes before the repeat)."""
        if self.shard_policy(shards) == BY_FILE:
            mine = units.shard(shards, index)
            records = self.read(mine if self.in_order else mine.shuffle(len(self.units["train"][0]), seed=seed))
        elif self.shard_policy(shards) == BY_RANGE:
            ranges = self.cut(shards)[index]
            records = self.read(_columns_dataset(ranges).shuffle(max(len(ranges[0]), 1), seed=seed))
        else:
            records = self.read(units).shard(shards, index)
        if self.cache_examples:
            return self._decoded(records).cache().shuffle(SHUFFLE_BUFFER, seed=seed)
        return self._decoded(records.shuffle(SHUFFLE_BUFFER, seed=seed))

    def _unit_dataset(self, split: str) -> tf.data.Dataset:
        return _columns_dataset(self.units[split])

    def _decoded(self, records: tf.data.Dataset) -> tf.data.Dataset:
        if self.record_name is None:
            return records.map(self.decode, num_parallel_calls=tf.data.AUTOTUNE)
        return corrupt.decode_checked(records, self.decode, self.record_name, self.input_shape,
                                      skip=self.skip_corrupt)

    def _labelled(self, batches: tf.data.Dataset) -> tf.data.Dataset:
        return labelled(batches, one_hot=self.one_hot, num_classes=self.num_classes)


def labelled(batches: tf.data.Dataset, *, one_hot: bool, num_classes: int | None) -> tf.data.Dataset:
    """One-hot labels where the loss wants them (categorical_crossentropy), else the labels as they are."""
    if not one_hot:
        return batches
    return batches.map(lambda features, labels: (features, tf.one_hot(labels, num_classes)))
