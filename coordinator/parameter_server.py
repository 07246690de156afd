"""Training under ParameterServerStrategy: the chief coordinates, workers run the steps, ps hold the variables."""

from __future__ import annotations

from cluster.config import ClusterConfig
from cluster.run_files import RunSummary, read_summary
from cluster.training_options import TrainingOptions
from coordinator import setup, strategy
from coordinator.compiled import ps_report
from coordinator.pacing import CHUNKS_AHEAD_PER_WORKER, SchedulePacing

BATCH_NOTE = ("batch {global_batch} per step (per_worker_batch {per_worker} x {workers} workers); each step runs "
              "on one worker, which computes all {global_batch} examples, and the workers take steps in turn")


def run_training(config: ClusterConfig, options: TrainingOptions, log) -> RunSummary | None:
    """Trains (or resumes) to `options.epochs`, exports the model and returns the run summary it wrote."""
    workers = config.input_pipelines
    run = setup.plan(config, options, log, workers=workers, batch_note=BATCH_NOTE)
    strategy.wait_for_cluster(config, options.probe_timeout_s, log)
    model = setup.build_model(run, strategy.build(config, options))
    shards = ps_report(model, run.source, run.global_batch, log)  # logged now: `sh run.sh status` shows it
    checkpoints = setup.epoch_checkpoints(run, model, io_device=strategy.CHIEF_CPU)
    done = setup.resume(run, checkpoints, model)
    if done is None:
        return read_summary(run.files)
    dataset_fn = run.source.train_dataset_fn(run.global_batch, options.seed, workers=workers)
    pacing = SchedulePacing(CHUNKS_AHEAD_PER_WORKER * workers)  # first: later hooks see steps done, not queued
    callbacks = [pacing, *setup.callbacks(run, checkpoints, device=strategy.CHIEF_CPU)]
    final_metrics, seconds = setup.fit(run, model, dataset_fn, callbacks, done)
    return setup.finish(run, model, final_metrics=final_metrics, train_seconds=seconds,
                        checkpoint=checkpoints.latest_path(), device=strategy.CHIEF_CPU, shards=shards)
