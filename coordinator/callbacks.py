"""Training callbacks: per-epoch checkpoints, step-decay learning rate, and the first step's report."""

from __future__ import annotations

import os
import time
from pathlib import Path

import tf_keras

from coordinator.checkpoints import EpochCheckpoints
from cluster.training_options import TrainingOptions


def learning_rate_at(options: TrainingOptions, epoch: int) -> float:
    """Step decay: the rate is multiplied by lr_decay_factor from each epoch (1-based) in lr_decay_epochs."""
    drops = sum(1 for boundary in options.lr_decay_epochs if epoch + 1 >= boundary)
    return options.learning_rate * options.lr_decay_factor ** drops


class StepDecay(tf_keras.callbacks.Callback):
    """Sets the optimizer's learning rate at the start of each epoch (0-based `epoch`, as Keras counts)."""

    def __init__(self, options: TrainingOptions):
        super().__init__()
        self.options = options

    def on_epoch_begin(self, epoch, logs=None):
        self.model.optimizer.learning_rate.assign(learning_rate_at(self.options, epoch))


class FirstStepReport(tf_keras.callbacks.Callback):
    """Logs once, when this process's first training step has finished (how long start-up and resuming took).

    Under ParameterServerStrategy a batch hook fires when a step is scheduled, not done, so it waits on that
    step's result; its logs stay remote values (`_supports_tf_logs`), so no other step is ever waited on.
    """

    def __init__(self, log):
        super().__init__()
        self.log, self.reported = log, False
        self._supports_tf_logs = True

    def on_train_batch_end(self, batch, logs=None):
        if self.reported:
            return
        self.reported = True
        if hasattr(logs, "fetch"):
            logs.fetch()
        self.log.info("first step done, %.1f s after the process started", time.time() - _process_start_s())


def _process_start_s() -> float:
    """This process's start time (seconds since the epoch), from /proc."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


class EpochEndedEarly(Exception):
    """An epoch ran fewer steps than planned without an error (Keras can end one early after a worker is lost)."""


class SaveEachEpoch(tf_keras.callbacks.Callback):
    """Writes `ckpt-<epoch>` after every epoch that ran its planned steps, for resuming and for the evaluator.

    An epoch that ended short is not saved as done: EpochEndedEarly stops the run, to be resumed from the
    previous checkpoint, instead of a short epoch being counted as whole.
    """

    def __init__(self, checkpoints: EpochCheckpoints, steps_per_epoch: int):
        super().__init__()
        self.checkpoints, self.steps_per_epoch = checkpoints, steps_per_epoch
        self.first_step = 0

    def on_epoch_begin(self, epoch, logs=None):
        """`logs["steps_done"]`: steps of this epoch already run before it began here (a mid-epoch resume)."""
        self.first_step = int(self.model.optimizer.iterations.numpy()) - (logs or {}).get("steps_done", 0)

    def on_epoch_end(self, epoch, logs=None):
        ran = int(self.model.optimizer.iterations.numpy()) - self.first_step
        if ran < self.steps_per_epoch:  # at-least-once re-runs can add steps, never take any away
            raise EpochEndedEarly(f"epoch {epoch + 1} ended after {ran} of its {self.steps_per_epoch} steps")
        self.checkpoints.save(epoch + 1)
