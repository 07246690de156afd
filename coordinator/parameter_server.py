"""Training under ParameterServerStrategy: the chief coordinates, workers run the steps, ps hold the variables."""

from __future__ import annotations

from cluster.config import ClusterConfig
from cluster.run_files import RunFiles, RunSummary, read_summary
from cluster.same_run import batch_workers
from cluster.training_options import TrainingOptions
from coordinator import capacity_watch, setup, strategy
from models.compiled import ps_report
from tables.kinds import table_report
from common.lost_tasks import exit_when_a_task_is_lost
from coordinator.pacing import CHUNKS_AHEAD_PER_WORKER, SchedulePacing
from common.preemption import StopRequest

BATCH_NOTE = ("batch {global_batch} per step (per_worker_batch {per_worker} x {workers} workers); each step runs "
              "on one worker, which computes all {global_batch} examples, and the workers take steps in turn")


def run_training(config: ClusterConfig, options: TrainingOptions, log) -> RunSummary | None:
    """Trains (or resumes) to `options.epochs`, exports the model and returns the run summary it wrote.

    SIGTERM writes a checkpoint at once and exits with PREEMPTED_EXIT_CODE; checkpoints are also written every
    `checkpoint_every_s` within epochs, so a failure costs at most that much work.
    """
    summary = read_summary(RunFiles(config.path(options.output_dir)))
    if options.follow_data:  # ends the process, whatever its pieces are doing (online/follow/errors.py)
        from online.follow.errors import ends_at_once
        from coordinator.following import run_following
        from data import followed_root
        with ends_at_once(log, data_root=str(followed_root(options, config.path(".")))):
            run_following(config, options, log, batch_workers=batch_workers(config, summary and summary.workers))
    stop = StopRequest(log, grace_s=config.stop_grace_s).install()
    workers = config.input_pipelines  # the workers training now: the launcher may have left lost ones out
    run = setup.plan(config, options, log, workers=batch_workers(config, summary and summary.workers),
                     batch_note=BATCH_NOTE, pipelines=workers)
    if config.trainer_workers is not None:
        log.info("training with %s (launcher: the others are lost)",
                 ", ".join(f"worker:{i}" for i in config.trainer_workers))
    config = strategy.wait_for_cluster(config, options.probe_timeout_s, log)
    with exit_when_a_task_is_lost(log, "a ps or worker this chief needs was lost", "the run resumes from the last "
                                  "checkpoint once it is back"):
        return _train(config, options, run, stop, log)


def _train(config: ClusterConfig, options: TrainingOptions, run: setup.TrainingRun, stop: StopRequest,
           log) -> RunSummary | None:
    workers = config.input_pipelines
    model = setup.build_model(run, strategy.build(config, options))
    shards = ps_report(model, run.source, run.global_batch, log)  # logged now: `sh run.sh status` shows it
    watch = capacity_watch.watch(config, model, run.source, run.global_batch, log)
    checkpoints = setup.epoch_checkpoints(run, model, io_device=strategy.CHIEF_CPU)
    start = setup.resume(run, checkpoints, model)
    if start is None:
        return read_summary(run.files)

    def dataset_fn(step: int):  # a resume shuffles afresh from its step: the batches already trained are not replayed
        return run.source.train_dataset_fn(run.global_batch, options.seed + step, workers=workers)

    pacing = SchedulePacing(CHUNKS_AHEAD_PER_WORKER * workers)  # first: later hooks see steps done, not queued
    timing = [watch] if watch else []  # before the checkpoints: it times an epoch's steps, not what follows them
    callback_list = [pacing, *timing, *setup.callbacks(run, checkpoints, device=strategy.CHIEF_CPU, stop=stop,
                                              resume_steps=start.steps, checkpoint_every_s=options.checkpoint_every_s,
                                              capacity=watch, tables=table_report(model))]
    final_metrics, seconds = setup.fit(run, model, dataset_fn, callback_list, start, stop)
    return setup.finish(run, model, final_metrics=final_metrics, train_seconds=seconds,
                        checkpoint=checkpoints.latest_path(), shards=shards, capacity=watch)

