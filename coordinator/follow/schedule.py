"""What the follow loop hands out: files that landed enter the ledger, their pieces go to free workers, and each
finished piece is recorded done, with its examples, steps and metrics; a piece stuck on its worker goes to
another as well (stragglers.py)."""

from __future__ import annotations

import collections
import itertools
import time

from coordinator.follow.errors import removed_before_trained
from coordinator.follow.ledger import Ledger
from coordinator.follow.report import duration
from coordinator.follow.stragglers import STUCK_FACTOR, Stragglers


class Schedule:
    """The ledger's pieces handed to the PieceTrainer `trainer` and recorded as they finish; `data` is the
    FollowedData, `report` the FollowReport, `watch` the FolderWatch; a piece is stuck past `straggler_after_s`."""

    def __init__(self, *, ledger: Ledger, trainer, data, report, watch, straggler_after_s: float):
        self.ledger, self.trainer, self.data, self.report, self.watch = ledger, trainer, data, report, watch
        self.stragglers, self.given_twice = Stragglers(straggler_after_s, workers=trainer.workers), 0
        self.known = {entry.name: (entry.size, entry.mtime) for entry in ledger.files}
        self.examples = sum(entry.examples for entry in ledger.files)
        self.last_piece, self.pieces_by_worker, self.metrics = None, collections.Counter(), {}
        self.last_activity = time.monotonic()
        self.trained_since_save = self.trained_since_version = False

    @property
    def running(self) -> bool:
        return bool(self.trainer.running)

    def take_looks(self) -> None:
        """The files the watcher found since the last beat enter the ledger (a resumed run's are known)."""
        now = time.time()
        for look in self.watch.looks():
            for landed in look.landed:
                if landed.name in self.known:  # a resumed run's file, already in the ledger
                    continue
                entry = self.ledger.add(landed, self.data.pieces(landed.name, landed.size), now)
                self.known[entry.name] = (entry.size, entry.mtime)
                self.report.landed(entry, now)
                self.last_activity = time.monotonic()
                if entry.complete:
                    self.report.done(entry)
            for name, why in look.incomplete.items():
                self.report.once(f"{name}\0{why}", "%s: not taken yet: %s", name, why)
                self.last_activity = time.monotonic()
            for name in look.changed:
                self.report.once(f"{name}\0changed", "%s: changed after it was taken; it is not trained again "
                                 "(new data needs a new file name)", name)

    def hand_out(self) -> None:
        """Stuck pieces go to another worker as well; then pieces not done go to the trainer while it has room,
        oldest file first. Pieces that finished meanwhile are recorded first: a finished piece is never stuck."""
        self.wait(0.0)
        self._give_stuck_again()
        room = self.trainer.room
        for key in itertools.islice(self.ledger.pending(set(self.trainer.running)), max(room, 0)):
            piece = self.ledger.piece(key)
            path = self.data.path(piece.name)
            removed_before_trained(path)
            if self.ledger.start(key, time.time()):
                self.report.started(self.ledger.files[key[0]], time.time())
            self.trainer.hand_out(key, path, piece.begin, piece.end)
            self.stragglers.handed_out(key, self.ledger.files[key[0]].size if piece.whole else piece.end - piece.begin,
                                       whole=piece.whole, now=time.monotonic())

    def _give_stuck_again(self) -> None:
        now = time.monotonic()
        for key in self.stragglers.stuck(now):
            piece = self.ledger.piece(key)
            self.trainer.hand_out(key, self.data.path(piece.name), piece.begin, piece.end)
            self.given_twice += 1
            self.report.log.info("%s: a piece (bytes %d-%s) still runs after %s, past its bound of %s "
                                 "(training.straggler_after_s, or %g times what its bytes took in earlier pieces): "
                                 "given to another worker as well; the first to finish counts", piece.name,
                                 piece.begin, "end" if piece.whole else piece.end,
                                 duration(now - self.stragglers.out[key].at), duration(self.stragglers.bound_s(key)),
                                 STUCK_FACTOR)

    def record(self, results) -> None:
        """Finished pieces are done in the ledger."""
        for result in results:
            piece = self.ledger.piece(result.key)
            self.stragglers.finished(result.key, result.worker, time.monotonic())
            if self.ledger.finish(result.key, result.examples, time.time(), steps=result.steps):
                self.report.done(self.ledger.files[result.key[0]])
            self.examples += result.examples
            self.pieces_by_worker[result.worker] += 1
            self.metrics = result.metrics
            self.trained_since_save = self.trained_since_version = True
            self.last_piece, self.last_activity = piece, time.monotonic()

    def wait(self, timeout_s: float) -> None:
        """Records the pieces that finish within `timeout_s` (at least one, if any runs)."""
        self.record(self.trainer.finished(timeout_s))

    def idle_for(self) -> float:
        """Seconds since a file last landed, waited to be whole, or a piece finished."""
        return time.monotonic() - self.last_activity
