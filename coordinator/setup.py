"""The training set-up every strategy shares: data, batch and steps, model, checkpoints, resume, callbacks, export."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
import tf_keras

from cluster.config import PROJECT_ROOT, ClusterConfig
from cluster.run_files import (Phase, RunFiles, RunStatus, RunSummary, TrainingProgress, read_progress,
                               read_summary, write_progress, write_summary)
from cluster.same_run import differences
from cluster.training_options import TrainingOptions
from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE, PREEMPTED_EXIT_CODE, Problem, UserError
from models import export
from models.compiled import build_compiled, with_table_stats
from models.sources import source_for_model
from tables.kinds import restored_rows
from online.publish.model_export import export_model, remove_leftovers
from online.publish.template import Template
from coordinator.strategy import CHIEF_CPU
from tables.streaming.bundle import BundleReader
from tables.streaming.entries import variable_keys
from models.raw_export import raw_description
from coordinator.callbacks import Checkpointing, EpochEndedEarly, FirstStepReport, StepDecay
from models.checkpoints import EpochCheckpoints, Position
from common.preemption import Preempted, StopRequest, exit_preempted
from tables.streaming.rows import chunk_bytes_of
from coordinator.progress import ProgressReport
from coordinator.traced_once import MetricsBeforeTheFirstStep
from coordinator import shared_output
from data import skipped


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """One run's facts, fixed before training starts; `scratch` is set on a worker that does not lead."""

    config: ClusterConfig
    options: TrainingOptions
    files: RunFiles
    source: object  # data.source.DataSource
    workers: int  # input pipelines: one per worker, or 1 for a single process
    global_batch: int
    steps_per_epoch: int
    log: object
    scratch: Path | None = None

    @property
    def lead(self) -> bool:
        return self.scratch is None


def plan(config: ClusterConfig, options: TrainingOptions, log, *, workers: int, batch_note: str,
         scratch: Path | None = None, pipelines: int | None = None) -> TrainingRun:
    """Opens the data set (data mistakes stop here) and fixes the batch and the steps per epoch: the global batch
    is `per_worker_batch x workers`; the data is sharded over `pipelines` (default: `workers`)."""
    source = source_for_model(options, PROJECT_ROOT)
    pipelines = pipelines or workers
    global_batch = options.per_worker_batch * workers
    steps_per_epoch = options.steps_per_epoch or source.steps_per_epoch(global_batch)
    log.info("%s: %s training examples; %s; %d steps per epoch", source.name,
             source.sizes.get("train", "an unknown number of"),
             batch_note.format(global_batch=global_batch, per_worker=options.per_worker_batch, workers=workers),
             steps_per_epoch)
    if source.note:
        log.info("%s: %s", source.name, source.note)
    log.info("%s: %s", source.name, source.sharding(pipelines))
    return TrainingRun(config=config, options=options, files=RunFiles(config.path(options.output_dir)),
                       source=source, workers=workers, global_batch=global_batch, steps_per_epoch=steps_per_epoch,
                       log=log, scratch=scratch)


def variable_placement(model) -> dict[str, list[str]]:
    """Each trainable variable's devices: several for a variable the partitioner split over ps."""
    placement: dict[str, list[str]] = {}
    for variable in model.trainable_variables:  # a split variable is listed as its parts, `<name>/part_<k>`
        placement.setdefault(variable.name.split("/part_")[0].removesuffix(":0"), []).append(variable.device)
    return placement


def build_model(run: TrainingRun, distribution):
    """The model, compiled, with its optimizer's slots built (so a restore is not deferred), under `distribution`."""
    options = run.options
    tf_keras.utils.set_random_seed(options.seed)
    with distribution.scope():
        model = build_compiled(options, run.source, steps_per_execution=options.steps_per_execution)
    for name, devices in variable_placement(model).items():
        if len(devices) > 1:
            run.log.info("%s split into %d shards on %s", name, len(devices),
                         ", ".join(d.split("/device")[0].removeprefix("/job:") for d in devices))
    return model


def epoch_checkpoints(run: TrainingRun, model, *, io_device: str | None) -> EpochCheckpoints:
    """The per-epoch checkpoint series that resuming, the evaluator and the export share."""
    scratch = run.scratch and run.scratch / "checkpoints"
    on_ps = io_device is not None and shared_output.rows_on_ps(run.config, run.options, run.files.checkpoints, run.log)
    return EpochCheckpoints(run.files, model=model, optimizer=model.optimizer, keep=run.options.keep_checkpoints,
                            has_evaluator=bool(run.config.jobs.get("evaluator")), io_device=io_device,
                            chunk_bytes=chunk_bytes_of(run.options), rows_on_ps=on_ps,
                            scratch=scratch, keep_unevaluated=run.options.keep_unevaluated_checkpoints)


def resume(run: TrainingRun, checkpoints: EpochCheckpoints, model) -> Position | None:
    """Restores the newest checkpoint and returns where it stands, or None when the plan is already complete;
    the lead marks the run as running (the evaluator waits while it is)."""
    options, summary = run.options, read_summary(run.files)
    found = summary and differences(summary.options, options, previous_workers=summary.workers,
                                    current_workers=run.workers)
    if found:
        raise UserError(Problem("training.output_dir", options.output_dir,
                                f"holds a different run ({'; '.join(found)})", "use a new output_dir, or `sh run.sh "
                                "--fresh` to move the old run aside and start over"))
    if run.lead:
        remove_leftovers(run)  # of an export that died midway (a model/ set aside goes back; the rest is gone)
    started = time.monotonic()
    position = checkpoints.restore_latest()
    restored_s = time.monotonic() - started
    ps = len(run.config.jobs.get("ps", ())) if "ps" in run.config.strategy.server_jobs else 0
    if summary and summary.ps and ps and summary.ps != ps and position != Position(0):
        _check_resharded(run, model, checkpoints.latest_path(), summary.ps, ps)
    if position.epochs >= options.epochs and summary and summary.complete:
        run.log.info("already complete: %d of %d epochs are in %s; nothing to train", position.epochs,
                     options.epochs, run.files.output)
        return None
    if position != Position(0):
        run.log.info("resuming %s from %s (optimizer step %d), restored in %.1f s", position, position.name,
                     int(model.optimizer.iterations.numpy()), restored_s)
    if run.lead:
        write_summary(run.files, RunSummary(status=RunStatus.RUNNING, epochs=options.epochs,
                                            options=dataclasses.asdict(options), workers=run.workers, ps=ps or None,
                                            follow=summary.follow if summary else {}))  # true until a version
    return position


RESHARD_TOLERANCE = 1e-6


def _check_resharded(run: TrainingRun, model, checkpoint: str, before: int, after: int) -> None:
    """After a change in the number of ps, compares the restored (resharded) model's predictions with those of
    the checkpoint, on 16 test inputs (the checkpoint's tables read only where they look), and each dynamic
    table's rows, slots and last steps with the checkpoint's, a chunk at a time: the model just before and just
    after the change."""
    chunk = chunk_bytes_of(run.options)
    with tf.device(CHIEF_CPU):
        checkpointed = Template(run.options, run.source, chunk_bytes=chunk, log=run.log).at(checkpoint)
    inputs = export.reference_inputs(run.source.split("test"))
    largest = float(np.abs(export.predictions(model, inputs) - checkpointed(inputs)).max())
    run.log.info("ps %d -> %d: %s restored over %d ps, model and optimizer slots; predictions before and after "
                 "differ by at most %.1e (allowed %.0e)", before, after, Path(checkpoint).name, after, largest,
                 RESHARD_TOLERANCE)
    reader, keys = BundleReader(checkpoint, device=CHIEF_CPU), variable_keys(tf.train.Checkpoint(model=model))
    for table, compared, differ in restored_rows(model, reader, keys, chunk):
        run.log.info("ps %d -> %d: table %s: %s differ from the checkpoint's by at most %.1e", before, after, table,
                     compared, differ)
        largest = max(largest, differ)
    if not largest <= RESHARD_TOLERANCE:
        raise UserError(Problem("cluster.ps", after, f"restoring {Path(checkpoint).name} over {after} ps changed "
                                f"the model's predictions by {largest:.1e}", f"go back to {before} ps and report it"))


def callbacks(run: TrainingRun, checkpoints: EpochCheckpoints, *, device: str | None,
              stop: StopRequest | None = None, resume_steps: int = 0, checkpoint_every_s: float = 0.0,
              capacity=None, tables=None) -> list:
    """Learning-rate decay, checkpoints (each epoch; with `checkpoint_every_s` and `stop`, within epochs too),
    the first-step report and the progress lines (with `capacity`, a CapacityWatch, beside the prediction; with
    `tables`, dynamic tables' TableReport, their rows)."""
    events = (run.scratch or run.files.output) / "tensorboard" / "train"
    saving = Checkpointing(checkpoints, run.steps_per_epoch, run.log, every_s=checkpoint_every_s, stop=stop,
                           resume_steps=resume_steps)
    return [StepDecay(run.options), saving, FirstStepReport(run.log),
            ProgressReport(run.log, events, run.files if run.lead else None, epochs=run.options.epochs,
                           steps_per_epoch=run.steps_per_epoch, global_batch=run.global_batch,
                           every_s=run.options.progress_every_s, device=device, capacity=capacity,
                           notes=tables.line if tables else None)]


def fit(run: TrainingRun, model, dataset_fn, callback_list: list, start: Position,
        stop: StopRequest | None = None) -> tuple[dict, float]:
    """Keras fit for the steps left from `start`; returns the last epoch's metrics and the seconds taken.

    Keras runs whole epochs, so a resume within an epoch fits the rest of that epoch first, then the epochs
    after it. `dataset_fn(step)` gives the input from optimizer step `step` on (a fresh shuffle, not a replay).
    """
    started, history = time.monotonic(), {}
    parts = [(start.epochs, start.epochs + 1, run.steps_per_epoch - start.steps)] if start.steps else []
    parts.append((start.epochs + int(bool(start.steps)), run.options.epochs, run.steps_per_epoch))
    if stop is not None:
        stop.training = True
    try:
        for first, last, steps in parts:
            if first >= last:
                continue
            step, metrics_first = int(model.optimizer.iterations.numpy()), MetricsBeforeTheFirstStep()
            fitted = model.fit(tf_keras.utils.experimental.DatasetCreator(metrics_first.recording(dataset_fn(step))),
                               epochs=last, initial_epoch=first, steps_per_epoch=steps, verbose=0,
                               callbacks=[metrics_first, *callback_list])
            history = fitted.history or history
            _ran_every_epoch(fitted.epoch, first, last)
    except EpochEndedEarly as short:
        run.log.error("%s (TensorFlow ended it without an error, e.g. after losing a worker); exiting so the "
                      "run resumes from the last checkpoint", short)
        sys.exit(CLUSTER_UNAVAILABLE_EXIT_CODE)
    except Preempted as preempted:
        run.log.info("stopped as asked: %s; exiting (code %d): the next run resumes there", preempted,
                     PREEMPTED_EXIT_CODE)
        exit_preempted()
    if stop is not None:
        stop.training = False
        if stop.requested:  # the last epoch's checkpoint is written: the export is left to the next run
            run.log.info("stopped as asked after the last epoch's checkpoint; the next run exports the model")
            exit_preempted()
    final = {k: float(v[-1]) for k, v in history.items()} if history else {}
    return final, time.monotonic() - started


def _ran_every_epoch(epochs_run: list[int], first: int, last: int) -> None:
    """EpochEndedEarly when Keras ended fit before epoch `last` without an error: its input ran out (a worker's
    iterator, once the worker came back from a cut, said its data had ended), the epochs before whole."""
    ended = epochs_run[-1] + 1 if epochs_run else first
    if ended < last:
        raise EpochEndedEarly(f"fit ended after epoch {ended} of {last}, its input said to have run out")


def finish(run: TrainingRun, model, *, final_metrics: dict, train_seconds: float, checkpoint: str,
           shards: dict | None = None, capacity=None) -> RunSummary:
    """Exports the last checkpoint (an exporter process writes it a chunk of each table at a time), checks it
    against `model`'s predictions, and writes the run summary (the per-ps report with dynamic tables' rows)."""
    options, files = run.options, run.files
    steps = int(model.optimizer.iterations.numpy())
    skipped_records = _skipped_records(run, model)  # before this process reads reference inputs
    recorded = read_progress(files)  # every lead's training time; the last epoch's metrics if this one trained none
    if recorded is not None:
        train_seconds, final_metrics = max(train_seconds, recorded.train_s), final_metrics or recorded.epoch_metrics
    _exporting(run, steps, train_seconds, final_metrics)  # a beat while exporting: it is not a stall
    raw = export.reference_inputs(run.source.split("test", raw=True))  # as an exported model takes them
    trained = export.predictions(model, export.model_inputs(run.source, raw))
    exported = export_model(run, checkpoint, raw, trained,
                            beat=lambda: _exporting(run, steps, train_seconds, final_metrics))
    run.log.info("export check: largest difference between trained and exported predictions %.2e (at most %.0e), "
                 "the exported model taking %s; %.1f MB written in %.1f s", exported.largest, export.TOLERANCE,
                 raw_description(run.source), exported.bytes / 1e6, exported.seconds)
    strategy = run.config.strategy
    summary = RunSummary(
        status=RunStatus.COMPLETE, options=dataclasses.asdict(options), epochs=options.epochs,
        optimizer_steps=steps, steps_per_epoch=run.steps_per_epoch,
        global_batch=run.global_batch, strategy=options.strategy, workers=run.workers,
        ps=len(run.config.jobs.get("ps", ())) if "ps" in strategy.server_jobs else 0,
        train_seconds=round(train_seconds, 2), final_metrics=final_metrics, checkpoint=checkpoint,
        model=exported.paths,
        tensorboard=str(files.tensorboard), variable_placement=variable_placement(model),
        ps_report=with_table_stats(dict(shards or {}), model), capacity=capacity.summary() if capacity else {},
        skipped_records=skipped_records)
    write_summary(files, summary)
    run.log.info("model exported to %s (.h5, SavedModel, .keras); summary %s", files.model_dir, files.summary)
    return summary


def _skipped_records(run: TrainingRun, model) -> int | None:
    """Malformed records skipped while training (skip_corrupt; data/skipped.py): every worker's count under
    parameter_server, this process's own under the other strategies (a worker's count is lost if it restarted)."""
    if not run.options.skip_corrupt:
        return None
    on_workers = skipped.taken_on_workers(model)
    count = skipped.taken_here() if on_workers is None else on_workers
    if count:
        run.log.info("skip_corrupt: %d malformed record(s) skipped while training (each said in the log of the "
                     "task that read it)", count)
    return count


def _exporting(run: TrainingRun, steps: int, train_seconds: float, final_metrics: dict) -> None:
    """The heartbeat while exporting, with the run's training time and last metrics as the summary gives them, so
    a lead restarted from here reports the same (the beats during training counted only to their last beat)."""
    write_progress(run.files, TrainingProgress(pid=os.getpid(), phase=Phase.EXPORT, epoch=run.options.epochs,
                                               step=steps, time=time.time(), train_s=round(train_seconds, 2),
                                               epoch_metrics=final_metrics))
