"""SIGTERM to the chief (sent by `sh kill.sh`, Slurm, Kubernetes and spot machines before a kill): during training
a checkpoint is written at once and the chief exits with PREEMPTED_EXIT_CODE; the next run resumes from it."""

from __future__ import annotations

import signal
import time

from common.errors import PREEMPTED_EXIT_CODE
from common.exit_file import end_process


class Preempted(Exception):
    """Raised inside `fit` once the checkpoint asked for by SIGTERM is written."""


class StopRequest:
    """Remembers a SIGTERM. While `training` is set the checkpoint callback acts on it at the next scheduled step;
    outside training nothing has moved since the last checkpoint, so the process exits at once."""

    def __init__(self, log):
        self.log, self.requested_at, self.training = log, None, False

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
            self.log.info("asked to stop (SIGTERM): writing a checkpoint at the next step")
            return
        self.log.info("asked to stop (SIGTERM) outside training: the last checkpoint holds this run; exiting")
        exit_preempted()


def exit_preempted() -> None:
    """Exits at once with PREEMPTED_EXIT_CODE, recorded for the launcher: the checkpoint is on disk, and a normal
    interpreter exit can wait tens of seconds on the cluster coordinator's threads and channels."""
    end_process(PREEMPTED_EXIT_CODE)
