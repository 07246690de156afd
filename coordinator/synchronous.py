"""One training run under a synchronous strategy (multi_worker_mirrored, mirrored, one_device): fit or custom loop.

Under multi_worker_mirrored every worker runs this; worker 0 leads. Every worker takes part in each save (a
save may need collectives), but only the lead writes the real checkpoints, TensorBoard logs, export and
summary; the others write into `OUTPUT/.worker-<i>` and remove it, as in TensorFlow's multi-worker tutorial.
All workers resume from the lead's files, so on several hosts `output_dir` must be a shared filesystem.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time

import tensorflow as tf
import tf_keras

from coordinator import custom_loop, models, strategy
from coordinator.callbacks import EpochReport, FirstStepReport, SaveEachEpoch, StepDecay
from coordinator.fit import epoch_checkpoints, export_and_summarise, last_epoch, resume
from coordinator.options import MULTI_WORKER_MIRRORED, TrainingOptions
from coordinator.summary import read_summary
from data import source_for
from roles.config import PROJECT_ROOT, ClusterConfig
from roles.errors import CLUSTER_UNAVAILABLE_EXIT_CODE


def run_training(config: ClusterConfig, options: TrainingOptions, log) -> dict | None:
    """Trains (or resumes) to `options.epochs`; the lead exports and returns the summary, the others None."""
    distribution = strategy.build_synchronous(options)  # first: collectives are configured at program start
    index = strategy.worker_index(distribution)
    output = config.path(options.output_dir)
    scratch = None if index == 0 else output / f".worker-{index}"
    workers = len(config.jobs["worker"]) if options.strategy == MULTI_WORKER_MIRRORED else 1
    source = source_for(options, PROJECT_ROOT)
    global_batch = options.per_worker_batch * workers
    steps_per_epoch = options.steps_per_epoch or source.steps_per_epoch(global_batch)
    log.info("%s over %d replica(s): %s: %d training examples, global batch %d (%d per worker), %d steps per "
             "epoch", options.strategy, distribution.num_replicas_in_sync, source.name, source.sizes["train"],
             global_batch, options.per_worker_batch, steps_per_epoch)
    log.info("%s: %s", source.name, source.sharding(workers))

    tf_keras.utils.set_random_seed(options.seed)
    with distribution.scope():
        model = models.build(options.model, source.input_shape, source.num_classes)
        models.compile_model(model, options, steps_per_execution=options.steps_per_execution)
        model.optimizer.build(model.trainable_variables)
    checkpoints = epoch_checkpoints(config, options, model, io_device=None,
                                    scratch=scratch and scratch / "checkpoints")
    done = resume(checkpoints, options, output, model, log, lead=scratch is None)
    if done is None:
        return read_summary(output)

    callbacks = [StepDecay(options), SaveEachEpoch(checkpoints), FirstStepReport(log),
                 EpochReport(log, (scratch or output) / "tensorboard" / "train", epochs=options.epochs,
                             steps_per_epoch=steps_per_epoch, global_batch=global_batch, device=None)]
    started = time.monotonic()
    with _peer_loss_exits(log):
        if options.loop == "custom":
            final_metrics = custom_loop.train(
                distribution, model, options, source, callbacks, global_batch=global_batch,
                steps_per_epoch=steps_per_epoch, backup_dir=output / "backup", scratch=scratch, done_epochs=done,
                log=log)
        else:
            history = model.fit(
                tf_keras.utils.experimental.DatasetCreator(source.train_dataset_fn(global_batch, options.seed)),
                epochs=options.epochs, initial_epoch=done, steps_per_epoch=steps_per_epoch, verbose=0,
                callbacks=callbacks)
            final_metrics = last_epoch(history)
    train_seconds = time.monotonic() - started
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)  # what this worker wrote for the saves it took part in
        log.info("training done; worker 0 exports the model")
        return None
    return export_and_summarise(config, options, model, source, output, log, device=None,
                                final_metrics=final_metrics, train_seconds=train_seconds,
                                steps_per_epoch=steps_per_epoch, global_batch=global_batch, workers=workers,
                                checkpoint=checkpoints.latest_path())


@contextlib.contextmanager
def _peer_loss_exits(log):
    """A worker that lost a peer mid-collective exits with one line (code 3) instead of a page of traceback."""
    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
            tf.errors.DeadlineExceededError) as error:
        lines = (error.message or "").strip().splitlines() or [""]
        reason = next((line for line in lines if "aborted by" in line), lines[0])
        log.error("a worker left the collective (%s: %s); exiting so the whole group restarts from the last "
                  "backup", type(error).__name__, reason[:200])
        sys.exit(CLUSTER_UNAVAILABLE_EXIT_CODE)
