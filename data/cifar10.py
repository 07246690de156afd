"""CIFAR-10 binary batches (cifar-10-batches-bin/), read as fixed-length records of 1 label byte + 3,072 pixels."""

from __future__ import annotations

import tensorflow as tf

from data.layouts import CIFAR_RECORD_BYTES, Span, span_columns
from data.source import DataSource

SHAPE = (32, 32, 3)
CYCLE_LENGTH = 4  # files read at once by one worker


def _read(units: tf.data.Dataset) -> tf.data.Dataset:
    def records(path, first, count):
        return tf.data.FixedLengthRecordDataset(path, CIFAR_RECORD_BYTES).skip(first).take(count)

    return units.interleave(records, cycle_length=CYCLE_LENGTH, num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)


def _decode(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Label byte, then the red, green and blue 32×32 planes: to a float32 (32, 32, 3) image in [0, 1]."""
    values = tf.io.decode_raw(record, tf.uint8)
    planes = tf.reshape(values[1:], (SHAPE[2], SHAPE[0], SHAPE[1]))
    image = tf.cast(tf.transpose(planes, (1, 2, 0)), tf.float32) / 255.0
    return image, tf.cast(values[0], tf.int32)


def load(spans: dict[str, tuple[Span, ...]]) -> DataSource:
    """Each record range of a batch file is one read unit: 5 training units, so up to 5 workers shard by file."""
    return DataSource(name="cifar10", input_shape=SHAPE, num_classes=10,
                      sizes={split: sum(s.count for s in split_spans) for split, split_spans in spans.items()},
                      units={split: span_columns(split_spans) for split, split_spans in spans.items()},
                      units_are_files=True, read=_read, decode=_decode)
