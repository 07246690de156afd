"""MNIST (or Fashion-MNIST): the four idx files, gzipped or not, or the mnist.npz layout Keras uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from data.layouts import IDX_IMAGES_HEADER, IDX_LABELS_HEADER, IdxFiles, Span, carve_validation, span_columns
from data.source import DataSource

NUM_CLASSES = 10


def _idx_reader(image_shape: tuple[int, int]):
    def compression(path):
        return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")

    def records(images, labels, first, count):
        pixels = tf.data.FixedLengthRecordDataset(images, image_shape[0] * image_shape[1], IDX_IMAGES_HEADER,
                                                  compression_type=compression(images))
        classes = tf.data.FixedLengthRecordDataset(labels, 1, IDX_LABELS_HEADER, compression_type=compression(labels))
        return tf.data.Dataset.zip(pixels, classes).skip(first).take(count)

    return lambda units: units.flat_map(records)


def _idx_decode(image_shape: tuple[int, int]):
    def decode(pixels, label):
        image = tf.reshape(tf.io.decode_raw(pixels, tf.uint8), (*image_shape, 1))
        return tf.cast(image, tf.float32) / 255.0, tf.cast(tf.io.decode_raw(label, tf.uint8)[0], tf.int32)

    return decode


def _scaled(image, label):
    return tf.cast(image, tf.float32)[..., tf.newaxis] / 255.0, tf.cast(label, tf.int32)


def _load_idx(files: IdxFiles) -> DataSource:
    """One read unit per split (an images file beside its labels file): workers shard by element."""
    return DataSource(name="mnist", input_shape=(*files.image_shape, 1), num_classes=NUM_CLASSES,
                      sizes={split: sum(s.count for s in spans) for split, spans in files.spans.items()},
                      units={split: span_columns(spans) for split, spans in files.spans.items()},
                      units_are_files=True, read=_idx_reader(files.image_shape), decode=_idx_decode(files.image_shape))


def _load_npz(path: Path) -> DataSource:
    """The arrays are read here and travel inside the dataset graph, so workers need no copy of the file."""
    with np.load(path) as arrays:
        x_train, y_train, x_test, y_test = (arrays[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    (train,), (validation,) = carve_validation([Span((str(path),), 0, len(y_train))])
    units = {"train": (x_train[:train.count], y_train[:train.count]),
             "validation": (x_train[validation.first:], y_train[validation.first:]), "test": (x_test, y_test)}
    return DataSource(name="mnist", input_shape=(*x_train.shape[1:], 1), num_classes=NUM_CLASSES,
                      sizes={split: len(labels) for split, (_, labels) in units.items()}, units=units,
                      decode=_scaled)


def load(layout: IdxFiles | Path) -> DataSource:
    """Validation is the last 10% of the training images (6,000 of 60,000), the same ones every time."""
    return _load_npz(layout) if isinstance(layout, Path) else _load_idx(layout)
