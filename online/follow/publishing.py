"""What the follow loop publishes: a serving version from a checkpoint, every `serving_export_every_s` when something
new was trained, written by an exporter process beside training (online/publish/) and checked against the
trained model's predictions at that checkpoint (or, when the model moved meanwhile, the checkpoint's own).

Hand-out never waits for the exporter: the loop starts it and goes on, and each beat asks whether it is done. A
version due while the previous one is still being written is not queued behind it: the next one's checkpoint is
taken at the first beat after it is done (settled, or beside training: `serving_checkpoint`), and that version starts
once its checkpoint is written. With
`serving_delta_every_s`, deltas of the newest version come between versions (deltas.py), and a run ends with a
delta instead of a version. Until a version of this run serves a trained file, one is due as soon as a file is
trained (with deltas, until a chain serves them), so a fresh run's first file, and the first after a restart, is
served soon after it is trained rather than an interval later. Every version starts through `publish`, whichever
checkpoint it comes from (one written for it, a periodic one, the one resumed, the one written on SIGTERM), so each
is guarded alike: this chief's generation, the step served (run_record.py), data to check it on.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np

from cluster.config import PROJECT_ROOT
from cluster.run_files import RunFiles, read_summary, write_summary
from common.errors import Problem, UserError
from online.follow.checkpointing import ForVersion
from online.follow import kill_points
from online.follow.for_serving import ForServing
from online.follow.kept import kept_sizes
from online.follow.ledger import Ledger
from online.follow.publication_mode import PublicationMode
from online.follow.reference import ReferenceInputs
from online.follow.served import freshness_summary, trained_through
from online.follow.report import duration
from online.follow.run_record import RunRecord
from online.publish.export_forks import ExportForks
from online.publish.process import ExportProcess
from online.publish.request import VERSION, ExportRequest, ExportResult
from online.publish.versions import ServingVersions


SCRATCH = ".exports"  # under output_dir: the requests and reference predictions of versions being written


def export_forks(files: RunFiles) -> ExportForks | None:
    """Where the run's exporters are forked from: made before TensorFlow's runtime starts, so that it can be a fork
    of this process (online/publish/export_forks.py)."""
    return ExportForks.start(files.output / SCRATCH, PROJECT_ROOT)


@dataclasses.dataclass
class _Exporting:
    """A version being written: its exporter, the ledger of its checkpoint, that checkpoint's name, the reference
    predictions it is checked against."""

    process: ExportProcess
    snapshot: Ledger
    checkpoint_name: str
    reference: Path
    pieces_before: int


class Publishing:
    """Serving versions of a follow-mode run (into `serving`, a ServingVersions) and the files each first serves."""

    def __init__(self, *, run, data, model, serving: ServingVersions, ledger: Ledger, report, task: str,
                 pieces_done: Callable[[], int], for_serving: ForServing, record: RunRecord,
                 forks: ExportForks | None, deltas=None):
        """`pieces_done()`: the pieces trained so far in this run (how many trained while a version was written
        is said beside it); `for_serving`: where the checkpoints written for versions lie (each goes once it is
        no longer needed); `record`: the run's RunRecord (who writes, the step served); `forks`: where its
        exporters are forked from (export_forks below; None: each is started); `deltas`: the run's FollowDeltas,
        or None."""
        self.run, self.data, self.model, self.serving, self.ledger = run, data, model, serving, ledger
        self.report, self.task, self.pieces_done, self.deltas = report, task, pieces_done, deltas
        self.for_serving, self.record, self.forks = for_serving, record, forks
        self.mode = PublicationMode.of(run.options)
        self.said_older = False
        self.scratch = run.files.output / SCRATCH
        shutil.rmtree(self.scratch, ignore_errors=True)  # a killed run's requests and references
        # nothing served yet: the first version is due as soon as something is trained (the first files would
        # otherwise wait a whole interval, and deltas need a version to build on)
        self.last_version = time.monotonic() if serving.versions() else float("-inf")
        self.served_a_file = False  # by a version of this run: until then the first trained file makes one due
        self.exporting: _Exporting | None = None
        self.references = ReferenceInputs(data, model)  # what every version is checked on; traced now

    @property
    def busy(self) -> bool:
        return self.exporting is not None

    @property
    def reading(self) -> set[str]:
        """The checkpoint the version being written is read from (none when none is): pruning spares it."""
        return {self.exporting.process.request.checkpoint} if self.exporting is not None else set()

    def due(self) -> bool:
        """Whether the next version is due: its interval is over, a file waits to be served first, or a delta was
        too large for its version."""
        return not self.busy and (time.monotonic() - self.last_version >= self.run.options.serving_export_every_s or
                                  self._first_file_waits() or (self.deltas is not None and self.deltas.version_wanted))

    def _first_file_waits(self) -> bool:
        """Whether no version of this run served a file yet, no chain of deltas serves them, and a file is trained."""
        return not self.served_a_file and not self.takes_deltas and any(
            entry.trained and entry.served_version is None for entry in self.ledger.files)

    def may_serve(self, step: int) -> bool:
        """Whether a version of the training up to `step` is at least as new as what readers were served (after a
        crash, a resumed run's versions wait until training passes it); said once while it waits."""
        if self.record.serves_no_older(step):
            return True
        self.last_version = float("-inf")  # due as soon as training passes it
        if not self.said_older:
            self.said_older = True
            self.run.log.info("serving | no version before training passes optimizer step %d (%s, served before "
                              "this run resumed from step %d): the served model never goes back",
                              self.record.served_step, self.record.served_at, step)
        return False

    def hold_deltas(self) -> None:
        """A version's checkpoint is about to be taken: the older chain's deltas stop (deltas.py: `hold`)."""
        if self.deltas is not None:
            self.deltas.hold(self.ledger)

    def dropped(self, checkpoint: str) -> None:
        """The version of `checkpoint` is not written: its checkpoint goes (one for serving) and deltas go on."""
        self.for_serving.dropped(checkpoint)
        if self.deltas is not None:
            self.deltas.release()

    def behind(self, number: int) -> bool:
        """Whether the checkpoint at step `number` is newer than what the newest version was written from; with
        deltas always (what is served may be a killed run's deltas beyond the checkpoint)."""
        newest = self.serving.newest_trained_through()
        return newest is None or newest.get("optimizer_step", 0) < number or self.deltas is not None

    @property
    def needs_live_rows(self) -> bool:
        """Whether a version deltas build on must come from a checkpoint of the live tables, not a restored one (a
        restore lays a table's rows out other than its checkpoint did: a dynamic table's ids)."""
        return self.deltas is not None and self.deltas.restore_moves_rows

    @property
    def takes_deltas(self) -> bool:
        """Whether a delta serves what is trained now (a published version to build on)."""
        return self.deltas is not None and self.deltas.chain is not None

    def kept(self, *, evaluated: bool = False) -> dict[str, int]:
        """The size of each structure the chief keeps (kept.py); with `evaluated`, evaluated.json's names too."""
        return kept_sizes(ledger=self.ledger, said=self.report.said, deltas=self.deltas,
                          files=self.run.files if evaluated else None)

    def write_last_delta(self) -> None:
        """SIGTERM, the end of a run: the last delta, now."""
        if self.deltas is not None:
            self.deltas.write_last(self.ledger)

    def prepare(self, piece) -> None:
        """Takes the reference inputs from the first piece handed out (its file may go before a version is due)."""
        if piece is not None:
            self.references.take(piece)

    def reference(self, piece=None):
        """(the reference inputs as the .npz beside a version holds them, the trained model's predictions on them
        now: call with no piece running, they are what the newest checkpoint predicts), the inputs taken from
        `piece` or, without one, from the folder's newest data, unless taken already (reference.py); None when
        there is no data to take them from."""
        if not self.references.take(piece):
            return None
        return self.references.saved, self.references.predictions()

    def publish(self, source: ForVersion, piece=None, *, against_checkpoint: bool = False) -> bool:
        """The one way a version starts: checkpoint `source` written as the next serving version, checked on the
        reference inputs (`reference(piece)`) against the trained model's predictions now, or with
        `against_checkpoint` (pieces ran on while it was written, so the model moved) against the checkpoint's own;
        not when this chief was superseded (raises), when it would serve an older step than was served, or when no
        data is left to check it on (its checkpoint, if its own, goes; deltas go on). Whether it started."""
        self.record.check_writer()
        if not self.may_serve(source.number):
            self.dropped(source.path)
            return False
        reference = self.reference(piece)
        if reference is None:  # the piece's file is gone: the next version takes its reference inputs from a later one
            self.dropped(source.path)
            return False
        kill_points.reached("version_checkpoint")
        self._start(source.path, source.name, source.number, source.ledger, *reference,
                    against_checkpoint=against_checkpoint)
        return True

    def _start(self, checkpoint: str, name: str, number: int, snapshot: Ledger, saved: dict, trained, *,
               against_checkpoint: bool) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        reference = self.scratch / f"reference-{number}.npz"
        np.savez(reference, predictions=trained, **saved)
        version = self.serving.next_number()
        from_step = self.deltas.from_step(checkpoint) if self.deltas is not None else None
        through = trained_through(snapshot, version=version, written=0.0, checkpoint=name, step=number)
        request = ExportRequest(kind=VERSION, checkpoint=checkpoint, destination=str(self.serving.directory),
                                options=dataclasses.asdict(self.run.options), reference=str(reference),
                                task=self.task, version=version, keep=self.serving.keep,
                                against_checkpoint=against_checkpoint, delta_from_step=from_step,
                                trained_through=through if from_step is None else {**through,
                                                                                   "delta_from_step": from_step})
        self.exporting = _Exporting(ExportProcess(request, self.scratch, self.forks), snapshot, name, reference,
                                    self.pieces_done())
        self.last_version = time.monotonic()

    def poll(self) -> None:
        """Records the version being written once it is done (a failed one is said, and the next one tries again);
        writes deltas when due."""
        if self.exporting is not None:
            result = self.exporting.process.poll()
            if result is not None:
                self._done(result)
        if self.deltas is not None:
            self.deltas.poll(self.ledger)
            if self.deltas.chain is not None:
                self.record.served(self.deltas.chain.through)

    def finish(self, timeout_s: float | None = None) -> None:
        """Waits up to `timeout_s` for the version being written (one left unfinished is stopped)."""
        if self.exporting is None:
            return
        result = self.exporting.process.wait(timeout_s)
        if result is None:
            self.exporting.process.stop()
            self.exporting.reference.unlink(missing_ok=True)
            self.dropped(self.exporting.process.request.checkpoint)
            self.run.log.warning("version %d was not done in time: stopped (the next run publishes it)",
                                 self.exporting.process.request.version)
            self.exporting = None
            return
        self._done(result)

    def _done(self, result: ExportResult) -> None:
        exporting, self.exporting = self.exporting, None
        exporting.reference.unlink(missing_ok=True)
        name = exporting.checkpoint_name
        if result.fatal:  # the export check failed, or the checkpoint cannot be read: a retry would too
            raise UserError(Problem("serving version", exporting.process.request.version, result.error,
                                    "keep the checkpoints and logs and report it"))
        if result.error:
            self.run.log.error("serving version %d from %s not written (the next one tries again): %s",
                               exporting.process.request.version, name, result.error)
            self.dropped(exporting.process.request.checkpoint)
            return
        kill_points.reached("version_published")
        self.for_serving.published(exporting.process.request.checkpoint)
        self.record.served(exporting.process.request.trained_through["optimizer_step"])
        if self.deltas is not None:
            self.deltas.based_on(result.version, exporting.process.request.checkpoint,
                                 exporting.process.request.delta_from_step)
        served = self.ledger.serve(result.version, result.written,
                                   names={e.name for e in exporting.snapshot.files if e.complete})
        self.served_a_file = self.served_a_file or bool(served)
        freshness = duration(served[-1].freshness_s) if served else "-"
        self.run.log.info("serving | version %d | %s | %d file%s newly served | freshness %s | export check %.1e | "
                          "%.1f MB in %.1f s, %d pieces trained meanwhile, exporter peak %.0f MB, rows linked %.1f MB "
                          "| %s", result.version, name, len(served), "s" * (len(served) != 1), freshness,
                          result.largest, result.bytes / 1e6, result.seconds,
                          self.pieces_done() - exporting.pieces_before, result.peak_rss_mb, result.linked_bytes / 1e6,
                          result.path)
        summary = read_summary(self.run.files)
        if summary is not None:
            write_summary(self.run.files, dataclasses.replace(
                summary, optimizer_steps=int(self.model.optimizer.iterations.numpy()),
                follow={**freshness_summary(self.ledger), "kept": self.kept(evaluated=True)}))
