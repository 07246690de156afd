"""Training-image augmentation as ImageDataGenerator users configure it, as one random affine map per image in tf.data.

Rotation up to 40 degrees, width and height shifts up to 0.2 of the size, shear up to 0.2 (degrees, as
ImageDataGenerator reads `shear_range`), zoom 0.8-1.2 per axis and horizontal flips, composed into one matrix
and resampled once (bilinear, edges repeated: ImageDataGenerator's `fill_mode="nearest"`). Rescaling by 1/255
is not needed here: every source already yields images in [0, 1].

Keras' RandomRotation & co. are not used: in tf_keras 2.21 they always create a `tf.random.Generator`
variable, and ParameterServerStrategy refuses variables in a dataset_fn ("Creating variables in `dataset_fn`
is not allowed"). Stateless random ops seeded per worker and per batch need no state.
"""

from __future__ import annotations

import math

import tensorflow as tf

ROTATION_DEGREES = 40.0
SHIFT_FRACTION = 0.2
SHEAR_DEGREES = 0.2
ZOOM_FRACTION = 0.2


def _matrices(rows) -> tf.Tensor:
    """[n, 3, 3] from rows of 9 entries each."""
    return tf.reshape(tf.stack(rows, axis=1), [-1, 3, 3])


def affine_maps(count, height, width, seed) -> tf.Tensor:
    """[count, 3, 3] random maps from output (row, col) to input (row, col) about the image centre."""
    seeds = tf.random.experimental.stateless_split(seed, num=6)

    def uniform(i, low, high):
        return tf.random.stateless_uniform([count], seeds[i], low, high)

    theta = uniform(0, -ROTATION_DEGREES, ROTATION_DEGREES) * (math.pi / 180)
    shear = uniform(1, -SHEAR_DEGREES, SHEAR_DEGREES) * (math.pi / 180)
    shift_rows, shift_cols = uniform(2, -SHIFT_FRACTION, SHIFT_FRACTION) * height, \
        uniform(3, -SHIFT_FRACTION, SHIFT_FRACTION) * width
    zoom_rows, zoom_cols = uniform(4, 1 - ZOOM_FRACTION, 1 + ZOOM_FRACTION), \
        uniform(5, 1 - ZOOM_FRACTION, 1 + ZOOM_FRACTION)
    zero, one = tf.zeros([count]), tf.ones([count])
    centre_rows, centre_cols = height / 2 - 0.5, width / 2 - 0.5
    maps = [
        _matrices([one, zero, zero + centre_rows, zero, one, zero + centre_cols, zero, zero, one]),
        _matrices([tf.cos(theta), -tf.sin(theta), zero, tf.sin(theta), tf.cos(theta), zero, zero, zero, one]),
        _matrices([one, zero, shift_rows, zero, one, shift_cols, zero, zero, one]),
        _matrices([one, -tf.sin(shear), zero, zero, tf.cos(shear), zero, zero, zero, one]),
        _matrices([zoom_rows, zero, zero, zero, zoom_cols, zero, zero, zero, one]),
        _matrices([one, zero, zero - centre_rows, zero, one, zero - centre_cols, zero, zero, one]),
    ]
    composed = maps[0]
    for matrix in maps[1:]:
        composed = tf.linalg.matmul(composed, matrix)
    return composed


def transform(images: tf.Tensor, maps: tf.Tensor) -> tf.Tensor:
    """Resamples each image of [n, h, w, c] through its (row, col) map, in TensorFlow's (x, y) = (col, row) form."""
    m = maps
    transforms = tf.stack([m[:, 1, 1], m[:, 1, 0], m[:, 1, 2], m[:, 0, 1], m[:, 0, 0], m[:, 0, 2],
                           tf.zeros_like(m[:, 0, 0]), tf.zeros_like(m[:, 0, 0])], axis=1)
    return tf.raw_ops.ImageProjectiveTransformV3(images=images, transforms=transforms,
                                                 output_shape=tf.shape(images)[1:3], fill_value=0.0,
                                                 interpolation="BILINEAR", fill_mode="NEAREST")


def random_augment(images: tf.Tensor, seed) -> tf.Tensor:
    """A batch [n, h, w, c] with each image moved by its own random map and flipped left-right half the time."""
    shape = tf.shape(images)
    height, width = tf.cast(shape[1], tf.float32), tf.cast(shape[2], tf.float32)
    moved = transform(images, affine_maps(shape[0], height, width, seed))
    flip = tf.random.stateless_uniform([shape[0], 1, 1, 1], tf.random.experimental.stateless_fold_in(seed, 7)) < 0.5
    return tf.where(flip, tf.reverse(moved, axis=[2]), moved)


def augment_batches(batches: tf.data.Dataset, seed) -> tf.data.Dataset:
    """Augments every training batch; `seed` (an int, or a worker's int64 tensor) and the batch count seed it."""

    def augment(step, batch):
        images, labels = batch
        return random_augment(images, tf.stack([tf.cast(seed, tf.int64), step])), labels

    return batches.enumerate().map(augment, num_parallel_calls=tf.data.AUTOTUNE)
