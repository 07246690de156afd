"""The user's code named in cluster.json (a model, dataset or topic parser function), checked on the lead's host
before any task starts: in a child process with the chief's python, directory and environment (the module may
import TensorFlow, whose noise stays out of here), which prints one line per problem as JSON."""

from __future__ import annotations

import json
import os
import socket
import subprocess

from cluster import taskspec, user_model
from cluster.config import PROJECT_ROOT, ClusterConfig
from cluster.training_names import USER_MODEL_PATTERN


def problems(config: ClusterConfig, python: str | None) -> list[str]:
    """Every problem of the user model, the user dataset function and the topic parser, one line each, checked with
    `python` (the lead's; when it is missing, machine_problems says so and nothing is checked here)."""
    if python is None:
        return []
    return model_problems(config, python) + dataset_problems(config, python) + parser_problems(config, python)


def model_problems(config: ClusterConfig, python: str) -> list[str]:
    """A user model (`package.module:function`) the chief could not build: importable, a function, its
    parameters."""
    spec = config.training.model
    if not USER_MODEL_PATTERN.match(spec):
        return []
    return _checked_in_child(config, python, "training.model", spec, ["cluster.user_model", spec])


def dataset_problems(config: ClusterConfig, python: str) -> list[str]:
    """A user dataset function the chief (or the evaluator) could not read, checked the same way: importable, of
    the right signature, returning datasets of (features, label), with a known size or steps_per_epoch."""
    spec, training = config.training.dataset, config.training
    if not USER_MODEL_PATTERN.match(spec):
        return []
    steps = json.dumps(training.steps_per_epoch)
    evaluator = json.dumps(bool(config.jobs.get("evaluator")))
    return _checked_in_child(config, python, "training.dataset", spec, ["data.user_pipeline", spec, steps, evaluator])


def parser_problems(config: ClusterConfig, python: str) -> list[str]:
    """A topic parser (`training.topic_parser`) the chief could not call on a message: importable, a function of
    one argument."""
    spec = config.training.topic_parser
    if spec is None:
        return []
    return _checked_in_child(config, python, "training.topic_parser", spec, ["online.follow.topic.parser", spec])


def _checked_in_child(config: ClusterConfig, python: str, field: str, spec: str, module_args: list[str]) -> list[str]:
    """The problem lines `python -m MODULE ARGS` prints as JSON, run on this host as the lead would run."""
    lead = config.lead
    try:
        result = subprocess.run([python, "-m", *module_args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                                env=taskspec.task_environment(config, lead, os.environ), stdin=subprocess.DEVNULL,
                                timeout=user_model.CHECK_TIMEOUT_S)
        lines = json.loads((result.stdout.strip().splitlines() or ["null"])[-1])
    except subprocess.TimeoutExpired:
        return [f"{config.source.name}: {field} = {spec!r}: checking it took over {user_model.CHECK_TIMEOUT_S} s on "
                f"{socket.gethostname()}; make its module import quickly (no work at import time)"]
    except json.JSONDecodeError:
        lines = None
    if not isinstance(lines, list):
        return [f"{config.source.name}: {field} = {spec!r}: {python} could not check it "
                f"({(result.stderr.strip().splitlines() or ['no output'])[-1]}); fix that python or the module"]
    return [f"{config.source.name}: {line}" for line in lines]
