"""Progress a person can watch and a launcher can judge: a line at least every `progress_every_s` and at each
epoch's end (epoch, step, steps/s, examples/s, loss, metrics, ETA), the same scalars in TensorBoard, and a
heartbeat file with the optimizer step (the lead's `progress.json`) every few seconds. The heartbeat carries the
training time of every lead of this output and the last epoch's metrics, so a restarted lead reports the run's.

Under ParameterServerStrategy a batch hook fires when a step is scheduled, not done; the optimizer's step
counter lives on a ps and says how many steps really ran, so rates and the heartbeat come from it. Batch
`logs` stay remote values (`_supports_tf_logs`) and are fetched only when a line is due.
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import tensorflow as tf
import tf_keras

from cluster.run_files import Phase, RunFiles, TrainingProgress, read_progress, write_progress

HEARTBEAT_EVERY_S = 2.0


def progress_line(*, epoch: int, epochs: int, step: int, total_steps: int, steps_per_s: float,
                  examples_per_s: float, metrics: dict, learning_rate: float, eta_s: float) -> str:
    """`train | epoch 2/4 | step 44/88 | 25.3 steps/s | 1619 ex/s | loss 0.4120 | lr 1.0e-04 | ETA 0:00:05`."""
    shown = " | ".join(f"{name} {value:.4f}" for name, value in metrics.items())
    return (f"train | epoch {epoch}/{epochs} | step {step}/{total_steps} | {steps_per_s:.1f} steps/s | "
            f"{examples_per_s:.0f} ex/s | {shown} | lr {learning_rate:.1e} | "
            f"ETA {datetime.timedelta(seconds=round(eta_s))}")


def _fetched(logs) -> dict[str, float]:
    """Batch or epoch logs as floats: a remote value (ParameterServerStrategy) is fetched, which waits for it."""
    if hasattr(logs, "fetch"):
        logs = logs.fetch()
    return {name: float(value) for name, value in (logs or {}).items()}


class ProgressReport(tf_keras.callbacks.Callback):
    """Progress lines and TensorBoard scalars during and after each epoch; the lead's heartbeat file."""

    def __init__(self, log, summary_dir: Path, files: RunFiles | None, *, epochs: int, steps_per_epoch: int,
                 global_batch: int, every_s: float, device: str | None, capacity=None, notes=None):
        super().__init__()
        self._supports_tf_logs = True
        self.log, self.files, self.device, self.capacity = log, files, device, capacity  # capacity: CapacityWatch
        self.notes = notes  # a callable whose text ends each progress line (dynamic tables' rows)
        self.epochs, self.steps_per_epoch, self.global_batch, self.every_s = epochs, steps_per_epoch, global_batch, \
            every_s
        with tf.device(device):
            self.writer = tf.summary.create_file_writer(str(summary_dir))
        self.epoch = 0
        self.last_beat = self.last_line = 0.0
        self.line_step = 0
        earlier = read_progress(files) if files is not None else None  # the previous lead's last beat, if any
        self.earlier_s = earlier.train_s if earlier else 0.0
        self.epoch_metrics = dict(earlier.epoch_metrics) if earlier else {}
        self.training_since: float | None = None

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        if self.training_since is None:
            self.training_since = time.monotonic()
        self.epoch = epoch
        self.last_line = time.monotonic()
        self.line_step = self._step()
        self._beat(self.line_step)

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        if now - self.last_beat < HEARTBEAT_EVERY_S:
            return
        step = self._step()
        self._beat(step)
        if now - self.last_line >= self.every_s:
            self._report(step, _fetched(logs))

    def on_epoch_end(self, epoch, logs=None):
        step, self.epoch_metrics = self._step(), _fetched(logs)
        self._report(step, self.epoch_metrics, epoch_end=True)
        self._beat(step)

    def on_train_end(self, logs=None):
        self._beat(self._step(), Phase.EXPORT)

    def train_s(self) -> float:
        """Seconds of training in this output: the earlier leads' and this one's since its first epoch began."""
        return self.earlier_s + (time.monotonic() - self.training_since if self.training_since is not None else 0.0)

    def _beat(self, step: int, phase: Phase = Phase.TRAIN) -> None:
        """Writes the heartbeat the launcher and evaluator judge progress by (the lead only)."""
        self.last_beat = time.monotonic()
        if self.files is not None:
            write_progress(self.files, TrainingProgress(pid=os.getpid(), phase=phase, epoch=self.epoch + 1, step=step,
                                                        time=time.time(), train_s=round(self.train_s(), 2),
                                                        epoch_metrics=self.epoch_metrics))

    def _report(self, step: int, metrics: dict, *, epoch_end: bool = False) -> None:
        now = time.monotonic()
        steps_per_s = (step - self.line_step) / max(now - self.last_line, 1e-9)
        self.last_line, self.line_step = now, step
        learning_rate = float(self.model.optimizer.learning_rate.numpy())
        total = self.epochs * self.steps_per_epoch
        line = progress_line(
            epoch=self.epoch + 1, epochs=self.epochs, step=step, total_steps=total, steps_per_s=steps_per_s,
            examples_per_s=steps_per_s * self.global_batch, metrics=metrics, learning_rate=learning_rate,
            eta_s=(total - step) / steps_per_s if steps_per_s > 0 else 0.0)
        self.log.info("%s", f"{line} | {self.notes()}" if self.notes else line)
        if self.capacity is not None:
            self.capacity.observe(steps_per_s)
        with tf.device(self.device), self.writer.as_default(step=step):
            for name, value in {**metrics, "learning_rate": learning_rate, "steps_per_sec": steps_per_s}.items():
                tf.summary.scalar(name, value)
            if epoch_end:
                tf.summary.scalar("epoch", self.epoch + 1)
        self.writer.flush()
