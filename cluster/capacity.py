"""The capacity arithmetic: the steps/s a parameter-server cluster can reach, what bounds it, how many ps it needs.

A step moves bytes from each ps to the worker and back (dense: every variable out and its gradient back;
sparse: the rows a batch looks up). On the worker the two happen one after the other around the compute, so one
worker runs at most 1 / (compute + moved / B) steps/s: 1 / (compute + 2V/B) for V bytes of dense variables. A
ps host sends and receives at once (links are full duplex), so it serves at most B / (half its bytes moved per
step) steps/s to the whole cluster: S·B/V for V spread evenly over S ps. Tasks that share a host share its link,
and workers on one host share its cores (a step's compute is measured with all of them).
Bandwidths are bytes per second between a worker host and a ps host; everything here is pure arithmetic.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

PS_LINKS, WORKER_LINKS, COMPUTE = "ps links", "worker links", "compute"  # the bounds
WORKERS = "workers"  # the workers' own ceiling: compute and transfer one after the other (bound: the larger)
ENOUGH_WITHIN = 0.05  # more ps "stop helping" once they add less than this fraction
FAR_BELOW = 0.5  # a run under this fraction of its prediction is "far below" it
NEW_HOST = "new host {k}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """One configuration: each ps's host and bytes moved per step (both directions), each worker's host."""

    ps_hosts: tuple[str, ...]
    ps_bytes_per_step: tuple[float, ...]
    worker_hosts: tuple[str, ...]
    compute_s: float  # one step's compute on a worker, its own variables local

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
    transfer_s: float  # one step's transfer time on the slowest worker host
    compute_s: float


Links = Callable[[str, str], float]  # (worker host, ps host) -> bytes/s


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


def predict(layout: Layout, links: Links) -> Prediction:
    """The steps/s the cluster can reach: the lowest of the workers' and the ps hosts' ceilings."""
    workers = {host: layout.worker_hosts.count(host) for host in layout.worker_hosts}
    share = {host: count / len(layout.worker_hosts) for host, count in workers.items()}
    transfer = {host: _transfer_s(layout, links, host) for host in workers}
    # a worker host: each worker alone, the host's link shared by its workers (half the bytes each way), its cores
    worker_ceiling = sum(min(_per_s(layout.compute_s + transfer[host], count), _per_s(transfer[host], 2),
                             _per_s(layout.compute_s)) for host, count in workers.items())
    compute_ceiling = _per_s(layout.compute_s, len(workers))
    ps_ceiling = float("inf")
    for host, nbytes in _ps_host_bytes(layout).items():  # steps come from every worker host in their share
        seconds_per_step = sum(share[w] * (nbytes / 2) / links(w, host) for w in workers)
        if seconds_per_step > 0:
            ps_ceiling = min(ps_ceiling, 1 / seconds_per_step)
    slowest = max(transfer.values())
    steps_per_s = min(worker_ceiling, ps_ceiling)
    if ps_ceiling <= worker_ceiling:
        bound = PS_LINKS
    else:
        bound = WORKER_LINKS if slowest > layout.compute_s else COMPUTE
    return Prediction(ps=len(layout.ps_hosts), steps_per_s=steps_per_s, bound=bound,
                      ceilings={PS_LINKS: ps_ceiling, WORKERS: worker_ceiling, COMPUTE: compute_ceiling},
                      transfer_s=slowest, compute_s=layout.compute_s)


def ps_hosts_for(configured: Sequence[str], worker_hosts: Sequence[str], count: int) -> tuple[str, ...]:
    """Hosts of `count` ps: the configured ones first; more go to new hosts, or to the one host of every task."""
    if count <= len(configured):
        return tuple(configured[:count])
    if len({*configured, *worker_hosts}) == 1:
        return tuple(configured) + (configured[0],) * (count - len(configured))
    return tuple(configured) + tuple(NEW_HOST.format(k=k) for k in range(1, count - len(configured) + 1))


def with_new_hosts(links: Links, ps_hosts: Sequence[str]) -> Links:
    """Links where a new ps host gets the slowest configured ps host's link."""
    def lookup(worker_host: str, ps_host: str) -> float:
        if ps_host.startswith(NEW_HOST.format(k="")):
            return min(links(worker_host, h) for h in ps_hosts)
        return links(worker_host, ps_host)
    return lookup


def even_split(total_bytes: float) -> Callable[[int], tuple[float, ...]]:
    """Bytes per ps when `total_bytes` per step spread evenly over the ps (the arithmetic on paper)."""
    return lambda count: (total_bytes / count,) * count


def sweep(configured: Layout, links: Links, bytes_for: Callable[[int], Sequence[float]],
          counts: Sequence[int]) -> list[Prediction]:
    """Predictions for each ps count, the workers and compute as configured."""
    found = []
    for count in counts:
        hosts = ps_hosts_for(configured.ps_hosts, configured.worker_hosts, count)
        layout = dataclasses.replace(configured, ps_hosts=hosts, ps_bytes_per_step=tuple(bytes_for(count)))
        found.append(predict(layout, with_new_hosts(links, configured.ps_hosts)))
    return found


def enough_ps(predictions: Sequence[Prediction], within: float = ENOUGH_WITHIN) -> int:
    """The smallest ps count past which more ps add less than `within` of the best predicted steps/s."""
    best = max(p.steps_per_s for p in predictions)
    return min(p.ps for p in predictions if p.steps_per_s >= (1 - within) * best)


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
