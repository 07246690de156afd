"""cluster.json → a frozen, validated ClusterConfig; every problem in the file is reported at once."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from cluster import crosschecks, job_sizes, jsonfile
from cluster import dynamic_table_options as dynamic_tables
from cluster import kubernetes_settings as k8s
from cluster import recommender_options as clicks
from cluster.addresses import Address, Task, ip_of, parse_address
from cluster.evaluation_options import EvaluationOptions, parse_evaluation_options
from cluster.settings import (LAUNCHER_CHECKS, SLURM_CHECKS, HostSettings, LauncherSettings, SlurmSettings,
                              check_gpus_suffice, check_signal_fits, parse_hosts)
from cluster.strategies import Strategy, StrategyName, strategy_named
from cluster.training_options import TrainingOptions
from cluster.training_parse import parse_training_options
from common.errors import Problem, UserError
from common.fields import parse_section

PROJECT_ROOT = Path(__file__).resolve().parent.parent
JOBS = ("chief", "worker", "ps", "evaluator")
TOP_LEVEL_KEYS = ("$schema", "cluster", "hosts", "training", "evaluation", "launcher", "slurm", "security",
                  "kubernetes")
__all__ = ["Address", "ClusterConfig", "HostSettings", "LauncherSettings", "SlurmSettings", "Task", "load", "parse"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """The whole validated cluster.json; nothing downstream reads the JSON again."""

    source: Path
    jobs: Mapping[str, tuple[Address, ...]]
    hosts: Mapping[str, HostSettings]
    training: TrainingOptions
    evaluation: EvaluationOptions
    launcher: LauncherSettings
    slurm: SlurmSettings = SlurmSettings()
    kubernetes: k8s.KubernetesSettings = k8s.KubernetesSettings()
    # under slurm, job sizes to place on the allocation's nodes; `jobs` stays empty until they are placed
    job_sizes: Mapping[str, int] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    allow_public_addresses: bool = False
    firewall: bool = False
    # the workers (indices into `jobs["worker"]`) the chief trains with, when the launcher left lost ones out
    trainer_workers: tuple[int, ...] | None = None

    def tasks(self, jobs: tuple[str, ...] = JOBS) -> list[Task]:
        return [Task(job, i, a) for job in jobs for i, a in enumerate(self.jobs.get(job, ()))]

    def training_jobs(self) -> dict[str, tuple[Address, ...]]:
        """The jobs as the training cluster holds them: the workers in `trainer_workers` only, numbered from 0."""
        if self.trainer_workers is None:
            return dict(self.jobs)
        return {**self.jobs, "worker": tuple(self.jobs["worker"][i] for i in self.trainer_workers)}

    def training_tasks(self, jobs: tuple[str, ...] = JOBS) -> list[Task]:
        """The tasks of the training cluster, as its TF_CONFIG numbers them."""
        held = self.training_jobs()
        return [Task(job, i, a) for job in jobs for i, a in enumerate(held.get(job, ()))]

    def task(self, job: str, index: Any) -> Task:
        """Looks a task up, raising a UserError naming the valid indices when it does not exist."""
        if job not in JOBS:
            raise UserError(Problem("--role", job, "unknown role", f"use one of {', '.join(JOBS)}"))
        addresses = self.jobs.get(job, ())
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(addresses)):
            valid = f"0..{len(addresses) - 1}" if addresses else "none"
            raise UserError(Problem("--index", index, f"{self.source.name} has {len(addresses)} {job} task(s)",
                                    f"use an index in {valid}"))
        return Task(job, index, addresses[index])

    @property
    def strategy(self) -> Strategy:
        return strategy_named(self.training.strategy)

    @property
    def lead(self) -> Task:
        """The task that writes checkpoints, TensorBoard logs, the export and the summary."""
        return self.task(self.strategy.lead_job, 0)

    @property
    def input_pipelines(self) -> int:
        """Processes that read training data: every worker when workers train or serve steps, else one."""
        worker_jobs = (self.strategy.trainer_job, *self.strategy.server_jobs)
        return len(self.training_jobs().get("worker", ())) if "worker" in worker_jobs else 1

    @property
    def stop_grace_s(self) -> float:
        """The time a chief sent SIGTERM has before SIGKILL: launcher.stop_grace_s (under Kubernetes, the pod's
        termination grace when shorter: the kubelet kills it then)."""
        if self.launcher.backend == "kubernetes":
            return min(self.launcher.stop_grace_s, float(self.kubernetes.termination_grace_period_s))
        return self.launcher.stop_grace_s

    def launched_tasks(self) -> list[Task]:
        """The tasks the strategy runs, in start order; other jobs listed in cluster.json stay idle."""
        return self.tasks(self.strategy.launched_jobs)

    def host(self, name: str) -> HostSettings:
        return self.hosts.get(name, HostSettings())

    def path(self, relative: str) -> Path:
        """Resolves a path from the file against the project directory (a remote host's workdir there)."""
        return (PROJECT_ROOT / Path(relative).expanduser()).resolve()


def load(path: str | Path) -> ClusterConfig:
    """Reads and validates cluster.json, raising one UserError that lists every problem."""
    path = Path(str(path))  # Fire turns a file named 123 into an int
    return parse(jsonfile.read_document(path), path)


def parse(raw: Any, source: Path) -> ClusterConfig:
    """Validates an already-decoded cluster.json document."""
    if not isinstance(raw, dict):
        raise UserError(Problem("document", type(raw).__name__, "must be a JSON object",
                                "start from the shipped cluster.json"), source=str(source))
    problems = [Problem(key, raw[key], "unknown top-level key", f"use only {', '.join(TOP_LEVEL_KEYS)}")
                for key in raw if key not in TOP_LEVEL_KEYS]
    security = _section(raw, "security", problems)
    for key in security:
        if key not in ("allow_public_addresses", "firewall"):
            problems.append(Problem(f"security.{key}", security[key], "unknown setting",
                                    "use allow_public_addresses or firewall"))
    allow_public = security.get("allow_public_addresses", False)
    if not isinstance(allow_public, bool):
        problems.append(Problem("security.allow_public_addresses", allow_public, "must be true or false",
                                "use false unless the cluster must span public addresses"))
        allow_public = False
    firewall = security.get("firewall", False)
    if not isinstance(firewall, bool):
        problems.append(Problem("security.firewall", firewall, "must be true or false",
                                "use true to let only cluster members reach task ports (needs root)"))
        firewall = False
    training_problems: list[Problem] = []  # parsed first (the strategy decides which jobs are needed), told later
    training = _parse_or_collect(parse_training_options, _section(raw, "training", training_problems),
                                 training_problems)
    strategy = strategy_named(training.strategy if training else StrategyName.PARAMETER_SERVER)
    launcher = parse_section(LauncherSettings, _section(raw, "launcher", problems), LAUNCHER_CHECKS, "launcher.",
                             problems)
    slurm = parse_section(SlurmSettings, _section(raw, "slurm", problems), SLURM_CHECKS, "slurm.", problems)
    check_signal_fits(slurm, problems)
    kubernetes = parse_section(k8s.KubernetesSettings, _section(raw, "kubernetes", problems), k8s.KUBERNETES_CHECKS,
                               "kubernetes.", problems)
    if job_sizes.is_sized(raw.get("cluster")) or launcher.backend == "kubernetes":
        sizes, jobs = _placed_by_backend(raw.get("cluster"), strategy, launcher.backend, slurm, kubernetes, problems)
    else:
        sizes, jobs = {}, _parse_cluster(raw.get("cluster"), allow_public is True, strategy, problems)
        problems += _slurm_address_problems(jobs) if launcher.backend == "slurm" else []
    hosts = parse_hosts(_section(raw, "hosts", problems), problems)
    check_gpus_suffice(jobs, hosts, problems)
    problems += training_problems
    evaluation_raw = clicks.with_click_evaluation(_section(raw, "evaluation", problems), training and training.model)
    evaluation = _parse_or_collect(parse_evaluation_options, evaluation_raw, problems)
    if not problems:  # checks across sections, once each section is right (no echoes of a section's mistake)
        problems += _cross_section_problems(jobs, hosts, training, evaluation, launcher, kubernetes)
    if problems:
        raise UserError(problems, source=str(source))
    return ClusterConfig(source=source.resolve(), jobs=MappingProxyType(jobs), hosts=MappingProxyType(hosts),
                         training=training, evaluation=evaluation, launcher=launcher, slurm=slurm,
                         kubernetes=kubernetes, job_sizes=MappingProxyType(sizes),
                         allow_public_addresses=allow_public, firewall=firewall)


def _placed_by_backend(cluster: Any, strategy: Strategy, backend: str, slurm: SlurmSettings,
                       kubernetes: k8s.KubernetesSettings, problems: list[Problem]) -> tuple[dict, dict]:
    """(sizes, jobs): Slurm places sizes once its allocation is known; Kubernetes places them now, each task at its
    pod's host name."""
    if backend != "kubernetes":
        sizes = job_sizes.parse_sizes(cluster, strategy, backend, problems)
        problems += job_sizes.port_range_problems(sizes, slurm.port_base)
        return sizes, {}
    sized = job_sizes.is_sized(cluster)
    sizes = job_sizes.parse_sizes(cluster, strategy, backend, problems) if sized else {}
    problems += k8s.kubernetes_problems(kubernetes, sizes, sized, {p.field for p in problems})
    return {}, k8s.place(sizes, kubernetes)


def _cross_section_problems(jobs, hosts, training, evaluation, launcher, kubernetes) -> list[Problem]:
    return [*crosschecks.unknown_host_problems(hosts, jobs), *crosschecks.duplicate_gpu_problems(hosts),
            *crosschecks.shared_output_problems(training, launcher.backend, kubernetes.output_volume),
            *([] if launcher.backend == "kubernetes" else crosschecks.evaluator_placement_problems(jobs, training)),
            *crosschecks.best_metric_problems(training, evaluation), *dynamic_tables.ps_count_problems(training, jobs),
            *crosschecks.directory_problems(training, launcher.logs_dir, PROJECT_ROOT)]


def _parse_or_collect(parse, raw: dict, problems: list[Problem]):
    try:
        return parse(raw)
    except UserError as error:
        problems.extend(error.problems)
        return None


def _section(raw: dict, key: str, problems: list[Problem]) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        problems.append(Problem(key, value, "must be a JSON object", f'use "{key}": {{...}} or leave it out'))
        return {}
    return value


def _parse_cluster(cluster: Any, allow_public: bool, strategy: Strategy,
                   problems: list[Problem]) -> dict[str, tuple[Address, ...]]:
    if not isinstance(cluster, dict):
        problems.append(Problem("cluster", cluster, "must be an object of job name -> list of host:port",
                                'use e.g. "cluster": {"chief": ["localhost:2220"], ...}'))
        return {}
    jobs: dict[str, tuple[Address, ...]] = {}
    for job, entries in cluster.items():
        if job not in JOBS:
            problems.append(Problem(f"cluster.{job}", entries, "unknown job name", f"use only {', '.join(JOBS)}"))
        elif not isinstance(entries, list):
            problems.append(Problem(f"cluster.{job}", entries, "must be a list of host:port strings",
                                    f'use e.g. "{job}": ["localhost:2222"]'))
        else:
            parsed = [parse_address(f"cluster.{job}[{i}]", e, allow_public, problems) for i, e in enumerate(entries)]
            jobs[job] = tuple(a for a in parsed if a is not None)
    _check_counts(cluster, strategy, problems)
    _check_duplicates(jobs, problems)
    return jobs


def _slurm_address_problems(jobs: dict[str, tuple[Address, ...]]) -> list[Problem]:
    """Under Slurm each task runs as a step on the node its address names (`srun -w NODE`): a node name it must be.
    Inside a job `localhost` would be each step's own node, and an IP address names no node."""
    return [Problem(f"cluster.{job}[{index}]", str(address), "is not a Slurm node name, and the slurm backend "
                    "starts each task on the node its address names", 'use the node name as `sinfo -N` shows it '
                    '(e.g. "n01:2222"), or give job sizes ("ps": 2) and let the allocation place them')
            for job, addresses in jobs.items() for index, address in enumerate(addresses)
            if address.is_loopback or ip_of(address.host)]


def _check_counts(cluster: dict, strategy: Strategy, problems: list[Problem]) -> None:
    def count(job):  # a job that is not a list was reported already; do not report it twice
        entries = cluster.get(job, [])
        return len(entries) if isinstance(entries, list) else None

    needed = strategy.required_jobs
    if "chief" in needed and count("chief") not in (1, None):
        problems.append(Problem("cluster.chief", cluster.get("chief"), "needs exactly one chief (the coordinator)",
                                'list one address, e.g. "chief": ["localhost:2220"]'))
    elif (count("chief") or 0) > 1:
        problems.append(Problem("cluster.chief", cluster.get("chief"),
                                f"allows at most one chief ({strategy.name.value} does not use it)",
                                "keep one address or none"))
    for job in ("worker", "ps"):
        if job in needed and count(job) == 0:
            problems.append(Problem(f"cluster.{job}", cluster.get(job), f"needs at least one {job}",
                                    f'list one or more, e.g. "{job}": ["localhost:2222"]'))
    if (count("evaluator") or 0) > 1:
        problems.append(Problem("cluster.evaluator", cluster.get("evaluator"), "allows at most one evaluator",
                                "keep one address"))


def _check_duplicates(jobs: dict[str, tuple[Address, ...]], problems: list[Problem]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for job, addresses in jobs.items():
        for index, address in enumerate(addresses):
            key = address.place
            if key in seen:
                problems.append(Problem(f"cluster.{job}[{index}]", str(address), f"is also used by {seen[key]}",
                                        "give every task its own host:port"))
            seen.setdefault(key, f"cluster.{job}[{index}]")


