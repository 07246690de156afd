"""The follow-mode chief's loop: takes the files that landed, hands their pieces to free workers, records each piece
done, checkpoints where the data stands, writes serving versions, and stops on SIGTERM or after idling.

A checkpoint (every `checkpoint_every_s`, and before each serving version) first lets the running pieces finish
and hands out none, so it holds exactly the pieces it lists as done; a serving version is then restored from
it and checked against the trained model's predictions at that moment while the workers go on. On SIGTERM the
running pieces get STOP_WAIT_S to finish; those that do not are left out of the checkpoint and trained again
by the next run.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import time

from cluster.run_files import Phase, RunStatus, read_summary, write_summary
from common.errors import Problem, UserError
from coordinator import export
from coordinator.checkpoints import Position
from coordinator.compiled import exportable
from coordinator.follow_report import duration
from coordinator.ledger import Ledger, freshness_summary, trained_through
from coordinator.preemption import exit_preempted
from coordinator.raw_export import servable, signatures

BEAT_S = 1.0  # the loop's pace: pieces finished, SIGTERM, heartbeat, looks at the folder
STOP_WAIT_S = 20.0  # on SIGTERM, running pieces get this long to finish (the launcher waits stop_grace_s, 60 s)


class FollowLoop:
    """One follow-mode run of the chief, from a restored (or empty) ledger; `parts` holds its collaborators."""

    def __init__(self, parts):
        self.p = parts  # run, model, data, ledger, state, trainer, checkpoints, serving, report, watch, stop, device
        self.ledger: Ledger = parts.ledger
        self.known = {entry.name: (entry.size, entry.mtime) for entry in self.ledger.files}
        self.examples = sum(entry.examples for entry in self.ledger.files)
        now = time.monotonic()
        self.started = self.last_save = self.last_version = self.last_activity = now
        self.unsaved = self.unserved = False
        self.last_piece, self.pieces_by_worker, self.metrics = None, collections.Counter(), {}
        self.saved_json, self.saved_number = self.ledger.to_json(), parts.resumed_number
        parts.report.line_examples = self.examples

    def run(self):
        """Follows until SIGTERM (checkpoint, exit 4) or idling for stop_when_idle_s (returns the summary)."""
        self.p.stop.training = True
        while True:
            self._take_looks()
            if self.p.stop.requested:
                self._stop_now()
            self._hand_out()
            self._record(self.p.trainer.finished(BEAT_S))
            training = bool(self.p.trainer.running)
            if not training:
                time.sleep(BEAT_S)  # nothing to wait on: a quiet beat
            self.p.report.beat(Phase.TRAIN if training else Phase.WAIT)
            self.p.report.progress(self.ledger, self.examples, self.pieces_by_worker, self.metrics, training=training)
            if self._save_due():
                self._save_and_serve(serve=self._serve_due())
            if self._idle_long_enough(training):
                return self._finish()

    def _take_looks(self) -> None:
        now = time.time()
        for look in self.p.watch.looks():
            for landed in look.landed:
                if landed.name in self.known:  # a resumed run's file, already in the ledger
                    continue
                entry = self.ledger.add(landed, self.p.data.pieces(landed), now)
                self.known[entry.name] = (entry.size, entry.mtime)
                self.p.report.landed(entry, now)
                self.last_activity = time.monotonic()
                if entry.complete:
                    self.p.report.done(entry)
            for name, why in look.incomplete.items():
                self.p.report.once(f"{name}\0{why}", "%s: not taken yet: %s", name, why)
                self.last_activity = time.monotonic()
            for name in look.changed:
                self.p.report.once(f"{name}\0changed", "%s: changed after it was taken; it is not trained again "
                                   "(new data needs a new file name)", name)

    def _hand_out(self) -> None:
        room = self.p.trainer.room
        for key in itertools.islice(self.ledger.pending(set(self.p.trainer.running)), max(room, 0)):
            piece = self.ledger.piece(key)
            if not os.path.exists(self.p.data.path(piece.name)):
                raise UserError(Problem("data file", self.p.data.path(piece.name), "was removed (or renamed) before "
                                        "it was trained", "put it back: a file may go once a serving version lists "
                                        "it in trained_through.json"))
            if self.ledger.start(key, time.time()):
                self.p.report.started(self.ledger.files[key[0]], time.time())
            self.p.trainer.hand_out(key, self.p.data.path(piece.name), piece.begin, piece.end)

    def _record(self, results) -> None:
        for result in results:
            piece = self.ledger.piece(result.key)
            if self.ledger.finish(result.key, result.examples, time.time(), steps=result.steps):
                self.p.report.done(self.ledger.files[result.key[0]])
            self.examples += result.examples
            self.pieces_by_worker[result.worker] += 1
            self.metrics = result.metrics
            self.unsaved = self.unserved = True
            self.last_piece, self.last_activity = piece, time.monotonic()

    def _save_due(self) -> bool:
        every = self.p.run.options.checkpoint_every_s
        return (self.unsaved and every > 0 and time.monotonic() - self.last_save >= every) or self._serve_due()

    def _serve_due(self) -> bool:
        return self.unserved and time.monotonic() - self.last_version >= self.p.run.options.serving_export_every_s

    def _idle_long_enough(self, training: bool) -> bool:
        limit = self.p.run.options.stop_when_idle_s
        return bool(limit) and not training and time.monotonic() - self.last_activity >= limit

    def _drain(self) -> None:
        """Lets every running piece finish (none is handed out meanwhile)."""
        while self.p.trainer.running:
            self._record(self.p.trainer.finished(BEAT_S))
            self.p.report.beat(Phase.TRAIN)
            if self.p.stop.requested:
                self._stop_now()

    def _save_and_serve(self, *, serve: bool) -> None:
        self._drain()
        checkpoint = self._save() if self.unsaved else self.p.checkpoints.latest_path()
        self.p.report.reset_metrics()  # nothing runs now: each line's metrics are those since this checkpoint
        self.metrics = {}
        if not serve or self.last_piece is None:
            return
        raw = export.reference_inputs(self.p.data.piece_examples(self.last_piece, raw=True))  # as a reader sends
        trained = self.p.model(export.model_inputs(self.p.data, raw), training=False).numpy()  # nothing runs now
        self._hand_out()  # the workers go on while the version is written
        self._write_version(checkpoint, raw, trained)

    def _save(self) -> str:
        started, step = time.monotonic(), int(self.p.model.optimizer.iterations.numpy())
        self.saved_number = max(step, self.saved_number + 1)
        self.saved_json = self.ledger.to_json()
        self.p.state.assign(self.saved_json)
        path = self.p.checkpoints.save(Position(0, self.saved_number))
        self.unsaved, self.last_save = False, time.monotonic()
        waiting, _ = self.ledger.behind(time.time())
        self.p.run.log.info("checkpoint %s (optimizer step %d): %d files done, %d not yet; written in %.1f s",
                            Position(0, self.saved_number).name, step, self.ledger.done_count(), waiting,
                            time.monotonic() - started)
        return path

    def _write_version(self, checkpoint: str, raw, trained) -> None:
        """The checkpoint restored whole, as exported (taking raw features), checked against the trained model's
        predictions at that checkpoint, written as the next serving version."""
        run, data, snapshot = self.p.run, self.p.data, Ledger.from_json(self.saved_json)
        self.p.report.beat(Phase.EXPORT, force=True)
        whole = export.restore_whole(run.options, data, checkpoint, device=self.p.device, io_device=self.p.device)
        exported = servable(exportable(whole), data)
        largest = export.check_export(trained, exported(raw, training=False).numpy())
        step = int(self.p.model.optimizer.iterations.numpy())
        version, path = self.p.serving.write(
            exported, inputs=raw, predictions=trained, signatures=signatures(exported, data),
            describe=lambda v, t: trained_through(snapshot, version=v, written=t,
                                                  checkpoint=Position(0, self.saved_number).name,
                                                  step=self.saved_number))
        served = self.ledger.serve(version, self.p.serving.trained_through(version)["written"],
                                   names={e.name for e in snapshot.files if e.complete})
        freshness = duration(served[-1].freshness_s) if served else "-"
        run.log.info("serving | version %d | %s | %d file%s newly served | freshness %s | export check %.1e | %s",
                     version, Position(0, self.saved_number).name, len(served), "s" * (len(served) != 1),
                     freshness, largest, path)
        self.unserved, self.last_version = False, time.monotonic()
        summary = read_summary(run.files)
        if summary is not None:
            write_summary(run.files, dataclasses.replace(summary, optimizer_steps=step,
                                                         follow=freshness_summary(self.ledger)))

    def _stop_now(self) -> None:
        """SIGTERM: the running pieces get what is left of STOP_WAIT_S, then a checkpoint without the others."""
        stop = self.p.stop
        self._record(self.p.trainer.all_finished(max(0.0, STOP_WAIT_S - (time.monotonic() - stop.requested_at))))
        left = len(self.p.trainer.running)
        said = "not needed (the last one holds every piece done)"
        if self.unsaved:
            self._save()
            said = f"{Position(0, self.saved_number).name} written"
        self.p.run.log.info("stopped as asked: checkpoint %s %.1f s after SIGTERM; %d piece%s still running will "
                            "be trained again by the next run; exiting", said,
                            time.monotonic() - stop.requested_at, left, "s" * (left != 1))
        exit_preempted()

    def _finish(self):
        """Idle for stop_when_idle_s: the last checkpoint and serving version, and the summary says complete."""
        self.p.run.log.info("no new data for %s (stop_when_idle_s): finishing",
                            duration(self.p.run.options.stop_when_idle_s))
        if self.unsaved or self.unserved:
            self._save_and_serve(serve=self.unserved)
        self.p.stop.training = False
        self.p.watch.stop()
        summary = read_summary(self.p.run.files)
        finished = dataclasses.replace(summary, status=RunStatus.COMPLETE,
                                       optimizer_steps=int(self.p.model.optimizer.iterations.numpy()),
                                       global_batch=self.p.run.global_batch, strategy=self.p.run.options.strategy,
                                       train_seconds=round(time.monotonic() - self.started, 2),
                                       checkpoint=self.p.checkpoints.latest_path(),
                                       model={"serving": str(self.p.run.files.serving)},
                                       ps_report=self.p.tables.summary() if self.p.tables else summary.ps_report,
                                       tensorboard=str(self.p.run.files.tensorboard),
                                       follow=freshness_summary(self.ledger))
        write_summary(self.p.run.files, finished)
        return finished
