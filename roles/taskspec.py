"""What each task is given: its TF_CONFIG, its environment and its command line (pure functions)."""

from __future__ import annotations

import json
import os
from typing import Mapping

from coordinator.options import MULTI_WORKER_MIRRORED, PARAMETER_SERVER
from roles.config import TRAINING_JOBS, ClusterConfig, Task

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "GRPC_PROXY")
NO_GPU = "-1"


def launched_jobs(config: ClusterConfig) -> tuple[str, ...]:
    """The jobs the training strategy runs, in start order; other jobs listed in cluster.json stay idle."""
    strategy = config.training.strategy
    if strategy == PARAMETER_SERVER:
        return ("ps", "worker", "chief", "evaluator")
    return ("worker", "evaluator") if strategy == MULTI_WORKER_MIRRORED else ("chief", "evaluator")


def trainer_jobs(config: ClusterConfig) -> tuple[str, ...]:
    """Jobs whose processes run coordinator.train and exit when training is done."""
    return ("worker",) if config.training.strategy == MULTI_WORKER_MIRRORED else ("chief",)


def lead_task(config: ClusterConfig) -> Task:
    """The task that writes checkpoints, TensorBoard logs, the export and the summary."""
    return config.task(trainer_jobs(config)[0], 0)


def tf_config(config: ClusterConfig, task: Task) -> dict:
    """The TF_CONFIG for one task; the evaluator is kept out of the training cluster, where it would hang it."""
    strategy = config.training.strategy
    if task.job == "evaluator":
        cluster = {"evaluator": [str(task.address)]}
    elif strategy == MULTI_WORKER_MIRRORED:
        cluster = {"worker": [str(a) for a in config.jobs["worker"]]}  # no chief: worker 0 leads
    elif strategy != PARAMETER_SERVER:
        return {}  # one process: no cluster at all
    else:
        cluster = {job: [str(a) for a in config.jobs[job]] for job in TRAINING_JOBS}
    return {"cluster": cluster, "task": {"type": task.job, "index": task.index}}


def visible_gpus(config: ClusterConfig, task: Task) -> str:
    """CUDA_VISIBLE_DEVICES: one GPU per worker, in order on its host; the evaluator takes a spare one.

    multi_worker_mirrored splits a host's GPUs between its workers; mirrored gives the chief all of its host's
    GPUs and one_device the first.
    """
    gpus = config.host(task.address.host).gpus
    strategy = config.training.strategy
    workers_here = [t.index for t in config.tasks(("worker",)) if t.address.host == task.address.host]
    if task.job == "chief" and strategy in ("mirrored", "one_device") and gpus:
        return ",".join(map(str, gpus if strategy == "mirrored" else gpus[:1]))
    if task.job == "worker" and gpus and strategy == MULTI_WORKER_MIRRORED:
        share = len(gpus) // len(workers_here)
        position = workers_here.index(task.index)
        return ",".join(map(str, gpus[position * share:(position + 1) * share]))
    if task.job == "worker" and gpus:
        return str(gpus[workers_here.index(task.index)])
    if task.job == "evaluator" and len(gpus) > len(workers_here):
        return str(gpus[len(workers_here)])
    return NO_GPU


def task_variables(config: ClusterConfig, task: Task) -> dict[str, str]:
    """The variables this toolkit sets for a task; all must be in place before TensorFlow is imported."""
    return {
        "TF_CONFIG": json.dumps(tf_config(config, task), separators=(",", ":")),
        "CUDA_VISIBLE_DEVICES": visible_gpus(config, task),
        "GRPC_FAIL_FAST": "use_caller",
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "GRPC_VERBOSITY": "ERROR",
        "PYTHONUNBUFFERED": "1",
    }


def task_environment(config: ClusterConfig, task: Task, base: Mapping[str, str]) -> dict[str, str]:
    """The full environment for a task's process: `base` without proxies (they break gRPC), plus its variables."""
    env = {k: v for k, v in base.items() if k not in PROXY_VARIABLES}
    env.update(task_variables(config, task))
    return env


def apply_to_this_process(config: ClusterConfig, task: Task) -> None:
    """Sets this process's environment for `task`; call it before the first `import tensorflow`."""
    for name in PROXY_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(task_variables(config, task))


def task_command(config: ClusterConfig, task: Task) -> list[str]:
    """The command line that starts `task` on its host, from that host's working directory."""
    python = config.host(task.address.host).python
    if task.job in trainer_jobs(config):
        command = [python, "-m", "coordinator.train"]
        if config.training.strategy == MULTI_WORKER_MIRRORED:
            command += ["--worker", str(task.index)]
    elif task.job == "evaluator":
        command = [python, "-m", "evaluator.sidecar"]
    else:
        command = [python, "-m", "roles.server", "--role", task.job, "--index", str(task.index)]
    return command + ["--cluster", str(config.source)]
