"""Criteo-like examples generated where they are read: Zipf-distributed ids per feature and a learnable click signal.

Each read unit is a block of BLOCK example numbers; a block is generated in one vectorised step from
(seed, block number), so workers ship no arrays and every run sees the same examples. Per feature, a value's
popularity rank follows a power law (P(rank >= k) ~ k^-(exponent - 1)). Each categorical value becomes a 62-bit
id keyed by feature and value, as data/criteo.py's hashing makes it (a 64-bit fingerprint of seed, feature and
value), so ids of different features do not meet and hot ids land anywhere modulo any table size.

Values: with no drift (`new_ids` 0) ranks wrap at the feature's `vocabulary` (table_rows: every value occurs
forever). With drift, ids are born and die: every `period_examples` training examples (one period), `new_ids`
values are born per feature and each lives `id_lifetime` periods; an example draws its value's age (in periods,
uniformly) and its rank among the values born that period (Zipf), so an id keeps its popularity while it lives
and never occurs after. Training units are then read in order (time goes forward); validation and test
examples come from the last training period. The label is drawn from a hidden logistic model over three
numeric features and the ids of SIGNAL_TABLES features (each id +1 or -1), so a model that learns those ids'
embeddings gets an AUC well above 0.5.
"""

from __future__ import annotations

import dataclasses

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
ID_BITS = 62  # ids are in [0, 2**62), as data/criteo.py's hashing gives


@dataclasses.dataclass(frozen=True)
class Drift:
    """Ids born and dying: `new_ids` per feature every `period_examples` training examples, each living
    `id_lifetime` periods (new_ids 0: no drift)."""

    new_ids: int = 0
    id_lifetime: int = 8
    period_examples: int = 4096


def zipf_ranks(shape, key, exponent: float) -> tf.Tensor:
    """Popularity ranks from 0 with P(rank >= k) ~ (k + 1)^-(exponent - 1): a discretised Pareto tail."""
    uniform = tf.random.stateless_uniform(shape, key, minval=1e-300, maxval=1.0, dtype=tf.float64)
    ranks = tf.minimum(tf.floor(tf.pow(uniform, -1.0 / (exponent - 1.0))) - 1.0, MAX_RANK)
    return tf.cast(ranks, tf.int64)


def keyed_ids(values: tf.Tensor, salt: int) -> tf.Tensor:
    """Values [n, features] as 62-bit ids: the FarmHash64 of (salt, feature, value), its top 62 bits (distinct per
    feature and value but for odds of about n**2 / 2**63, as for any hashing of real values)."""
    features = tf.broadcast_to(tf.range(tf.shape(values)[1], dtype=tf.int64)[tf.newaxis, :], tf.shape(values))
    keyed = tf.stack([tf.fill(tf.shape(values), tf.constant(salt, tf.int64)), features, values], axis=-1)
    as_bytes = tf.reshape(tf.bitcast(tf.reshape(keyed, [-1, 3]), tf.uint8), [-1, 24])
    hashed = tf.bitcast(tf.fingerprint(as_bytes), tf.uint64)
    ids = tf.bitwise.right_shift(tf.reshape(hashed, [-1]), tf.constant(64 - ID_BITS, tf.uint64))
    return tf.reshape(tf.cast(ids, tf.int64), tf.shape(values))


def drifting_values(ranks: tf.Tensor, periods: tf.Tensor, key, drift: Drift) -> tf.Tensor:
    """Values of the ids alive in each example's period [n]: an age drawn uniformly over the lifetime, then the
    rank among the `new_ids` born that period; values count from the first period's oldest ids."""
    ages = tf.random.stateless_uniform(tf.shape(ranks), key, 0, drift.id_lifetime, dtype=tf.int64)
    born = periods[:, tf.newaxis] - ages + drift.id_lifetime
    return born * drift.new_ids + tf.math.floormod(ranks, drift.new_ids)


def click_logits(dense: tf.Tensor, ids: tf.Tensor, salt: int) -> tf.Tensor:
    """The hidden model: a few numeric features plus a fixed +-1 effect for each id of the first features."""
    signed = tf.raw_ops.RandomIndexShuffle(index=tf.reshape(ids[:, :SIGNAL_TABLES], [-1]),
                                           seed=tf.constant([salt, 13, 17], tf.int64),
                                           max_index=tf.constant((1 << ID_BITS) - 1, tf.int64), rounds=4)
    effects = tf.reshape(tf.cast(signed % 2, tf.float32) * 2.0 - 1.0, [-1, SIGNAL_TABLES])
    centred = dense[:, :len(DENSE_WEIGHTS)] - 1.5
    return BIAS + tf.reduce_sum(centred * DENSE_WEIGHTS, axis=1) + SIGNAL_WEIGHT * tf.reduce_sum(effects, axis=1)


def generate_block(block: tf.Tensor, period: tf.Tensor, vocabulary: tf.Tensor, seed: int, exponent: float,
                   drift: Drift) -> tuple[dict, tf.Tensor]:
    """BLOCK examples: features {dense: log(1 + count) [BLOCK, 13], ids [BLOCK, 26]} and float labels [BLOCK];
    `period` [BLOCK] is each example's period (drift only)."""
    key = tf.stack([tf.constant(seed, tf.int64), block])
    counts = tf.floor(tf.exp(tf.random.stateless_normal([BLOCK, NUMERIC_FEATURES], key, mean=1.0, stddev=1.5)))
    dense = tf.math.log1p(counts)  # the same log(1 + x) the Criteo reader applies to its integers
    ranks = zipf_ranks([BLOCK, CATEGORICAL_FEATURES], key + 1, exponent)
    if drift.new_ids:
        values = drifting_values(ranks, period, key + 3, drift)
    else:
        values = tf.math.floormod(ranks, vocabulary)
    ids = keyed_ids(values, salt=seed)
    clicks = tf.random.stateless_uniform([BLOCK], key + 2) < tf.sigmoid(click_logits(dense, ids, salt=seed))
    return {"dense": dense, "ids": ids}, tf.cast(clicks, tf.float32)


def _periods(block: tf.Tensor, last_period: int, period_examples: int) -> tf.Tensor:
    """Each example's period: in training, from its position in the stream; elsewhere, the last training one."""
    position = tf.math.floormod(block, SPLIT_STRIDE) * BLOCK + tf.range(BLOCK, dtype=tf.int64)
    return tf.where(block < SPLIT_STRIDE, position // period_examples, tf.constant(last_period, tf.int64))


def load(vocabulary: tuple[int, ...], *, seed: int = 0, train_examples: int = SIZES["train"],
         exponent: float = ZIPF_EXPONENT, drift: Drift = Drift()) -> DataSource:
    """A fixed synthetic click log: per categorical feature `vocabulary` values (one count per feature; the
    toolkit passes table_rows), or with `drift` ids born and dying over the training stream."""
    if len(vocabulary) != CATEGORICAL_FEATURES:
        raise ValueError(f"vocabulary has {len(vocabulary)} sizes, not {CATEGORICAL_FEATURES}")
    sizes = {**SIZES, "train": train_examples}
    values = tf.constant(vocabulary, tf.int64)
    last_period = (train_examples - 1) // drift.period_examples

    def read(blocks: tf.data.Dataset) -> tf.data.Dataset:
        generated = blocks.map(lambda block: generate_block(block, _periods(block, last_period, drift.period_examples),
                                                            values, seed, exponent, drift),
                               num_parallel_calls=tf.data.AUTOTUNE)
        return generated.unbatch()

    units = {name: (np.arange(-(-size // BLOCK), dtype=np.int64) + position * SPLIT_STRIDE,)
             for position, (name, size) in enumerate(sizes.items())}
    return DataSource(name="synthetic_criteo", features=CriteoPreprocessing().feature_spec, num_classes=2,
                      sizes={k: len(v[0]) * BLOCK for k, v in units.items()}, units=units, units_are_files=True,
                      read=read, in_order=bool(drift.new_ids), note=_note(drift, train_examples))


def _note(drift: Drift, train_examples: int) -> str:
    if not drift.new_ids:
        return ""
    periods = -(-train_examples // drift.period_examples)
    return (f"ids born and dying: {drift.new_ids} new per feature every {drift.period_examples} examples, each "
            f"living {drift.id_lifetime} periods ({drift.new_ids * drift.id_lifetime} alive per feature at a time, "
            f"{drift.new_ids * (periods + drift.id_lifetime - 1)} over the {periods} periods); read in order")
