"""`plan`: how many ps a job needs, predicted before it runs from its model, its links and its compute.

Bytes per ps come from the model built here on the CPU (coordinator.step_traffic); each worker host <-> ps
host link is `hosts.<name>.link_gbps` when both ends (or the one host) give it, else measured by a short
bounded transfer (launcher.link_probe); compute is `hosts.<name>.step_compute_ms` when every worker host gives
it (the slowest counts), else measured here. The prediction's inputs go to LOGS_DIR/capacity-plan.json, where
the chief finds them and puts its measured steps/s beside the prediction.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cluster import capacity
from cluster.addresses import Address
from cluster.capacity_inputs import given_compute_s, given_link, hosts_of, plan_path
from cluster.config import ClusterConfig
from launcher import link_probe

SEARCH_UP_TO = 16  # ps counts searched for the smallest that is enough (at least twice the configured count)
SHARED_MEMORY = ("tasks on one host reach each other through memory (loopback): their links share the host's "
                 "memory bandwidth and its cores, so these are not network figures")


def links(config: ClusterConfig, say) -> dict[tuple[str, str], tuple[float, str]]:
    """{(worker host, ps host): (bytes/s, "given" or "measured")} for every pair the cluster uses."""
    found = {}
    ports = {a.host: a.port for a in config.jobs["ps"]}
    for worker_host in dict.fromkeys(hosts_of(config, "worker")):
        for ps_host in dict.fromkeys(hosts_of(config, "ps")):
            given = given_link(config, worker_host, ps_host)
            if given is not None:
                found[(worker_host, ps_host)] = (given, "given")
            else:
                rate = link_probe.measure(config, worker_host, ps_host, ports[ps_host])
                found[(worker_host, ps_host)] = (rate, "measured")
                say(f"link {ps_host} -> {worker_host}: {rate * 8 / 1e9:.3f} Gbit/s measured")
    return found


def shares_memory(worker_hosts, ps_hosts) -> bool:
    return bool(set(worker_hosts) & set(ps_hosts)) or all(Address(h, 1).is_loopback
                                                          for h in (*worker_hosts, *ps_hosts))


def table(predictions: list[capacity.Prediction], configured: int) -> list[str]:
    """One aligned row per ps count: steps/s, the bound, each bound's own ceiling."""
    rows = ["    ps | steps/s | bound        | ps links |  workers | compute | transfer ms | compute ms"]
    for p in predictions:
        mark = "*" if p.ps == configured else " "
        c = p.ceilings
        rows.append(f"  {mark}{p.ps:3d} | {p.steps_per_s:7.2f} | {p.bound:<12} | {c[capacity.PS_LINKS]:8.2f} | "
                    f"{c[capacity.WORKERS]:8.2f} | {c[capacity.COMPUTE]:7.2f} | {p.transfer_s * 1e3:11.1f} | "
                    f"{p.compute_s * 1e3:10.1f}")
    return rows


def sweep_lines(layout: capacity.Layout, rate, bytes_for) -> tuple[list[str], list[capacity.Prediction], int]:
    """The table for 1..2x the configured ps (and the enough count, when it lies beyond) and that count."""
    configured = len(layout.ps_hosts)
    searched = capacity.sweep(layout, rate, bytes_for, range(1, max(2 * configured, SEARCH_UP_TO) + 1))
    enough = capacity.enough_ps(searched)
    shown = [p for p in searched if p.ps <= 2 * configured or p.ps == enough]
    best = max(p.steps_per_s for p in searched)
    lines = table(shown, configured)
    if enough == searched[-1].ps:
        lines.append(f"more ps still help at {enough} ps (the most searched); the bound is "
                     f"{searched[-1].bound}")
    else:
        lines.append(f"enough ps: {enough} (past it more ps add less than {capacity.ENOUGH_WITHIN:.0%}; "
                     f"{best:.2f} steps/s at best, then bound by {searched[enough - 1].bound}); "
                     f"configured: {configured} (* above)")
    return lines, searched, enough


def plan(config: ClusterConfig, say) -> list[str]:
    """Builds the model, reads its bytes per ps, measures or takes links and compute; returns the report lines."""
    from coordinator import step_traffic  # TensorFlow: only once the environment is set
    from data import source_for

    options = config.training
    workers, ps = hosts_of(config, "worker"), hosts_of(config, "ps")
    source = source_for(options, config.path("."))
    global_batch = options.per_worker_batch * len(workers)
    model, created = step_traffic.built_on_cpu(options, source)
    ids = step_traffic.sample_ids(source, global_batch) if hasattr(model, "split_variables") else []
    compute_s, compute_from = given_compute_s(config), "given (hosts.<name>.step_compute_ms)"
    if compute_s is None:
        compute_s, compute_from = step_traffic.compute_s(model, source, global_batch), "measured on this machine"
    found = links(config, say)
    layout = capacity.Layout(ps_hosts=ps, worker_hosts=workers, compute_s=compute_s,
                             ps_bytes_per_step=step_traffic.planned_bytes(options, model, created, ids, len(ps)))
    rate = lookup({pair: value for pair, (value, _) in found.items()})
    lines, searched, enough = sweep_lines(
        layout, rate, lambda count: step_traffic.planned_bytes(options, model, created, ids, count))
    variable_bytes = sum(int(v.shape.num_elements()) * v.dtype.size for v in model.trainable_variables)
    moved = sum(layout.ps_bytes_per_step)
    head = [f"capacity plan for {config.source}: model {options.model}, {variable_bytes / 1e6:.2f} MB of trainable "
            f"variables, {len(workers)} worker(s), batch {global_batch} per step; {moved / 1e6:.2f} MB moved per "
            f"step over {len(ps)} ps",
            f"compute: {compute_s * 1e3:.1f} ms per step, {compute_from}"]
    head += [f"link {p} -> {w}: {value * 8 / 1e9:.3f} Gbit/s, {how}" for (w, p), (value, how) in found.items()]
    if shares_memory(workers, ps):
        head.append(f"note: {SHARED_MEMORY}")
    write(config, layout, found, searched, enough)
    return head + lines


def lookup(rates: dict[tuple[str, str], float]):
    """(worker host, ps host) -> bytes/s over the pairs given."""
    return lambda worker_host, ps_host: rates[(worker_host, ps_host)]


def write(config: ClusterConfig, layout: capacity.Layout, found: dict, searched: list, enough: int) -> Path:
    """The plan's inputs and predictions, for the chief (LOGS_DIR/capacity-plan.json)."""
    path = plan_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    global_batch = config.training.per_worker_batch * len(layout.worker_hosts)
    document = {"model": config.training.model, "global_batch": global_batch,
                "worker_hosts": list(layout.worker_hosts), "ps_hosts": list(layout.ps_hosts),
                "compute_s": layout.compute_s, "ps_bytes_per_step": list(layout.ps_bytes_per_step),
                "links": [{"worker_host": w, "ps_host": p, "bytes_per_s": value, "source": how}
                          for (w, p), (value, how) in found.items()],
                "enough_ps": enough, "predictions": [dataclasses.asdict(p) for p in searched]}
    path.write_text(json.dumps(document, indent=2))
    return path


def on_paper(*, workers: int, ps: int, variable_mb: float, link_gbps: float, step_compute_ms: float) -> list[str]:
    """The same table from given figures alone: dense variables spread evenly, one host per task."""
    layout = capacity.Layout(ps_hosts=tuple(f"ps host {k}" for k in range(ps)),
                             worker_hosts=tuple(f"worker host {k}" for k in range(workers)),
                             compute_s=step_compute_ms / 1000, ps_bytes_per_step=(2 * variable_mb * 1e6 / ps,) * ps)
    lines, _, _ = sweep_lines(layout, lambda w, p: link_gbps * 1e9 / 8, capacity.even_split(2 * variable_mb * 1e6))
    return [f"capacity on paper: {variable_mb} MB of dense variables, {workers} worker(s), {ps} ps, "
            f"{link_gbps} Gbit/s per host, {step_compute_ms} ms of compute per step"] + lines
