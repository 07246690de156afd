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


def _option(default, help_text: str):
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingOptions:
    """What to train and how; every field can come from cluster.json's `training` or the command line."""

    model: str = _option("cnn", "cnn, mlp, resnet, mobilenet_v2, or package.module:function returning a tf_keras model")
    dataset: str = _option("digits", "digits (embedded, real) or synthetic")
    data_dir: str | None = _option(None, "directory of a file-based data set")
    epochs: int = _option(4, "epochs to train in all (a resumed run finishes the same plan)")
    per_worker_batch: int = _option(32, "examples per worker per step; the global batch is this times workers")
    steps_per_epoch: int | None = _option(None, "steps per epoch; null derives it as train examples // global batch")
    steps_per_execution: int = _option(10, "steps each worker runs per remote call")
    optimizer: str = _option("adam", "adam, sgd or rmsprop")
    learning_rate: float = _option(1e-3, "initial learning rate")
    lr_decay_epochs: tuple[int, ...] = _option((2, 3), "epochs (1-based) from which the rate is multiplied by lr_decay_factor")
    lr_decay_factor: float = _option(0.1, "factor applied at each of lr_decay_epochs")
    loss: str = _option("sparse_categorical_crossentropy", "Keras loss name")
    metrics: tuple[str, ...] = _option(("accuracy",), "Keras metric names")
    output_dir: str = _option("output", "checkpoints, TensorBoard logs, exported model and summary (chief's disk)")
    min_shard_bytes: int = _option(256 * 1024, "MinSizePartitioner: smallest shard of a variable, in bytes")
    max_shards: int | None = _option(None, "MinSizePartitioner: most shards per variable; null means one per ps")
    keep_checkpoints: int = _option(3, "newest checkpoints kept (older ones go once the evaluator has read them)")
    probe_timeout_s: float = _option(60.0, "seconds to wait for every ps and worker port before giving up")
    seed: int = _option(0, "random seed for model initialisation and shuffling")


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


def options_help() -> str:
    """One docstring `Args:` line per option, for --help."""
    return "\n".join(f"  {f.name}: {f.metadata['help']}" for f in dataclasses.fields(TrainingOptions))


def with_overrides(options: TrainingOptions, overrides: Mapping[str, Any]) -> TrainingOptions:
    """Applies command-line overrides on top of the file's options, validating them the same way."""
    listed = ("lr_decay_epochs", "metrics")  # Fire turns `--metrics accuracy` into a plain string
    overrides = {k: [v] if k in listed and not isinstance(v, (list, tuple)) else v for k, v in overrides.items()}
    merged = {**dataclasses.asdict(options), **overrides}
    return parse_training_options(merged, field_prefix="--")
