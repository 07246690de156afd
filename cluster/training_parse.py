"""cluster.json's training block read into TrainingOptions: every field checked, then across fields, one UserError
listing every problem; command-line overrides checked the same way."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from cluster import recommender_options as clicks
from cluster.training_checks import CHECKS, cross_field_problems
from cluster.training_options import TrainingOptions
from common.errors import UserError
from common.fields import parse_or_raise


def parse_training_options(raw: Mapping[str, Any], field_prefix: str = "training.") -> TrainingOptions:
    """Builds TrainingOptions from a mapping, raising one UserError that lists every bad field."""
    options = parse_or_raise(TrainingOptions, clicks.with_click_defaults(raw), CHECKS, field_prefix)
    problems = cross_field_problems(options, field_prefix)
    if problems:
        raise UserError(problems)
    return options


def with_overrides(options: TrainingOptions, overrides: Mapping[str, Any]) -> TrainingOptions:
    """Applies command-line overrides on top of the file's options, validating them the same way."""
    listed = ("lr_decay_epochs", "metrics")  # Fire turns `--metrics accuracy` into a plain string
    overrides = {k: [v] if k in listed and not isinstance(v, (list, tuple)) else v for k, v in overrides.items()}
    merged = {**dataclasses.asdict(options), **overrides}
    return parse_training_options(merged, field_prefix="--")
