"""What a step costs beside its compute and bytes, split out of calibration runs: fixed seconds, round trips, CPU.

The calibration (launcher/calibration_run.py) times the job's real step on one worker and one ps on this
machine's loopback. Of that step, the compute (measured alone, in one process), the transfer of its bytes over
loopback (at the loopback rate the link probe measures) and its round trips (at loopback's round-trip time) are
known; what is left is the step's fixed cost: the chief's dispatch and the RPCs' own work, which no byte count
shows and which every link pays again. A second run on one worker and two ps gives what each ps more adds to the
fixed cost and to each process's CPU (its own subgraph and RPCs in every step). A step waits for ROUND_TRIPS
round trips (the variables read, the gradients sent) and one more per execution (the chief hands a worker
`steps_per_execution` steps at a time).
"""

from __future__ import annotations

import socket

from cluster.capacity import StepCosts
from cluster.config import ClusterConfig
from launcher import calibration_run, link_probe

ROUND_TRIPS = 2


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


def measured(config: ClusterConfig, *, compute_s: float, bytes_per_step: float, say) -> tuple[StepCosts, list[str]]:
    """The step's costs from calibration runs on one ps and on two, and the lines that say how its time splits."""
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
    return costs, lines
