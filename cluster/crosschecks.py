"""Checks across sections of cluster.json (metrics, hosts, GPUs, placement, paths); each returns Problems."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from cluster.evaluation_options import EvaluationOptions
from cluster.strategies import strategy_named
from cluster.training_options import TrainingOptions
from cluster.training_names import MINIMISED_METRICS
from common.errors import Problem


def valid_best_metrics(training: TrainingOptions) -> list[str]:
    """What the evaluator reports: val_loss and val_<name> for each metric, named as tf_keras names it in its logs
    (the string given to compile: "acc" is logged as acc, "accuracy" as accuracy)."""
    return ["val_loss", *(f"val_{name}" for name in training.metrics)]


def best_metric_problems(training: TrainingOptions, evaluation: EvaluationOptions) -> list[Problem]:
    """best_metric must be one the evaluator will report, and best_mode must not pick the worst checkpoint."""
    valid = valid_best_metrics(training)
    metric = evaluation.best_metric
    if metric not in valid:
        return [Problem("evaluation.best_metric", metric, "is not among the validation metrics of this training "
                        f"(training.metrics = {list(training.metrics)})", f"use one of {', '.join(valid)}, or add "
                        f"{metric.removeprefix('val_')} to training.metrics")]
    smaller_is_better = metric.removeprefix("val_") in MINIMISED_METRICS
    if (evaluation.best_mode == "min") != smaller_is_better:
        wanted = "min" if smaller_is_better else "max"
        return [Problem("evaluation.best_mode", evaluation.best_mode, f"would keep the worst checkpoint by {metric}",
                        f'use "best_mode": "{wanted}"')]
    return []


def host_key(host: str) -> str:
    """Host names compare without case or a trailing dot."""
    return host.lower().rstrip(".")


def unknown_host_problems(hosts: Mapping, jobs: Mapping[str, tuple]) -> list[Problem]:
    """A hosts entry that matches no task's host is a typo whose settings (GPUs, ssh user) silently go unused."""
    known = sorted({a.host for addresses in jobs.values() for a in addresses})
    return [Problem(f"hosts.{name}", name, "matches no host in cluster, so its settings would be ignored",
                    f"use the host exactly as written in cluster: {', '.join(known) or '(none)'}")
            for name in hosts if name not in known]


def duplicate_gpu_problems(hosts: Mapping) -> list[Problem]:
    problems = []
    for name, settings in hosts.items():
        repeated = sorted({g for g in settings.gpus if settings.gpus.count(g) > 1})
        if repeated:
            problems.append(Problem(f"hosts.{name}.gpus", list(settings.gpus), f"lists GPU {repeated[0]} twice, so "
                                    "two workers would share it", "list each GPU id once"))
    return problems


def lead_address(jobs: Mapping[str, tuple], training: TrainingOptions):
    """The lead trainer's address (the chief, or worker 0 under multi_worker_mirrored), None when missing."""
    lead = jobs.get(strategy_named(training.strategy).lead_job, ())
    return lead[0] if lead else None


def evaluator_placement_problems(jobs: Mapping[str, tuple], training: TrainingOptions) -> list[Problem]:
    """The evaluator reads the lead trainer's checkpoints from its output_dir: it must run on the same host.
    A loopback address and a host name may both be this machine: the launcher's preflight judges that pair."""
    lead, evaluators = lead_address(jobs, training), jobs.get("evaluator", ())
    if not (lead and evaluators) or "this machine" in (lead.place[0], evaluators[0].place[0]):
        return []
    if lead.place[0] == evaluators[0].place[0]:
        return []
    return [evaluator_problem(evaluators[0], lead, training)]


def evaluator_problem(evaluator, lead, training: TrainingOptions) -> Problem:
    who = "worker 0" if strategy_named(training.strategy).lead_job == "worker" else "the chief"
    return Problem("cluster.evaluator[0]", str(evaluator), f"runs on another host than {who} ({lead}), whose "
                   "output_dir it must read", f'put it on {lead.host}, e.g. "{lead.host}:{evaluator.port}"')


def directory_problems(training: TrainingOptions, logs_dir: str, root: Path) -> list[Problem]:
    """output_dir and logs_dir must be distinct directories (a file in the way fails only once tasks start)."""
    fields = (("training.output_dir", training.output_dir), ("launcher.logs_dir", logs_dir))
    problems = [p for field, given in fields for p in _directory_problem(field, given, root)]
    if not problems and _resolved(training.output_dir, root) == _resolved(logs_dir, root):
        problems.append(Problem("launcher.logs_dir", logs_dir, f"is training.output_dir ({training.output_dir}) "
                                "too: task logs would mix with checkpoints", 'give each its own directory, e.g. '
                                '"logs" and "output"'))
    return problems


def _directory_problem(field: str, given: str, root: Path) -> list[Problem]:
    try:
        path = _resolved(given, root)
        blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    except (RuntimeError, ValueError, OSError) as error:  # ~nobody, a NUL byte, a name too long
        return [Problem(field, given, f"is not a usable path ({error})", "give a plain directory path")]
    if blocking is None:
        return []
    return [Problem(field, given, f"{blocking} is a file, not a directory", "move the file away or name another "
                    "directory")]


def _resolved(path: str, root: Path) -> Path:
    return (root / Path(path).expanduser()).resolve()


def shared_output_problems(training: TrainingOptions, backend: str, output_volume: str | None) -> list[Problem]:
    """output_dir declared shared under Kubernetes needs the claim every pod mounts (without it each has its own)."""
    if not (training.output_dir_shared and backend == "kubernetes" and output_volume is None):
        return []
    return [Problem("training.output_dir_shared", True, "needs kubernetes.output_volume: without it each pod has a "
                    "folder of its own", "give a ReadWriteMany PersistentVolumeClaim, or set it false")]
