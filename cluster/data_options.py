"""Checks of the bring-your-own data options: a dataset function, a TFRecord schema and which of its features feed
a click model's bottom MLP and tables (docs/your-data.md).

`training.dataset` may name a function ("package.module:function", like a user model); `tfrecord_features` gives
the schema of tfrecord's tf.train.Example records, one entry per feature: {"dtype": "int64" | "float32" |
"string", "shape": [n] or "variable" (default [1]), "label": true for the one label}; `numeric_features` and
`categorical_features` name the schema's features that dlrm and wide_deep (or a user model) receive as `dense`
and `ids`. Each mistake is one line naming the field, as for every option.
"""

from __future__ import annotations

from typing import Any

from cluster import recommender_options as clicks
from cluster.training_names import DATASET_NAMES, MODEL_NAMES, ONE_HOT_LOSSES, USER_MODEL_PATTERN
from common.errors import Problem
from common.fields import INT32_MAX, Check, optional_positive_int, positive_int

DTYPES = ("int64", "float32", "string")
NUMERIC_DTYPES, CATEGORICAL_DTYPES = ("int64", "float32"), ("string", "int64")
ENTRY_KEYS = ("dtype", "shape", "label")
VARIABLE = "variable"
EXAMPLE_SCHEMA = '{"clicked": {"dtype": "int64", "label": true}, "price": {"dtype": "float32"}}'


def is_function(dataset: Any) -> bool:
    """A dataset given as "package.module:function"."""
    return isinstance(dataset, str) and bool(USER_MODEL_PATTERN.match(dataset))


def has_schema(options) -> bool:
    return options.dataset == "tfrecord" and options.tfrecord_features is not None


def _names(value: Any) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and all(isinstance(n, str) and n for n in value)
                             and len(set(value)) == len(value))


CHECKS = {
    "dataset": Check(lambda v: v in DATASET_NAMES or is_function(v), "unknown dataset",
                     f"use one of {', '.join(DATASET_NAMES)} or 'package.module:function' (docs/your-data.md)"),
    "tfrecord_features": Check(lambda v: v is None or (isinstance(v, dict) and bool(v)), "must be a non-empty object "
                               "of feature names, or null", f"use e.g. {EXAMPLE_SCHEMA}"),
    "numeric_features": Check(_names, "must be a list of distinct feature names, or null", 'use e.g. ["price"]'),
    "categorical_features": Check(_names, "must be a list of distinct feature names, or null",
                                  'use e.g. ["country", "tags"]'),
    "num_classes": Check(optional_positive_int, f"must be an integer from 1 to {INT32_MAX}, or null",
                         "use the number of classes of the labels, or null"),
}


def _entry_problems(name: str, entry: Any, prefix: str) -> list[Problem]:
    field = f"{prefix}tfrecord_features.{name}"
    if not isinstance(entry, dict) or set(entry) - set(ENTRY_KEYS) or "dtype" not in entry:
        return [Problem(field, entry, f"must be an object of {', '.join(ENTRY_KEYS)} (dtype required)",
                        'use e.g. {"dtype": "string", "shape": "variable"}')]
    shape = entry.get("shape", [1])
    problems = []
    if entry["dtype"] not in DTYPES:
        problems.append(Problem(f"{field}.dtype", entry["dtype"], "is not a tf.train.Example type",
                                f"use one of {', '.join(DTYPES)}"))
    if shape != VARIABLE and not (isinstance(shape, (list, tuple)) and len(shape) == 1 and positive_int(shape[0])):
        problems.append(Problem(f"{field}.shape", shape, "must be [n] (values per example) or \"variable\"",
                                'use e.g. [1], [3] or "variable"'))
    if entry.get("label", False) not in (True, False):
        problems.append(Problem(f"{field}.label", entry["label"], "must be true or false", "use true for the label"))
    elif entry.get("label") and (entry["dtype"] == "string" or shape not in ([1], (1,))):
        problems.append(Problem(field, entry, "a label must be one int64 or float32 value per example",
                                'use {"dtype": "int64", "label": true}'))
    return problems


def _schema_problems(schema: dict, prefix: str) -> list[Problem]:
    problems = [p for name, entry in schema.items() for p in _entry_problems(name, entry, prefix)]
    labels = [name for name, entry in schema.items() if isinstance(entry, dict) and entry.get("label") is True]
    if len(labels) != 1:
        problems.append(Problem(f"{prefix}tfrecord_features", sorted(labels), f"marks {len(labels)} features as "
                                "the label, not one", 'add "label": true to the one feature that holds the label'))
    return problems


def _listed_problems(options, prefix: str, schema: dict) -> list[Problem]:
    """numeric_features and categorical_features name distinct, non-label schema features of fitting types."""
    problems = []
    for field, allowed in (("numeric_features", NUMERIC_DTYPES), ("categorical_features", CATEGORICAL_DTYPES)):
        for name in getattr(options, field) or ():
            entry = schema.get(name)
            if not isinstance(entry, dict) or entry.get("label") is True:
                problems.append(Problem(f"{prefix}{field}", name, "is not a feature of training.tfrecord_features "
                                        "(or is its label)", f"use some of {', '.join(_inputs(schema))}"))
            elif entry.get("dtype") in DTYPES and entry["dtype"] not in allowed:  # a wrong dtype is said above
                problems.append(Problem(f"{prefix}{field}", name, f"is {entry.get('dtype')}, which a "
                                        f"{field.split('_')[0]} feature cannot be", f"use {' or '.join(allowed)} "
                                        "features there"))
    both = set(options.numeric_features or ()) & set(options.categorical_features or ())
    if both:
        problems.append(Problem(f"{prefix}categorical_features", sorted(both), "are also numeric_features",
                                "name each feature in one of the two lists"))
    return problems


def _inputs(schema: dict) -> list[str]:
    return [name for name, entry in schema.items() if not (isinstance(entry, dict) and entry.get("label") is True)]


def _model_problems(options, prefix: str) -> list[Problem]:
    """A click model needs both lists; a zoo image model cannot read named features, and needs the classes."""
    problems = []
    listed = options.numeric_features is not None or options.categorical_features is not None
    if options.model in clicks.RECOMMENDER_MODELS and has_schema(options):
        for field in ("numeric_features", "categorical_features"):
            if not getattr(options, field):
                problems.append(Problem(f"{prefix}{field}", getattr(options, field), f"{options.model} needs the "
                                        f"{field.split('_')[0]} features named", "name them, some of "
                                        f"{', '.join(_inputs(options.tfrecord_features))}"))
    if listed and options.tfrecord_features is None:
        problems.append(Problem(f"{prefix}numeric_features", options.numeric_features, "names features of a "
                                "TFRecord schema, and there is none", "set training.tfrecord_features with "
                                '"dataset": "tfrecord", or leave numeric_features and categorical_features out'))
    zoo = options.model in MODEL_NAMES and options.model not in clicks.RECOMMENDER_MODELS
    own = is_function(options.dataset) or has_schema(options)
    if own and options.num_classes is None and (zoo or options.loss in ONE_HOT_LOSSES):
        needs = options.model if zoo else f"loss {options.loss} (one-hot labels)"
        problems.append(Problem(f"{prefix}num_classes", None, f"{needs} needs the number of classes of "
                                f"{options.dataset}'s labels", "give training.num_classes"))
    return problems


def table_count(options) -> int:
    """The categorical features, hence tables, of the click data the options describe."""
    return len(options.categorical_features or ()) if has_schema(options) else clicks.CATEGORICAL_FEATURES


def problems(options, prefix: str) -> list[Problem]:
    """What no single field shows: a schema's entries, the features named from it, what the model needs."""
    found = []
    if options.tfrecord_features is not None:
        if options.dataset != "tfrecord":
            found.append(Problem(f"{prefix}tfrecord_features", "{...}", f"describes TFRecord files, but dataset is "
                                 f"{options.dataset}", 'use "dataset": "tfrecord", or leave tfrecord_features out'))
        found += _schema_problems(options.tfrecord_features, prefix)
        found += _listed_problems(options, prefix, options.tfrecord_features)
    found += _model_problems(options, prefix)
    rows = options.table_rows
    if isinstance(rows, (list, tuple)) and len(rows) != table_count(options):
        found.append(Problem(f"{prefix}table_rows", list(rows), f"gives {len(rows)} sizes for "
                             f"{table_count(options)} categorical features", "give one size per categorical feature, "
                             "or one number for all"))
    return found
