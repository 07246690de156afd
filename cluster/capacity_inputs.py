"""The figures a prediction needs that are not in the model: links and compute, given in cluster.json or planned.

`hosts.<name>.link_gbps`, `hosts.<name>.link_rtt_ms` and `hosts.<name>.step_compute_ms` give them (and
`cores` and `memory_gib` what `plan` would ask a host for: launcher/host_facts.py); what `plan`
measured is kept in LOGS_DIR/capacity-plan.json, which the chief reads to put its measured steps/s beside the
prediction.
"""

from __future__ import annotations

import json
from pathlib import Path

from cluster.capacity import Machine, StepCosts
from cluster.config import ClusterConfig

PLAN_FILE = "capacity-plan.json"


def plan_path(config: ClusterConfig) -> Path:
    return config.path(config.launcher.logs_dir) / PLAN_FILE


def hosts_of(config: ClusterConfig, job: str) -> tuple[str, ...]:
    return tuple(a.host for a in config.jobs.get(job, ()))


def given_link(config: ClusterConfig, worker_host: str, ps_host: str) -> float | None:
    """Bytes/s from link_gbps: the slower end of the two hosts (None unless every end of the pair gives it)."""
    ends = [config.host(h).link_gbps for h in {worker_host, ps_host}]
    return None if None in ends else min(ends) * 1e9 / 8


def given_rtt_s(config: ClusterConfig, worker_host: str, ps_host: str) -> float | None:
    """Round-trip seconds from link_rtt_ms: the larger of the two hosts' (None unless every end gives it)."""
    ends = [config.host(h).link_rtt_ms for h in {worker_host, ps_host}]
    return None if None in ends else max(ends) / 1000


def missing_keys(config: ClusterConfig, hosts, fields) -> str:
    """`hosts.a.link_gbps and hosts.b.link_gbps`: the keys of `fields` that `hosts` do not give yet."""
    missing = [f"hosts.{host}.{field}" for host in dict.fromkeys(hosts) for field in fields
               if getattr(config.host(host), field) is None]
    return ", ".join(missing[:-1]) + (" and " if len(missing) > 1 else "") + missing[-1] if missing else ""


def given_compute_s(config: ClusterConfig) -> float | None:
    """The slowest worker host's step_compute_ms, in seconds, when every worker host gives one."""
    given = [config.host(h).step_compute_ms for h in set(hosts_of(config, "worker"))]
    return None if None in given else max(given) / 1000


def read_plan(config: ClusterConfig) -> dict | None:
    """The plan `plan` wrote for this cluster, or None when there is none (or it cannot be read)."""
    try:
        return json.loads(plan_path(config).read_text())
    except (OSError, ValueError):
        return None


def plan_mismatch(config: ClusterConfig, plan: dict) -> str | None:
    """Why a plan does not describe this cluster (another model, batch or placement), or None when it does."""
    now = {"model": config.training.model, "global_batch": config.training.per_worker_batch
           * len(config.jobs.get("worker", ())), "worker_hosts": list(hosts_of(config, "worker")),
           "ps_hosts": list(hosts_of(config, "ps"))}
    changed = [f"{key} {plan.get(key)} -> {value}" for key, value in now.items() if plan.get(key) != value]
    return "; ".join(changed) or None


def links_and_compute(config: ClusterConfig, plan: dict | None) -> tuple[dict, float | None]:
    """({(worker host, ps host): bytes/s} for every pair found, compute seconds or None): given first, then plan."""
    planned = {(link["worker_host"], link["ps_host"]): link["bytes_per_s"] for link in (plan or {}).get("links", [])}
    links = {}
    for worker_host in set(hosts_of(config, "worker")):
        for ps_host in set(hosts_of(config, "ps")):
            rate = given_link(config, worker_host, ps_host) or planned.get((worker_host, ps_host))
            if rate:
                links[(worker_host, ps_host)] = rate
    compute_s = given_compute_s(config)
    return links, compute_s if compute_s is not None else (plan or {}).get("compute_s")


def planned_costs(config: ClusterConfig, plan: dict | None) -> dict:
    """The Layout fields `plan` measured beyond links and compute (step costs, machines, the chief's host), and
    each pair's round trip: given first, then the plan's; {} without a plan."""
    if not plan or "costs" not in plan:
        return {}
    planned = {(link["worker_host"], link["ps_host"]): link.get("rtt_s", 0.0) for link in plan.get("links", [])}
    trips = {pair: given_rtt_s(config, *pair) if given_rtt_s(config, *pair) is not None else rtt
             for pair, rtt in planned.items()}
    return {"costs": StepCosts(**plan["costs"]), "chief_host": plan.get("chief_host"),
            "machines": {host: Machine(**m) for host, m in plan.get("machines", {}).items()}, "round_trips": trips}
