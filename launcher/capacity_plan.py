"""`plan`: how many ps a job needs, predicted before it runs from its model, its links, its compute and its costs.

Bytes per ps come from the model built here on the CPU (coordinator.step_traffic); each worker host <-> ps
host link's rate and round trip are `hosts.<name>.link_gbps` and `link_rtt_ms` when both ends (or the one host)
give them, else measured by a short bounded transfer (launcher.link_probe); compute is
`hosts.<name>.step_compute_ms` when every worker host gives it (the slowest counts), else measured here; what a
step costs beyond those (fixed costs, round trips, CPU per task) comes from a few seconds of the real step on one
worker and one ps here (launcher.step_costs); each host's cores and available memory are
`hosts.<name>.cores` and `memory_gib` when given, else asked on the host (launcher.host_facts), and the ps of a
recommender are held against that memory before the model is built (cluster/ps_memory.py). So a cluster whose
hosts give every figure is planned without reaching any of them; a host that cannot be reached is named with the
keys still missing. The prediction's inputs go to LOGS_DIR/capacity-plan.json, where the chief finds them
and puts its measured steps/s beside the prediction.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cluster import capacity
from cluster.addresses import Address
from cluster import ps_count_sweep, ps_memory
from cluster.capacity_inputs import given_compute_s, given_link, given_rtt_s, hosts_of, missing_keys, plan_path
from cluster.config import ClusterConfig
from common.errors import UserError
from launcher import host_facts, link_probe, step_costs

SEARCH_UP_TO = 16  # ps counts searched for the smallest that is enough (at least twice the configured count)
SHARED_MEMORY = ("tasks on one host reach each other through memory (loopback): their links share the host's "
                 "memory bandwidth and its cores, so these are not network figures")


def links(config: ClusterConfig, say) -> dict[tuple[str, str], tuple[float, float, str]]:
    """{(worker host, ps host): (bytes/s, round-trip s, "given" or "measured")} for every pair the cluster uses."""
    found = {}
    ports = {a.host: a.port for a in config.jobs["ps"]}
    for worker_host in dict.fromkeys(hosts_of(config, "worker")):
        for ps_host in dict.fromkeys(hosts_of(config, "ps")):
            rate, rtt = given_link(config, worker_host, ps_host), given_rtt_s(config, worker_host, ps_host)
            if rate is not None and rtt is not None:
                found[(worker_host, ps_host)] = (rate, rtt, "given")
                continue
            try:
                probed = link_probe.measure(config, worker_host, ps_host, ports[ps_host])
            except link_probe.ProbeFailed as failure:
                keys = missing_keys(config, (worker_host, ps_host), ("link_gbps", "link_rtt_ms"))
                raise link_probe.ProbeFailed(f"{failure}; to plan without measuring it, give {keys}") from None
            how = "measured" if rate is None and rtt is None else "given rate, measured round trip" \
                if rtt is None else "measured rate, given round trip"
            found[(worker_host, ps_host)] = (rate or probed.bytes_per_s, probed.rtt_s if rtt is None else rtt, how)
            say(f"link {ps_host} -> {worker_host}: {probed.bytes_per_s * 8 / 1e9:.3f} Gbit/s, round trip "
                f"{probed.rtt_s * 1e3:.2f} ms measured")
    return found


def lone_link(found: dict, worker_hosts, ps_hosts) -> float | None:
    """The rate of a lone worker's slowest link to its ps, which its step is timed through; None with more workers
    or over memory (the calibration's own loopback is that link)."""
    if len(worker_hosts) > 1 or shares_memory(worker_hosts, ps_hosts):
        return None
    return min(rate for rate, _, _ in found.values())


def shares_memory(worker_hosts, ps_hosts) -> bool:
    return bool(set(worker_hosts) & set(ps_hosts)) or all(Address(h, 1).is_loopback
                                                          for h in (*worker_hosts, *ps_hosts))


def table(predictions: list[capacity.Prediction], configured: int) -> list[str]:
    """One aligned row per ps count: steps/s, the bound, each bound's own ceiling, a worker's step in parts."""
    rows = ["    ps | steps/s | bound          | ps links |  workers |  cores |  chief | compute ms | transfer ms | "
            "fixed ms | queued ms"]
    for p in predictions:
        mark = "*" if p.ps == configured else " "
        c = p.ceilings
        rows.append(f"  {mark}{p.ps:3d} | {p.steps_per_s:7.2f} | {p.bound:<14} | {c[capacity.PS_LINKS]:8.2f} | "
                    f"{c[capacity.WORKERS]:8.2f} | {c[capacity.CORES]:6.1f} | {c[capacity.CHIEF]:6.1f} | "
                    f"{p.compute_s * 1e3:10.1f} | {p.transfer_s * 1e3:11.1f} | {p.fixed_s * 1e3:8.1f} | "
                    f"{p.queued_s * 1e3:9.1f}")
    return rows


def sweep_lines(layout: capacity.Layout, rate, bytes_for,
                round_trip=capacity.no_round_trips) -> tuple[list[str], list[capacity.Prediction], int]:
    """The table for 1..2x the configured ps (and the enough count, when it lies beyond) and that count."""
    configured = len(layout.ps_hosts)
    counts = range(1, max(2 * configured, SEARCH_UP_TO) + 1)
    searched = ps_count_sweep.sweep(layout, rate, bytes_for, counts, round_trip)
    enough = ps_count_sweep.enough_ps(searched)
    shown = [p for p in searched if p.ps <= 2 * configured or p.ps == enough]
    best = max(p.steps_per_s for p in searched)
    lines = table(shown, configured)
    if enough == searched[-1].ps:
        lines.append(f"more ps still help at {enough} ps (the most searched); the bound is "
                     f"{searched[-1].bound}")
    else:
        lines.append(f"enough ps: {enough} (past it more ps add less than {ps_count_sweep.ENOUGH_WITHIN:.0%}; "
                     f"{best:.2f} steps/s at best, then bound by {searched[enough - 1].bound}); "
                     f"configured: {configured} (* above)")
    return lines, searched, enough


def _machine_lines(config: ClusterConfig, machines: dict[str, capacity.Machine]) -> list[str]:
    """One line per machine: its hosts, cores and available memory (hosts of one kernel share its cores)."""
    by_machine: dict[str, list[str]] = {}
    for host, machine in machines.items():
        by_machine.setdefault(machine.name, []).append(host)
    return [f"machine of {', '.join(hosts)}: {machines[hosts[0]].cores:.0f} core(s), "
            f"{ps_memory.gib(machines[hosts[0]].memory_bytes)} available"
            + (", shared by all of them (one kernel)" if len(hosts) > 1 else "")
            + (", given" if all(config.host(h).cores and config.host(h).memory_gib for h in hosts) else ", asked")
            for hosts in by_machine.values()]


def tables_fit(config: ClusterConfig, machines: dict[str, capacity.Machine]) -> list[str]:
    """What each ps holds at its peak (dlrm, wide_deep), one line; refused (UserError, one line) when the ps of a
    machine would need more than its available memory, as `sh run.sh` would refuse it."""
    options, ps = config.training, hosts_of(config, "ps")
    peak = ps_memory.peak(options, len(ps))
    if peak is None:
        return []
    by_machine: dict[str, list[str]] = {}
    for host in ps:
        by_machine.setdefault(machines[host].name, []).append(host)
    for hosts in by_machine.values():
        available, place = machines[hosts[0]].memory_bytes, ", ".join(dict.fromkeys(hosts))
        why = ps_memory.shortfall(options, len(ps), len(hosts), available, place=f"on {place}",
                                  has=f"{place} {'has' if len(set(hosts)) == 1 else 'have'} "
                                      f"{ps_memory.gib(available)} available")
        if why:
            raise UserError(ps_memory.problem(options, why), source=config.source.name)
    return [f"each ps at its peak: {ps_memory.gib(peak.total)} ({peak.parts()}; docs/memory.md)"]


def plan(config: ClusterConfig, say) -> list[str]:
    """Builds the model, reads its bytes per ps, measures or takes links, compute and step costs; returns the
    report lines."""
    from coordinator import step_traffic  # TensorFlow: only once the environment is set
    from models.sources import source_for_model

    options = config.training
    workers, ps = hosts_of(config, "worker"), hosts_of(config, "ps")
    chief = config.jobs["chief"][0].host
    machines = host_facts.machines(config, (*workers, *ps, chief))  # first: given, or asked (a failure names keys)
    fitting = tables_fit(config, machines)  # before the model is built here
    source = source_for_model(options, config.path("."))
    global_batch = options.per_worker_batch * len(workers)
    model, created = step_traffic.built_on_cpu(options, source)
    ids = step_traffic.sample_ids(source, global_batch) if hasattr(model, "split_variables") else []

    def bytes_for(count: int) -> tuple[float, ...]:
        return step_traffic.planned_bytes(options, model, created, ids, count)

    compute_s, compute_from = given_compute_s(config), "given (hosts.<name>.step_compute_ms)"
    if compute_s is None:
        compute_s, compute_from = step_traffic.compute_s(model, source, global_batch), "measured on this machine"
    found = links(config, say)
    costs, costs_lines = step_costs.measured(config, compute_s=compute_s, bytes_per_step=sum(bytes_for(1)), say=say,
                                             lone_link_bytes_per_s=lone_link(found, workers, ps))
    layout = capacity.Layout(ps_hosts=ps, worker_hosts=workers, compute_s=compute_s, ps_bytes_per_step=bytes_for(
        len(ps)), costs=costs, machines=machines, chief_host=chief)
    lines, searched, enough = sweep_lines(layout, lookup({pair: f[0] for pair, f in found.items()}), bytes_for,
                                          lookup({pair: f[1] for pair, f in found.items()}))
    write(config, layout, found, searched, enough)
    tables = table_lines(options, model, created, ids, layout)
    head = _head(config, model, layout, found, compute_from)
    return [*head, *costs_lines, *_machine_lines(config, machines), *fitting, *tables, *lines]


def table_lines(options, model, created, ids, layout: capacity.Layout) -> list[str]:
    """With tables whose memory the options alone do not give (dynamic tables): what each configured ps holds at
    full capacity against its host's free memory, and the ids a step looks up and inserts."""
    from coordinator import step_traffic
    from tables import kinds, memory

    count = len(layout.ps_hosts)
    shards = step_traffic.placed(created, step_traffic.partitioner_for(options, count), count)
    held, lines = kinds.ps_account(model, lambda variable: shards[variable.ref()]), []
    if not held:
        return []
    for index, share in sorted(held.items()):
        host = layout.ps_hosts[index]
        machine = layout.machines.get(host)
        free = (f" of {machine.memory_bytes / 2 ** 20:,.0f} MiB free on {host} "
                f"({share.total / machine.memory_bytes:.0%})" if machine and machine.memory_bytes else "")
        lines.append(f"dynamic tables on ps:{index}: {share.rows:,} rows at capacity = rows "
                     f"{share.row_bytes / 2 ** 20:,.1f} MiB + optimizer slots {share.slot_bytes / 2 ** 20:,.1f} MiB "
                     f"+ id index {share.index_bytes / 2 ** 20:,.1f} MiB + bookkeeping and admission sketch "
                     f"{share.bookkeeping_bytes / 2 ** 20:,.1f} MiB = "
                     f"{share.total / 2 ** 20:,.1f} MiB{free}")
    if ids:
        lookups, distinct, new = memory.ids_per_step(ids)
        lines.append(f"dynamic tables per step: {lookups:,.0f} ids looked up ({distinct:,.0f} distinct), about "
                     f"{new:,.0f} not seen in the batches before (inserts, until the tables hold what your data "
                     f"repeats), in {len(ids)} sampled batches")
    return lines


def _head(config: ClusterConfig, model, layout: capacity.Layout, found: dict, compute_from: str) -> list[str]:
    variable_bytes = sum(int(v.shape.num_elements()) * v.dtype.size for v in model.trainable_variables)
    moved = sum(layout.ps_bytes_per_step)
    workers, ps = layout.worker_hosts, layout.ps_hosts
    head = [f"capacity plan for {config.source}: model {config.training.model}, {variable_bytes / 1e6:.2f} MB of "
            f"trainable variables, {len(workers)} worker(s), batch {config.training.per_worker_batch * len(workers)} "
            f"per step; {moved / 1e6:.2f} MB moved per step over {len(ps)} ps",
            f"compute: {layout.compute_s * 1e3:.1f} ms per step, {compute_from}"]
    head += [f"link {p} -> {w}: {rate * 8 / 1e9:.3f} Gbit/s, round trip {rtt * 1e3:.2f} ms, {how}"
             for (w, p), (rate, rtt, how) in found.items()]
    if shares_memory(workers, ps):
        head.append(f"note: {SHARED_MEMORY}")
    return head


def lookup(figures: dict[tuple[str, str], float]):
    """(worker host, ps host) -> the figure of that pair."""
    return lambda worker_host, ps_host: figures[(worker_host, ps_host)]


def write(config: ClusterConfig, layout: capacity.Layout, found: dict, searched: list, enough: int) -> Path:
    """The plan's inputs and predictions, for the chief (LOGS_DIR/capacity-plan.json)."""
    path = plan_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    global_batch = config.training.per_worker_batch * len(layout.worker_hosts)
    document = {"model": config.training.model, "global_batch": global_batch,
                "worker_hosts": list(layout.worker_hosts), "ps_hosts": list(layout.ps_hosts),
                "compute_s": layout.compute_s, "ps_bytes_per_step": list(layout.ps_bytes_per_step),
                "costs": dataclasses.asdict(layout.costs), "chief_host": layout.chief_host,
                "machines": {host: dataclasses.asdict(m) for host, m in layout.machines.items()},
                "links": [{"worker_host": w, "ps_host": p, "bytes_per_s": rate, "rtt_s": rtt, "source": how}
                          for (w, p), (rate, rtt, how) in found.items()],
                "enough_ps": enough, "predictions": [dataclasses.asdict(p) for p in searched]}
    path.write_text(json.dumps(document, indent=2))
    return path


def on_paper(*, workers: int, ps: int, variable_mb: float, link_gbps: float, step_compute_ms: float) -> list[str]:
    """The same table from given figures alone: dense variables spread evenly, one host per task."""
    layout = capacity.Layout(ps_hosts=tuple(f"ps host {k}" for k in range(ps)),
                             worker_hosts=tuple(f"worker host {k}" for k in range(workers)),
                             compute_s=step_compute_ms / 1000, ps_bytes_per_step=(2 * variable_mb * 1e6 / ps,) * ps)
    split = ps_count_sweep.even_split(2 * variable_mb * 1e6)
    lines, _, _ = sweep_lines(layout, lambda w, p: link_gbps * 1e9 / 8, split)
    return [f"capacity on paper: {variable_mb} MB of dense variables, {workers} worker(s), {ps} ps, "
            f"{link_gbps} Gbit/s per host, {step_compute_ms} ms of compute per step"] + lines
