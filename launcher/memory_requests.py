"""A scheduler's memory request against what the ps hold at their peak, before a Slurm or Kubernetes job is sent.

A node's or a pod's memory is not known before the job starts, so the check is against what the job asks for:
Slurm's `--mem` (per node) or `--mem-per-cpu` (times the CPUs a node's tasks take) in `slurm.sbatch_options`,
Kubernetes' `kubernetes.memory.ps` (per ps pod). A request below the ps's peak (cluster/ps_memory.py) is refused
with one line; without a request the launcher warns, since a scheduler may then place the ps where they do not
fit. (On the hosts backend, and on Slurm's nodes once the job holds them, each host's available memory is checked
before any task starts: launcher/agent.py.)
"""

from __future__ import annotations

import math
import re

from cluster import ps_memory
from cluster.config import ClusterConfig
from common.errors import UserError
from launcher.backends.slurm.commands import most_per_node

SLURM_UNITS = {"": 2 ** 20, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}  # Slurm's default unit: MB
KUBERNETES_UNITS = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
                    "E": 1e18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
                    "Ei": 2 ** 60}


def slurm_bytes(size: str) -> float | None:
    """Slurm's `--mem` size in bytes (`8G`, `8000`: MB), None for 0 (a node's whole memory) or a size it cannot be."""
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([KMGT]?)[Bb]?", size.strip(), flags=re.IGNORECASE)
    if not found or float(found[1]) == 0:
        return None
    return float(found[1]) * SLURM_UNITS[found[2].upper()]


def kubernetes_bytes(quantity: str) -> float:
    """A Kubernetes memory quantity in bytes (`8Gi`, `500M`, `1e9`), as kubernetes.memory holds them (checked)."""
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?", quantity)
    number, suffix = float(found[1]), found[2] or ""
    return number * 10 ** int(suffix[1:]) if suffix[:1] in ("e", "E") else number * KUBERNETES_UNITS[suffix]


def _slurm_request(config: ClusterConfig) -> tuple[float, str] | None:
    """(bytes a node may use, the option that says so), or None when the job asks for no memory."""
    per_node = most_per_node(config, config.strategy.launched_jobs) * config.slurm.cpus_per_task
    for option in reversed(config.slurm.sbatch_options):  # sbatch takes the last one given
        name, _, value = option.partition("=")
        size = slurm_bytes(value) if name in ("--mem", "--mem-per-cpu") else None
        if size is not None:
            return (size if name == "--mem" else size * per_node), f"slurm.sbatch_options {option}"
    return None


def checked(config: ClusterConfig) -> str | None:
    """Refuses (UserError, one line) a Slurm or Kubernetes job whose memory request the ps cannot run in; returns a
    warning when the job asks for no memory, else None."""
    backend, options = config.launcher.backend, config.training
    ps = config.job_sizes.get("ps") or len(config.jobs.get("ps", ()))
    peak = ps_memory.peak(options, ps) if "ps" in config.strategy.launched_jobs else None
    if backend not in ("slurm", "kubernetes") or peak is None:
        return None
    if backend == "kubernetes":
        quantity = config.kubernetes.memory.get("ps")
        request = quantity and (kubernetes_bytes(quantity), f"kubernetes.memory.ps {quantity!r}")
        on_one, place, unit = 1, "in each pod", "a ps pod"
    else:
        request = _slurm_request(config)
        on_one = most_per_node(config, ("ps",))
        place, unit = f"on a node ({on_one} ps per node as placed)" if on_one > 1 else "on a node", "a node"
    if not request:
        how = ("kubernetes.memory.ps (e.g. \"{}Gi\")" if backend == "kubernetes"
               else "--mem in slurm.sbatch_options (e.g. \"--mem={}G\")").format(
            math.ceil(on_one * peak.total / ps_memory.GIB))
        return (f"warning: the job asks for no memory, and each ps needs {ps_memory.gib(peak.total)} at its peak "
                f"({peak.parts()}): {unit} with less ends it; ask for it with {how}")
    size, said = request
    why = ps_memory.shortfall(options, ps, on_one, size, place=place,
                              has=f"the job asks for {ps_memory.gib(size)} ({said})")
    if why:
        raise UserError(ps_memory.problem(options, why), source=config.source.name)
    return None
