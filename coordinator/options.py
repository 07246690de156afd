"""The coordinator's training options: one frozen dataclass, checked field by field with fixable errors."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from roles.errors import Problem, UserError

MODEL_NAMES = ("cnn", "mlp", "resnet", "mobilenet_v2")
DATASET_NAMES = ("digits", "synthetic")
OPTIMIZER_NAMES = ("adam", "sgd", "rmsprop")
USER_MODEL_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingOptions:
    """What to train and how; every field can come from cluster.json's `training` or the command line."""

    model: str = "cnn"
    dataset: str = "digits"
    data_dir: str | None = None
    epochs: int = 4
    per_worker_batch: int = 32
    steps_per_epoch: int | None = None
    steps_per_execution: int = 10
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    lr_decay_epochs: tuple[int, ...] = (2, 3)
    lr_decay_factor: float = 0.1
    loss: str = "sparse_categorical_crossentropy"
    metrics: tuple[str, ...] = ("accuracy",)
    output_dir: str = "output"
    min_shard_bytes: int = 256 * 1024
    max_shards: int | None = None
    keep_checkpoints: int = 3
    probe_timeout_s: float = 60.0
    seed: int = 0


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TrainingOptions))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(value: Any) -> bool:
    return _is_int(value) and value > 0


def _optional_positive_int(value: Any) -> bool:
    return value is None or _positive_int(value)


def _model_name(value: Any) -> bool:
    return isinstance(value, str) and (value in MODEL_NAMES or bool(USER_MODEL_PATTERN.match(value)))


def _int_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_positive_int(v) for v in value)


def _str_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)


# field -> (accepts the value, what it must be, how to fix)
_CHECKS: dict[str, tuple[Any, str, str]] = {
    "model": (_model_name, f"unknown model", f"use one of {', '.join(MODEL_NAMES)} or 'package.module:function'"),
    "dataset": (lambda v: v in DATASET_NAMES, "unknown dataset", f"use one of {', '.join(DATASET_NAMES)}"),
    "data_dir": (lambda v: v is None or (isinstance(v, str) and v), "must be a path", "give a directory or null"),
    "epochs": (_positive_int, "must be a positive integer", "use e.g. 4"),
    "per_worker_batch": (_positive_int, "must be a positive integer", "use e.g. 32"),
    "steps_per_epoch": (_optional_positive_int, "must be a positive integer or null",
                        "use null to derive it from the data set size"),
    "steps_per_execution": (_positive_int, "must be a positive integer", "use e.g. 10"),
    "optimizer": (lambda v: v in OPTIMIZER_NAMES, "unknown optimizer", f"use one of {', '.join(OPTIMIZER_NAMES)}"),
    "learning_rate": (lambda v: _is_number(v) and v > 0, "must be a positive number", "use e.g. 0.001"),
    "lr_decay_epochs": (_int_list, "must be a list of positive epoch numbers", "use e.g. [2, 3] or []"),
    "lr_decay_factor": (lambda v: _is_number(v) and 0 < v <= 1, "must be in (0, 1]", "use e.g. 0.1"),
    "loss": (lambda v: isinstance(v, str) and v, "must be a Keras loss name", "use e.g. sparse_categorical_crossentropy"),
    "metrics": (_str_list, "must be a list of Keras metric names", "use e.g. [\"accuracy\"]"),
    "output_dir": (lambda v: isinstance(v, str) and v, "must be a path", "give a directory, e.g. output"),
    "min_shard_bytes": (_positive_int, "must be a positive integer", "use e.g. 262144 (256 KiB)"),
    "max_shards": (_optional_positive_int, "must be a positive integer or null",
                   "use null for one shard per ps"),
    "keep_checkpoints": (lambda v: _is_int(v) and v >= 2, "must be an integer >= 2",
                         "keep at least 2 so the evaluator can read one while the next is written"),
    "probe_timeout_s": (lambda v: _is_number(v) and v > 0, "must be a positive number of seconds", "use e.g. 60"),
    "seed": (_is_int, "must be an integer", "use e.g. 0"),
}


def parse_training_options(raw: Mapping[str, Any], field_prefix: str = "training.") -> TrainingOptions:
    """Builds TrainingOptions from a mapping, raising one UserError that lists every bad field."""
    problems = []
    for key in raw:
        if key not in FIELD_NAMES:
            problems.append(Problem(f"{field_prefix}{key}", raw[key], "unknown training option",
                                    f"remove it or use one of: {', '.join(FIELD_NAMES)}"))
    for key, value in raw.items():
        if key in _CHECKS and not _CHECKS[key][0](value):
            _, problem, fix = _CHECKS[key]
            problems.append(Problem(f"{field_prefix}{key}", value, problem, fix))
    if problems:
        raise UserError(problems)
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    return TrainingOptions(**values)


def with_overrides(options: TrainingOptions, overrides: Mapping[str, Any]) -> TrainingOptions:
    """Applies command-line overrides on top of the file's options, validating them the same way."""
    merged = {**dataclasses.asdict(options), **overrides}
    return parse_training_options(merged, field_prefix="--")
