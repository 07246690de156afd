"""What the follow loop hands out: what the watcher found enters the ledger (online/follow/intake.py), pieces
not done go to free workers, and each finished piece is recorded done, with its examples, steps, skipped records
and metrics; a piece whose data failed (its file unreadable, or gone) comes back for its file alone; a piece stuck
on its worker goes to another as well (stragglers.py)."""

from __future__ import annotations

import collections
import itertools
import os
import time

from online.follow.errors import DataFailure
from online.follow.intake import Intake, size_text
from online.follow.ledger import LOST, QUARANTINED, Ledger
from online.follow.quarantine import check_bound
from online.follow.report import duration
from online.follow.stragglers import STUCK_FACTOR, Stragglers

RETRIES_PER_PIECE = 2  # a piece whose file reads with an error that is not a corrupt record is tried this often again


class Schedule:
    """The ledger's pieces handed to the PieceTrainer `trainer` and recorded as they finish; `intake` takes the
    FolderWatch `watch`'s looks into the ledger; `data` is the FollowedData, `report` the FollowReport; a piece is
    stuck past `straggler_after_s`."""

    def __init__(self, *, ledger: Ledger, trainer, data, report, watch, intake: Intake, straggler_after_s: float,
                 newest_first: bool = False):
        self.ledger, self.trainer, self.data, self.report, self.watch = ledger, trainer, data, report, watch
        self.intake, self.newest_first = intake, newest_first
        self.stragglers, self.given_twice = Stragglers(straggler_after_s, workers=trainer.workers), 0
        self.examples = sum(entry.examples for entry in ledger.files) + ledger.compacted.examples
        self.last_piece, self.pieces_by_worker, self.metrics = None, collections.Counter(), {}
        self.last_activity = time.monotonic()
        self.trained_since_save = self.trained_since_version = False
        self.failures: collections.Counter = collections.Counter()

    @property
    def running(self) -> bool:
        return bool(self.trainer.running)

    def take_looks(self) -> None:
        """The files the watcher found since the last beat enter the ledger (a resumed run's are known)."""
        for look in self.watch.looks():
            if self.intake.take(look, time.time()):
                self.last_activity = time.monotonic()
        self.watch.pending(sum(entry.untrained_bytes() for entry in self.ledger.files if not entry.complete))

    def hand_out(self) -> None:
        """Stuck pieces go to another worker as well; then pieces not done go to the trainer while it has room,
        oldest file first (or newest, for freshness); a file not there now waits for the next look to say whether it
        was renamed or removed. Pieces that finished meanwhile are recorded first: a finished piece is never stuck."""
        self.wait(0.0)
        self._give_stuck_again()
        busy = set(self.trainer.running)
        for key in itertools.islice(self._present(self.ledger.pending(busy, self.newest_first)), max(self.trainer.room,
                                                                                                        0)):
            piece = self.ledger.piece(key)
            if not self.trainer.hand_out(key, self.data.path(piece.name), piece.begin, piece.end):
                return  # another piece's data failed meanwhile: it comes back through `wait`
            if self.ledger.start(key, time.time()):
                self.report.started(self.ledger.by_seq[key[0]], time.time())
            size = self.ledger.by_seq[key[0]].size if piece.whole else piece.end - piece.begin
            self.stragglers.handed_out(key, size, whole=piece.whole, now=time.monotonic())

    def _give_stuck_again(self) -> None:
        now = time.monotonic()
        for key in self.stragglers.stuck(now):
            piece = self.ledger.piece(key)
            if piece is None or self.ledger.by_seq[key[0]].complete:  # its file is done with: nothing to give
                self.stragglers.out.pop(key, None)
                continue
            if not self.trainer.hand_out(key, self.data.path(piece.name), piece.begin, piece.end):
                return
            self.given_twice += 1
            self.report.log.info("%s: a piece (bytes %d-%s) still runs after %s, past its bound of %s "
                                 "(training.straggler_after_s, or %g times what its bytes took in earlier pieces): "
                                 "given to another worker as well; the first to finish counts", piece.name,
                                 piece.begin, "end" if piece.whole else piece.end,
                                 duration(now - self.stragglers.out[key].at), duration(self.stragglers.bound_s(key)),
                                 STUCK_FACTOR)

    def _present(self, keys):
        there: dict[int, bool] = {}
        for key in keys:
            if key[0] not in there:
                there[key[0]] = os.path.exists(self.data.path(self.ledger.by_seq[key[0]].name))
            if there[key[0]]:
                yield key

    def record(self, results) -> None:
        """Finished pieces are done in the ledger; a piece whose data failed ends its file (quarantined) or waits
        for the next look (its file gone) or is tried again."""
        for result in results:
            if isinstance(result, DataFailure):
                self.stragglers.out.pop(result.key, None)
                self._failed(result)
                continue
            self.stragglers.finished(result.key, result.worker, time.monotonic())
            piece, entry = self.ledger.piece(result.key), self.ledger.by_seq.get(result.key[0])
            went = entry is not None and entry.outcome == LOST and piece is not None
            if self.ledger.finish(result.key, result.examples, time.time(), steps=result.steps,
                                  skipped=result.skipped, bad_fraction=self.intake.max_bad_fraction):
                self.report.done(entry)
                if entry.note:
                    self.intake.quarantine.record(entry.name, entry.outcome, entry.note)
            elif went:
                self._trained_after_it_went(entry, result.examples)
            if result.skipped and piece is not None:
                self.intake.quarantine.record(piece.name, "skipped", f"{result.skipped} malformed record(s) in "
                                              f"bytes {piece.begin}..{piece.end}" if not piece.whole else
                                              f"{result.skipped} malformed record(s)", result.where)
            self.examples += result.examples
            self.pieces_by_worker[result.worker] += 1
            self.metrics = result.metrics
            self.trained_since_save = self.trained_since_version = True
            self.last_piece, self.last_activity = piece or self.last_piece, time.monotonic()
        check_bound(self.ledger, self.intake.max_bad_fraction, str(self.data.root))

    def _trained_after_it_went(self, entry, examples: int) -> None:
        if entry.outcome == LOST:
            self.report.log.info("%s: a piece that ran when the file went finished: its %d examples are trained (%s "
                                 "of the file not)", entry.name, examples, size_text(entry.lost_bytes))
        else:
            self.report.log.info("%s: its last pieces finished after it went: every piece is trained after all",
                                 entry.name)

    def _failed(self, failure: DataFailure) -> None:
        entry = self.ledger.by_seq.get(failure.key[0])
        if entry is None or entry.complete:
            return
        self.last_activity = time.monotonic()
        if failure.cancelled or not os.path.exists(self.data.path(entry.name)):
            return  # cancelled by another piece's failure, or its file gone: pending again (the look says which)
        self.failures[failure.key] += 1
        if failure.corrupt or self.failures[failure.key] > RETRIES_PER_PIECE:
            self.ledger.end(entry, QUARANTINED, failure.why, time.time())
            self.intake.quarantined(entry, failure.why)
        else:
            self.report.log.info("%s: a piece failed to read (%s); it is tried again", entry.name, failure.why)

    def wait(self, timeout_s: float) -> None:
        """Records the pieces that finish within `timeout_s` (at least one, if any runs)."""
        self.record(self.trainer.finished(timeout_s))

    def idle_for(self) -> float:
        """Seconds since a file last landed, changed, left or a piece finished; 0 while a file waits to be taken
        (every file waits at most unfinished_after_s)."""
        return 0.0 if self.intake.waiting else time.monotonic() - self.last_activity
