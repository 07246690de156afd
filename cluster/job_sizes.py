"""Job sizes instead of addresses (`"ps": 2`), as the slurm backend allows, and their placement on nodes.

Once an allocation's nodes are known (in Slurm's order), `place` turns sizes into `node:port` addresses: the lead
trainer and the evaluator (which reads the lead's output_dir) on the first node, every other task round-robin
over the remaining nodes, and ports counted up from `port_base` in the order of the shipped cluster.json
(chief, workers, ps, evaluator).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from cluster.strategies import Strategy
from common.errors import Problem
from common.fields import is_int

JOB_ORDER = ("chief", "worker", "ps", "evaluator")  # the order of cluster.json, and of the ports
SIZED_BACKENDS = ("slurm", "kubernetes")  # the backends that place tasks themselves


def is_sized(cluster: Any) -> bool:
    """True when the cluster section gives any job as a number of tasks rather than a list of addresses."""
    return isinstance(cluster, dict) and any(is_int(v) for v in cluster.values())


def parse_sizes(cluster: dict, strategy: Strategy, backend: str, problems: list[Problem]) -> dict[str, int]:
    """The job sizes of a sized cluster section; every mistake goes to `problems`, one line each."""
    if backend not in SIZED_BACKENDS:
        return _refuse("cluster", cluster, "gives job sizes, which only the slurm backend can place (and kubernetes)",
                       'list host:port addresses, or set "launcher": {"backend": "slurm"} (or "kubernetes")', problems)
    sizes = {}
    for job, size in cluster.items():
        if job not in JOB_ORDER:
            problems.append(Problem(f"cluster.{job}", size, "unknown job name", f"use only {', '.join(JOB_ORDER)}"))
        elif not is_int(size):
            problems.append(Problem(f"cluster.{job}", size, "is a list while other jobs are sizes",
                                    f'give every job as a size (e.g. "{job}": 2) or every job as addresses'))
        else:
            sizes[job] = size
    for job, (low, high) in _size_limits(strategy).items():
        if job in cluster and job not in sizes:
            continue  # reported above
        size = sizes.get(job, 0)
        if not low <= size <= high:
            allowed = f"exactly {low}" if low == high else f"from {low} to {high}"
            problems.append(Problem(f"cluster.{job}", size, f"must be {allowed} under {strategy.name.value}",
                                    f'use e.g. "{job}": {max(low, min(high, 2))}'))
    return sizes


def _size_limits(strategy: Strategy) -> dict[str, tuple[int, int]]:
    """The smallest and largest size of each job under `strategy`."""
    needed = strategy.required_jobs
    return {"chief": (int("chief" in needed), 1), "worker": (int("worker" in needed), 10_000),
            "ps": (int("ps" in needed), 10_000), "evaluator": (0, 1)}


def _refuse(field: str, value: Any, problem: str, fix: str, problems: list[Problem]) -> dict:
    problems.append(Problem(field, value, problem, fix))
    return {}


def default_node_count(sizes: Mapping[str, int], strategy: Strategy) -> int:
    """One node for the lead trainer and the evaluator, and one for each other launched task."""
    launched = sum(sizes.get(job, 0) for job in strategy.launched_jobs if job != "evaluator")
    return max(1, launched)


def place(sizes: Mapping[str, int], nodes: Sequence[str], port_base: int, strategy: Strategy) -> dict[str, list[str]]:
    """`job: ["node:port", ...]` for every sized job, on `nodes` in the order given (Slurm's, never text order)."""
    if not nodes:
        raise ValueError("place() needs at least one node")
    lead_node, others = nodes[0], list(nodes[1:]) or list(nodes)
    ports = iter(range(port_base, port_base + sum(sizes.values())))
    spread = 0
    placed: dict[str, list[str]] = {}
    for job in JOB_ORDER:
        for index in range(sizes.get(job, 0)):
            if (job == strategy.lead_job and index == 0) or job == "evaluator":
                node = lead_node
            else:
                node, spread = others[spread % len(others)], spread + 1
            placed.setdefault(job, []).append(f"{node}:{next(ports)}")
    return placed


def resize(placed: Mapping[str, Sequence[str]], sizes: Mapping[str, int], nodes: Sequence[str],
           strategy: Strategy) -> dict[str, list[str]]:
    """New job sizes on the nodes of a running placement: a task that stays keeps its `node:port`, a job that
    shrinks loses its last tasks, and a new task goes to the least busy node (the lead's node only for the lead
    and the evaluator) on a port above every port the placement used."""
    kept = {job: list(placed.get(job, ()))[:sizes.get(job, 0)] for job in JOB_ORDER}
    load = Counter(dict.fromkeys(nodes, 0))
    load.update(address.rsplit(":", 1)[0] for addresses in kept.values() for address in addresses)
    others = list(nodes[1:]) or list(nodes)
    next_port = 1 + max(int(a.rsplit(":", 1)[1]) for addresses in placed.values() for a in addresses)
    resized: dict[str, list[str]] = {}
    for job in JOB_ORDER:
        addresses = kept[job]
        while len(addresses) < sizes.get(job, 0):
            lead = job == "evaluator" or (job == strategy.lead_job and not addresses)
            node = nodes[0] if lead else min(others, key=lambda n: (load[n], others.index(n)))
            addresses.append(f"{node}:{next_port}")
            load[node], next_port = load[node] + 1, next_port + 1
        if addresses:
            resized[job] = addresses
    return resized


def port_range_problems(sizes: Mapping[str, int], port_base: int) -> list[Problem]:
    """Consecutive ports from `port_base` must stay below 65536."""
    last = port_base + sum(sizes.values()) - 1
    if last <= 65535:
        return []
    return [Problem("slurm.port_base", port_base, f"leaves no room for {sum(sizes.values())} consecutive ports",
                    f"use at most {65536 - sum(sizes.values())}")]
