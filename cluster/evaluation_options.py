"""The evaluator's options (cluster.json `evaluation`): which metric picks the best model, and how long to wait."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from common.fields import INT32_MAX, Check, int_in, parse_or_raise, positive_int, seconds_check


def _option(default, help_text: str):
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationOptions:
    """How the sidecar evaluator follows training."""

    best_metric: str = _option("val_accuracy", "metric that picks the best checkpoint: val_loss or val_<name> of "
                                               "one of training.metrics, as tf_keras logs it; dlrm and wide_deep: "
                                               "val_auc unless given")
    best_mode: str = _option("max", "max or min: whether a larger best_metric is better (max for accuracies and "
                                    "auc, min for val_loss and crossentropies); dlrm and wide_deep: max unless given")
    idle_timeout_s: float = _option(600.0, "give up (exit 1) when no new checkpoint arrives for this long while "
                                           "the lead's heartbeat stands still and its process is gone")
    poll_s: float = _option(2.0, "seconds between looks at the checkpoint directory")
    batch: int = _option(256, "batch size of each evaluation (the validation split, or a one-off --split)")
    read_retries: int = _option(3, "attempts to read a checkpoint that is being written or removed")
    progressive_examples: int = _option(10_000, "training.follow_data: each checkpoint is scored on up to this many "
                                                "examples of the newest data it has not trained on yet")


CHECKS = {
    "best_metric": Check(lambda v: isinstance(v, str) and v.startswith("val_") and len(v) > 4,
                         "must name a validation metric", "use val_accuracy, val_loss or val_<metric>"),
    "best_mode": Check(lambda v: v in ("max", "min"), "must be max or min", "use max for accuracy, min for loss"),
    "idle_timeout_s": seconds_check("600"),
    "poll_s": seconds_check("2"),
    "batch": Check(positive_int, f"must be an integer from 1 to {INT32_MAX}", "use e.g. 256"),
    "read_retries": Check(int_in(1, 1000), "must be an integer from 1 to 1000", "use e.g. 3"),
    "progressive_examples": Check(positive_int, f"must be an integer from 1 to {INT32_MAX}", "use e.g. 10000"),
}


def parse_evaluation_options(raw: Mapping[str, Any], field_prefix: str = "evaluation.") -> EvaluationOptions:
    """Builds EvaluationOptions, raising one UserError that lists every bad field."""
    return parse_or_raise(EvaluationOptions, raw, CHECKS, field_prefix)
