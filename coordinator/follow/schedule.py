"""What the follow loop hands out: files that landed enter the ledger, their pieces go to free workers, and each
finished piece is recorded done, with its examples, steps and metrics."""

from __future__ import annotations

import collections
import itertools
import time

from coordinator.follow.errors import removed_before_trained
from coordinator.follow.ledger import Ledger


class Schedule:
    """The ledger's pieces handed to the PieceTrainer `trainer` and recorded as they finish; `data` is the
    FollowedData, `report` the FollowReport, `watch` the FolderWatch."""

    def __init__(self, *, ledger: Ledger, trainer, data, report, watch):
        self.ledger, self.trainer, self.data, self.report, self.watch = ledger, trainer, data, report, watch
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
        """Pieces not done go to the trainer while it has room, oldest file first."""
        room = self.trainer.room
        for key in itertools.islice(self.ledger.pending(set(self.trainer.running)), max(room, 0)):
            piece = self.ledger.piece(key)
            path = self.data.path(piece.name)
            removed_before_trained(path)
            if self.ledger.start(key, time.time()):
                self.report.started(self.ledger.files[key[0]], time.time())
            self.trainer.hand_out(key, path, piece.begin, piece.end)

    def record(self, results) -> None:
        """Finished pieces are done in the ledger."""
        for result in results:
            piece = self.ledger.piece(result.key)
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
