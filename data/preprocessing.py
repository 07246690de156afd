"""The one function from the features as they are in the data to what a model receives: the pipeline's and the export's.

A click source's pipeline reads raw features (Criteo's integers and hexadecimal strings, or a TFRecord schema's
named features) and calls its Preprocessing on each batch of them; the exported model wraps the same object
(made again from `config`, which is plain JSON), so a serving system sends raw features and needs no
re-implementation of the hashing. Every call takes a batch: a dict of tensors with a leading batch axis (ragged
for variable-length features). Numeric counts become log(1 + max(x, 0)) (Criteo's integers, a schema's int64
numeric features; float32 ones pass as they are, a variable-length one as the mean of its values, 0 when empty).
A categorical value becomes a 62-bit id hashed from its feature, the salt and the value (a hashed table takes it
modulo its rows); a feature of several values gives several ids, pooled by the model's mean.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from data.criteo_layout import CATEGORICAL_FEATURES, NUMERIC_FEATURES

ID_BUCKETS = 1 << 62
VARIABLE = "variable"


def counts(values: tf.Tensor) -> tf.Tensor:
    """Integer counts as the models take them: log(1 + max(x, 0)) in float32."""
    return tf.math.log1p(tf.maximum(tf.cast(values, tf.float32), 0.0))


def hashed_ids(keys: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """62-bit ids of `values` (strings), each keyed by its feature's `keys` prefix ("<feature>:<salt>:")."""
    return tf.strings.to_hash_bucket_fast(tf.strings.join([tf.broadcast_to(keys, tf.shape(values)), values]),
                                          ID_BUCKETS)


@dataclasses.dataclass(frozen=True)
class CriteoPreprocessing:
    """Criteo: {integers: int64 [13] (empty as 0), categories: string [26] (empty is its own value)} ->
    {dense: float32 [13], ids: int64 [26]}; hex strings are read in any case."""

    salt: int = 0

    @property
    def config(self) -> dict:
        return {"kind": "criteo", "salt": self.salt}

    @property
    def raw_spec(self) -> dict:
        return {"integers": tf.TensorSpec([NUMERIC_FEATURES], tf.int64, name="integers"),
                "categories": tf.TensorSpec([CATEGORICAL_FEATURES], tf.string, name="categories")}

    @property
    def feature_spec(self) -> dict:
        return {"dense": tf.TensorSpec([NUMERIC_FEATURES], tf.float32),
                "ids": tf.TensorSpec([CATEGORICAL_FEATURES], tf.int64)}

    def __call__(self, raw: dict) -> dict:
        keys = tf.constant([f"{k}:{self.salt}:" for k in range(CATEGORICAL_FEATURES)])
        return {"dense": counts(raw["integers"]), "ids": hashed_ids(keys, tf.strings.lower(raw["categories"]))}


@dataclasses.dataclass(frozen=True)
class SchemaPreprocessing:
    """A TFRecord schema's features (`schema`: name -> {dtype, shape}) -> {dense: float32 [numeric columns],
    ids: int64 [categorical features]}, ids ragged [features, None] when any categorical feature holds several
    values (a fixed [n > 1] or variable-length one); numeric and categorical name the features in order."""

    schema: dict
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    salt: int = 0

    @property
    def config(self) -> dict:
        return {"kind": "schema", "schema": self.schema, "numeric": list(self.numeric),
                "categorical": list(self.categorical), "salt": self.salt}

    @property
    def raw_spec(self) -> dict:
        return {name: feature_spec(self.schema[name], name) for name in (*self.numeric, *self.categorical)}

    @property
    def pooled(self) -> bool:
        return any(self.schema[name].get("shape", [1]) != [1] for name in self.categorical)

    @property
    def feature_spec(self) -> dict:
        columns = sum(_width(self.schema[name]) for name in self.numeric)
        ids = (tf.RaggedTensorSpec([len(self.categorical), None], tf.int64, ragged_rank=1, row_splits_dtype=tf.int64)
               if self.pooled else tf.TensorSpec([len(self.categorical)], tf.int64))
        return {"dense": tf.TensorSpec([columns], tf.float32), "ids": ids}

    def __call__(self, raw: dict) -> dict:
        dense = [self._numeric(raw[name], self.schema[name]) for name in self.numeric]
        ids = [self._ids(name, raw[name]) for name in self.categorical]
        if self.pooled:
            rows = tf.ragged.stack([_ragged(values) for values in ids], axis=1).values  # [batch x features, None]
            stacked = tf.RaggedTensor.from_uniform_row_length(rows, len(ids))  # [batch, features, None]
        else:
            stacked = tf.concat([tf.reshape(values, [-1, 1]) for values in ids], axis=1)
        return {"dense": tf.concat(dense, axis=1) if dense else tf.zeros([_rows(ids[0]), 0]), "ids": stacked}

    @staticmethod
    def _numeric(values, entry: dict) -> tf.Tensor:
        """[batch, n] columns; a variable-length feature's mean as one column."""
        if isinstance(values, tf.RaggedTensor):
            values = tf.cast(values, tf.float32)
            total = tf.reduce_sum(values, axis=1)
            values = tf.math.divide_no_nan(total, tf.cast(values.row_lengths(), tf.float32))[:, tf.newaxis]
            return counts(values) if entry["dtype"] == "int64" else values
        return counts(values) if entry["dtype"] == "int64" else tf.cast(values, tf.float32)

    def _ids(self, name: str, values):
        text = values if values.dtype == tf.string else tf.strings.as_string(values)
        key = tf.constant(f"{name}:{self.salt}:")
        if isinstance(text, tf.RaggedTensor):
            return text.with_flat_values(hashed_ids(key, text.flat_values))
        return hashed_ids(key, text)


def _width(entry: dict) -> int:
    shape = entry.get("shape", [1])
    return 1 if shape == VARIABLE else int(shape[0])


def _ragged(values) -> tf.RaggedTensor:
    if isinstance(values, tf.RaggedTensor):
        return values
    return tf.RaggedTensor.from_tensor(values, row_splits_dtype=tf.int64)


def _rows(values) -> tf.Tensor:
    return values.nrows() if isinstance(values, tf.RaggedTensor) else tf.shape(values, out_type=tf.int64)[0]


DTYPES = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}


def feature_spec(entry: dict, name: str | None = None):
    """One schema entry's per-example spec: a TensorSpec [n], or a ragged [None] for "variable"."""
    shape, dtype = entry.get("shape", [1]), DTYPES[entry["dtype"]]
    if shape == VARIABLE:
        return tf.RaggedTensorSpec([None], dtype, ragged_rank=0, row_splits_dtype=tf.int64)
    return tf.TensorSpec(list(shape), dtype, name=name)


def from_config(config: dict | None):
    """The Preprocessing a `config` (as written into an exported model) describes; None stays None."""
    if config is None:
        return None
    if config["kind"] == "criteo":
        return CriteoPreprocessing(config["salt"])
    return SchemaPreprocessing(config["schema"], tuple(config["numeric"]), tuple(config["categorical"]),
                               config["salt"])
