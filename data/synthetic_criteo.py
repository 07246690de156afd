"""Criteo-like examples generated where they are read: Zipf-distributed ids per table and a learnable click signal.

Each read unit is a block of BLOCK example numbers; a block is generated in one vectorised step from
(seed, block number), so workers ship no arrays and every run sees the same examples. Per table, an id's
popularity rank follows a power law (P(rank >= k) ~ k^-(exponent - 1), independent of the table's size), ranks
past the table wrap, and a keyed permutation of the table's rows (`RandomIndexShuffle`) turns ranks into ids, so
hot ids land anywhere in the table, as salted hashing does for real data. The label is drawn from a hidden
logistic model over three numeric features and the ids of SIGNAL_TABLES tables (each id +1 or -1), so a model
that learns those ids' embeddings gets an AUC well above 0.5.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from data.criteo_layout import CATEGORICAL_FEATURES, NUMERIC_FEATURES
from data.preprocessing import CriteoPreprocessing
from data.source import DataSource

BLOCK = 256
SIZES = {"train": 1 << 18, "validation": 1 << 14, "test": 1 << 14}
SPLIT_STRIDE = 1 << 40  # block numbers of each split start at its position times this: disjoint random streams
ZIPF_EXPONENT = 1.2
SIGNAL_TABLES = 4
SIGNAL_WEIGHT, DENSE_WEIGHTS, BIAS = 0.8, (0.6, -0.5, 0.4), -1.2
MAX_RANK = float(1 << 52)


def zipf_ranks(shape, key, exponent: float) -> tf.Tensor:
    """Popularity ranks from 0 with P(rank >= k) ~ (k + 1)^-(exponent - 1): a discretised Pareto tail."""
    uniform = tf.random.stateless_uniform(shape, key, minval=1e-300, maxval=1.0, dtype=tf.float64)
    ranks = tf.minimum(tf.floor(tf.pow(uniform, -1.0 / (exponent - 1.0))) - 1.0, MAX_RANK)
    return tf.cast(ranks, tf.int64)


def ids_of_ranks(ranks: tf.Tensor, table_rows: tf.Tensor, salt: int) -> tf.Tensor:
    """Each table's ranks wrapped into its rows and permuted by a keyed bijection, so rank 0 is no special row."""
    flat_rows = tf.reshape(tf.broadcast_to(table_rows, tf.shape(ranks)), [-1])
    flat = tf.math.floormod(tf.reshape(ranks, [-1]), flat_rows)
    shuffled = tf.raw_ops.RandomIndexShuffle(index=flat, seed=tf.constant([salt, 7, 11], tf.int64),
                                             max_index=flat_rows - 1, rounds=4)
    return tf.reshape(shuffled, tf.shape(ranks))


def click_logits(dense: tf.Tensor, ids: tf.Tensor, salt: int) -> tf.Tensor:
    """The hidden model: a few numeric features plus a fixed +-1 effect for each id of the first tables."""
    signed = tf.raw_ops.RandomIndexShuffle(index=tf.reshape(ids[:, :SIGNAL_TABLES], [-1]),
                                           seed=tf.constant([salt, 13, 17], tf.int64),
                                           max_index=tf.constant(np.iinfo(np.int64).max // 2, tf.int64), rounds=4)
    effects = tf.reshape(tf.cast(signed % 2, tf.float32) * 2.0 - 1.0, [-1, SIGNAL_TABLES])
    centred = dense[:, :len(DENSE_WEIGHTS)] - 1.5
    return BIAS + tf.reduce_sum(centred * DENSE_WEIGHTS, axis=1) + SIGNAL_WEIGHT * tf.reduce_sum(effects, axis=1)


def generate_block(block: tf.Tensor, table_rows: tf.Tensor, seed: int, exponent: float) -> tuple[dict, tf.Tensor]:
    """BLOCK examples: features {dense: log(1 + count) [BLOCK, 13], ids [BLOCK, 26]} and float labels [BLOCK]."""
    key = tf.stack([tf.constant(seed, tf.int64), block])
    counts = tf.floor(tf.exp(tf.random.stateless_normal([BLOCK, NUMERIC_FEATURES], key, mean=1.0, stddev=1.5)))
    dense = tf.math.log1p(counts)  # the same log(1 + x) the Criteo reader applies to its integers
    ranks = zipf_ranks([BLOCK, CATEGORICAL_FEATURES], key + 1, exponent)
    ids = ids_of_ranks(ranks, table_rows, salt=seed)
    clicks = tf.random.stateless_uniform([BLOCK], key + 2) < tf.sigmoid(click_logits(dense, ids, salt=seed))
    return {"dense": dense, "ids": ids}, tf.cast(clicks, tf.float32)


def load(table_rows: tuple[int, ...], *, seed: int = 0, train_examples: int = SIZES["train"],
         exponent: float = ZIPF_EXPONENT) -> DataSource:
    """A fixed synthetic click log over tables of `table_rows` rows (one size per categorical feature)."""
    if len(table_rows) != CATEGORICAL_FEATURES:
        raise ValueError(f"table_rows has {len(table_rows)} sizes, not {CATEGORICAL_FEATURES}")
    sizes = {**SIZES, "train": train_examples}
    rows = tf.constant(table_rows, tf.int64)

    def read(blocks: tf.data.Dataset) -> tf.data.Dataset:
        generated = blocks.map(lambda block: generate_block(block, rows, seed, exponent),
                               num_parallel_calls=tf.data.AUTOTUNE)
        return generated.unbatch()

    units = {name: (np.arange(-(-size // BLOCK), dtype=np.int64) + position * SPLIT_STRIDE,)
             for position, (name, size) in enumerate(sizes.items())}
    return DataSource(name="synthetic_criteo", features=CriteoPreprocessing().feature_spec, num_classes=2,
                      sizes={k: len(v[0]) * BLOCK for k, v in units.items()}, units=units, units_are_files=True,
                      read=read)
