"""The Slurm allocation a run uses: a job submitted to hold the nodes, or the user's own (SLURM_JOB_ID); recorded in
the logs directory, its nodes placed into a resolved cluster.json, and released at the end."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import time
from pathlib import Path

from cluster import config as cluster_config
from cluster import job_sizes, jsonfile
from cluster.config import ClusterConfig
from common.errors import UserError
from launcher.backends.base import HostUnreachable
from launcher.backends.slurm import commands as slurm
from launcher.backends.slurm import endings, limits, refusals
from launcher.records import RunFailed

ALLOCATION_FILE = "slurm-job.json"
RESOLVED_FILE = "slurm-cluster.json"  # cluster.json with the job sizes placed on the allocation's nodes
FINISHED = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "TIMEOUT")
RELEASE_TIMEOUT_S = 60


class AllocationFailed(RunFailed):
    """The job never ran, or its nodes cannot hold the cluster."""


@dataclasses.dataclass(frozen=True)
class Allocation:
    """A running job whose nodes hold the cluster; `owned` when the launcher submitted it (and cancels it);
    `workers_per_node`: the most workers it placed on one node (each node's GPUs are held for that many)."""

    job_id: str
    nodes: tuple[str, ...]
    owned: bool
    workers_per_node: int = 1

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, path: Path) -> "Allocation | None":
        try:
            raw = json.loads(path.read_text())
            return cls(str(raw["job_id"]), tuple(raw["nodes"]), bool(raw["owned"]), int(raw.get("workers_per_node", 1)))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def allocation_path(config: ClusterConfig) -> Path:
    return config.path(config.launcher.logs_dir) / ALLOCATION_FILE


def resolved_path(config: ClusterConfig) -> Path:
    return config.path(config.launcher.logs_dir) / RESOLVED_FILE


def acquire(config: ClusterConfig, say) -> Allocation:
    """Joins the allocation this process runs in (SLURM_JOB_ID), or submits a job holding the nodes, and waits
    until it runs (at most slurm.start_timeout_s); records it in the logs directory."""
    job_id, owned = os.environ.get("SLURM_JOB_ID"), False
    if job_id:
        say(f"using the allocation this runs in: job {job_id} (SLURM_JOB_ID); it is left running at the end")
    else:
        job_id, owned = submit(config, say), True
    try:
        nodes = wait_until_running(config, job_id, say)
        _check_nodes(config, job_id, nodes)
    except BaseException:
        if owned:
            slurm.cancel(job_id)
        raise
    allocation = Allocation(job_id, tuple(nodes), owned, slurm.most_per_node(config, ("worker",)))
    allocation.write(allocation_path(config))
    return allocation


def submit(config: ClusterConfig, say) -> str:
    """Checks the request against the partition, then submits the job that holds the nodes; sbatch's refusals
    come back as one line naming the field."""
    count, names = slurm.node_request(config)
    check_request(config, count)
    output = str(config.path(config.launcher.logs_dir) / "slurm-%j.out")
    config.path(config.launcher.logs_dir).mkdir(parents=True, exist_ok=True)
    argv = slurm.holder_job_argv(config, count, names, output, endings.WARNING)
    try:
        job_id = slurm.run_client(argv).strip().split(";")[0]
    except slurm.SlurmError as error:
        problem = refusals.sbatch_problem(config, error.stderr, count)
        if problem is None:
            raise
        raise UserError(problem) from None
    say(f"submitted job {job_id} holding {count} node(s): {shlex.join(argv)}")
    return job_id


def check_request(config: ClusterConfig, node_count: int) -> bool:
    """Raises UserError for what the partition can never run (too many nodes, CPUs over a node's, a time limit
    over its MaxTime, GPUs where there are none, an unknown partition); False when Slurm could not tell."""
    try:
        partitions = limits.parse_partitions(slurm.run_client(["scontrol", "show", "partition", "--oneliner"]))
        name = config.slurm.partition or limits.default_partition(partitions)
        if name is not None and name not in partitions:
            raise UserError(limits.unknown_partition(name, list(partitions)))
        if name is None:
            return False
        nodes = slurm.run_client(["sinfo", "--noheader", "--Node", f"--partition={name}", "--format=%N %c %G"])
    except (slurm.SlurmError, HostUnreachable):
        return False  # sbatch will say what is wrong; its words are translated then
    per_node = slurm.most_per_node(config, config.strategy.launched_jobs)
    problems = limits.request_problems(config, limits.partition(partitions[name], nodes), node_count, per_node)
    if problems:
        raise UserError(problems)
    return True


def wait_until_running(config: ClusterConfig, job_id: str, say) -> list[str]:
    """Polls the job until it runs; returns its nodes in Slurm's order. Says why it waits when Slurm gives a
    reason; raises at once for a reason that never clears, when it ends, or when it stays queued too long."""
    timeout_s, node_count = config.slurm.start_timeout_s, slurm.node_request(config)[0]
    started, state, delay, said = time.monotonic(), None, 0.2, "None"
    while time.monotonic() - started < timeout_s:
        fields = slurm.job_fields(job_id)
        state, reason = fields.get("JobState"), fields.get("Reason", "None")
        if state == slurm.RUNNING:
            nodes = slurm.hostnames(fields.get("NodeList") or "")
            say(f"job {job_id} runs on {', '.join(nodes)} ({time.monotonic() - started:.1f} s after asking)")
            return nodes
        if state is None or state in FINISHED:
            raise AllocationFailed(f"job {job_id} is {state or 'gone'} before it ran "
                                   f"(reason: {reason}); see `scontrol show job {job_id}`")
        problem = refusals.pending_problem(config, job_id, reason, node_count)
        if problem is not None:
            raise UserError(problem)
        if reason != said:
            say(refusals.pending_line(job_id, reason, time.monotonic() - started, timeout_s))
            said = reason
        time.sleep(delay)
        delay = min(2 * delay, 2.0)
    raise AllocationFailed(f"job {job_id} still {state} after {timeout_s:.0f} s (Slurm's reason: {said}); raise "
                           "slurm.start_timeout_s, or ask for fewer nodes or another slurm.partition")


def _check_nodes(config: ClusterConfig, job_id: str, nodes: list[str]) -> None:
    """Named nodes must all be in the allocation (the user's own allocation may hold others)."""
    missing = sorted({t.address.host for t in config.launched_tasks()} - set(nodes))
    if missing:
        raise AllocationFailed(f"cluster.json names node(s) {', '.join(missing)} that job {job_id} does not hold "
                               f"(it holds {', '.join(nodes)}); name those, or give job sizes instead")


def placed(config: ClusterConfig, allocation: Allocation) -> ClusterConfig:
    """The config with job sizes placed on the allocation's nodes, written as a cluster.json every task reads;
    the config itself when cluster.json names nodes already."""
    if not config.job_sizes:
        return config
    cluster = job_sizes.place(config.job_sizes, allocation.nodes, config.slurm.port_base, config.strategy)
    return write_placed(config, cluster, resolved_path(config))


def write_placed(config: ClusterConfig, cluster: dict[str, list[str]], path: Path) -> ClusterConfig:
    """cluster.json with its `cluster` section replaced by placed addresses, written to `path` and loaded."""
    document = jsonfile.read_document(config.source)
    document.pop("$schema", None)
    document["cluster"] = cluster
    path.write_text(json.dumps(document, indent=2) + "\n")
    return cluster_config.load(path)


def current(config: ClusterConfig) -> ClusterConfig:
    """The placed config of the last run when cluster.json gives job sizes (for status and kill.sh)."""
    if config.job_sizes and resolved_path(config).exists():
        return cluster_config.load(resolved_path(config))
    return config


def release(config: ClusterConfig, allocation: Allocation) -> list[str]:
    """Cancels the job we submitted (our steps only, in the user's own allocation) and checks nothing remains."""
    ours = f"{config.slurm.job_name}-"
    if allocation.owned:
        slurm.cancel(allocation.job_id)
    else:
        for step in live_steps(allocation.job_id, ours):
            slurm.cancel(step.step_id)
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while (left := _what_remains(allocation, ours)) and time.monotonic() < deadline:
        time.sleep(0.2)
    allocation_path(config).unlink(missing_ok=True)
    if left:
        return [f"job {allocation.job_id}: {left} {RELEASE_TIMEOUT_S} s after scancel; check `squeue --steps`"]
    what = f"job {allocation.job_id} cancelled" if allocation.owned else f"our steps of job {allocation.job_id} ended"
    return [f"{what}; nothing of it remains in squeue"]


def live_steps(job_id: str, prefix: str = "") -> list[slurm.Step]:
    """The job's steps whose name starts with `prefix`; none once the job is gone."""
    try:
        return [s for s in slurm.steps(job_id) if s.name.startswith(prefix)]
    except slurm.SlurmError:
        return []


def _what_remains(allocation: Allocation, prefix: str) -> str:
    if allocation.owned:
        queued = slurm.queue_state(allocation.job_id)  # COMPLETING while slurmstepd still ends its steps
        return f"still {queued} in squeue" if queued else ""
    left = live_steps(allocation.job_id, prefix)
    return f"steps {', '.join(s.step_id for s in left)} still run" if left else ""
