"""Predictions over ps counts (cluster/capacity.py's arithmetic for each): where more ps than configured go,
and the smallest count past which more stop helping."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from cluster.capacity import Layout, Links, Prediction, no_round_trips, predict

ENOUGH_WITHIN = 0.05  # more ps "stop helping" once they add less than this fraction
NEW_HOST = "new host {k}"


def ps_hosts_for(configured: Sequence[str], worker_hosts: Sequence[str], count: int) -> tuple[str, ...]:
    """Hosts of `count` ps: the configured ones first; more go to new hosts, or to the one host of every task."""
    if count <= len(configured):
        return tuple(configured[:count])
    if len({*configured, *worker_hosts}) == 1:
        return tuple(configured) + (configured[0],) * (count - len(configured))
    return tuple(configured) + tuple(NEW_HOST.format(k=k) for k in range(1, count - len(configured) + 1))


def with_new_hosts(links: Links, ps_hosts: Sequence[str], worst=min) -> Links:
    """Links where a new ps host gets the worst configured ps host's figure (the slowest rate: `min`; for round
    trips pass `max`)."""
    def lookup(worker_host: str, ps_host: str) -> float:
        if ps_host.startswith(NEW_HOST.format(k="")):
            return worst(links(worker_host, h) for h in ps_hosts)
        return links(worker_host, ps_host)
    return lookup


def even_split(total_bytes: float) -> Callable[[int], tuple[float, ...]]:
    """Bytes per ps when `total_bytes` per step spread evenly over the ps (the arithmetic on paper)."""
    return lambda count: (total_bytes / count,) * count


def sweep(configured: Layout, links: Links, bytes_for: Callable[[int], Sequence[float]],
          counts: Sequence[int], round_trip: Links = no_round_trips) -> list[Prediction]:
    """Predictions for each ps count, the workers, compute and costs as configured."""
    found = []
    for count in counts:
        hosts = ps_hosts_for(configured.ps_hosts, configured.worker_hosts, count)
        layout = dataclasses.replace(configured, ps_hosts=hosts, ps_bytes_per_step=tuple(bytes_for(count)))
        found.append(predict(layout, with_new_hosts(links, configured.ps_hosts),
                             with_new_hosts(round_trip, configured.ps_hosts, max)))
    return found


def enough_ps(predictions: Sequence[Prediction], within: float = ENOUGH_WITHIN) -> int:
    """The smallest ps count past which more ps add less than `within` of the best predicted steps/s."""
    best = max(p.steps_per_s for p in predictions)
    return min(p.ps for p in predictions if p.steps_per_s >= (1 - within) * best)
