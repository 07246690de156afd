"""Follow mode (`training.follow_data`): the chief trains on files as they land in data_dir, each once, handed to the
workers in pieces as they are free, and keeps serving versions of the model fresh (docs/online-training.md).

Set-up and resume: the run's checkpoints hold the model, both optimizers and the data ledger (which files
landed, which pieces are done), so a chief restarted by the launcher, or a new `sh run.sh` after `sh kill.sh`,
continues where the last checkpoint stands, with the files that landed in between.
"""

from __future__ import annotations

import time

import tensorflow as tf

from cluster import topic_address
from cluster.config import PROJECT_ROOT, ClusterConfig
from cluster.run_files import RunFiles, RunSummary
from cluster.topic_address import is_topic
from cluster.training_options import TrainingOptions
from coordinator import setup, shared_output, strategy
from models.checkpoints import EpochCheckpoints, Position
from models.compiled import ps_report
from tables.kinds import table_report
from online.follow.checkpointing import FollowCheckpoints
from online.follow.deltas import FollowDeltas
from online.follow.handout import PieceTrainer
from online.follow.intake import Intake
from online.follow.kept import kept_text
from online.follow.landing import landing_for
from online.follow.ledger import CHECKPOINT_NAME, Ledger
from online.follow.loop import FollowLoop, FollowParts
from online.follow.publishing import Publishing, export_forks
from online.follow.quarantine import QuarantineReport
from online.follow.report import FollowReport, duration
from online.follow.run_record import RunRecord
from online.follow.schedule import Schedule
from online.follow.watch import FolderWatch
from common.lost_tasks import exit_when_a_task_is_lost
from common.preemption import StopRequest
from models.raw_export import raw_description
from tables.streaming.rows import chunk_bytes_of
from online.publish.versions import ServingVersions
from data import followed_for


def run_following(config: ClusterConfig, options: TrainingOptions, log, *, batch_workers: int) -> RunSummary:
    """Follows data_dir until SIGTERM (checkpoint, exit 4) or stop_when_idle_s without new data (summary)."""
    files = RunFiles(config.path(options.output_dir))
    forks = export_forks(files)  # first: before the runtime starts, a fork of this process costs no import
    stop = StopRequest(log, grace_s=config.stop_grace_s).install()
    data = followed_for(options, PROJECT_ROOT)
    run = setup.TrainingRun(config=config, options=options, files=files,
                            source=data, workers=batch_workers, global_batch=options.per_worker_batch * batch_workers,
                            steps_per_epoch=0, log=log)
    _say_following(data, options, run.global_batch, log)
    config = strategy.wait_for_cluster(config, options.probe_timeout_s, log)
    distribution = strategy.build(config, options)
    model = setup.build_model(run, distribution)
    log.info("serving versions every %g s in %s, taking %s", options.serving_export_every_s, run.files.serving,
             raw_description(data))
    _report_per_ps(model, data, run.global_batch, log)
    with tf.device(strategy.CHIEF_CPU):
        state = tf.Variable("", trainable=False)  # on the chief, beside the model in every checkpoint
    on_ps = shared_output.rows_on_ps(config, options, run.files.checkpoints, log)
    checkpoints = EpochCheckpoints(run.files, model=model, optimizer=model.optimizer, keep=options.keep_checkpoints,
                                   has_evaluator=bool(config.jobs.get("evaluator")), io_device=strategy.CHIEF_CPU,
                                   extra={CHECKPOINT_NAME: state}, chunk_bytes=chunk_bytes_of(options),
                                   keep_unevaluated=options.keep_unevaluated_checkpoints, rows_on_ps=on_ps)
    position = setup.resume(run, checkpoints, model) or Position(0)
    record, versions, ledger = _record_and_ledger(run, data, state, position, log)
    watch = _watch(options, data, ledger, run.files, log).start()
    tables = table_report(model)
    report = FollowReport(log, run.files, model, every_s=options.progress_every_s, device=strategy.CHIEF_CPU,
                          folder=options.data_dir if is_topic(options.data_dir) else str(data.root),
                          poll_s=options.data_poll_s, tables=tables)
    report.source = watch.line
    deltas = FollowDeltas.create(run, model, distribution, rows_on_ps=on_ps)  # stamps rows: before the piece's trace
    trainer = PieceTrainer(distribution, model, data, global_batch=run.global_batch, seed=options.seed,
                           workers=config.input_pipelines)
    intake = Intake(ledger=ledger, data=data, report=report, quarantine=QuarantineReport(run.files.quarantine),
                    max_bad_fraction=options.max_bad_fraction)
    schedule = Schedule(ledger=ledger, trainer=trainer, data=data, report=report, watch=watch, intake=intake,
                        straggler_after_s=options.straggler_after_s, newest_first=options.backlog_order == "newest")
    saving = FollowCheckpoints(checkpoints=checkpoints, state=state, model=model, ledger=ledger, record=record,
                               every_s=options.checkpoint_every_s, resumed_number=position.steps, log=log)
    publishing = Publishing(run=run, data=data, model=model, ledger=ledger, report=report, task=config.lead.name,
                            serving=versions, pieces_done=lambda: sum(schedule.pieces_by_worker.values()),
                            for_serving=saving.for_serving, record=record, forks=forks, deltas=deltas)
    report.kept = lambda: kept_text(publishing.kept())  # each progress line ends with it: `run.sh status` shows it
    parts = FollowParts(run=run, model=model, report=report, watch=watch, stop=stop, tables=tables, schedule=schedule,
                        saving=saving, publishing=publishing)
    with exit_when_a_task_is_lost(log, "lost part of the cluster", "the run resumes from the last checkpoint (pieces "
                                  "done since are trained again)"):
        return FollowLoop(parts).run()


def _say_following(data, options: TrainingOptions, global_batch: int, log) -> None:
    log.info("follow mode: training on %s files as they land in %s (pattern %s, looked at every %g s); batch %d "
             "per step; plain files in pieces of about %g MB, gzip and TFRecord files whole, each to the next free "
             "worker", data.name, data.root, options.follow_pattern, options.data_poll_s, global_batch,
             options.piece_mb)


def _watch(options, data, ledger: Ledger, files: RunFiles, log):
    """What finds the data that lands: a look at the folder every data_poll_s, or a followed topic read as it goes
    (online/follow/topic/)."""
    address = topic_address.parse(options.data_dir)
    if address is not None:
        from online.follow.topic.source import watch_topic
        return watch_topic(address, data, files, options, log)
    return FolderWatch(landing_for(data, ledger.known, settle_s=options.settle_s,  # the first look knows the ledger
                                   unfinished_after_s=options.unfinished_after_s), options.data_poll_s, log)


def _report_per_ps(model, data, global_batch: int, log) -> None:
    """The per-ps report, logged now (`sh run.sh status` shows it), on the newest data there is; none when the
    folder holds none yet or its newest file cannot be read (it will be quarantined when it lands)."""
    try:
        if next(iter(data.split("train").take(1)), None) is not None:
            ps_report(model, data, global_batch, log)
    except tf.errors.OpError as error:
        log.info("per ps: no report (the newest data cannot be read: %s)", (error.message or "").strip()[-200:])


def _record_and_ledger(run, data, state: tf.Variable, position: Position, log):
    """(the run's RunRecord, its ServingVersions, the restored ledger): this chief's generation taken, the step
    served read, and safe_to_delete.json written from the checkpoint it resumed (empty for a new run)."""
    record = RunRecord(run.files.output, data.root, log)
    record.take_generation()
    versions = ServingVersions(run.files.serving, run.options.keep_serving_versions)
    ledger = _restored_ledger(state, versions, record, log)
    record.read_served(versions)
    record.write_safe_to_delete(ledger, position.name if position.steps else "", position.steps)
    return record, versions, ledger


def _restored_ledger(state: tf.Variable, versions: ServingVersions, record: RunRecord, log) -> Ledger:
    """The ledger of the restored checkpoint (empty for a new run), knowing which files the newest serving
    version already holds (it may have been written after that checkpoint) and which of those were deleted
    before a resume could keep their training (counted lost, by name)."""
    ledger = Ledger.from_json(state.numpy().decode())
    if versions.versions():
        for served in record.served_records(versions):  # the version, then each delta that served more of it
            ledger.served_from(served)
        record.count_deleted_before_safe(ledger, versions)
    if ledger.file_count():
        waiting, behind_s = ledger.behind(time.time())
        behind = f", {waiting} not yet (the oldest landed {duration(behind_s)} ago)" if waiting else ""
        log.info("data: %d files done%s, %d names held (not opened again); pieces that were running when the "
                 "checkpoint was written are trained again", ledger.done_count(), behind, len(ledger.known()))
    return ledger
