"""What each task is given: its TF_CONFIG, its environment and its command line (pure functions)."""

from __future__ import annotations

import json
import os
from typing import Mapping

from cluster.config import ClusterConfig, Task
from cluster.strategies import GpuSharing

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "GRPC_PROXY")
NO_GPU = "-1"


def tf_config(config: ClusterConfig, task: Task) -> dict:
    """The TF_CONFIG for one task; the evaluator is kept out of the training cluster, where it would hang it."""
    jobs = config.strategy.cluster_jobs
    if task.job == "evaluator":
        cluster = {"evaluator": [str(task.address)]}
    elif not jobs:
        return {}  # one process: no cluster at all
    else:
        # the trainer sees the workers it trains with; servers keep their own start-up spec (TensorFlow uses the
        # coordinator's), so a worker keeps its index when the chief leaves others out
        held = config.training_jobs() if task.job == config.strategy.trainer_job else dict(config.jobs)
        cluster = {job: [str(a) for a in held[job]] for job in jobs}  # mwms: no chief, worker 0 leads
    return {"cluster": cluster, "task": {"type": task.job, "index": task.index}}


def visible_gpus(config: ClusterConfig, task: Task) -> str:
    """CUDA_VISIBLE_DEVICES for `task`, as its strategy shares its host's GPUs (see GpuSharing)."""
    gpus = config.host(task.address.host).gpus
    sharing = config.strategy.gpus
    workers_here = [t.index for t in config.tasks(("worker",)) if t.address.host == task.address.host]
    if not gpus:
        return NO_GPU
    if task.job == "chief" and sharing in (GpuSharing.ALL_TO_CHIEF, GpuSharing.FIRST_TO_CHIEF):
        return ",".join(map(str, gpus if sharing == GpuSharing.ALL_TO_CHIEF else gpus[:1]))
    if task.job == "worker" and sharing == GpuSharing.SPLIT_BETWEEN_WORKERS:
        share = len(gpus) // len(workers_here)
        position = workers_here.index(task.index)
        return ",".join(map(str, gpus[position * share:(position + 1) * share]))
    if task.job == "worker" and sharing == GpuSharing.ONE_PER_WORKER:
        return str(gpus[workers_here.index(task.index)])
    if task.job == "evaluator" and len(gpus) > len(workers_here):
        return str(gpus[len(workers_here)])
    return NO_GPU


def scheduler_gives_gpus(config: ClusterConfig, task: Task) -> bool:
    """Whether Slurm or Kubernetes' device plugin sets `task`'s CUDA_VISIBLE_DEVICES (a worker given GPUs there):
    its step or pod is then started without the toolkit's."""
    gpus = {"slurm": config.slurm.gpus_per_worker, "kubernetes": config.kubernetes.gpus_per_worker}
    return task.job == "worker" and bool(gpus.get(config.launcher.backend))


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
    strategy = config.strategy
    if task.job == strategy.trainer_job:
        command = [python, "-m", "coordinator.train"]
        if task.job == "worker":  # every worker trains (multi_worker_mirrored)
            command += ["--worker", str(task.index)]
        elif config.trainer_workers is not None:  # the launcher left lost workers out
            command += ["--workers", ",".join(map(str, config.trainer_workers))]
    elif task.job == "evaluator":
        command = [python, "-m", "evaluator.sidecar"]
    else:
        command = [python, "-m", "roles.server", "--role", task.job, "--index", str(task.index)]
    return command + ["--cluster", str(config.source)]
