"""What each task is given: its TF_CONFIG, its environment and its command line (pure functions)."""

from __future__ import annotations

import json
import os
from typing import Mapping

from roles.config import TRAINING_JOBS, ClusterConfig, Task

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "GRPC_PROXY")
ENTRYPOINTS = {"ps": "roles.server", "worker": "roles.server",
               "chief": "coordinator.train", "evaluator": "evaluator.sidecar"}
NO_GPU = "-1"


def tf_config(config: ClusterConfig, task: Task) -> dict:
    """The TF_CONFIG for one task; the evaluator is kept out of the training cluster, where it would hang it."""
    if task.job == "evaluator":
        cluster = {"evaluator": [str(task.address)]}
    else:
        cluster = {job: [str(a) for a in config.jobs[job]] for job in TRAINING_JOBS}
    return {"cluster": cluster, "task": {"type": task.job, "index": task.index}}


def visible_gpus(config: ClusterConfig, task: Task) -> str:
    """CUDA_VISIBLE_DEVICES: one GPU per worker, in order on its host; the evaluator takes a spare one."""
    gpus = config.host(task.address.host).gpus
    workers_here = [t.index for t in config.tasks(("worker",)) if t.address.host == task.address.host]
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
    command = [python, "-m", ENTRYPOINTS[task.job]]
    if task.job in ("ps", "worker"):
        command += ["--role", task.job, "--index", str(task.index)]
    return command + ["--cluster", str(config.source)]
