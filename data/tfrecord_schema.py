"""TFRecord files of tf.train.Example records of any schema (`training.tfrecord_features`), parsed with parse_example.

Records are parsed a chunk at a time: every feature as ragged first, so that a record missing a fixed-length
feature, or holding another number of values, stops the run with one line naming its file, record and feature
(not TensorFlow's message); then fixed-length features become dense [n] tensors and variable-length ones stay
ragged. The label (the entry with "label": true) becomes the example's label, one value. With numeric_features
and categorical_features named, the features then go through the schema's Preprocessing (data/preprocessing.py)
to {dense, ids}; without, a model receives the parsed features by name. The first training record is checked
against the schema before anything starts.
"""

from __future__ import annotations

import dataclasses
import struct

import tensorflow as tf

from common.errors import Problem, UserError
from data import failures
from data.layouts import tfrecord_counts
from data.preprocessing import DTYPES, VARIABLE, SchemaPreprocessing, feature_spec
from data.source import SPLITS, DataSource
from data.tfrecord import read_records

CHUNK = 256  # records parsed together
MARKER = "pscluster: record does not match the schema"
KINDS = {"int64": "int64_list", "float32": "float_list", "string": "bytes_list"}


def label_name(schema: dict) -> str:
    return next(name for name, entry in schema.items() if entry.get("label"))


def _width(entry: dict) -> int | None:
    shape = entry.get("shape", [1])
    return None if shape == VARIABLE else int(shape[0])


def parse(schema: dict, names, serialized: tf.Tensor, where: tf.Tensor) -> dict:
    """Serialized records [n] -> the `names` features of each (fixed-length dense [n, width], variable-length
    ragged [n, None]); `where` [n] names the records for the one-line failure."""
    specs = {name: tf.io.RaggedFeature(DTYPES[schema[name]["dtype"]], row_splits_dtype=tf.int64) for name in names}
    parsed = tf.io.parse_example(serialized, specs)
    features = {}
    for name in names:
        width = _width(schema[name])
        if width is None:
            features[name] = parsed[name]
            continue
        fits = tf.equal(parsed[name].row_lengths(), width)
        first = tf.argmin(tf.cast(fits, tf.int32))
        check = tf.debugging.Assert(tf.reduce_all(fits), [MARKER, tf.strings.join(
            [where[first], f", feature {name}: ", tf.strings.as_string(parsed[name].row_lengths()[first]),
             f" value(s), not {width}"])])
        with tf.control_dependencies([check]):
            features[name] = tf.reshape(parsed[name].flat_values, [-1, width])
    return features


def serving_parser(schema: dict, names):
    """Serialized records -> raw features, as the pipeline parses them (for an exported model's signature)."""
    def parse_examples(serialized):
        where = tf.strings.join(["example ", tf.strings.as_string(tf.range(tf.size(serialized)))])
        return parse(schema, names, serialized, where)

    return parse_examples


def check_first(path: str, schema: dict) -> None:
    """The first record must hold every feature of the schema, of its type and (fixed-length) size."""
    held = tf.train.Example.FromString(_first_record(path)).features.feature
    problems = [Problem(f"training.tfrecord_features.{name}", schema[name], f"is {found} in the first record of "
                        f"{path}", f"describe it as it is ({KINDS[schema[name]['dtype']]} expected), or use some of: "
                        f"{', '.join(sorted(held))}") for name, found in mismatches(held, schema)]
    if problems:
        raise UserError(problems)


def mismatches(held, schema: dict) -> list[tuple[str, str]]:
    """(feature, what it is) for each feature of the schema that the record's features `held` lack, or hold of
    another type or (fixed-length) size."""
    found = []
    for name, entry in schema.items():
        kind = held[name].WhichOneof("kind") if name in held else None
        count = len(getattr(held[name], kind).value) if kind else 0
        if kind != KINDS[entry["dtype"]] or _width(entry) not in (None, count):
            found.append((name, f"a {kind} of {count} value(s)" if kind else "missing"))
    return found


def record_problem(serialized: bytes, schema: dict) -> str:
    """Why a serialized record is not a tf.train.Example of `schema` ('' when it is one)."""
    try:
        held = tf.train.Example.FromString(serialized).features.feature
    except Exception:  # noqa: BLE001 - protobuf's DecodeError, whatever its module
        return "not a tf.train.Example"
    return "; ".join(f"{name} is {what}" for name, what in mismatches(held, schema))


def _first_record(path: str) -> bytes:
    """The bytes of a TFRecord file's first record, read without a tf.data pipeline: follow mode checks each file
    landing on its watcher thread, where a traced function would wait for every task, a frozen worker too."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        header = handle.read(12)  # the record's length (8 bytes) and the length's checksum (4)
        return handle.read(struct.unpack("<Q", header[:8])[0]) if len(header) == 12 else b""


def load(files: dict[str, tuple[str, ...]], *, schema: dict, numeric=None, categorical=None,
         num_classes: int | None = None) -> DataSource:
    """Each file is a read unit, as for image TFRecords; with numeric and categorical named, click features."""
    sizes = tfrecord_counts(files)
    check_first(files["train"][0], schema)
    source = schema_source(schema=schema, numeric=numeric, categorical=categorical, num_classes=num_classes)
    return dataclasses.replace(source, sizes=sizes, units={split: (paths,) for split, paths in files.items()})


def schema_source(*, schema: dict, numeric=None, categorical=None, num_classes: int | None = None) -> DataSource:
    """A source of no files yet that reads any TFRecord file of this schema (follow mode hands it files)."""
    label = label_name(schema)
    preprocessing = SchemaPreprocessing(schema, tuple(numeric or ()), tuple(categorical or ())) \
        if numeric is not None or categorical is not None else None
    names = list(preprocessing.raw_spec) if preprocessing else [name for name in schema if name != label]

    def reader(preprocess):
        def chunk(paths, numbers, records):
            where = tf.strings.join([paths, " record ", tf.strings.as_string(numbers)])
            parsed = parse(schema, [*names, label], records, where)
            labels = tf.reshape(parsed.pop(label), [-1])
            labels = tf.cast(labels, tf.int32) if labels.dtype == tf.int64 else labels
            return preprocess(parsed) if preprocess else parsed, labels

        def read(units: tf.data.Dataset) -> tf.data.Dataset:
            return read_records(units).batch(CHUNK).map(chunk, num_parallel_calls=tf.data.AUTOTUNE).unbatch()

        return read

    features = preprocessing.feature_spec if preprocessing else {name: feature_spec(schema[name]) for name in names}
    return DataSource(name="tfrecord", num_classes=num_classes, sizes={split: 0 for split in SPLITS},
                      units={split: ((),) for split in SPLITS}, units_are_files=True,
                      read=reader(preprocessing), read_raw=reader(None), features=features,
                      preprocessing=preprocessing, parse_examples=serving_parser(schema, names))


def _problem(where: str) -> Problem:
    return Problem("data file", where, "does not match training.tfrecord_features",
                   "fix or remove that record, or describe the feature as it is (e.g. \"shape\": \"variable\")")


MISMATCHED = failures.Failure(MARKER, _problem)
