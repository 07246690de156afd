"""SIGTERM to the chief (sent by `sh kill.sh`, Slurm, Kubernetes and spot machines before a kill): during training
a checkpoint is written at once, within the launcher's grace (stop_budget.py), and the chief exits with
PREEMPTED_EXIT_CODE; the next run resumes from it."""

from __future__ import annotations

import signal
import time

from common.errors import PREEMPTED_EXIT_CODE
from common.exit_file import end_process
from common.stop_budget import StopBudget


class Preempted(Exception):
    """Raised inside `fit` once the checkpoint asked for by SIGTERM is written."""


class StopRequest:
    """Remembers a SIGTERM. While `training` is set the checkpoint callback acts on it at the next scheduled step;
    outside training nothing has moved since the last checkpoint, so the process exits at once. With `grace_s` (the
    time the launcher gives before SIGKILL) the stop's steps are held to a StopBudget, watched from SIGTERM on."""

    def __init__(self, log, grace_s: float | None = None):
        self.log, self.requested_at, self.training, self.grace_s = log, None, False, grace_s
        self.budget: StopBudget | None = None

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def install(self) -> "StopRequest":
        signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def _on_sigterm(self, signum, _frame) -> None:
        if self.requested:
            return
        self.requested_at = time.monotonic()
        if self.training:
            if self.grace_s is not None:
                self.budget = StopBudget(arrived_at=self.requested_at, grace_s=self.grace_s, log=self.log).watch()
            self.log.info("asked to stop (SIGTERM): writing a checkpoint at the next step%s", "" if self.budget is
                          None else f" (the stop ends within {self.budget.deadline - self.requested_at:.0f} s: "
                          f"launcher.stop_grace_s less {self.budget.margin_s:g} s for the exit)")
            return
        self.log.info("asked to stop (SIGTERM) outside training: the last checkpoint holds this run; exiting")
        exit_preempted()

    def step(self, step: str, then: str, *, expected_s: float = 0.0) -> bool:
        """Step `step` of the stop starts (StopBudget.begin); True, always, without a budget."""
        return self.budget is None or self.budget.begin(step, then, expected_s=expected_s)

    def wait_s(self, most_s: float, fraction: float = 1.0) -> float:
        """A wait within the stop: at most `most_s`, and at most `fraction` of what the budget has left."""
        return most_s if self.budget is None else self.budget.share(most_s, fraction)


def exit_preempted() -> None:
    """Exits at once with PREEMPTED_EXIT_CODE, recorded for the launcher: the checkpoint is on disk, and a normal
    interpreter exit can wait tens of seconds on the cluster coordinator's threads and channels."""
    end_process(PREEMPTED_EXIT_CODE)
