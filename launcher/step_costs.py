"""What a step costs beside its compute and bytes, split out of calibration runs: fixed seconds, round trips, CPU.

The calibration (launcher/calibration_run.py) times the job's real step on one worker and one ps on this
machine's loopback. Of that step, the compute (measured alone, in one process), the transfer of its bytes over
loopback (at the loopback rate the link probe measures) and its round trips (at loopback's round-trip time) are
known; what is left is the step's fixed cost: the chief's dispatch and the RPCs' own work, which no byte count
shows and which every link pays again. A second run on one worker and two ps gives what each ps more adds to the
fixed cost and to each process's CPU (its own subgraph and RPCs in every step). A step waits for ROUND_TRIPS
round trips (the variables read, the gradients sent) and one more per execution (the chief hands a worker
`steps_per_execution` steps at a time). For a cluster of one worker a third run times the step through a link
of the planned rate (at most THROTTLED_UP_TO, and fast enough to move a step's bytes in
THROTTLED_TRANSFER_UP_TO_S, so that the run stays short): the part of its transfer time the step shows, the rest
overlapped by its compute and its other direction, which no byte count tells.
"""

from __future__ import annotations

import dataclasses
import socket

from cluster.capacity import StepCosts
from cluster.config import ClusterConfig
from launcher import calibration_run, link_probe

ROUND_TRIPS = 2
THROTTLED_UP_TO = 1e9 / 8  # bytes/s: the relays are Python threads sharing this machine's cores with the step
THROTTLED_TRANSFER_UP_TO_S = 0.25  # a slower link is timed at the rate that moves a step's bytes in this (bounded)


def round_trips(steps_per_execution: int) -> float:
    """The link round trips one step waits for: the reads and the writes, and its share of the dispatch."""
    return ROUND_TRIPS + 1 / steps_per_execution


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _calibrated(config: ClusterConfig, ps_count: int, say, *, compute_s: float, bytes_per_step: float,
                loopback) -> tuple[dict, float]:
    """A calibration run's figures on `ps_count` ps, and its step's fixed seconds (what compute, transfer and round
    trips leave)."""
    figures = calibration_run.calibrate(config, say, ps_count)
    trips = round_trips(figures["steps_per_execution"])
    transfer_s = bytes_per_step / loopback.bytes_per_s
    return figures, max(0.0, figures["step_s"] - compute_s - transfer_s - trips * loopback.rtt_s)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def transfer_shown(config: ClusterConfig, *, lone_link_bytes_per_s: float, loopback_step_s: float,
                   bytes_per_step: float, loopback, say) -> tuple[float, str]:
    """The part of its transfer time a lone worker's step shows, from a calibration run through a throttled link
    (what it takes beyond the loopback step without its transfer), and the line that says so."""
    rate = min(THROTTLED_UP_TO, max(lone_link_bytes_per_s, bytes_per_step / THROTTLED_TRANSFER_UP_TO_S))
    figures = calibration_run.calibrate(config, say, 1, link_bytes_per_s=rate)
    transfer_s = bytes_per_step / rate
    rest_s = loopback_step_s - bytes_per_step / loopback.bytes_per_s
    shown = max(0.0, figures["step_s"] - rest_s) / transfer_s
    return shown, (f"step on 1 worker + 1 ps here through a {rate * 8 / 1e9:.3f} Gbit/s link: "
                   f"{_ms(figures['step_s'])} ms measured = the step on loopback without its transfer {_ms(rest_s)} "
                   f"+ {shown:.2f} of its transfer {_ms(transfer_s)} (the rest overlaps its compute and its other "
                   "direction), measured")


def measured(config: ClusterConfig, *, compute_s: float, bytes_per_step: float, say,
             lone_link_bytes_per_s: float | None = None) -> tuple[StepCosts, list[str]]:
    """The step's costs from calibration runs on one ps and on two (and, for one worker on a link of
    `lone_link_bytes_per_s`, through such a link), and the lines that say how its time splits."""
    loopback = link_probe.measure(config, "localhost", "localhost", _free_port())
    one, fixed_s = _calibrated(config, 1, say, compute_s=compute_s, bytes_per_step=bytes_per_step, loopback=loopback)
    two, fixed_two_s = _calibrated(config, 2, say, compute_s=compute_s, bytes_per_step=bytes_per_step,
                                   loopback=loopback)
    trips = round_trips(one["steps_per_execution"])
    cpu, cpu_two = one["cpu_s_per_step"], two["cpu_s_per_step"]
    costs = StepCosts(fixed_s=fixed_s, round_trips=trips, cpu_s=dict(cpu),
                      fixed_per_ps_s=max(0.0, fixed_two_s - fixed_s),
                      cpu_per_ps_s={role: max(0.0, cpu_two[role] - cpu[role]) for role in cpu})
    lines = [f"step on 1 worker + 1 ps here: {_ms(one['step_s'])} ms measured = compute {_ms(compute_s)} + transfer "
             f"{_ms(bytes_per_step / loopback.bytes_per_s)} (loopback {loopback.bytes_per_s * 8 / 1e9:.1f} Gbit/s) + "
             f"{trips:.1f} round trips x {loopback.rtt_s * 1e3:.2f} ms + fixed {_ms(fixed_s)} (dispatch, RPC work); "
             f"CPU per step: worker {_ms(cpu['worker'])} ms, ps {_ms(cpu['ps'])} ms, chief {_ms(cpu['chief'])} ms, "
             f"measured",
             f"step on 1 worker + 2 ps here: {_ms(two['step_s'])} ms measured: each ps more adds fixed "
             f"{_ms(costs.fixed_per_ps_s)} ms and CPU per step worker {_ms(costs.cpu_per_ps_s['worker'])} ms, ps "
             f"{_ms(costs.cpu_per_ps_s['ps'])} ms, chief {_ms(costs.cpu_per_ps_s['chief'])} ms, measured"]
    if lone_link_bytes_per_s is not None:
        shown, line = transfer_shown(config, lone_link_bytes_per_s=lone_link_bytes_per_s,
                                     loopback_step_s=one["step_s"], bytes_per_step=bytes_per_step, loopback=loopback,
                                     say=say)
        costs, lines = dataclasses.replace(costs, transfer_shown=shown), [*lines, line]
    return costs, lines
