"""What a step costs beside its compute and bytes, split out of a calibration run: fixed seconds, round trips, CPU.

The calibration (launcher/calibration_run.py) times the job's real step on one worker and one ps on this
machine's loopback. Of that step, the compute (measured alone, in one process), the transfer of its bytes over
loopback (at the loopback rate the link probe measures) and its round trips (at loopback's round-trip time) are
known; what is left is the step's fixed cost: the chief's dispatch and the RPCs' own work, which no byte count
shows and which every link pays again. A step waits for ROUND_TRIPS round trips (the variables read, the
gradients sent) and one more per execution (the chief hands a worker `steps_per_execution` steps at a time).
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


def measured(config: ClusterConfig, *, compute_s: float, bytes_per_step: float, say) -> tuple[StepCosts, str]:
    """The step's costs from a calibration run, and the line that says how its time splits."""
    figures = calibration_run.calibrate(config, say)
    loopback = link_probe.measure(config, "localhost", "localhost", _free_port())
    trips = round_trips(figures["steps_per_execution"])
    transfer_s = bytes_per_step / loopback.bytes_per_s
    fixed_s = max(0.0, figures["step_s"] - compute_s - transfer_s - trips * loopback.rtt_s)
    cpu = figures["cpu_s_per_step"]
    line = (f"step on 1 worker + 1 ps here: {figures['step_s'] * 1e3:.1f} ms measured = compute "
            f"{compute_s * 1e3:.1f} + transfer {transfer_s * 1e3:.1f} (loopback {loopback.bytes_per_s * 8 / 1e9:.1f} "
            f"Gbit/s) + {trips:.1f} round trips x {loopback.rtt_s * 1e3:.2f} ms + fixed {fixed_s * 1e3:.1f} (dispatch, "
            f"RPC work); CPU per step: worker {cpu['worker'] * 1e3:.1f} ms, ps {cpu['ps'] * 1e3:.1f} ms, chief "
            f"{cpu['chief'] * 1e3:.1f} ms, measured")
    return StepCosts(fixed_s=fixed_s, round_trips=trips, cpu_s=dict(cpu)), line
