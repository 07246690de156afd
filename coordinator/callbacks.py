"""Training callbacks: per-epoch checkpoints, step-decay learning rate, and one aligned progress line per epoch."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import tensorflow as tf
import tf_keras

from coordinator.checkpoints import EpochCheckpoints
from coordinator.options import TrainingOptions
from coordinator.strategy import CHIEF_CPU


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


class SaveEachEpoch(tf_keras.callbacks.Callback):
    """Writes `ckpt-<epoch>` after every epoch, for resuming and for the evaluator."""

    def __init__(self, checkpoints: EpochCheckpoints):
        super().__init__()
        self.checkpoints = checkpoints

    def on_epoch_end(self, epoch, logs=None):
        self.checkpoints.save(epoch + 1)


def progress_line(*, epoch: int, epochs: int, step: int, total_steps: int, steps_per_s: float,
                  examples_per_s: float, metrics: dict, learning_rate: float, eta_s: float) -> str:
    """`train | epoch 2/4 | step 44/88 | 25.3 steps/s | 1619 ex/s | loss 0.4120 | lr 1.0e-04 | ETA 0:00:05`."""
    shown = " | ".join(f"{name} {value:.4f}" for name, value in metrics.items())
    return (f"train | epoch {epoch}/{epochs} | step {step}/{total_steps} | {steps_per_s:.1f} steps/s | "
            f"{examples_per_s:.0f} ex/s | {shown} | lr {learning_rate:.1e} | "
            f"ETA {datetime.timedelta(seconds=round(eta_s))}")


class EpochReport(tf_keras.callbacks.Callback):
    """After each epoch: one progress line in the log and the same scalars in TensorBoard at the optimizer step.

    Keras' progress bar and batch hooks do not work under ParameterServerStrategy, so this is per epoch.
    """

    def __init__(self, log, summary_dir: Path, *, epochs: int, steps_per_epoch: int, global_batch: int,
                 device: str | None = CHIEF_CPU):
        super().__init__()
        self.log, self.epochs, self.device = log, epochs, device
        self.steps_per_epoch, self.global_batch = steps_per_epoch, global_batch
        with tf.device(device):
            self.writer = tf.summary.create_file_writer(str(summary_dir))

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        seconds = max(time.monotonic() - self.started, 1e-9)
        steps_per_s = self.steps_per_epoch / seconds
        step = int(self.model.optimizer.iterations.numpy())
        metrics = {k: float(v) for k, v in (logs or {}).items()}
        learning_rate = float(self.model.optimizer.learning_rate.numpy())
        self.log.info(progress_line(
            epoch=epoch + 1, epochs=self.epochs, step=step, total_steps=self.epochs * self.steps_per_epoch,
            steps_per_s=steps_per_s, examples_per_s=steps_per_s * self.global_batch, metrics=metrics,
            learning_rate=learning_rate, eta_s=(self.epochs - epoch - 1) * seconds))
        with tf.device(self.device), self.writer.as_default(step=step):
            for name, value in {**metrics, "learning_rate": learning_rate, "steps_per_sec": steps_per_s}.items():
                tf.summary.scalar(name, value)
            tf.summary.scalar("epoch", epoch + 1)
        self.writer.flush()
