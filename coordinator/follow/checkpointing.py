"""What the follow loop checkpoints: the model, both optimizers and the ledger as it stands, named by the optimizer
step (`ckpt-0-<step>`), every `checkpoint_every_s` and before each serving version."""

from __future__ import annotations

import time

from coordinator.checkpoints import Position
from coordinator.follow.ledger import Ledger


class FollowCheckpoints:
    """Writes the run's checkpoints (an EpochCheckpoints `checkpoints` saving `state`, the ledger's JSON variable);
    `resumed_number` is the step the restored checkpoint is named by (0 for a new run)."""

    def __init__(self, *, checkpoints, state, model, ledger: Ledger, every_s: float, resumed_number: int, log):
        self.checkpoints, self.state, self.model, self.ledger, self.every_s = checkpoints, state, model, ledger, every_s
        self.log = log
        self.saved_json, self.saved_number = ledger.to_json(), resumed_number
        self.last_save = time.monotonic()

    @property
    def name(self) -> str:
        """The newest checkpoint's name."""
        return Position(0, self.saved_number).name

    def due(self) -> bool:
        return self.every_s > 0 and time.monotonic() - self.last_save >= self.every_s

    def latest_path(self) -> str | None:
        return self.checkpoints.latest_path()

    def saved_ledger(self) -> Ledger:
        """The ledger as the newest checkpoint holds it."""
        return Ledger.from_json(self.saved_json)

    def save(self) -> str:
        """A checkpoint of the model and the ledger as they stand now (a piece still running is not done in it)."""
        started, step = time.monotonic(), int(self.model.optimizer.iterations.numpy())
        self.saved_number = max(step, self.saved_number + 1)
        self.saved_json = self.ledger.to_json()
        self.state.assign(self.saved_json)
        path = self.checkpoints.save(Position(0, self.saved_number))
        self.last_save = time.monotonic()
        waiting, _ = self.ledger.behind(time.time())
        self.log.info("checkpoint %s (optimizer step %d): %d files done, %d not yet; written in %.1f s", self.name,
                      step, self.ledger.done_count(), waiting, time.monotonic() - started)
        return path
