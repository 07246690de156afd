"""What a partition can hold, read from `scontrol show partition` and `sinfo`, and the requests it can never run.

Checked before submitting, so that a request Slurm would leave pending forever (or refuse in its own terse words)
gets one line naming the cluster.json field, the bad value and the fix, at once.
"""

from __future__ import annotations

import dataclasses

from cluster.config import ClusterConfig
from cluster.settings import slurm_minutes as minutes
from common.errors import Problem
from launcher.backends.slurm.refusals import requested_value

@dataclasses.dataclass(frozen=True)
class Partition:
    """One partition as slurmctld describes it; limits are None when unlimited."""

    name: str
    total_nodes: int
    max_nodes: int | None
    max_time_min: float | None
    state: str
    node_cpus: tuple[int, ...] = ()  # each node's CPU count (sinfo)
    gpu_nodes: int = 0  # nodes with a gpu generic resource

    @property
    def usable_nodes(self) -> int:
        return min(self.total_nodes, self.max_nodes or self.total_nodes)


def fields_of(line: str) -> dict[str, str]:
    """`Key=Value Key=Value` of a `scontrol --oneliner` line (values hold no spaces in the fields read here)."""
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def parse_partitions(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show partition --oneliner` output, by partition name."""
    rows = [fields_of(line) for line in text.splitlines() if line.startswith("PartitionName=")]
    return {row["PartitionName"]: row for row in rows}


def default_partition(partitions: dict[str, dict[str, str]]) -> str | None:
    return next((name for name, row in partitions.items() if row.get("Default") == "YES"), None)


def partition(row: dict[str, str], sinfo_rows: str) -> Partition:
    """A Partition from its `scontrol` row and `sinfo --Node --format='%N %c %G'` rows."""
    cpus, gpu_nodes = [], 0
    for line in sinfo_rows.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1].rstrip("+").isdigit():
            cpus.append(int(parts[1].rstrip("+")))
            gpu_nodes += "gpu" in parts[2]
    max_nodes = row.get("MaxNodes", "UNLIMITED")
    return Partition(name=row["PartitionName"], total_nodes=int(row.get("TotalNodes", "0")),
                     max_nodes=None if max_nodes == "UNLIMITED" else int(max_nodes),
                     max_time_min=minutes(row.get("MaxTime", "UNLIMITED")), state=row.get("State", "UP"),
                     node_cpus=tuple(cpus), gpu_nodes=gpu_nodes)


def request_problems(config: ClusterConfig, part: Partition, node_count: int, tasks_per_node: int) -> list[Problem]:
    """What in the request this partition can never satisfy, one Problem per field."""
    slurm, problems = config.slurm, []
    where = f"partition {part.name}"
    if node_count > part.usable_nodes:
        limit = (f"has {part.total_nodes} node(s)" if part.usable_nodes == part.total_nodes
                 else f"allows {part.usable_nodes} node(s) per job (MaxNodes)")
        field, value = ("slurm.nodes", requested_value(config, "slurm.nodes", node_count)) if config.job_sizes else \
            ("cluster", f"{node_count} node(s)")
        fix = (f"set slurm.nodes to {part.usable_nodes} or fewer (tasks then share nodes)" if config.job_sizes
               else f"place the tasks on at most {part.usable_nodes} nodes")
        problems.append(Problem(field, value, f"asks for {node_count} node(s); {where} {limit} (Slurm would leave "
                                f"it pending: PartitionNodeLimit)", f"{fix}, or pick another slurm.partition"))
    most_cpus = max(part.node_cpus, default=0)
    wanted = slurm.cpus_per_task * tasks_per_node
    if part.node_cpus and wanted > most_cpus:
        share = f" ({tasks_per_node} tasks per node × {slurm.cpus_per_task})" if tasks_per_node > 1 else ""
        fit = most_cpus // tasks_per_node
        fix = f"set slurm.cpus_per_task to {fit} or fewer" if fit else "spread the tasks over more nodes"
        problems.append(Problem("slurm.cpus_per_task", slurm.cpus_per_task,
                                f"needs {wanted} CPUs on one node{share}; the nodes of {where} have at most "
                                f"{most_cpus} CPUs", fix))
    limit_min = minutes(slurm.time_limit) if slurm.time_limit else None
    if limit_min is not None and part.max_time_min is not None and limit_min > part.max_time_min:
        most = format_minutes(part.max_time_min)
        problems.append(Problem("slurm.time_limit", slurm.time_limit, f"is over the MaxTime of {where} ({most})",
                                f"use at most {most}, or pick another slurm.partition"))
    if slurm.gpus_per_worker and not part.gpu_nodes:
        problems.append(Problem("slurm.gpus_per_worker", slurm.gpus_per_worker, f"asks for GPUs; no node of {where} "
                                "has a gpu resource (sinfo shows no GPU gres)",
                                "set it to 0 on CPU-only nodes, or pick a GPU slurm.partition"))
    if part.state in ("INACTIVE", "DRAIN"):  # takes no jobs at all (a DOWN one queues them until it is UP)
        problems.append(Problem("slurm.partition", part.name, f"is {part.state} (scontrol show partition)",
                                "pick a partition that is UP (sinfo), or ask its administrator"))
    return problems


def format_minutes(value: float) -> str:
    """Minutes as Slurm's [days-]hours:minutes:seconds."""
    seconds = round(value * 60)
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def unknown_partition(name: str, known: list[str]) -> Problem:
    return Problem("slurm.partition", name, "is not a partition of this cluster (Slurm: Invalid partition name "
                   "specified)", f"use one of {', '.join(known) or 'the partitions sinfo lists'}, or null for "
                   "the default")

