"""Follows the coordinator's checkpoints: evaluates each once, writes validation scalars, exports the best."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from cluster.evaluation_options import EvaluationOptions
from cluster.run_files import (NAMES_KEPT, BestRecord, EvaluationState, RunFiles, read_progress, this_run,
                               training_finished, write_best)
from cluster.training_options import TrainingOptions
from common.errors import Problem, UserError
from common.proc import has_live_thread
from models import export
from models.checkpoints import checkpoint_epoch, checkpoint_position, checkpoint_step, listed_checkpoints
from online.publish.exporter import export_checkpoint, remove_leftovers
from online.publish.request import BEST, ExportRequest
from online.publish.template import Template
from tables.streaming.rows import chunk_bytes_of
from evaluator.progressive import FixedValidation, ProgressiveValidation
from evaluator.scoring import scores

UNREADABLE = (tf.errors.NotFoundError, tf.errors.DataLossError, tf.errors.FailedPreconditionError, OSError)


class DataVanished(Exception):
    """A data file the validation read went away while a checkpoint was scored: score it again, without it."""


def metrics_line(label: str, metrics: dict) -> str:
    return f"{label} | " + " | ".join(f"{name} {value:.4f}" for name, value in metrics.items())


class SidecarEvaluator:
    """Evaluates every checkpoint the coordinator writes, exactly once, on the validation split.

    What the trainer must save (models/checkpoints.py and the run summary of cluster/run_files.py):
    `ckpt-<epoch>` (and, within epochs, `ckpt-<epoch>-<steps>`) prefixes named in the `checkpoint` state file of
    OUTPUT/checkpoints, each holding `model` and `optimizer` (whose step places the TensorBoard point), and
    OUTPUT/summary.json whose status becomes
    "complete" with the planned epochs once training has finished. In follow mode the summary must also be
    stamped with this evaluator's launcher run (PSCLUSTER_RUN): a followed run that stopped when idle is
    complete only until `sh run.sh` starts it again, and the new run's evaluator scores its new checkpoints.
    """

    def __init__(self, *, training: TrainingOptions, evaluation: EvaluationOptions, source, files: RunFiles, log):
        """`source`: a DataSource (its validation split scores every checkpoint) or, in follow mode, a FollowedData
        (each checkpoint is scored on the newest data it has not trained on: evaluator/progressive.py)."""
        self.training, self.evaluation, self.files, self.log, self.source = training, evaluation, files, log, source
        self.checkpoint_dir = files.checkpoints
        self.template = Template(training, source, chunk_bytes=chunk_bytes_of(training), log=log)
        remove_leftovers(files.best_dir)  # of a best model whose writing died midway (the old one goes back)
        self._reference_path().unlink(missing_ok=True)
        self.validation = (ProgressiveValidation(source, examples=evaluation.progressive_examples,
                                                 batch=evaluation.batch, log=log) if training.follow_data
                           else FixedValidation(source.eval_dataset("validation", evaluation.batch)))
        self.state = EvaluationState.load(files)
        self.waiting: set[str] = set()  # checkpoints listed at the last look and not done yet
        self.said_fold = False
        self.writer = tf.summary.create_file_writer(str(files.validation_events))

    def run(self) -> int:
        """Evaluates until training is marked complete and every checkpoint is done; 1 if it waited in vain: no
        new checkpoint and no training progress for idle_timeout_s, and the lead that last wrote a heartbeat is
        gone (it runs on this host; a live but frozen lead is the launcher's to restart)."""
        if self.state.evaluated:
            self.log.info("resuming: %d checkpoints already done (%s)", self.state.done_count(),
                          ", ".join(self.state.evaluated))
        last_news, last_beat = time.monotonic(), read_progress(self.files)
        run = this_run() if self.training.follow_data else None  # a followed run may be started again
        while True:
            finished = training_finished(self.files, self.training.epochs, run=run)  # read before listing: no race
            pending, newest = self._pending()
            done = [path for path in pending if self._evaluate(path, newest, finished)]
            beat = read_progress(self.files)  # the lead's heartbeat: it moves while training (or exporting) goes on
            if done or beat != last_beat:
                last_news, last_beat = time.monotonic(), beat
            elif finished and not pending:
                self.log.info("training complete and all %d checkpoints done; best %s", self.state.done_count(),
                              self.state.best)
                return 0
            elif time.monotonic() - last_news > self.evaluation.idle_timeout_s and not _writer_alive(beat):
                self.log.error("no new checkpoint in %s and no training progress for %.0f s, and training is not "
                               "marked complete in summary.json: is the chief running? (see logs/chief-0.log)",
                               self.checkpoint_dir, self.evaluation.idle_timeout_s)
                return 1
            time.sleep(self.evaluation.poll_s)

    def _pending(self) -> tuple[list[str], str | None]:
        """Listed checkpoints not yet done, oldest first (at most the newest keep_unevaluated_checkpoints: a lagging
        evaluator skips to them), and the newest listed; checkpoints deleted unread are reported as skipped."""
        paths = listed_checkpoints(self.checkpoint_dir)
        still_listed = {Path(p).name for p in paths}
        self._fold(still_listed)
        self._skip_all([name for name in sorted(self.waiting - still_listed, key=checkpoint_position)
                        if name not in self.state.evaluated], "deleted by the chief before they were read")
        listed, done = ({p.epochs for p in map(checkpoint_position, names) if not p.steps}  # epoch ends: ckpt-<E>
                        for names in (paths, self.state.evaluated))
        through = self.state.folded_through
        for epoch in range(checkpoint_position(through).epochs + 1 if through else 1, max(listed, default=0)):
            if epoch not in listed and epoch not in done:
                self._skip(f"ckpt-{epoch}", "deleted before it could be read")
        pending = [p for p in paths if Path(p).name not in self.state.evaluated]
        window = self.training.keep_unevaluated_checkpoints
        if len(pending) > window:  # the chief keeps only so many for us: score the newest, never a deleted one
            self._skip_all([Path(p).name for p in pending[:-window]], f"the evaluator lags {len(pending)} "
                           f"checkpoints behind; it scores the newest {window} (training.keep_unevaluated_checkpoints)")
            pending = pending[-window:]
        self.waiting = {Path(p).name for p in pending}
        return pending, (paths[-1] if paths else None)

    def _fold(self, listed: set[str]) -> None:
        """Keeps evaluated.json a size: names of deleted checkpoints past the newest NAMES_KEPT fold into a count."""
        if self.state.fold(listed, checkpoint_position):
            self.state.save()
            if not self.said_fold:
                self.said_fold = True
                self.log.info("evaluated.json keeps the names of the newest %d deleted checkpoints (and the best); "
                              "older ones are counted (%d so far): %s and every checkpoint before it count as done",
                              NAMES_KEPT, self.state.folded, self.state.folded_through)

    def _skip(self, name: str, reason: str) -> None:
        self.log.warning("skipped %s: %s", name, reason)
        self.state.skip(name, reason)
        self.state.save()

    def _skip_all(self, names: list[str], reason: str) -> None:
        """Skips `names` (oldest first) with one line."""
        if not names:
            return
        shown = names[0] if len(names) == 1 else f"{len(names)} checkpoints, {names[0]} to {names[-1]}"
        self.log.warning("skipped %s: %s", shown, reason)
        for name in names:
            self.state.skip(name, reason)
        self.state.save()

    def _read(self, path: str, dataset) -> tuple[int, dict] | None:
        """Restores and evaluates one checkpoint, retrying while it is being written or removed."""
        for attempt in range(1, self.evaluation.read_retries + 1):
            try:
                step = checkpoint_step(path)
                results = scores(self.template.at(path), self.template.inner, dataset)
                return step, {f"val_{name}": value for name, value in results.items()}
            except (*UNREADABLE, tf.errors.OpError) as error:
                if self.validation.vanished():
                    raise DataVanished() from None
                if not isinstance(error, UNREADABLE):
                    raise
                # the race: the chief may prune or rewrite a prefix between our listing and our read
                self.log.warning("%s unreadable (attempt %d of %d): %s", Path(path).name, attempt,
                                 self.evaluation.read_retries, str(error).splitlines()[0])
                time.sleep(1.0)
        return None

    def _evaluate(self, path: str, newest: str, finished: bool) -> bool:
        """Evaluates (or skips) one checkpoint; False when it waits for data it has not trained on (follow mode), or
        when the chief deleted it since the listing (the next look says so)."""
        name = Path(path).name
        if path not in listed_checkpoints(self.checkpoint_dir):
            return False
        try:
            scored = self.validation.for_checkpoint(path, newest)
        except UNREADABLE:
            scored = None  # pruned or rewritten since the listing: read again at the next look
        if scored is None:
            if finished:
                self._skip(name, "no data landed after it to score it on")
            return finished
        try:
            outcome = self._read(path, scored[0])
        except DataVanished:
            return False  # the next look scores it on the data still there
        if outcome is None:
            self._skip(name, f"unreadable after {self.evaluation.read_retries} attempts")
            return True
        step, metrics = outcome
        self._check_best_metric(metrics)
        is_best = self._better_than_best(metrics)
        if is_best:
            self._export_best(path, step, metrics)
        with self.writer.as_default(step=step):  # the event first: a kill before the state save re-evaluates
            for metric, value in metrics.items():
                tf.summary.scalar(metric.removeprefix("val_"), value)  # same tags as train: one chart each
        self.writer.flush()
        self.state.record(name, {"epoch": checkpoint_epoch(path), "step": step, "metrics": metrics})
        if is_best:
            self.state.best = name
        self.state.save()
        self.log.info("%s | best %s%s | kept %d names", metrics_line(f"eval | {name} | step {step}", metrics),
                      self.state.best, scored[1] and f" | {scored[1]}", len(self.state.evaluated))
        return True

    def _check_best_metric(self, metrics: dict) -> None:
        if self.evaluation.best_metric not in metrics:
            raise UserError(Problem("evaluation.best_metric", self.evaluation.best_metric,
                                    "is not among the metrics evaluated", f"use one of {', '.join(metrics)}"))

    def _better_than_best(self, metrics: dict) -> bool:
        if self.state.best is None:
            return True
        value = metrics[self.evaluation.best_metric]
        best = self.state.results[self.state.best]["metrics"][self.evaluation.best_metric]
        return value > best if self.evaluation.best_mode == "max" else value < best

    def _reference_path(self) -> Path:
        """Where the best model's reference predictions wait while it is written."""
        return self.files.best_dir.with_name(".best_model-reference.npz")

    def _export_best(self, path: str, step: int, metrics: dict) -> None:
        """Writes checkpoint `path` to best_model/ (a chunk of each table at a time, whole or not at all), checked
        against the checkpoint's own predictions on a few inputs of the data."""
        name = Path(path).name
        raw = next(iter(self.source.split("validation", raw=True).take(1)), None)
        if raw is None:
            self.log.warning("%s is the best so far, but no data is left to check an export on: best_model/ stays "
                             "as it is", name)
            return
        raw = export.reference_inputs(self.source.split("validation", raw=True))
        reference = self._reference_path()
        np.savez(reference, predictions=self.template.at(path)(raw, raw=True), **export.saved_inputs(raw))
        try:
            written = export_checkpoint(ExportRequest(kind=BEST, checkpoint=path, destination=str(self.files.best_dir),
                                                      options=dataclasses.asdict(self.training),
                                                      reference=str(reference)), self.log)
        finally:
            reference.unlink(missing_ok=True)
        write_best(self.files, BestRecord(checkpoint=name, epoch=checkpoint_epoch(name), step=step, metrics=metrics,
                                          best_metric=self.evaluation.best_metric,
                                          best_mode=self.evaluation.best_mode, model=written.paths))


def _writer_alive(beat) -> bool:
    """Whether the process that wrote the lead's last heartbeat still runs here (the evaluator shares its host)."""
    return beat is not None and has_live_thread(beat.pid)
