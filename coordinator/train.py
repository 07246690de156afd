"""`python -m coordinator.train [--cluster cluster.json] [--option value ...]`: the chief's training run."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys

import fire

from coordinator.options import FIELD_NAMES, TrainingOptions, with_overrides
from data import preflight
from roles import config as cluster_config
from roles import taskspec
from roles.config import PROJECT_ROOT
from roles.errors import Problem, UserError, exit_on_user_error
from roles.fields import field_help
from roles.logs import quiet_tensorflow, task_logger


class FromFile:
    """Default of every option on the command line: take the value from cluster.json (shown as the default)."""

    def __init__(self, default):
        self.default = default

    def __repr__(self) -> str:
        return json.dumps(list(self.default) if isinstance(self.default, tuple) else self.default)


@exit_on_user_error()
def train(cluster: str = "cluster.json", **overrides) -> None:
    overrides = {name: value for name, value in overrides.items() if not isinstance(value, FromFile)}
    unknown = [name for name in overrides if name not in FIELD_NAMES]
    if unknown:
        raise UserError([Problem(f"--{name}", overrides[name], "unknown option", "see --help for the options")
                         for name in unknown])
    config = cluster_config.load(cluster)
    options = with_overrides(config.training, overrides)
    preflight(options, PROJECT_ROOT)  # data set on disk checked before TensorFlow loads
    task = config.task("chief", 0)
    taskspec.apply_to_this_process(config, task)
    log = task_logger(task.name)
    quiet_tensorflow()
    from coordinator.fit import run_training  # imports TensorFlow, so only after the environment is set
    from data.corrupt import undecodable_records_named

    with undecodable_records_named():  # a corrupt image met on a worker: one line naming it, exit 2
        run_training(config, options, log)


train.__doc__ = f"""Trains the cluster's model with ParameterServerStrategy as its chief, then exports it.

Options come from the `training` section of CLUSTER (the defaults below apply where it is silent) and
can be overridden here, e.g. `--epochs 2`.
Resumes from the last per-epoch checkpoint in OUTPUT_DIR/checkpoints; a finished run says so and stops.

Args:
  cluster: path of cluster.json.
{field_help(TrainingOptions)}
"""
train.__signature__ = inspect.Signature(
    [inspect.Parameter("cluster", inspect.Parameter.KEYWORD_ONLY, default="cluster.json")]
    + [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=FromFile(f.default))
       for f in dataclasses.fields(TrainingOptions)]
    + [inspect.Parameter("unknown", inspect.Parameter.VAR_KEYWORD)])  # so Fire hands us misspelt flags

if __name__ == "__main__":
    arguments = sys.argv[1:]
    # the catch-all keyword parameter would swallow --help, so hand it to Fire's own flag section
    fire.Fire(train, command=["--", "--help"] if {"--help", "-h"} & set(arguments) else arguments)
