"""Click-through models over numeric and categorical features: dlrm and wide_deep, with their options.

Inputs are a dict as the data describes it (data/preprocessing.py): `dense` float32 [batch, numeric columns]
(Criteo: 13, already log(1 + x)) and `ids` int64 [batch, categorical features] (Criteo: 26; 62-bit ids keyed by
feature and value: hashed tables take them modulo their rows, dynamic tables give each its own row), or ragged
[batch, features, None] when a feature holds several values (their vectors pooled by mean). Output: the click
probability [batch, 1]. Build and compile under the strategy's scope so the partitioner splits the tables over
the ps.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
import tf_keras
from tf_keras import layers

from models.input_contract import keras_inputs
from models.packed import PackedMLP
from tables.pooling import MeanPooled
from tables.sparse import SparseDenseModel, check_tables_sparse, make_embedding_optimizer
from tables import kinds
from data.contract import describe
from data.criteo_layout import CATEGORICAL_FEATURES
from data.preprocessing import CriteoPreprocessing
from cluster import dynamic_table_options as dynamic_options
from common.errors import Problem, UserError
from common.fields import Check, is_int, parse_or_raise, positive_int, positive_number

METRICS_FOR_CLICKS = ("auc", "log_loss")  # the evaluator picks the best model by val_auc (mode max)
CRITEO_FEATURES = CriteoPreprocessing().feature_spec  # {dense: float32 [13], ids: int64 [26]}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecommenderOptions:
    """What dlrm and wide_deep are built from (fields of cluster.json's `training` once integrated)."""

    embedding_dim: int = 16
    table_rows: int | tuple[int, ...] = 100_000  # rows (hash buckets) of each table, or one size per table
    bottom_mlp: tuple[int, ...] = (64,)  # dlrm: numeric features -> these -> embedding_dim
    top_mlp: tuple[int, ...] = (64, 32)  # dlrm: after the interaction; wide_deep: the deep part
    embedding_optimizer: str = "adagrad"  # adagrad, sgd or ftrl: updates only looked-up rows
    embedding_learning_rate: float = 0.05
    fused_tables: bool = True  # all tables as row ranges of one variable: one lookup per step, even shards
    deduplicate_ids: bool = True  # tf.unique before the lookup: a hot id moves once per step
    packed_mlp: bool = True  # each MLP's weights in one variable: one transfer each way per step, not 2 per layer
    hash_salt: int = 0  # criteo: salt of the categorical hashing
    embedding_kind: str = dynamic_options.DEFAULT_KIND  # hashed (rows by id modulo table_rows) or dynamic
    embedding_capacity: int = dynamic_options.DEFAULT_CAPACITY  # dynamic: rows in all, spread over the ps
    admit_after: int = dynamic_options.DEFAULT_ADMIT_AFTER  # dynamic: sightings before an id gets its own row
    admit_window_steps: int = dynamic_options.DEFAULT_ADMIT_WINDOW_STEPS  # dynamic: ... within so many steps
    admission_halving: str = dynamic_options.DEFAULT_ADMISSION_HALVING  # dynamic: by_load or by_window
    expire_after_steps: int = dynamic_options.DEFAULT_EXPIRE_AFTER_STEPS  # dynamic: idle steps before a row is freed
    expire_after_s: float = dynamic_options.DEFAULT_EXPIRE_AFTER_S  # dynamic: or idle seconds

    @property
    def rows_per_table(self) -> tuple[int, ...]:
        return self.rows_for(CATEGORICAL_FEATURES)

    def rows_for(self, tables: int) -> tuple[int, ...]:
        """One size per table, for `tables` categorical features."""
        rows = self.table_rows
        return tuple(rows) if isinstance(rows, (list, tuple)) else (rows,) * tables


def _sizes(value) -> bool:
    return isinstance(value, (list, tuple)) and all(positive_int(n) for n in value)


CHECKS = {
    "embedding_dim": Check(positive_int, "must be a positive integer", "use e.g. 16"),
    "table_rows": Check(lambda v: positive_int(v) or (_sizes(v) and len(v) == CATEGORICAL_FEATURES),
                        f"must be a positive integer or a list of {CATEGORICAL_FEATURES}",
                        "use e.g. 1000000 (rows of every table)"),
    "bottom_mlp": Check(_sizes, "must be a list of layer widths", "use e.g. [64]"),
    "top_mlp": Check(_sizes, "must be a list of layer widths", "use e.g. [64, 32]"),
    "embedding_optimizer": Check(lambda v: isinstance(v, str), "must be an optimizer name", "use adagrad"),
    "embedding_learning_rate": Check(positive_number, "must be a positive number", "use e.g. 0.05"),
    "fused_tables": Check(lambda v: isinstance(v, bool), "must be true or false", "use true"),
    "deduplicate_ids": Check(lambda v: isinstance(v, bool), "must be true or false", "use true"),
    "packed_mlp": Check(lambda v: isinstance(v, bool), "must be true or false", "use true"),
    "hash_salt": Check(is_int, "must be an integer", "use e.g. 0"),
    **{name: check for name, check in dynamic_options.CHECKS.items() if not name.startswith("synthetic_")},
}


def parse_recommender_options(raw, field_prefix: str = "training.") -> RecommenderOptions:
    """RecommenderOptions from a mapping, one UserError listing every bad field; the table optimizer is checked."""
    options = parse_or_raise(RecommenderOptions, raw, CHECKS, field_prefix)
    make_embedding_optimizer(options.embedding_optimizer, options.embedding_learning_rate,
                             field=f"{field_prefix}embedding_optimizer")
    return options


def _inputs(features: dict, model: str) -> dict:
    """Inputs for the data's `dense` and `ids`; other data is refused with one line naming both."""
    dense, ids = (features.get(name) if isinstance(features, dict) else None for name in ("dense", "ids"))
    if not (isinstance(dense, tf.TensorSpec) and dense.dtype == tf.float32 and dense.shape.rank == 1
            and ids is not None and ids.dtype == tf.int64 and ids.shape.rank == (2 if _pooled(ids) else 1)):
        raise UserError(Problem("training.model", model, "takes dict {dense: float32 [numeric columns], ids: int64 "
                                f"[categorical features]}} but the data gives {describe(features)}",
                                "give it criteo, synthetic_criteo or a tfrecord schema with numeric_features and "
                                "categorical_features (docs/your-data.md)"))
    return keras_inputs(features, ("dense", "ids"))


def _pooled(ids) -> bool:
    return isinstance(ids, tf.RaggedTensorSpec)


def _tables(options: RecommenderOptions, features: dict, dim: int, name: str, splits=None, serving: bool = False):
    """The table layer for the data's categorical features, as the options choose: hashed (fused, or one per
    feature) or dynamic (always fused: one index for every feature, whose ids are keyed by feature; with
    `serving`, in its exported form); wrapped to pool several values per feature."""
    ids = features["ids"]
    layer = kinds.named(options.embedding_kind).build(options, ids.shape[0], dim, name=name, serving=serving,
                                                      splits=None if _pooled(ids) else splits)
    return MeanPooled(layer, ids.shape[0], splits=splits, name=f"{name}_pooled") if _pooled(ids) else layer


def _mlp(x, widths, prefix: str, *, packed: bool, final_activation: str | None):
    """ReLU layers of `widths`, the last with `final_activation`: one PackedMLP variable, or one Dense per layer."""
    if packed:
        return PackedMLP(widths, final_activation=final_activation, name=prefix)(x)
    for number, width in enumerate(widths):
        last = number == len(widths) - 1
        x = layers.Dense(width, activation=final_activation if last else "relu", name=f"{prefix}_{number}")(x)
    return x


class DotInteraction(layers.Layer):
    """DLRM's pairwise interaction: the dot product of every pair among [bottom output, each embedding]."""

    def call(self, vectors):  # [batch, n, dim] -> [batch, n (n - 1) / 2]
        dots = tf.matmul(vectors, vectors, transpose_b=True)
        n = vectors.shape[1]
        upper = np.array([i * n + j for i in range(n) for j in range(i + 1, n)])
        return tf.gather(tf.reshape(dots, [-1, n * n]), upper, axis=1)


class SumOverTables(layers.Layer):
    """The wide part's logit: the sum of each table's one-wide weight, [batch, tables, 1] -> [batch, 1]."""

    def call(self, weights):
        return tf.reduce_sum(weights, axis=1)


def dlrm(options: RecommenderOptions, features: dict = CRITEO_FEATURES, serving: bool = False) -> SparseDenseModel:
    """Bottom MLP on the numeric features, one embedding per categorical feature, dot interaction, top MLP (with
    `serving`, its tables in their exported form)."""
    inputs = _inputs(features, "dlrm")
    bottom = _mlp(inputs["dense"], (*options.bottom_mlp, options.embedding_dim), "bottom",
                  packed=options.packed_mlp, final_activation="relu")
    embedded = _tables(options, features, options.embedding_dim, "embeddings", serving=serving)(inputs["ids"])
    vectors = layers.Concatenate(axis=1)([layers.Reshape((1, options.embedding_dim))(bottom), embedded])
    x = layers.Concatenate()([bottom, DotInteraction(name="interaction")(vectors)])
    output = _mlp(x, (*options.top_mlp, 1), "top", packed=options.packed_mlp, final_activation="sigmoid")
    return SparseDenseModel(inputs, output, name="dlrm")


def wide_deep(options: RecommenderOptions, features: dict = CRITEO_FEATURES, serving: bool = False) -> SparseDenseModel:
    """A linear (wide) part on the categorical ids and numeric features plus a deep MLP on embeddings and numerics
    (with `serving`, its tables in their exported form)."""
    inputs = _inputs(features, "wide_deep")
    if kinds.named(options.embedding_kind).joins_parts():  # one row holds both of an id's parts
        weights, embedded = _tables(options, features, 1 + options.embedding_dim, "tables",
                                    splits=(1, options.embedding_dim), serving=serving)(inputs["ids"])
    else:
        weights = _tables(options, features, 1, "wide_weights", serving=serving)(inputs["ids"])
        embedded = _tables(options, features, options.embedding_dim, "embeddings", serving=serving)(inputs["ids"])
    wide = layers.Add()([SumOverTables(name="wide_sum")(weights),
                         layers.Dense(1, name="wide_numeric")(inputs["dense"])])
    deep = layers.Concatenate()([layers.Flatten()(embedded), inputs["dense"]])
    deep = _mlp(deep, (*options.top_mlp, 1), "deep", packed=options.packed_mlp, final_activation=None)
    output = layers.Activation("sigmoid", name="click")(layers.Add()([wide, deep]))
    return SparseDenseModel(inputs, output, name="wide_deep")


RECOMMENDERS = {"dlrm": dlrm, "wide_deep": wide_deep}


CUSTOM_OBJECTS = {**kinds.saved_layers(), "DotInteraction": DotInteraction, "SumOverTables": SumOverTables,
                  "PackedMLP": PackedMLP, "MeanPooled": MeanPooled}


def build_for_serving(name: str, options: RecommenderOptions, *, features=CRITEO_FEATURES,
                      compiled: bool = True) -> tf_keras.Model:
    """The named recommender as exported: a plain functional model (no second optimizer), its dynamic tables in
    their exported form (tables/dynamic/exported.py), compiled with its loss and click metrics; its weights
    come from a checkpoint (online/publish/). Load an export with
    `tf_keras.models.load_model(path, custom_objects=models.compiled.CUSTOM_OBJECTS)`."""
    model = RECOMMENDERS[name](options, features, serving=True)
    plain = tf_keras.Model(model.inputs, model.outputs, name=model.name)
    if compiled:
        compile_for_serving(plain)
    return plain


def compile_for_serving(model: tf_keras.Model) -> None:
    """An exported recommender's loss and click metrics, so it evaluates as loaded (e.g. `--model`)."""
    model.compile(loss="binary_crossentropy", metrics=click_metrics())


def click_metrics(names=METRICS_FOR_CLICKS) -> list:
    made = {"auc": lambda: tf_keras.metrics.AUC(name="auc"),
            "log_loss": lambda: tf_keras.metrics.BinaryCrossentropy(name="log_loss")}
    return [made[name]() for name in names]


def from_training(training) -> RecommenderOptions:
    """The RecommenderOptions that TrainingOptions `training` (already validated) give."""
    fields = {f.name for f in dataclasses.fields(RecommenderOptions)}
    return RecommenderOptions(**{k: v for k, v in dataclasses.asdict(training).items() if k in fields})


def build_and_compile(name: str, options: RecommenderOptions, dense_optimizer, *, features=CRITEO_FEATURES,
                      metric_names=METRICS_FOR_CLICKS, **compile_kwargs) -> SparseDenseModel:
    """The named recommender for the data's `features` (data/contract.py), compiled with both optimizers and their
    slots created (call under strategy.scope())."""
    model = RECOMMENDERS[name](options, features)
    check_tables_sparse(model)
    model.embedding_optimizer = make_embedding_optimizer(options.embedding_optimizer,
                                                         options.embedding_learning_rate)
    model.compile(optimizer=dense_optimizer, loss="binary_crossentropy", metrics=click_metrics(metric_names),
                  **compile_kwargs)
    model.build_optimizers()
    return model
