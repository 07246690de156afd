"""The follow-mode chief's loop: a beat that takes the files that landed, hands their pieces to free workers,
records each piece done, checkpoints where the data stands, writes serving versions, and stops on SIGTERM or
after idling. What it hands out is schedule.py's, what it checkpoints checkpointing.py's, what it publishes
publishing.py's.

A checkpoint (every `checkpoint_every_s`, and before each serving version) first lets the running pieces finish
and hands out none, so it holds exactly the pieces it lists as done; a serving version is then restored from
it and checked against the trained model's predictions at that moment while the workers go on. On SIGTERM the
running pieces get STOP_WAIT_S to finish; those that do not are left out of the checkpoint and trained again
by the next run.
"""

from __future__ import annotations

import dataclasses
import time

from cluster.run_files import Phase, RunStatus, read_summary, write_summary
from coordinator.dynamic.checkpoint import of_earlier_form
from coordinator.follow.checkpointing import FollowCheckpoints
from coordinator.follow.ledger import freshness_summary
from coordinator.follow.publishing import Publishing
from coordinator.follow.report import duration
from coordinator.follow.schedule import Schedule
from coordinator.preemption import exit_preempted

BEAT_S = 1.0  # the loop's pace: pieces finished, SIGTERM, heartbeat, looks at the folder
STOP_WAIT_S = 20.0  # on SIGTERM, running pieces get this long to finish (the launcher waits stop_grace_s, 60 s)


@dataclasses.dataclass
class FollowParts:
    """What the follow loop works with: the run (setup.TrainingRun), its model, the schedule, checkpoints and
    publishing, the FollowReport, the FolderWatch, the StopRequest and dynamic tables' TableReport (or None)."""

    run: object
    model: object
    schedule: Schedule
    saving: FollowCheckpoints
    publishing: Publishing
    report: object
    watch: object
    stop: object
    tables: object | None = None


class FollowLoop:
    """One follow-mode run of the chief, from a restored (or empty) ledger."""

    def __init__(self, parts: FollowParts):
        self.p, self.schedule, self.saving, self.publishing = parts, parts.schedule, parts.saving, parts.publishing
        self.ledger = parts.schedule.ledger
        self.started = time.monotonic()
        parts.report.line_examples = self.schedule.examples

    def run(self):
        """Follows until SIGTERM (checkpoint, exit 4) or idling for stop_when_idle_s (returns the summary)."""
        self.p.stop.training = True
        self._publish_restored()
        while True:
            self.schedule.take_looks()
            if self.p.stop.requested:
                self._stop_now()
            self.schedule.hand_out()
            self.schedule.wait(BEAT_S)
            training = self.schedule.running
            if not training:
                time.sleep(BEAT_S)  # nothing to wait on: a quiet beat
            self.p.report.beat(Phase.TRAIN if training else Phase.WAIT)
            self.p.report.progress(self.ledger, self.schedule.examples, self.schedule.pieces_by_worker,
                                   self.schedule.metrics, training=training)
            self.publishing.poll()
            if self._save_due():
                self._save_and_serve(serve=self._serve_due())
            if self._idle_long_enough(training):
                return self._finish()

    def _publish_restored(self) -> None:
        """A resumed run whose checkpoint is newer than the newest version (a chief stopped between the two)
        publishes it first: every file trained is served."""
        number = self.saving.saved_number
        if not number or not self.publishing.behind(number):
            return
        reference = self.publishing.reference()
        if reference is None:
            self.p.run.log.warning("%s is not served yet, and no data file is left to check a version of it on: "
                                   "the next version serves it", self.saving.name)
            return
        self.p.run.log.info("%s is newer than the newest serving version: publishing it first", self.saving.name)
        checkpoint = self.saving.latest_path()
        if of_earlier_form(checkpoint) or self.publishing.needs_live_rows:  # an earlier version's dynamic table,
            checkpoint = self._save()  # or deltas that name the rows a restore laid the ids out in: written again
        self.publishing.start(checkpoint, self.saving.name, self.saving.saved_number, self.saving.saved_ledger(),
                              *reference)

    def _save_due(self) -> bool:
        return (self.schedule.trained_since_save and self.saving.due()) or self._serve_due()

    def _serve_due(self) -> bool:
        return self.schedule.trained_since_version and self.publishing.due()

    def _idle_long_enough(self, training: bool) -> bool:
        limit = self.p.run.options.stop_when_idle_s
        return bool(limit) and not training and self.schedule.idle_for() >= limit

    def _drain(self) -> None:
        """Lets every running piece finish (none is handed out meanwhile)."""
        while self.schedule.running:
            self.schedule.wait(BEAT_S)
            self.p.report.beat(Phase.TRAIN)
            if self.p.stop.requested:
                self._stop_now()

    def _save_and_serve(self, *, serve: bool) -> None:
        self._drain()
        checkpoint = self._save() if self.schedule.trained_since_save else self.saving.latest_path()
        self.p.report.reset_metrics()  # nothing runs now: each line's metrics are those since this checkpoint
        self.schedule.metrics = {}
        if not serve or self.schedule.last_piece is None:
            return
        reference = self.publishing.reference(self.schedule.last_piece)  # nothing runs now
        if reference is None:
            return  # the piece's file is gone: the next version takes its reference inputs from a later one
        self.publishing.start(checkpoint, self.saving.name, self.saving.saved_number, self.saving.saved_ledger(),
                              *reference)  # the workers go on while an exporter writes the version
        self.schedule.trained_since_version = False

    def _save(self) -> str:
        path = self.saving.save()
        self.schedule.trained_since_save = False
        return path

    def _stop_now(self) -> None:
        """SIGTERM: the running pieces get what is left of STOP_WAIT_S, then a checkpoint without the others."""
        stop = self.p.stop
        self.schedule.record(self.schedule.trainer.all_finished(
            max(0.0, STOP_WAIT_S - (time.monotonic() - stop.requested_at))))
        left = len(self.schedule.trainer.running)
        said = "not needed (the last one holds every piece done)"
        if self.schedule.trained_since_save:
            self._save()
            said = f"{self.saving.name} written"
        self.publishing.write_last_delta()
        self.p.run.log.info("stopped as asked: checkpoint %s %.1f s after SIGTERM; %d piece%s still running will "
                            "be trained again by the next run; exiting", said,
                            time.monotonic() - stop.requested_at, left, "s" * (left != 1))
        exit_preempted()

    def _finish(self):
        """Idle for stop_when_idle_s: the last checkpoint and serving version, and the summary says complete."""
        run = self.p.run
        run.log.info("no new data for %s (stop_when_idle_s): finishing", duration(run.options.stop_when_idle_s))
        self.publishing.finish()
        if self.schedule.trained_since_save or self.schedule.trained_since_version:
            self._save_and_serve(serve=self.schedule.trained_since_version and not self.publishing.takes_deltas)
        self.publishing.finish()
        self.publishing.write_last_delta()
        self.p.stop.training = False
        self.p.watch.stop()
        summary = read_summary(run.files)
        finished = dataclasses.replace(summary, status=RunStatus.COMPLETE,
                                       optimizer_steps=int(self.p.model.optimizer.iterations.numpy()),
                                       global_batch=run.global_batch, strategy=run.options.strategy,
                                       train_seconds=round(time.monotonic() - self.started, 2),
                                       checkpoint=self.saving.latest_path(), model={"serving": str(run.files.serving)},
                                       ps_report=self.p.tables.summary() if self.p.tables else summary.ps_report,
                                       tensorboard=str(run.files.tensorboard), follow=freshness_summary(self.ledger))
        write_summary(run.files, finished)
        return finished
