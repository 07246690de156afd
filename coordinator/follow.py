"""Follow mode (`training.follow_data`): the chief trains on files as they land in data_dir, each once, handed to the
workers in pieces as they are free, and keeps serving versions of the model fresh (docs/online-training.md).

Set-up and resume: the run's checkpoints hold the model, both optimizers and the data ledger (which files
landed, which pieces are done), so a chief restarted by the launcher, or a new `sh run.sh` after `sh kill.sh`,
continues where the last checkpoint stands, with the files that landed in between.
"""

from __future__ import annotations

import dataclasses
import time

import tensorflow as tf

from cluster.config import PROJECT_ROOT, ClusterConfig
from cluster.run_files import RunFiles, RunSummary
from cluster.training_options import TrainingOptions
from common.errors import Problem, UserError
from coordinator import setup, strategy
from coordinator.checkpoints import EpochCheckpoints, Position
from coordinator.compiled import ps_report
from coordinator.dynamic.report import TableReport, table_report
from coordinator.folder_watch import FolderWatch
from coordinator.follow_loop import FollowLoop
from coordinator.follow_report import FollowReport, duration
from coordinator.handout import PieceTrainer
from coordinator.lost_tasks import exit_when_a_task_is_lost
from coordinator.ledger import CHECKPOINT_NAME, Ledger
from coordinator.preemption import StopRequest
from coordinator.raw_export import raw_description
from coordinator.serving import ServingVersions
from data import followed_for

@dataclasses.dataclass
class FollowParts:
    """What the follow loop works with."""

    run: setup.TrainingRun
    model: object
    data: object  # data.followed.FollowedData
    ledger: Ledger
    state: tf.Variable
    trainer: PieceTrainer
    checkpoints: EpochCheckpoints
    serving: ServingVersions
    report: FollowReport
    watch: FolderWatch
    stop: StopRequest
    device: str
    resumed_number: int
    tables: TableReport | None = None  # dynamic tables: their rows in the progress lines


def run_following(config: ClusterConfig, options: TrainingOptions, log, *, batch_workers: int) -> RunSummary:
    """Follows data_dir until SIGTERM (checkpoint, exit 4) or stop_when_idle_s without new data (summary)."""
    stop = StopRequest(log).install()
    data = followed_for(options, PROJECT_ROOT)
    watch = FolderWatch(data.landing(), options.data_poll_s).start()  # the first look now: files land from the next
    run = setup.TrainingRun(config=config, options=options, files=RunFiles(config.path(options.output_dir)),
                            source=data, workers=batch_workers, global_batch=options.per_worker_batch * batch_workers,
                            steps_per_epoch=0, log=log)
    log.info("follow mode: training on %s files as they land in %s (pattern %s, looked at every %g s); batch %d "
             "per step; plain files in pieces of about %g MB, gzip and TFRecord files whole, each to the next free "
             "worker", data.name, data.root, options.follow_pattern, options.data_poll_s, run.global_batch,
             options.piece_mb)
    strategy.wait_for_cluster(config, options.probe_timeout_s, log)
    distribution = strategy.build(config, options)
    model = setup.build_model(run, distribution)
    log.info("serving versions every %g s in %s, taking %s", options.serving_export_every_s, run.files.serving,
             raw_description(data))
    if next(iter(data.split("train").take(1)), None) is not None:
        ps_report(model, data, run.global_batch, log)  # logged now: `sh run.sh status` shows it
    with tf.device(strategy.CHIEF_CPU):
        state = tf.Variable("", trainable=False)  # on the chief, beside the model in every checkpoint
    checkpoints = EpochCheckpoints(run.files, model=model, optimizer=model.optimizer, keep=options.keep_checkpoints,
                                   has_evaluator=bool(config.jobs.get("evaluator")), io_device=strategy.CHIEF_CPU,
                                   extra={CHECKPOINT_NAME: state})
    position = setup.resume(run, checkpoints, model) or Position(0)
    ledger = _restored_ledger(state, run.files, options, log)
    tables = table_report(model)
    parts = FollowParts(
        run=run, model=model, data=data, ledger=ledger, state=state,
        trainer=PieceTrainer(distribution, model, data, global_batch=run.global_batch, seed=options.seed,
                             workers=config.input_pipelines),
        checkpoints=checkpoints, serving=ServingVersions(run.files.serving, options.keep_serving_versions),
        report=FollowReport(log, run.files, model, every_s=options.progress_every_s, device=strategy.CHIEF_CPU,
                            folder=str(data.root), poll_s=options.data_poll_s, tables=tables),
        watch=watch, stop=stop, device=strategy.CHIEF_CPU, resumed_number=position.steps, tables=tables)
    with exit_when_a_task_is_lost(log, "lost part of the cluster", "the run resumes from the last checkpoint (pieces "
                                  "done since are trained again)"):
        try:
            return FollowLoop(parts).run()
        except tf.errors.NotFoundError as error:  # removed while its piece was read (before, the loop says which)
            raise UserError(Problem("data file", ((error.message or "").strip().splitlines() or [""])[0][-300:],
                                    "was removed (or renamed) before it was trained", "put it back: a file may go "
                                    "once a serving version lists it in trained_through.json")) from None


def _restored_ledger(state: tf.Variable, files: RunFiles, options: TrainingOptions, log) -> Ledger:
    """The ledger of the restored checkpoint (empty for a new run), knowing which files the newest serving
    version already holds (it may have been written after that checkpoint)."""
    ledger = Ledger.from_json(state.numpy().decode())
    versions = ServingVersions(files.serving, options.keep_serving_versions)
    if versions.versions():
        ledger.served_from(versions.trained_through(versions.versions()[-1]))
    if ledger.files:
        waiting, behind_s = ledger.behind(time.time())
        behind = f", {waiting} not yet (the oldest landed {duration(behind_s)} ago)" if waiting else ""
        log.info("data: %d files done%s; pieces that were running when the checkpoint was written are trained "
                 "again", ledger.done_count(), behind)
    return ledger
