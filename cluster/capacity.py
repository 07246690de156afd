"""The capacity arithmetic: the steps/s a parameter-server cluster can reach and what bounds it (how many ps it
needs: ps_count_sweep.py).

A step moves bytes from each ps to the worker and back (dense: every variable out and its gradient back;
sparse: the rows a batch looks up). On the worker the two happen one after the other around the compute, and a
step also pays fixed costs that no byte count shows (the chief's dispatch, the RPCs' own work: `fixed_s`,
measured by the calibration run, and more for each ps it talks to) and some round trips of its link
(`round_trips` x the link's round-trip time).
So one worker alone runs at most 1 / (compute + fixed + moved / B + round trips x RTT) steps/s, less the part of
its transfer that overlaps its compute and its other direction: a lone worker's step shows only
`transfer_shown` of its transfer time, measured by the calibration on a throttled link (with more workers their
transfers meet at the ps links, and the queueing below counts them whole). A ps host sends
and receives at once (links are full duplex), so it serves at most B / (half its bytes moved per step) steps/s
to the whole cluster: S·B/V for V spread evenly over S ps. Below that ceiling the workers still queue at a
ps's link behind each other's transfers (they read at once, then write at once): the cluster's steps/s is that
of a closed queueing network, one worker a customer (mean value analysis, `_queued`); a worker's reads from
several ps run at once, so each direction lasts as long as its own link needs or its slowest ps's queue,
whichever is longer. Workers whose transfers fit in turns at a ps link take turns there instead of queueing
(`_sharing`). A worker's link carries its traffic to every ps: when it reads from several ps hosts in long
transfers, each lasts the worker's whole direction, TCP shares each ps link among them, and the workers move in
step, every direction a round of all their bytes through the busiest ps link (`_in_step_s`). Tasks that share a
host share its link. Every task uses CPU per step (worker, ps and
chief, measured): the tasks on one machine (hosts with the same kernel, e.g. network namespaces or containers)
share its cores, and the chief dispatches every step from one thread. Bandwidths are bytes per second between
a worker host and a ps host; everything here is pure arithmetic.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Callable, Mapping

PS_LINKS, WORKER_LINKS, COMPUTE = "ps links", "worker links", "compute"  # the bounds
FIXED, CORES, CHIEF = "fixed costs", "shared cores", "chief dispatch"
WORKERS = "workers"  # the workers' own ceiling: compute and transfer one after the other (bound: the larger)
FAR_BELOW = 0.5  # a run under this fraction of its prediction is "far below" it
# a round of every worker's transfer through one ps link, over a worker's cycle alone: up to TURNS_FILL the
# workers take turns there, from SHARING_FILL on they share it (bench/RESULTS-capacity.md: 2 workers on one ps
# at 0.75-0.95 stepped as if alone, 3 at 1.1-1.4 as the queueing analysis says)
TURNS_FILL, SHARING_FILL = 0.75, 1.25
# a worker's transfer to one ps, one way, above which workers reading from several ps hosts move in step
# (`_in_step_s`): in bench/RESULTS-capacity.md transfers of 0.2-0.4 MB to each of 2-3 ps took turns as the plan
# says, while the CNN 28x28's 5.5 MB to each of 2 ps ran at the pace of all workers reading at once (the plan that
# let them take turns was 51-86 % high)
LONG_TRANSFER_BYTES = 1 << 20
IN_STEP_ROUND = 2.0  # what was measured: 3 workers over 2 ps, a round 1.5 times a worker's own direction


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepCosts:
    """What a step costs beside its compute and bytes: fixed seconds per step (dispatch, the RPCs' own work), the
    link round trips it waits for, and CPU seconds per step of a worker, of all ps together and of the chief, all
    with one ps; and what each ps beyond the first adds to the fixed seconds and to each role's CPU (its own
    subgraph and RPCs in every step)."""

    fixed_s: float = 0.0
    round_trips: float = 0.0
    cpu_s: Mapping[str, float] = dataclasses.field(default_factory=dict)  # "worker", "ps", "chief"
    fixed_per_ps_s: float = 0.0
    cpu_per_ps_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    transfer_shown: float = 1.0  # the part of its transfer time a lone worker's step shows

    def for_ps(self, count: int) -> "StepCosts":
        """The costs of a step that talks to `count` ps."""
        more = count - 1
        cpu = {role: seconds + more * self.cpu_per_ps_s.get(role, 0.0) for role, seconds in self.cpu_s.items()}
        return StepCosts(fixed_s=self.fixed_s + more * self.fixed_per_ps_s, round_trips=self.round_trips, cpu_s=cpu,
                         transfer_shown=self.transfer_shown)

    def shown(self, workers: int) -> float:
        """The part of a worker's transfer time its step shows: `transfer_shown` alone, all of it among others."""
        return self.transfer_shown if workers == 1 else 1.0


@dataclasses.dataclass(frozen=True)
class Machine:
    """The machine a host runs on (hosts of one kernel share it) and the cores its tasks may use."""

    name: str
    cores: float
    memory_bytes: float = 0.0  # available memory (MemAvailable), 0 where unknown


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """One configuration: each ps's host and bytes moved per step (both directions), each worker's host."""

    ps_hosts: tuple[str, ...]
    ps_bytes_per_step: tuple[float, ...]
    worker_hosts: tuple[str, ...]
    compute_s: float  # one step's compute on a worker, its own variables local
    costs: StepCosts = StepCosts()
    machines: Mapping[str, Machine] = dataclasses.field(default_factory=dict)  # host -> machine, where known
    chief_host: str | None = None

    def __post_init__(self):
        if len(self.ps_hosts) != len(self.ps_bytes_per_step) or not self.ps_hosts or not self.worker_hosts:
            raise ValueError(f"one byte count per ps ({self.ps_hosts}, {self.ps_bytes_per_step}) and at least one "
                             f"ps and worker ({self.worker_hosts}) are required")
        if self.compute_s < 0 or min(self.ps_bytes_per_step) < 0:
            raise ValueError(f"compute_s ({self.compute_s}) and bytes ({self.ps_bytes_per_step}) must be >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prediction:
    """Predicted steps/s of the whole cluster, the bound that sets it, and every bound's own ceiling."""

    ps: int
    steps_per_s: float
    bound: str
    ceilings: Mapping[str, float]  # PS_LINKS, WORKERS, COMPUTE -> steps/s each alone would allow
    transfer_s: float  # one step's transfer time on the slowest worker host (what a lone worker's step shows of it)
    compute_s: float
    fixed_s: float = 0.0  # one step's fixed costs and round trips on the slowest worker host
    queued_s: float = 0.0  # one step's wait at the ps links behind the other workers' transfers


Links = Callable[[str, str], float]  # (worker host, ps host) -> bytes/s, or -> round-trip seconds


def no_round_trips(worker_host: str, ps_host: str) -> float:
    return 0.0


def _ps_host_bytes(layout: Layout) -> dict[str, float]:
    moved: dict[str, float] = {}
    for host, nbytes in zip(layout.ps_hosts, layout.ps_bytes_per_step, strict=True):
        moved[host] = moved.get(host, 0.0) + nbytes
    return moved


def _transfer_s(layout: Layout, links: Links, worker_host: str) -> float:
    """One step's transfer time for a worker on `worker_host`: every ps's bytes, one after another."""
    return sum(nbytes / links(worker_host, host) for host, nbytes in _ps_host_bytes(layout).items())


def _per_s(seconds: float, count: float = 1) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _worker_ceiling(layout: Layout, costs: StepCosts, transfer: dict, waits: dict) -> float:
    """The workers' steps/s: each alone, its host's link shared by its workers (half the bytes each way) and,
    without CPU figures, its cores (the compute is measured with all of them)."""
    total, shown = 0.0, costs.shown(len(layout.worker_hosts))
    for host, count in Counter(layout.worker_hosts).items():
        alone = _per_s(layout.compute_s + shown * transfer[host] + waits[host], count)
        cores = float("inf") if costs.cpu_s else _per_s(layout.compute_s)
        total += min(alone, _per_s(transfer[host], 2), cores)
    return total


def _ps_link_s(layout: Layout, links: Links) -> list[float]:
    """Seconds each ps host's link spends per step (of any worker, in their share) in each direction."""
    share = {host: count / len(layout.worker_hosts) for host, count in Counter(layout.worker_hosts).items()}
    return [sum(share[w] * (nbytes / 2) / links(w, host) for w in share)
            for host, nbytes in _ps_host_bytes(layout).items()]


def _sharing(link_s: float, workers: int, cycle_s: float) -> float:
    """The part of the queueing analysis's wait a link's workers meet: none while a round of their transfers
    fills at most TURNS_FILL of a worker's cycle (their transfers take the same time every step, so they fall
    into turns, one reading while another writes), all of it from SHARING_FILL on (they overlap on every step
    and share the link), in proportion between."""
    fill = workers * link_s / cycle_s if cycle_s > 0 else float("inf")
    return min(1.0, max(0.0, (fill - TURNS_FILL) / (SHARING_FILL - TURNS_FILL)))


def _in_step_s(layout: Layout, link_s: list[float], own_s: float, rest_s: float) -> float | None:
    """One direction of a worker's step when its transfers to several ps hosts are long (over LONG_TRANSFER_BYTES
    to one ps, one way), else None. A worker's link carries its traffic to every ps, so its transfer to each ps
    lasts its whole direction (`own_s`), not its bytes' time at that ps: the turns the workers can take there are
    counted with that time (`_sharing`), and where they cannot, TCP shares each ps link among the long transfers
    that meet there and transfers that start together end together: the workers move in step, a direction lasting
    a round of every worker's transfer through the busiest ps link. Only while that round is at most
    IN_STEP_ROUND times the worker's own direction (what was measured); past it the queueing analysis stands."""
    moved, count = _ps_host_bytes(layout), len(layout.worker_hosts)
    round_s = count * max(link_s)
    if count < 2 or len(moved) < 2 or max(moved.values()) / 2 <= LONG_TRANSFER_BYTES or round_s > IN_STEP_ROUND * own_s:
        return None
    return own_s + _sharing(own_s, count, rest_s + 2 * own_s) * max(0.0, round_s - own_s)


def _queued(layout: Layout, transfer: dict, waits: dict, link_s: list[float]) -> tuple[float, float]:
    """The workers' steps/s and a step's wait when they queue at the ps links, by mean value analysis: with n
    workers a transfer through ps link k lasts its own time there times (1 + the transfers queued there with n-1
    workers). A worker reads from all ps at once (and writes at once), so a direction lasts its own link's time
    or the slowest ps's time with its queue, whichever is longer; a link carries both directions at once. The
    workers meet the queue at a link only in the part `_sharing` gives: the rest of the time they take turns.
    Long transfers to several ps (`_in_step_s`) take turns or move in step instead of queueing at random."""
    count = len(layout.worker_hosts)
    own = sum(transfer[host] for host in layout.worker_hosts) / count / 2  # one direction on the worker's link
    rest = layout.compute_s + sum(waits[host] for host in layout.worker_hosts) / count
    in_step = _in_step_s(layout, link_s, own, rest)
    if in_step is not None:
        return _per_s(rest + 2 * in_step * layout.costs.shown(count), count), 2 * (in_step - own)
    alone_s = rest + 2 * max([own, *link_s])  # a worker's cycle with no one else
    queues = [0.0] * len(link_s)
    for n in range(1, count):
        direction_s = max([own, *(s * (1 + q) for s, q in zip(link_s, queues, strict=True))])
        steps_per_s = _per_s(rest + 2 * direction_s, n)
        queues = [steps_per_s * s * (1 + q) if s else 0.0 for s, q in zip(link_s, queues, strict=True)]
    met = [_sharing(s, count, alone_s) * q for s, q in zip(link_s, queues, strict=True)]  # of n-1 workers' queue
    direction_s = max([own, *(s * (1 + m) for s, m in zip(link_s, met, strict=True))])
    return _per_s(rest + 2 * direction_s * layout.costs.shown(count), count), 2 * (direction_s - own)


def _cores_ceiling(layout: Layout, costs: StepCosts) -> float:
    """Each machine's cores over the CPU seconds its tasks spend per step of the whole cluster (workers take
    steps in their share, ps work in proportion to their bytes, the chief on every step)."""
    cpu, machines = costs.cpu_s, layout.machines
    if not cpu or not machines:
        return float("inf")
    load: dict[str, float] = {}
    for host in layout.worker_hosts:
        if host in machines:
            load[machines[host].name] = load.get(machines[host].name, 0.0) + cpu.get("worker", 0.0) / len(
                layout.worker_hosts)
    total_bytes = sum(layout.ps_bytes_per_step)
    for host, nbytes in zip(layout.ps_hosts, layout.ps_bytes_per_step, strict=True):
        if host in machines:
            part = nbytes / total_bytes if total_bytes else 1 / len(layout.ps_hosts)
            load[machines[host].name] = load.get(machines[host].name, 0.0) + part * cpu.get("ps", 0.0)
    if layout.chief_host in machines:
        name = machines[layout.chief_host].name
        load[name] = load.get(name, 0.0) + cpu.get("chief", 0.0)
    cores = {m.name: m.cores for m in machines.values()}
    return min((_per_s(seconds, cores[name]) for name, seconds in load.items()), default=float("inf"))


def predict(layout: Layout, links: Links, round_trip: Links = no_round_trips) -> Prediction:
    """The steps/s the cluster can reach: the workers' steps/s with their queues at the ps links, at most the
    workers', the ps hosts', the shared cores' and the chief's ceilings. `round_trip(worker host, ps host)` is
    the link's round-trip time in seconds."""
    workers, costs = Counter(layout.worker_hosts), layout.costs.for_ps(len(layout.ps_hosts))
    transfer = {host: _transfer_s(layout, links, host) for host in workers}
    waits = {host: costs.fixed_s + costs.round_trips * max(round_trip(host, p) for p in layout.ps_hosts)
             for host in workers}
    link_s = _ps_link_s(layout, links)
    ceilings = {WORKERS: _worker_ceiling(layout, costs, transfer, waits),
                PS_LINKS: min((_per_s(s) for s in link_s if s > 0), default=float("inf")),
                COMPUTE: _per_s(layout.compute_s, len(workers)), CORES: _cores_ceiling(layout, costs),
                CHIEF: _per_s(costs.cpu_s.get("chief", 0.0))}
    queued, queued_s = _queued(layout, transfer, waits, link_s)
    steps_per_s = min(queued, ceilings[WORKERS], ceilings[PS_LINKS], ceilings[CORES], ceilings[CHIEF])
    slowest = max(workers, key=lambda host: transfer[host] + waits[host])
    shown_s = costs.shown(len(layout.worker_hosts)) * transfer[slowest]
    parts = {WORKER_LINKS: shown_s, COMPUTE: layout.compute_s, FIXED: waits[slowest]}
    return Prediction(ps=len(layout.ps_hosts), steps_per_s=steps_per_s,
                      bound=_bound(ceilings, steps_per_s, queued_s, parts), ceilings=ceilings,
                      transfer_s=shown_s, compute_s=layout.compute_s, fixed_s=waits[slowest],
                      queued_s=queued_s)


def _bound(ceilings: dict, steps_per_s: float, queued_s: float, parts: dict) -> str:
    """What sets the prediction: a shared resource (ps links, cores, the chief), or the workers' largest part
    of a step (their wait in the ps links' queues counts as the ps links')."""
    for name in (CORES, CHIEF):
        if ceilings[name] <= steps_per_s:
            return name
    if ceilings[PS_LINKS] <= steps_per_s or queued_s > max(parts.values()):
        return PS_LINKS
    return max(parts, key=parts.get)


def verdict(measured_steps_per_s: float, prediction: Prediction, *, warming_up: bool = False) -> str:
    """`capacity: measured 8.1 steps/s, predicted 9.0 (90%), bound by ps links`, flagging a run far below it
    (unless `warming_up`: the first figure of a run includes tracing and connecting)."""
    ratio = measured_steps_per_s / prediction.steps_per_s if prediction.steps_per_s > 0 else 0.0
    line = (f"capacity: measured {measured_steps_per_s:.2f} steps/s, predicted {prediction.steps_per_s:.2f} "
            f"({ratio:.0%}), bound by {prediction.bound}")
    if warming_up:
        line += " (the first figure: it includes start-up)"
    elif ratio < FAR_BELOW:
        line += (" - far below the prediction: something the model leaves out limits this run (CPU shared with "
                 "other tasks, the input pipeline, the chief's dispatch, a slower link than planned)")
    return line
