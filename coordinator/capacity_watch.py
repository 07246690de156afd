"""The chief's capacity check: measured steps/s beside the predicted, in its first progress lines and its summary.

The prediction is made here, on the variables as the strategy really placed them, with the links and compute
that `plan` measured (LOGS_DIR/capacity-plan.json) or that cluster.json gives; the lines read
`capacity: measured 8.10 steps/s, predicted 9.00 (90%), bound by ps links`. The run's figure counts the time its
epochs' steps took, not what happens between epochs (checkpoints, the next epoch's input), which the plan
does not predict.
"""

from __future__ import annotations

import statistics
import time

import tf_keras

from cluster import capacity
from cluster.capacity_inputs import (hosts_of, links_and_compute, plan_mismatch, plan_path, planned_costs,
                                     read_plan)
from cluster.config import ClusterConfig
from coordinator import step_traffic

FIRST_LINES = 3


class CapacityWatch(tf_keras.callbacks.Callback):
    """Logs the verdict for the first `first_lines` progress lines; `summary()` is the run's in summary.json. As a
    callback (placed before the checkpoints'), it times each epoch from its start to its steps' end."""

    def __init__(self, prediction: capacity.Prediction, layout: capacity.Layout, log, *,
                 first_lines: int = FIRST_LINES):
        super().__init__()
        self.prediction, self.layout, self.log, self.first_lines = prediction, layout, log, first_lines
        self.seen: list[float] = []
        self.epochs: list[tuple[float, int, float, int]] = []  # (start s, start step, end s, end step), monotonic
        self.began: tuple[float, int] | None = None

    def observe(self, steps_per_s: float) -> None:
        self.seen.append(steps_per_s)
        if len(self.seen) <= self.first_lines:
            self.log.info("%s", capacity.verdict(steps_per_s, self.prediction, warming_up=len(self.seen) == 1))

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_began(int(self.model.optimizer.iterations.numpy()))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_ended(int(self.model.optimizer.iterations.numpy()))

    def epoch_began(self, step: int) -> None:
        self.began = (time.monotonic(), step)

    def epoch_ended(self, step: int) -> None:
        """At an epoch's end every step scheduled in it has run (Keras has fetched its last step's result)."""
        if self.began is not None:
            self.epochs.append((*self.began, time.monotonic(), step))
            self.began = None

    def measured(self) -> float | None:
        """Steps/s over the epochs after the first (which traces), each from its start to its steps' end, else
        the median of the progress lines after the first (it includes tracing), if any.

        Not the lines alone: under ParameterServerStrategy the chief's batch hooks run when steps are scheduled,
        a whole short epoch's at once, so a line's step count can be seconds old (a run measured 143.7 steps/s
        between two lines and 11.2 over its last epoch)."""
        later = self.epochs[1:]
        seconds, steps = sum(end - start for start, _, end, _ in later), sum(b - a for _, a, _, b in later)
        if seconds > 0 and steps > 0:
            return steps / seconds
        lines = self.seen[1:] or self.seen
        return statistics.median(lines) if lines else None

    def summary(self) -> dict:
        measured = self.measured()
        if measured is not None:
            how = ("the steps of the epochs after the first, checkpoints between them left out"
                   if len(self.epochs) >= 2 else "median of the run")
            self.log.info("%s (%s)", capacity.verdict(measured, self.prediction), how)
        p = self.prediction
        return {"predicted_steps_per_s": round(p.steps_per_s, 3), "bound": p.bound,
                "ceilings": {k: round(v, 3) for k, v in p.ceilings.items()},
                "ps_bytes_per_step": list(self.layout.ps_bytes_per_step), "compute_s": self.layout.compute_s,
                "measured_steps_per_s": None if measured is None else round(measured, 3),
                "measured_over_predicted": None if measured is None else round(measured / p.steps_per_s, 3)}


def watch(config: ClusterConfig, model, source, global_batch: int, log) -> CapacityWatch | None:
    """A watch with this run's prediction, or None (logged once, with how to get one) when figures are missing."""
    plan = read_plan(config)
    mismatch = plan and plan_mismatch(config, plan)
    if mismatch:
        log.info("capacity: the plan in %s is for another cluster (%s): run `python -m roles.launch plan` again",
                 plan_path(config), mismatch)
        plan = None
    links, compute_s = links_and_compute(config, plan)
    workers, ps = hosts_of(config, "worker"), hosts_of(config, "ps")
    if compute_s is None or len(links) < len(set(workers)) * len(set(ps)):
        log.info("capacity: no prediction: run `python -m roles.launch plan %s` first, or give every host "
                 "link_gbps and step_compute_ms", config.source)
        return None
    ids = step_traffic.sample_ids(source, global_batch) if hasattr(model, "split_variables") else []
    measured = planned_costs(config, plan)
    trips = measured.pop("round_trips", {})
    layout = capacity.Layout(ps_hosts=ps, worker_hosts=workers, compute_s=compute_s,
                             ps_bytes_per_step=step_traffic.bytes_per_ps(model, len(ps), ids), **measured)
    prediction = capacity.predict(layout, lambda w, p: links[(w, p)], lambda w, p: trips.get((w, p), 0.0))
    log.info("capacity: predicted %.2f steps/s, bound by %s (%.2f MB per step over %d ps, compute %.1f ms)",
             prediction.steps_per_s, prediction.bound, sum(layout.ps_bytes_per_step) / 1e6, len(ps),
             compute_s * 1e3)
    return CapacityWatch(prediction, layout, log)
