"""The follow-mode chief's loop: a beat that takes the files that landed, hands their pieces to free workers,
records each piece done, checkpoints where the data stands, writes serving versions, and stops on SIGTERM or
after idling. What it hands out is schedule.py's, what it checkpoints checkpointing.py's, what it publishes
publishing.py's.

A checkpoint (every `checkpoint_every_s`) first hands out none and lets the running pieces finish, for at most
`straggler_after_s`: a slow worker's piece never holds up checkpoints, serving versions, progress lines or the
heartbeat. Pieces still running then (stragglers) are not done in the checkpoint's ledger, so a run resumed from it
trains them again, though some of their steps may be in its model. A serving version is written from a checkpoint by
an exporter process while the workers go on. Its checkpoint (`serving_checkpoint`) is its own, written on a thread
while pieces run on (each of those is in it as a straggler is, and no resume reads it: for_serving.py; without
deltas, the tables' rows without their optimizer slots), so hand-out never pauses for a version, which is checked
against that checkpoint's own predictions; a version due with a periodic checkpoint (without deltas), the last one
when a run ends idle and the one on SIGTERM are of a settled checkpoint, checked against the trained model's
predictions at that moment, as is every version with `serving_checkpoint` settled. On SIGTERM (stopping.py) the
running pieces get at most STOP_WAIT_S (or `straggler_after_s`); those that do not finish are left out of the
checkpoint likewise, and what that checkpoint trained is published before the chief exits, every step within the
launcher's `stop_grace_s`.
"""

from __future__ import annotations

import dataclasses
import gc
import time

from cluster.run_files import Phase, RunStatus, read_summary, write_summary
from tables.kinds import earlier_form
from online.follow.checkpointing import FollowCheckpoints
from online.follow.served import freshness_summary
from online.follow.publishing import Publishing
from online.follow.report import duration
from online.follow.schedule import Schedule
from online.follow.stopping import FollowStop

BEAT_S = 1.0  # the loop's pace: pieces finished, SIGTERM, heartbeat, looks at the folder
WRITER_LOOK_S = 5.0  # between looks for a newer chief (writers/), besides one before each checkpoint and version


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
        self.step_at_save = self._step()  # the model's step when the newest checkpoint (or the restored one) was taken
        parts.report.line_examples = self.schedule.examples

    def run(self):
        """Follows until SIGTERM (checkpoint, exit 4) or idling for stop_when_idle_s (returns the summary)."""
        self.p.stop.training = True
        self.p.report.reset_metrics()  # its ops run once before any piece: later, a new op waits for every worker
        self.publishing.reference()  # taken now from the folder's data, if any, for the same reason
        gc.collect()  # and set-up's garbage: a traced function collected later is removed from every task first
        self._publish_restored()
        while True:
            self.schedule.take_looks()
            if self.p.stop.requested:
                self._stop_now()
            self.schedule.hand_out()
            self.publishing.prepare(self.schedule.last_piece)
            self.schedule.wait(BEAT_S)
            if not self.schedule.running:
                time.sleep(BEAT_S)  # nothing to wait on: a quiet beat
            training = self._beat()
            self.publishing.record.check_writer(WRITER_LOOK_S)  # a newer chief on this output_dir: it stops here
            self.publishing.poll()
            self._publish_written_for_version()
            if self._save_due():
                self._checkpoint(serve=self._serve_due())
            if self._idle_long_enough(training):
                return self._finish()

    def _beat(self) -> bool:
        """The heartbeat and the progress line when due; True while pieces run."""
        training = self.schedule.running
        self.p.report.beat(Phase.TRAIN if training else Phase.WAIT)
        self.p.report.progress(self.ledger, self.schedule.examples, self.schedule.pieces_by_worker,
                               self.schedule.metrics, training=training)
        return training

    def _publish_restored(self) -> None:
        """A resumed run whose checkpoint is newer than the newest version (a chief stopped between the two)
        publishes it first: every file trained is served."""
        number = self.saving.saved_number
        if not number or not self.publishing.behind(number) or not self.publishing.may_serve(number):
            return
        if self.publishing.reference() is None:
            self.p.run.log.warning("%s is not served yet, and no data file is left to check a version of it on: "
                                   "the next version serves it", self.saving.name)
            return
        self.p.run.log.info("%s is newer than the newest serving version: publishing it first", self.saving.name)
        checkpoint = self.saving.latest_path()
        if earlier_form(checkpoint) or self.publishing.needs_live_rows:  # a table in an earlier version's form,
            checkpoint = self._save()  # or deltas that name the rows a restore laid out anew: written again
        self.publishing.publish(self.saving.settled(checkpoint))

    def _save_due(self) -> bool:
        return not self.saving.writing and (self._periodic_due() or self._serve_due())

    def _serve_due(self) -> bool:
        return self.schedule.trained_since_version and self.publishing.due() and \
            self.publishing.may_serve(self._step())

    def _idle_long_enough(self, training: bool) -> bool:
        limit = self.p.run.options.stop_when_idle_s
        return bool(limit) and not training and self.schedule.idle_for() >= limit

    def _settle(self) -> int:
        """Hands out none and lets the running pieces finish, for at most straggler_after_s; returns how many
        still run (stragglers, left out of the checkpoint that follows)."""
        deadline = time.monotonic() + self.p.run.options.straggler_after_s
        while self.schedule.running and time.monotonic() < deadline:
            self.schedule.wait(min(BEAT_S, max(0.0, deadline - time.monotonic())))
            self._beat()
            if self.p.stop.requested:
                self._stop_now()
        return len(self.schedule.trainer.running)

    def _save_and_serve(self, *, serve: bool) -> None:
        serve = serve and self.schedule.last_piece is not None
        if serve:
            self.publishing.hold_deltas()  # the version holds every step a delta served
        stragglers = self._settle()
        moving = self.schedule.trainer.moving  # stragglers, or the other closure of a piece given twice
        checkpoint = self._save(stragglers) if self._moved_since_save() else self.saving.latest_path()
        if not moving:  # a reset while a closure runs would race its updates
            self.p.report.reset_metrics()  # each line's metrics are those since this checkpoint
            self.schedule.metrics = {}
        if serve and self.publishing.publish(self.saving.settled(checkpoint), self.schedule.last_piece,
                                             against_checkpoint=moving):  # the workers go on while it is written
            self.schedule.trained_since_version = False

    def _checkpoint(self, *, serve: bool) -> None:
        """A settled checkpoint, and a version of it when `serve`; with versions' checkpoints beside training (the
        default), when a version is due and no periodic checkpoint with it, the version's own checkpoint instead, so
        hand-out never pauses for a version (a periodic one due meanwhile comes after it)."""
        mode = self.publishing.mode
        if serve and self.schedule.last_piece is not None and mode.own_checkpoint and \
                not (mode.shares_periodic and self._periodic_due()):  # one checkpoint, not two
            self._checkpoint_for_version()
        else:
            self._save_and_serve(serve=serve)

    def _periodic_due(self) -> bool:
        return self.schedule.trained_since_save and self.saving.due()

    def _checkpoint_for_version(self) -> None:
        """The next version's checkpoint, written while the workers train on (and deltas go on being written); the
        version starts once it is done."""
        self.publishing.hold_deltas()  # the version holds every step a delta served
        name = self.saving.start_for_version(table_slots=self.publishing.mode.with_slots)
        running = len(self.schedule.trainer.running)
        self.p.run.log.info("checkpoint %s for the next serving version: written while %d piece%s run%s on",
                            name, running, "s" * (running != 1), "s" * (running == 1))
        self.schedule.trained_since_version = False

    def _publish_written_for_version(self, wait: bool = False) -> None:
        """Starts the version of the checkpoint written for it once that is done (with `wait`, waits)."""
        written = self.saving.written_for_version(wait)
        if written is not None:  # pieces ran on while it was written: checked on its own predictions
            self.publishing.publish(written, self.schedule.last_piece, against_checkpoint=True)

    def _step(self) -> int:
        return int(self.p.model.optimizer.iterations.numpy())

    def _moved_since_save(self) -> bool:
        """Whether the model moved since the newest checkpoint: a piece finished, or an unwaited closure stepped."""
        return self.schedule.trained_since_save or self._step() != self.step_at_save

    def _save(self, stragglers: int = 0) -> str:
        self.step_at_save = self._step()
        path = self.saving.save(reading=self.publishing.reading)
        self.schedule.trained_since_save = False
        if stragglers:
            self.p.run.log.info("checkpoint %s written without waiting longer for %d piece%s still running (past "
                                "training.straggler_after_s, %g s): not done in it; a run resumed from it trains "
                                "them again", self.saving.name, stragglers, "s" * (stragglers != 1),
                                self.p.run.options.straggler_after_s)
        return path

    def _stop_now(self) -> None:
        """SIGTERM: the stop, each step within launcher.stop_grace_s (stopping.py); ends the process."""
        FollowStop(self).run()

    def _settle_abandoned(self) -> None:
        """The other closures of pieces given twice end before the last checkpoint, for at most stop_when_idle_s
        (beating meanwhile): the checkpoint holds their steps and the summary counts them."""
        limit, trainer = self.p.run.options.stop_when_idle_s, self.schedule.trainer
        deadline = time.monotonic() + limit
        while trainer.settle_abandoned(BEAT_S) and time.monotonic() < deadline:
            self.p.report.beat(Phase.WAIT)
        if trainer.abandoned:
            self.p.run.log.info("finishing without waiting longer than %s for %d closure%s of pieces given twice, "
                                "still running on a slow worker: what they train is counted by nothing",
                                duration(limit), len(trainer.abandoned), "s" * (len(trainer.abandoned) != 1))

    def _finish(self):
        """Idle for stop_when_idle_s: the last checkpoint and serving version, and the summary says complete."""
        run = self.p.run
        run.log.info("no new data for %s (stop_when_idle_s): finishing", duration(run.options.stop_when_idle_s))
        self._settle_abandoned()
        self.publishing.finish()
        self._publish_written_for_version(wait=True)
        self.publishing.finish()
        if self._moved_since_save() or self.schedule.trained_since_version:  # closures of pieces given twice too
            self._save_and_serve(serve=self.schedule.trained_since_version and not self.publishing.takes_deltas)
        self.publishing.finish()
        self.publishing.write_last_delta()
        self.p.stop.training = False
        self.publishing.record.flush()  # safe_to_delete.json of the last checkpoint: a topic commits its end at stop
        self.p.watch.stop()
        summary = read_summary(run.files)
        finished = dataclasses.replace(summary, status=RunStatus.COMPLETE,
                                       optimizer_steps=self._step(),
                                       global_batch=run.global_batch, strategy=run.options.strategy,
                                       train_seconds=round(time.monotonic() - self.started, 2),
                                       checkpoint=self.saving.latest_path(), model={"serving": str(run.files.serving)},
                                       ps_report=self.p.tables.summary() if self.p.tables else summary.ps_report,
                                       tensorboard=str(run.files.tensorboard),
                                       follow={**freshness_summary(self.ledger),
                                               "pieces_given_twice": self.schedule.given_twice,
                                               "steps_trained_again": self.schedule.trainer.steps_again,
                                               "kept": self.publishing.kept(evaluated=True),
                                               **self.p.watch.summary()})
        write_summary(run.files, finished)
        return finished
