"""`python -m coordinator.train [--cluster cluster.json] [--option value ...]`: the chief's training run."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys

import fire

from cluster import config as cluster_config
from cluster import taskspec
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from cluster.strategies import StrategyName
from cluster.training_options import FIELD_NAMES, TrainingOptions
from cluster.training_parse import with_overrides
from common import durable, stack_dump
from common.errors import Problem, UserError, exit_on_user_error
from common.disk_full import exit_on_full_disk
from common.exit_file import run_recording_exit, skip_collection_at_exit
from common.fields import field_help
from common.large_buffers import return_large_buffers_at_once
from common.graph_style import trace_toolkit_code_as_written
from common.logs import quiet_tensorflow, task_logger
from common.version import titled
from data import preflight


class FromFile:
    """Default of every option on the command line: take the value from cluster.json (shown as the default)."""

    def __init__(self, default):
        self.default = default

    def __repr__(self) -> str:
        return json.dumps(list(self.default) if isinstance(self.default, tuple) else self.default)


def _this_task(config: ClusterConfig, worker) -> Task:
    """chief:0, or worker:N under multi_worker_mirrored, where every worker runs this program."""
    if config.strategy.trainer_job != "worker":
        if worker is not None:
            raise UserError(Problem("--worker", worker, f"only multi_worker_mirrored runs training on workers "
                                    f"(strategy is {config.training.strategy})", "leave --worker out"))
        return config.task("chief", 0)
    if worker is None:
        raise UserError(Problem("--worker", None, "multi_worker_mirrored runs this program on every worker",
                                "give this worker's index, e.g. --worker 0 (sh run.sh starts them all)"))
    try:
        return config.task("worker", worker)
    except UserError as error:  # the lookup names --index, as roles.server calls it; here it is --worker
        raise UserError([dataclasses.replace(p, field="--worker") for p in error.problems]) from None


def _trainer_workers(config: ClusterConfig, workers) -> ClusterConfig:
    """The config narrowed to `--workers` (indices into cluster.worker, e.g. `0,2`): the launcher leaves lost
    workers out of the chief's training cluster, since TensorFlow waits at start-up for every worker listed."""
    if workers is None:
        return config
    listed = workers if isinstance(workers, (tuple, list)) else str(workers).split(",")
    count = len(config.jobs.get("worker", ()))
    try:
        indices = tuple(int(i) for i in listed)
    except (TypeError, ValueError):
        indices = ()
    if not indices or len(set(indices)) != len(indices) or not all(0 <= i < count for i in indices):
        raise UserError(Problem("--workers", workers, f"must be distinct worker indices from 0 to {count - 1}",
                                "give e.g. --workers 0,2, or leave it out to train with every worker"))
    return dataclasses.replace(config, trainer_workers=indices)


@exit_on_user_error()
def train(cluster: str = "cluster.json", worker: int | None = None, workers=None, **overrides) -> None:
    overrides = {name: value for name, value in overrides.items() if not isinstance(value, FromFile)}
    unknown = [name for name in overrides if name not in FIELD_NAMES]
    if unknown:
        raise UserError([Problem(f"--{name}", overrides[name], "unknown option", "see --help for the options")
                         for name in unknown])
    config = cluster_config.load(cluster)
    config = dataclasses.replace(_trainer_workers(config, workers), training=with_overrides(config.training, overrides))
    options = config.training
    preflight(options, PROJECT_ROOT)  # data set on disk checked before TensorFlow loads
    durable.refuse_object_store(str(config.path(options.output_dir)), "training.output_dir")  # renames publish
    task = _this_task(config, worker)
    taskspec.apply_to_this_process(config, task)
    log = task_logger(task.name)
    quiet_tensorflow()
    trace_toolkit_code_as_written()
    return_large_buffers_at_once()  # the chief streams tables a chunk at a time, on several threads
    stack_dump.on_sigusr1()
    from data import bad_records_named  # imports TensorFlow: only after the environment is set

    if options.strategy == StrategyName.PARAMETER_SERVER:
        from coordinator.parameter_server import run_training
    else:
        from coordinator.synchronous import run_training
    with bad_records_named(), exit_on_full_disk(log, config.path(options.output_dir)):  # exit 2, exit 5
        run_training(config, options, log)


train.__doc__ = titled(f"""Trains the cluster's model with its strategy (ParameterServerStrategy by default, as chief).

Options come from the `training` section of CLUSTER (the defaults below apply where it is silent) and
can be overridden here, e.g. `--epochs 2`.
Resumes from the newest checkpoint in OUTPUT_DIR/checkpoints: under parameter_server mid-epoch, at the step
it names (written every checkpoint_every_s and on SIGTERM, which then exits with code 4); under the synchronous
strategies at an epoch's end, and the custom loop from OUTPUT_DIR/backup (every backup_every_steps). A finished
run says so and stops. The lead (the chief, or worker 0) exports the model at the end.

Args:
  cluster: path of cluster.json.
  worker: under multi_worker_mirrored, the index of the worker this process is (every worker runs it).
  workers: parameter_server: train with these workers only (indices into cluster.worker, e.g. 0,2); the launcher
    sets it when it leaves lost workers out.
{field_help(TrainingOptions)}
""")
train.__signature__ = inspect.Signature(
    [inspect.Parameter("cluster", inspect.Parameter.KEYWORD_ONLY, default="cluster.json"),
     inspect.Parameter("worker", inspect.Parameter.KEYWORD_ONLY, default=None),
     inspect.Parameter("workers", inspect.Parameter.KEYWORD_ONLY, default=None)]
    + [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=FromFile(f.default))
       for f in dataclasses.fields(TrainingOptions)]
    + [inspect.Parameter("unknown", inspect.Parameter.VAR_KEYWORD)])  # so Fire hands us misspelt flags

if __name__ == "__main__":
    arguments = sys.argv[1:]
    # the catch-all keyword parameter would swallow --help, so hand it to Fire's own flag section
    try:
        run_recording_exit(lambda: fire.Fire(train, command=["--", "--help"] if {"--help", "-h"} & set(arguments)
                                              else arguments, name="coordinator.train"))
    finally:  # the run is over, whatever its ending: leave without seconds of collection (see the function)
        skip_collection_at_exit()
