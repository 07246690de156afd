"""Slurm's refusals in the user's terms: sbatch's errors and the pending reasons that never clear, each as one
line naming the cluster.json field, the bad value (with Slurm's own words) and what to change."""

from __future__ import annotations

from cluster.config import ClusterConfig
from common.errors import Problem

# sbatch's error text -> the field it is about and what to do; matched in order, first wins
SBATCH_ERRORS = (
    ("invalid partition", "slurm.partition", "use a partition sinfo lists, or null for the default one"),
    ("invalid account", "slurm.account", "use an account `sacctmgr show assoc user=$USER` lists for you, or null"),
    ("invalid qos", "slurm.sbatch_options", "use a QOS `sacctmgr show qos` lists, or drop --qos"),
    ("generic resource", "slurm.gpus_per_worker",
     "set it to 0 on CPU-only nodes, or pick a GPU slurm.partition (sinfo -o '%P %G' shows their GPUs)"),
    ("time limit", "slurm.time_limit", "use at most the partition's MaxTime (scontrol show partition)"),
    ("cpu count per node", "slurm.cpus_per_task", "ask for at most the CPUs a node has (sinfo -o '%P %c')"),
    ("more processors requested than permitted", "slurm.cpus_per_task",
     "ask for fewer CPUs (sinfo -o '%P %c' shows the CPUs per node)"),
    ("node count specification invalid", "slurm.nodes", "ask for at most the nodes the partition has (sinfo)"),
    ("partition configuration not available", "slurm.nodes",
     "ask for at most the nodes and time the partition allows (scontrol show partition)"),
    ("requested node configuration is not available", "slurm.nodes",
     "ask for nodes, CPUs and GPUs the partition has (sinfo -o '%P %D %c %G')"),
    ("accounting/qos policy", "slurm.account",
     "stay within your account's and QOS's limits (sacctmgr show assoc), or ask for less"),
    ("invalid feature", "slurm.sbatch_options", "use features sinfo -o '%P %f' lists"),
    ("invalid node name", "cluster", "name nodes `sinfo -N` lists, or give job sizes and let Slurm pick"),
)

# pending reasons that can never clear by waiting: the field to change and the fix
NEVER_CLEARS = {
    "PartitionNodeLimit": ("slurm.nodes", "ask for at most the nodes the partition allows (scontrol show partition)"),
    "PartitionTimeLimit": ("slurm.time_limit", "use at most the partition's MaxTime (scontrol show partition)"),
    "PartitionConfig": ("slurm.partition", "the request does not fit the partition's limits (nodes, CPUs, "
                        "accounts, QOS: scontrol show partition): ask for less, or pick another partition"),
    "BadConstraints": ("slurm.sbatch_options", "no node has what the job asks for (CPUs, GPUs, features)"),
    "InvalidAccount": ("slurm.account", "use an account you belong to (sacctmgr show assoc user=$USER)"),
    "AccountNotAllowed": ("slurm.account", "the partition does not allow this account: pick another"),
    "InvalidQOS": ("slurm.sbatch_options", "use a QOS you may use (sacctmgr show assoc user=$USER)"),
    "QOSNotAllowed": ("slurm.sbatch_options", "the partition does not allow this QOS: pick another"),
    "DependencyNeverSatisfied": ("slurm.sbatch_options", "drop the --dependency that can never be met"),
}
PER_JOB_LIMIT = ("MaxNodePerJob", "MaxCpuPerJob", "MaxWallDurationPerJob", "MaxTRESPerJob", "MinTRESPerJob",
                 "MaxCpusPerJob", "MaxNodesPerJob")


def requested_value(config: ClusterConfig, field: str, node_count: int):
    """The value of `field` as the job asked for it (the node count the default chose, too)."""
    slurm = config.slurm
    if field == "cluster":
        return list(dict.fromkeys(task.address.host for task in config.launched_tasks())) or dict(config.job_sizes)
    if field == "slurm.nodes":
        return slurm.nodes if slurm.nodes else f"{node_count} (the default: one per ps and worker, plus one)"
    value = getattr(slurm, field.removeprefix("slurm."), None) if field.startswith("slurm.") else None
    return list(value) if isinstance(value, tuple) else value  # as cluster.json wrote it


def sbatch_problem(config: ClusterConfig, stderr: str, node_count: int) -> Problem | None:
    """sbatch's error as a Problem naming the field, or None when it is none of the known refusals."""
    words = "; ".join(line.removeprefix("sbatch: error: ") for line in stderr.strip().splitlines()) or "no output"
    lowered = words.lower()
    for needle, field, fix in SBATCH_ERRORS:
        if needle in lowered:
            return Problem(field, requested_value(config, field, node_count), f"refused by sbatch ({words})", fix)
    return None


def never_clears(reason: str) -> tuple[str, str] | None:
    """The field and the fix for a pending reason that waiting cannot clear; None for ordinary waits."""
    if reason in NEVER_CLEARS:
        return NEVER_CLEARS[reason]
    if reason.startswith(("QOS", "Assoc")) and reason.removesuffix("Limit").endswith(PER_JOB_LIMIT):
        field = "slurm.time_limit" if "Wall" in reason else "slurm.nodes"
        return field, "stay within the per-job limit of your QOS or association (sacctmgr show qos), or ask for less"
    return None


def pending_problem(config: ClusterConfig, job_id: str, reason: str, node_count: int) -> Problem | None:
    """A Problem for a job pending for a reason that never clears (the job is then cancelled), else None."""
    known = never_clears(reason)
    if known is None:
        return None
    field, fix = known
    return Problem(field, requested_value(config, field, node_count),
                   f"job {job_id} can never start (Slurm's reason: {reason}); it was cancelled", fix)


WAIT_REASONS = {
    "Resources": "waiting for nodes to become free",
    "Priority": "other jobs come first",
    "ReqNodeNotAvail": "some requested nodes are down, drained or reserved",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "Reservation": "waiting for its reservation",
    "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "BeginTime": "its start time has not come",
    "Dependency": "waiting for another job",
}


def pending_line(job_id: str, reason: str, waited_s: float, timeout_s: float) -> str:
    """What the launcher says while the job waits in the queue."""
    words = WAIT_REASONS.get(reason.split(",")[0], "")
    return (f"job {job_id} pending ({reason}{': ' + words if words else ''}); waiting up to {timeout_s:.0f} s "
            f"(slurm.start_timeout_s), {waited_s:.0f} s so far")
