"""A serving program that knows nothing of the toolkit: raw rows in, an exported SavedModel's predictions out (JSON).

`python tests/serving_client.py SAVED_MODEL criteo FILE COUNT`: the first COUNT lines of a Criteo TSV file, parsed
here (label, 13 integers, 26 hexadecimal strings; empty integers as 0), sent as {integers, categories}.
`python tests/serving_client.py SAVED_MODEL examples FILE COUNT`: the first COUNT serialized tf.train.Example
records of a TFRecord file, sent as they are to `serving_examples`.
`python tests/serving_client.py SAVED_MODEL features FILE.json -`: the raw features a REST client sends as JSON
(`{"price": [[1.5], ...], "tags": ["a", "b", ...], "tags_row_lengths": [2, ...]}`), each made a tensor of the type
`serving_default` declares. It imports only TensorFlow and numpy, as docs/your-data.md shows.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import tensorflow as tf


def criteo_rows(path: str, count: int) -> dict:
    with open(path) as handle:
        fields = [line.rstrip("\n").split("\t") for _, line in zip(range(count), handle)]
    return {"integers": tf.constant([[int(v or 0) for v in f[1:14]] for f in fields], tf.int64),
            "categories": tf.constant([f[14:40] for f in fields])}


def examples(path: str, count: int) -> dict:
    return {"examples": tf.constant([record.numpy() for record in tf.data.TFRecordDataset(path).take(count)])}


def features(serve, path: str) -> dict:
    """A JSON request's named inputs, typed as the signature declares them (as TensorFlow Serving does)."""
    declared = serve.structured_input_signature[1]
    return {name: tf.constant(value, declared[name].dtype) for name, value in json.loads(open(path).read()).items()}


def main(saved_model: str, kind: str, path: str, count: str) -> None:
    loaded = tf.saved_model.load(saved_model)
    serve = loaded.signatures["serving_examples" if kind == "examples" else "serving_default"]
    inputs = (criteo_rows(path, int(count)) if kind == "criteo" else examples(path, int(count)) if kind == "examples"
              else features(serve, path))
    predictions = serve(**inputs)["prediction"].numpy()
    print(json.dumps(np.asarray(predictions, dtype=float).reshape(-1).tolist()))


if __name__ == "__main__":
    main(*sys.argv[1:])
