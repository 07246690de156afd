"""The click-through models' training fields (dlrm, wide_deep on Criteo data): names, checks, defaults and fit."""

from __future__ import annotations

from typing import Any, Mapping

from common.errors import Problem
from common.fields import Check, positive_int, positive_number

RECOMMENDER_MODELS = ("dlrm", "wide_deep")
CLICK_DATASETS = ("criteo", "synthetic_criteo")
CLICK_LOSS = "binary_crossentropy"
CLICK_METRICS = ("auc", "log_loss")  # the best model is picked by val_auc (max)
EMBEDDING_OPTIMIZERS = ("adagrad", "sgd", "ftrl")  # each updates only the rows a batch looks up
NUMERIC_FEATURES, CATEGORICAL_FEATURES = 13, 26  # Criteo's columns after the label
DEFAULT_TABLE_ROWS = 100_000


def _sizes(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(positive_int(n) for n in value)


def _table_rows(value: Any) -> bool:
    return positive_int(value) or _sizes(value)  # a list's length is checked against the features (data_options)


CHECKS = {
    "embedding_dim": Check(positive_int, "must be a positive integer", "use e.g. 16"),
    "table_rows": Check(_table_rows, "must be a positive integer or a list of them, one per categorical feature",
                        "use e.g. 100000 (rows, i.e. hash buckets, of every table)"),
    "bottom_mlp": Check(_sizes, "must be a non-empty list of layer widths", "use e.g. [64]"),
    "top_mlp": Check(_sizes, "must be a non-empty list of layer widths", "use e.g. [64, 32]"),
    "embedding_optimizer": Check(lambda v: v in EMBEDDING_OPTIMIZERS, "is not a sparse table optimizer (a dense one "
                                 "such as adam updates every row each step)",
                                 f"use one of {', '.join(EMBEDDING_OPTIMIZERS)}"),
    "embedding_learning_rate": Check(positive_number, "must be a positive number", "use e.g. 0.05"),
}


def rows_per_table(table_rows) -> tuple[int, ...]:
    """One size per categorical feature, from one size for all or a list."""
    return tuple(table_rows) if isinstance(table_rows, (list, tuple)) else (table_rows,) * CATEGORICAL_FEATURES


def with_click_defaults(raw: Mapping[str, Any]) -> dict:
    """A recommender trains on clicks: unless given, loss binary_crossentropy and metrics auc and log_loss."""
    if raw.get("model") not in RECOMMENDER_MODELS:
        return dict(raw)
    return {"loss": CLICK_LOSS, "metrics": list(CLICK_METRICS), **raw}


def with_click_evaluation(raw: Mapping[str, Any], model: str | None) -> dict:
    """A recommender's best model is the one of highest validation AUC, unless the evaluation section says."""
    if model not in RECOMMENDER_MODELS or "best_metric" in raw:
        return dict(raw)
    return {"best_metric": "val_auc", "best_mode": "max", **raw}


def fit_problems(options, prefix: str) -> list[Problem]:
    """A recommender needs click data (Criteo, a TFRecord schema, or a dataset function whose features it
    checks when built) and a Criteo source a click model; clicks take their own loss."""
    recommender = options.model in RECOMMENDER_MODELS
    schema = options.dataset == "tfrecord" and options.tfrecord_features is not None
    clicks, own = options.dataset in CLICK_DATASETS or schema, ":" in options.dataset
    if recommender and not (clicks or own):
        return [Problem(f"{prefix}dataset", options.dataset, f"is not click data, which {options.model} needs",
                        'use "dataset": "criteo" (with data_dir), "synthetic_criteo", "tfrecord" with '
                        "tfrecord_features, or your own dataset function (docs/your-data.md)")]
    if clicks and not recommender and ":" not in options.model:
        return [Problem(f"{prefix}model", options.model, f"cannot read {options.dataset}'s numeric and categorical "
                        "features", f"use one of {', '.join(RECOMMENDER_MODELS)}, or your own model "
                        "(package.module:function)")]
    if options.loss == CLICK_LOSS and not (clicks or own):
        return [Problem(f"{prefix}loss", options.loss, "needs click labels (0 or 1), not classes",
                        "use sparse_categorical_crossentropy, or a click data set with dlrm or wide_deep")]
    if recommender and options.loss != CLICK_LOSS:
        return [Problem(f"{prefix}loss", options.loss, "does not fit click labels (0 or 1)",
                        f'use "loss": "{CLICK_LOSS}" or leave it out')]
    return []


def metrics_for(loss: str) -> tuple[str, ...] | None:
    """The metrics a click loss allows (None: not a click loss)."""
    return CLICK_METRICS if loss == CLICK_LOSS else None
