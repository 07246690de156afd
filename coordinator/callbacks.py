"""Training callbacks: checkpoints (epoch ends, timed, on SIGTERM), step-decay learning rate, first-step report."""

from __future__ import annotations

import os
import time
from pathlib import Path

import tf_keras

from cluster.training_options import TrainingOptions
from models.checkpoints import EpochCheckpoints, Position
from common.preemption import Preempted, StopRequest


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


class Checkpointing(tf_keras.callbacks.Callback):
    """Writes `ckpt-<E>` after every epoch that ran its planned steps, and under ParameterServerStrategy
    `ckpt-<E>-<S>` within an epoch every `every_s` seconds and at once when the chief is asked to stop.

    A save within an epoch first waits for the steps already scheduled (the coordinator's join), so the
    checkpoint holds exactly the steps it names and a resume redoes none. An epoch that ended short is not saved
    as done: EpochEndedEarly stops the run, to be resumed from the previous checkpoint.
    """

    def __init__(self, checkpoints: EpochCheckpoints, steps_per_epoch: int, log, *, every_s: float = 0.0,
                 stop: StopRequest | None = None, resume_steps: int = 0):
        super().__init__()
        self._supports_tf_logs = True  # batch hooks under ParameterServerStrategy; logs are never fetched here
        self.checkpoints, self.steps_per_epoch, self.log = checkpoints, steps_per_epoch, log
        self.every_s, self.stop, self.resume_steps = every_s, stop, resume_steps
        self.first_step, self.epoch, self.last_save = 0, 0, time.monotonic()

    def _iterations(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        """`resume_steps` (or `logs["steps_done"]`): steps of this epoch run before it began here."""
        done = self.resume_steps or (logs or {}).get("steps_done", 0)
        self.epoch, self.first_step, self.resume_steps = epoch, self._iterations() - done, 0
        self.last_save = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self.stop is not None and self.stop.requested:
            self.stop.step("the stop's checkpoint", "the next start resumes from the checkpoint written before it "
                           "and redoes the steps since")  # within launcher.stop_grace_s, or the process ends here
            name = self._save_within_epoch(stopping=True)
            waited = time.monotonic() - self.stop.requested_at
            raise Preempted(f"checkpoint {name} written {waited:.1f} s after SIGTERM" if name else
                            f"checkpoint of the epoch start holds every step ({waited:.1f} s after SIGTERM)")
        if self.every_s and time.monotonic() - self.last_save >= self.every_s:
            self._save_within_epoch()

    def _save_within_epoch(self, stopping: bool = False) -> str | None:
        """Drains the scheduled steps, then saves; None when the epoch's start, or (unless `stopping`: its end is
        never reached then) its end, is the checkpoint."""
        started = time.monotonic()
        coordinator = getattr(self.model, "_cluster_coordinator", None)
        if coordinator is not None:
            coordinator.join()
        steps, step = self._iterations() - self.first_step, self._iterations()
        self.last_save = time.monotonic()
        if steps <= 0 or (steps >= self.steps_per_epoch and not stopping):
            return None
        position = Position(self.epoch + 1) if steps >= self.steps_per_epoch else Position(self.epoch, steps)
        self.checkpoints.save(position)
        self.log.info("checkpoint %s (optimizer step %d) written in %.1f s", position.name, step,
                      time.monotonic() - started)
        return position.name

    def on_epoch_end(self, epoch, logs=None):
        ran = self._iterations() - self.first_step
        if ran < self.steps_per_epoch:  # at-least-once re-runs can add steps, never take any away
            raise EpochEndedEarly(f"epoch {epoch + 1} ended after {ran} of its {self.steps_per_epoch} steps")
        self.checkpoints.save(Position(epoch + 1))
        self.last_save = time.monotonic()
