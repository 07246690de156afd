"""Checks of the training options: one per field (a fixable error each), then the checks across fields."""

from __future__ import annotations

from typing import Any

from cluster import data_options, follow_checks
from cluster import dynamic_table_options as tables
from cluster import recommender_options as clicks
from cluster.strategies import STRATEGY_NAMES, StrategyName
from cluster.training_names import (COLLECTIVE_NAMES, CONVOLUTIONAL_MODELS, LOOP_NAMES, LOSS_NAMES,
                                    MAX_SIDE, METRIC_NAMES, MODEL_NAMES, ONE_HOT_LABEL_METRICS, ONE_HOT_LOSSES,
                                    OPTIMIZER_NAMES, RESIZED_DATASETS, SEED_LIMIT, SPARSE_LABEL_METRICS,
                                    TFRECORD_IMAGE_KEY, TFRECORD_LABEL_KEY, USER_MODEL_PATTERN)
from cluster.training_options import TrainingOptions
from common.errors import Problem
from common.fields import (INT32_MAX, MAX_SECONDS, Check, int_in, is_number, optional_positive_int, positive_int,
                           positive_number, seconds, seconds_check)


def _model_name(value: Any) -> bool:
    return isinstance(value, str) and (value in MODEL_NAMES or bool(USER_MODEL_PATTERN.match(value)))


def _side(value: Any) -> bool:
    return positive_int(value) and value <= MAX_SIDE


def _count(example: str) -> Check:
    return Check(positive_int, f"must be an integer from 1 to {INT32_MAX}", f"use e.g. {example}")


def _non_empty_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _fraction(value: Any) -> bool:
    return is_number(value) and 0 < value < 1


def _held_out(value: Any) -> bool:
    """null, a fraction, or a non-empty list of distinct day numbers."""
    if isinstance(value, (list, tuple)):
        return bool(value) and all(int_in(0, 10_000)(d) for d in value) and len(set(value)) == len(value)
    return value is None or _fraction(value)


CHECKS = {
    "model": Check(_model_name, "unknown model",
                   f"use one of {', '.join(MODEL_NAMES)} or 'package.module:function'"),
    "data_dir": Check(lambda v: v is None or _non_empty_text(v), "must be a path", "give a directory or null"),
    "image_size": Check(lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(_side(n) for n in v),
                        f"must be [height, width] in pixels, each 1 to {MAX_SIDE}", "use e.g. [224, 224]"),
    "augment": Check(lambda v: isinstance(v, bool), "must be true or false", "use false unless training images "
                     "should be augmented"),
    "skip_corrupt": Check(lambda v: isinstance(v, bool), "must be true or false",
                          "use false to stop at the first corrupt image"),
    "criteo_validation": Check(_held_out, "must be null, a fraction between 0 and 1, or a list of distinct day "
                               "numbers", "use null for the published convention, e.g. 0.1, or e.g. [23]"),
    "validation_fraction": Check(_fraction, "must be a fraction between 0 and 1 (both excluded)", "use e.g. 0.1"),
    "tfrecord_image_key": Check(_non_empty_text, "must be a feature name", f"use e.g. {TFRECORD_IMAGE_KEY}"),
    "tfrecord_label_key": Check(_non_empty_text, "must be a feature name", f"use e.g. {TFRECORD_LABEL_KEY}"),
    "tfrecord_num_classes": Check(optional_positive_int, f"must be an integer from 1 to {INT32_MAX}, or null",
                                  "use null to count the classes from the labels"),
    "synthetic_shape": Check(lambda v: isinstance(v, (list, tuple)) and 1 <= len(v) <= 3
                             and all(_side(n) for n in v), f"must be a list of 1 to 3 sizes, each 1 to {MAX_SIDE}",
                             "use e.g. [28, 28, 1]"),
    "synthetic_examples": _count("4096"),
    "strategy": Check(lambda v: v in STRATEGY_NAMES, "unknown strategy", f"use one of {', '.join(STRATEGY_NAMES)}"),
    "collective": Check(lambda v: v in COLLECTIVE_NAMES, "unknown collective implementation",
                        f"use one of {', '.join(COLLECTIVE_NAMES)}"),
    "loop": Check(lambda v: v in LOOP_NAMES, "unknown training loop", f"use one of {', '.join(LOOP_NAMES)}"),
    "backup_every_steps": _count("100"),
    "epochs": _count("4"),
    "per_worker_batch": _count("32"),
    "steps_per_epoch": Check(optional_positive_int, f"must be an integer from 1 to {INT32_MAX}, or null",
                             "use null to derive it from the data set size"),
    "steps_per_execution": _count("10"),
    "optimizer": Check(lambda v: v in OPTIMIZER_NAMES, "unknown optimizer",
                       f"use one of {', '.join(OPTIMIZER_NAMES)}"),
    "learning_rate": Check(positive_number, "must be a positive number", "use e.g. 0.001"),
    "lr_decay_epochs": Check(lambda v: isinstance(v, (list, tuple)) and all(positive_int(e) for e in v),
                             f"must be a list of epoch numbers from 1 to {INT32_MAX}", "use e.g. [4, 6] or []"),
    "lr_decay_factor": Check(lambda v: is_number(v) and 0 < v <= 1, "must be in (0, 1]", "use e.g. 0.1"),
    "loss": Check(lambda v: v in (*LOSS_NAMES, clicks.CLICK_LOSS), "unknown loss for class labels or clicks",
                  f"use one of {', '.join(LOSS_NAMES)} ({clicks.CLICK_LOSS} for dlrm, wide_deep)"),
    "metrics": Check(lambda v: isinstance(v, (list, tuple)) and all(m in (*METRIC_NAMES, *clicks.CLICK_METRICS)
                                                                    for m in v)
                     and len(set(v)) == len(v), "must be a list of distinct Keras metric names",
                     f"use some of {', '.join(METRIC_NAMES)} ({', '.join(clicks.CLICK_METRICS)} for click data)"),
    "output_dir": Check(_non_empty_text, "must be a path", "give a directory, e.g. output"),
    "output_dir_shared": Check(lambda v: isinstance(v, bool), "must be true or false",
                               "use true when every ps reaches output_dir at the same path, else false"),
    "min_shard_bytes": Check(int_in(1, 2**63 - 1), "must be a positive integer (int64)", "use e.g. 262144 (256 KiB)"),
    "max_shards": Check(optional_positive_int, f"must be an integer from 1 to {INT32_MAX}, or null",
                        "use null for one shard per ps"),
    "checkpoint_every_s": Check(lambda v: (is_number(v) and v == 0) or seconds(v),
                                f"must be 0 or a positive number of seconds, at most {MAX_SECONDS}",
                                "use e.g. 600, or 0 for epoch ends only"),
    "stream_chunk_mb": Check(lambda v: is_number(v) and 0.001 <= v <= 1 << 20,
                             f"must be a number of MB from 0.001 to {1 << 20}", "use e.g. 64"),
    "keep_checkpoints": Check(int_in(2, INT32_MAX), f"must be an integer from 2 to {INT32_MAX}",
                              "keep at least 2 so the evaluator can read one while the next is written"),
    "keep_unevaluated_checkpoints": Check(int_in(2, INT32_MAX), f"must be an integer from 2 to {INT32_MAX}",
                                          "use e.g. 10 (a followed run's newest checkpoint waits for newer data, so "
                                          "the evaluator needs at least 2)"),
    "probe_timeout_s": seconds_check("60"),
    "seed": Check(int_in(0, SEED_LIMIT - 1), f"must be an integer from 0 to {SEED_LIMIT - 1}",
                  "use e.g. 0 (numpy takes seeds in [0, 2**32))"),
    "progress_every_s": seconds_check("30"),
    **follow_checks.CHECKS,
    **clicks.CHECKS,
    **data_options.CHECKS,
    **tables.CHECKS,
}


def cross_field_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    """What no single field shows: a loop the strategy cannot run, data the model cannot read, mismatched metrics."""
    return [*_loop_problems(options, prefix), *clicks.fit_problems(options, prefix),
            *_metric_problems(options, prefix), *_shape_problems(options, prefix),
            *data_options.problems(options, prefix), *follow_checks.follow_problems(options, prefix),
            *tables.cross_field_problems(options, prefix)]


def _loop_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    if options.loop == "custom" and options.strategy == StrategyName.PARAMETER_SERVER:
        return [Problem(f"{prefix}loop", options.loop, "the custom loop needs a synchronous strategy",
                        'use "loop": "fit" with parameter_server, or another strategy')]
    return []


def _metric_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    """Each metric must fit the labels the loss asks for: class indices, or one-hot for ONE_HOT_LOSSES."""
    one_hot = options.loss in ONE_HOT_LOSSES
    fitting = clicks.metrics_for(options.loss) or (ONE_HOT_LABEL_METRICS if one_hot else SPARSE_LABEL_METRICS)
    labels = "click labels" if clicks.metrics_for(options.loss) else "one-hot labels" if one_hot else \
        "class-index labels"
    return [Problem(f"{prefix}metrics", list(options.metrics), f"{name} does not work with the {labels} that loss "
                    f"{options.loss} trains on", f"use some of {', '.join(fitting)}")
            for name in options.metrics if name not in fitting]


def _shape_problems(options: TrainingOptions, prefix: str) -> list[Problem]:
    """The built-in convolutional models reshape flat inputs to a square image, and cnn's 3x3 kernel needs 3x3."""
    if options.model not in CONVOLUTIONAL_MODELS or options.dataset not in ("synthetic", *RESIZED_DATASETS):
        return []
    field = "synthetic_shape" if options.dataset == "synthetic" else "image_size"
    shape = getattr(options, field)
    if len(shape) == 1 and round(shape[0] ** 0.5) ** 2 != shape[0]:
        return [Problem(f"{prefix}{field}", list(shape), f"{options.model} reshapes flat inputs to a square image, "
                        "and this size is not a square", "use e.g. [784] (28x28) or [28, 28, 1]")]
    sides = [round(shape[0] ** 0.5)] if len(shape) == 1 else shape[:2]
    if options.model == "cnn" and min(sides) < 3:
        return [Problem(f"{prefix}{field}", list(shape), "cnn's 3x3 convolution needs images of at least 3x3",
                        "use e.g. [28, 28, 1], or the mlp model")]
    return []
