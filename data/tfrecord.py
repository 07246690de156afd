"""TFRecord files of tf.train.Example (ImageNet-style train-00000-of-01024 ...), each an encoded image and a label."""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from data.image_folder import CHANNELS, decode_image
from data.layouts import tfrecord_counts
from data.source import SPLITS, DataSource
from common.errors import Problem, UserError

CYCLE_LENGTH = 8  # files one worker reads at once


def read_records(units: tf.data.Dataset) -> tf.data.Dataset:
    """File names -> (file, record number, serialized example), files interleaved in parallel."""

    def records(path):
        return tf.data.TFRecordDataset(path).enumerate().map(lambda number, record: (path, number, record))

    return units.interleave(records, cycle_length=CYCLE_LENGTH, num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)


def _check_features(paths: tuple[str, ...], image_key: str, label_key: str) -> None:
    """The first example must hold the configured keys, or every record would later fail to decode."""
    first = next(iter(tf.data.TFRecordDataset(paths).take(1)))
    example = tf.train.Example.FromString(first.numpy())
    features = example.features.feature
    for option, key, kind in (("tfrecord_image_key", image_key, "bytes_list"),
                              ("tfrecord_label_key", label_key, "int64_list")):
        if key not in features or features[key].WhichOneof("kind") != kind:
            raise UserError(Problem(f"training.{option}", key, f"is not a {kind} feature of the examples in {paths[0]}",
                                    f"use one of: {', '.join(sorted(features))}"))


def _count_classes(files: dict[str, tuple[str, ...]], label_key: str) -> int:
    """1 + the largest label in any split: reads every record once (set tfrecord_num_classes to skip this)."""
    paths = sorted({path for split_files in files.values() for path in split_files})
    labels = tf.data.TFRecordDataset(paths, num_parallel_reads=CYCLE_LENGTH).map(
        lambda record: tf.io.parse_single_example(record, {label_key: tf.io.FixedLenFeature([], tf.int64)})[label_key],
        num_parallel_calls=tf.data.AUTOTUNE)
    return int(labels.reduce(tf.constant(-1, tf.int64), tf.maximum)) + 1


def load(files: dict[str, tuple[str, ...]], *, image_size: tuple[int, int], image_key: str, label_key: str,
         num_classes: int | None) -> DataSource:
    """Each file is one read unit: with at least as many training files as workers, workers shard by file."""
    sizes = tfrecord_counts(files)
    _check_features(files["train"], image_key, label_key)
    source = image_source(image_size=image_size, image_key=image_key, label_key=label_key,
                          num_classes=num_classes or _count_classes(files, label_key))
    return dataclasses.replace(source, sizes=sizes, units={split: (paths,) for split, paths in files.items()})


def image_source(*, image_size: tuple[int, int], image_key: str, label_key: str, num_classes: int) -> DataSource:
    """A source of no files yet whose `read` and `decode` read any TFRecord file of these examples (follow mode
    hands it files one by one)."""
    image_size = tuple(image_size)
    features = {image_key: tf.io.FixedLenFeature([], tf.string), label_key: tf.io.FixedLenFeature([], tf.int64)}

    def decode(path, number, record):
        example = tf.io.parse_single_example(record, features)
        return decode_image(example[image_key], image_size), tf.cast(example[label_key], tf.int32)

    return DataSource(name="tfrecord", input_shape=(*image_size, CHANNELS), num_classes=num_classes,
                      sizes={split: 0 for split in SPLITS}, units={split: ((),) for split in SPLITS},
                      units_are_files=True, read=read_records, decode=decode,
                      record_name=lambda path, number, record: tf.strings.join(
                          [path, " record ", tf.strings.as_string(number)]))
