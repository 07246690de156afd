"""`sh run.sh reload` under Slurm: an edited cluster.json placed on the nodes the running allocation already holds."""

from __future__ import annotations

from collections import Counter

from cluster import config as cluster_config
from cluster import job_sizes
from cluster.config import ClusterConfig
from common.errors import Problem, UserError
from launcher.backends.slurm.allocation import Allocation, allocation_path, resolved_path, write_placed

CANDIDATE_FILE = "slurm-cluster.reload.json"  # the placement under review; it replaces slurm-cluster.json if taken


def on_allocation(running: ClusterConfig, edited: ClusterConfig) -> ClusterConfig:
    """The edited cluster on the running job's nodes: tasks that stay keep their node and port, new ones go to the
    least busy nodes. Raises UserError, one line per problem, when it cannot fit the allocation."""
    allocation = Allocation.read(allocation_path(running))
    if allocation is None:
        raise UserError(Problem("launcher.backend", "slurm", f"no Slurm job is recorded in {allocation_path(running)}",
                                "see `sh run.sh status`; start the run with `sh run.sh`"))
    if not edited.job_sizes:
        _check_named_nodes(edited, allocation)
        return edited
    current = {job: [str(address) for address in running.jobs.get(job, ())] for job in job_sizes.JOB_ORDER}
    cluster = job_sizes.resize(current, edited.job_sizes, allocation.nodes, edited.strategy)
    problems = _port_problems(cluster) + _gpu_problems(edited, cluster, allocation)
    if problems:
        raise UserError(problems, source=str(edited.source))
    return write_placed(edited, cluster, candidate_path(running))


def adopt(candidate: ClusterConfig) -> ClusterConfig:
    """Makes an accepted placement the run's slurm-cluster.json (what steps, status and kill.sh read)."""
    if candidate.source != candidate_path(candidate):
        return candidate  # cluster.json names the nodes itself
    candidate.source.replace(resolved_path(candidate))
    return cluster_config.load(resolved_path(candidate))


def discard(running: ClusterConfig) -> None:
    candidate_path(running).unlink(missing_ok=True)


def candidate_path(config: ClusterConfig):
    return config.path(config.launcher.logs_dir) / CANDIDATE_FILE


def _check_named_nodes(edited: ClusterConfig, allocation: Allocation) -> None:
    for job, addresses in edited.jobs.items():
        outside = sorted({a.host for a in addresses} - set(allocation.nodes))
        if outside and job in edited.strategy.launched_jobs:
            raise UserError(Problem(f"cluster.{job}", ", ".join(outside), f"not a node of the running job "
                                    f"{allocation.job_id} (it holds {', '.join(allocation.nodes)})",
                                    "name only those nodes, or give job sizes"), source=str(edited.source))


def _port_problems(cluster: dict[str, list[str]]) -> list[Problem]:
    last = max(int(address.rsplit(":", 1)[1]) for addresses in cluster.values() for address in addresses)
    if last <= 65535:
        return []
    return [Problem("slurm.port_base", last, "the new tasks' ports would run past 65535",
                    "stop the run (`sh kill.sh`, which checkpoints) and start it again with the new sizes")]


def _gpu_problems(edited: ClusterConfig, cluster: dict[str, list[str]], allocation: Allocation) -> list[Problem]:
    """A node's GPUs were sized for the workers first placed on it: more would wait for GPUs that never free."""
    if not edited.slurm.gpus_per_worker:
        return []
    per_node = Counter(address.rsplit(":", 1)[0] for address in cluster.get("worker", ()))
    crowded = sorted(node for node, count in per_node.items() if count > allocation.workers_per_node)
    if not crowded:
        return []
    return [Problem("cluster.worker", edited.job_sizes.get("worker"), f"puts more than "
                    f"{allocation.workers_per_node} worker(s) on {', '.join(crowded)}, whose GPUs the job holds "
                    "only for that many", "add at most one worker per node the job holds, or stop the run "
                    "(`sh kill.sh`, which checkpoints) and start it again with the new sizes")]
