"""A custom training loop for the synchronous strategies that backs up mid-epoch and resumes where it stopped.

The backup (`OUTPUT/backup`) holds the model, the optimizer, the epoch and the step within it, written every
`backup_every_steps` steps and at each epoch's end; a restarted cluster continues from it, as users of
TensorFlow's multi-worker custom-loop tutorial do. The data pipeline starts a fresh shuffle on resume.
The per-epoch `ckpt-<epoch>` series for the evaluator and the export is written as under `fit`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import tensorflow as tf
import tf_keras

from cluster.training_options import TrainingOptions


class Backup:
    """Model, optimizer, epoch and step-in-epoch; a non-lead worker writes to its scratch folder and removes it."""

    def __init__(self, directory: Path, scratch: Path | None, *, model, optimizer):
        self.directory, self.scratch = directory, scratch
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self.epoch,
                                              step_in_epoch=self.step_in_epoch)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(scratch or directory), max_to_keep=1)

    def restore(self) -> tuple[int, int] | None:
        """(epoch, step in it) from the lead's newest backup, or None when there is none."""
        latest = tf.train.latest_checkpoint(str(self.directory))
        if latest is None:
            return None
        self.checkpoint.read(latest).assert_existing_objects_matched()
        return int(self.epoch.numpy()), int(self.step_in_epoch.numpy())

    def save(self, epoch: int, step_in_epoch: int) -> None:
        self.epoch.assign(epoch)
        self.step_in_epoch.assign(step_in_epoch)
        self.manager.save()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _metric_objects(options: TrainingOptions, one_hot: bool) -> list[tf_keras.metrics.Metric]:
    """Keras metrics for the option's names; `accuracy` follows the labels (sparse or one-hot), as compile does."""
    metrics = []
    for name in options.metrics:
        if name in ("accuracy", "acc"):
            metrics.append(tf_keras.metrics.CategoricalAccuracy(name="accuracy") if one_hot
                           else tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy"))
            continue
        found = tf_keras.metrics.get(name)
        metrics.append(found if isinstance(found, tf_keras.metrics.Metric)
                       else tf_keras.metrics.MeanMetricWrapper(found, name=name))
    return metrics


class StepRunner:
    """Runs `n` synchronous steps per call: forward, loss averaged over the global batch, gradients, update."""

    def __init__(self, distribution, model, options: TrainingOptions, *, global_batch: int, one_hot: bool):
        self.distribution, self.model, self.global_batch = distribution, model, global_batch
        self.loss_fn = tf_keras.losses.get(options.loss)
        with distribution.scope():
            self.loss_mean = tf_keras.metrics.Mean(name="loss")
            self.metrics = _metric_objects(options, one_hot)

    def _step(self, images, labels):
        with tf.GradientTape() as tape:
            predictions = self.model(images, training=True)
            per_example = self.loss_fn(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.global_batch)
            if self.model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
        variables = self.model.trainable_variables
        self.model.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        self.loss_mean.update_state(per_example)
        for metric in self.metrics:
            metric.update_state(labels, predictions)

    @tf.function
    def run(self, iterator, n):
        for _ in tf.range(n):
            self.distribution.run(self._step, args=next(iterator))

    def results(self) -> dict[str, float]:
        return {m.name: float(m.result().numpy()) for m in (self.loss_mean, *self.metrics)}

    def reset(self) -> None:
        for metric in (self.loss_mean, *self.metrics):
            metric.reset_state()


def train(distribution, model, run, callbacks, *, done_epochs: int) -> dict[str, float]:
    """Runs the epochs left after the backup (or `done_epochs`) of TrainingRun `run`, calling the Keras
    callbacks per epoch; returns the last epoch's metrics."""
    options = run.options
    backup = Backup(run.files.backup, run.scratch and run.scratch / "backup", model=model,
                    optimizer=model.optimizer)
    first_epoch, step = backup.restore() or (done_epochs, 0)
    if first_epoch > done_epochs or step:
        run.log.info("resuming from the backup at epoch %d, step %d of %d (optimizer step %d)", first_epoch + 1,
                     step, run.steps_per_epoch, int(model.optimizer.iterations.numpy()))
    runner = StepRunner(distribution, model, options, global_batch=run.global_batch, one_hot=run.source.one_hot)
    dataset_fn = run.source.train_dataset_fn(run.global_batch, options.seed)
    iterator = iter(distribution.distribute_datasets_from_function(dataset_fn))
    for callback in callbacks:
        callback.set_model(model)
    results: dict[str, float] = {}
    for epoch in range(first_epoch, options.epochs):
        for callback in callbacks:
            callback.on_epoch_begin(epoch, {"steps_done": step})
        runner.reset()
        _run_epoch(runner, iterator, backup, run, epoch, first_step=step, callbacks=callbacks)
        results = runner.results()
        for callback in callbacks:
            callback.on_epoch_end(epoch, dict(results))
        backup.save(epoch + 1, 0)
        step = 0
    return results


def _run_epoch(runner: StepRunner, iterator, backup: Backup, run, epoch: int, *, first_step: int,
               callbacks) -> None:
    """The steps of one epoch from `first_step`, in chunks of steps_per_execution, backing up on schedule; the
    callbacks' batch hooks see each chunk (progress lines, heartbeat)."""
    options, step, steps = run.options, first_step, run.steps_per_epoch
    while step < steps:
        chunk = min(options.steps_per_execution, steps - step,
                    options.backup_every_steps - step % options.backup_every_steps)
        runner.run(iterator, tf.constant(chunk))
        step += chunk
        for callback in callbacks:
            callback.on_train_batch_end(step, runner.results())
        if step % options.backup_every_steps == 0 and step < steps:
            backup.save(epoch, step)
            run.log.info("backup | epoch %d/%d | step %d/%d | loss %.4f", epoch + 1, options.epochs, step, steps,
                         runner.results()["loss"])
