"""One training run under a synchronous strategy (multi_worker_mirrored, mirrored, one_device): fit or custom loop.

Under multi_worker_mirrored every worker runs this; worker 0 leads. Every worker takes part in each save (a
save may need collectives), but only the lead writes the real checkpoints, TensorBoard logs, export and
summary; the others write into `OUTPUT/.worker-<i>` and remove it, as in TensorFlow's multi-worker tutorial.
All workers resume from the lead's files, so on several hosts `output_dir` must be a shared filesystem.
"""

from __future__ import annotations

import shutil
import time

from cluster.config import ClusterConfig
from cluster.run_files import RunFiles, RunSummary, read_summary
from cluster.training_options import TrainingOptions
from coordinator import custom_loop, setup, strategy
from tables.kinds import table_report
from common.lost_tasks import exit_when_a_task_is_lost

BATCH_NOTE = "global batch {global_batch} ({per_worker} per worker, {workers} worker(s), split over the replicas)"


def run_training(config: ClusterConfig, options: TrainingOptions, log) -> RunSummary | None:
    """Trains (or resumes) to `options.epochs`; the lead exports and returns the summary, the others None."""
    distribution = strategy.build_synchronous(options)  # first: collectives are configured at program start
    index = strategy.worker_index(distribution)
    workers = config.input_pipelines
    scratch = None if index == 0 else RunFiles(config.path(options.output_dir)).scratch(index)
    run = setup.plan(config, options, log, workers=workers, batch_note=BATCH_NOTE, scratch=scratch)
    log.info("%s over %d replica(s)", options.strategy, distribution.num_replicas_in_sync)
    model = setup.build_model(run, distribution)
    checkpoints = setup.epoch_checkpoints(run, model, io_device=None)
    start = setup.resume(run, checkpoints, model)
    if start is None:
        return read_summary(run.files)
    callback_list = setup.callbacks(run, checkpoints, device=None, tables=table_report(model))
    with exit_when_a_task_is_lost(log, "a worker left the collective", "the whole group restarts from the last "
                                  "backup"):
        if options.loop == "custom":
            started = time.monotonic()
            final_metrics = custom_loop.train(distribution, model, run, callback_list, done_epochs=start.epochs)
            seconds = time.monotonic() - started
        else:
            final_metrics, seconds = setup.fit(
                run, model, lambda step: run.source.train_dataset_fn(run.global_batch, options.seed + step),
                callback_list, start)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)  # what this worker wrote for the saves it took part in
        log.info("training done; worker 0 exports the model")
        return None
    return setup.finish(run, model, final_metrics=final_metrics, train_seconds=seconds,
                        checkpoint=checkpoints.latest_path())
