"""What the follow loop checkpoints: the model, both optimizers and the ledger as it stands, named by the optimizer
step (`ckpt-0-<step>`), every `checkpoint_every_s` and when a run ends, with the running pieces settled (a resume
reads these; with `serving_checkpoint` settled, every serving version is written from one of them); and by default,
for each serving version, on a thread while the workers train on, a checkpoint of its own
(`start_for_version`: without deltas, the tables' rows without their optimizer slots) in
output/checkpoints/for-serving/, which no resume reads (for_serving.py). After each settled checkpoint,
safe_to_delete.json lists the files done in it (run_record.py)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Collection

from models.checkpoints import Position
from online.follow import kill_points
from online.follow.for_serving import ForServing
from online.follow.ledger import Ledger
from online.follow.run_record import RunRecord


class FollowCheckpoints:
    """Writes the run's checkpoints (an EpochCheckpoints `checkpoints` saving `state`, the ledger's JSON variable);
    `resumed_number` is the step the restored checkpoint is named by (0 for a new run)."""

    def __init__(self, *, checkpoints, state, model, ledger: Ledger, every_s: float, resumed_number: int, log,
                 record: RunRecord):
        self.checkpoints, self.state, self.model, self.ledger, self.every_s = checkpoints, state, model, ledger, every_s
        self.log, self.record = log, record
        self.saved_json, self.saved_number = ledger.to_json(), resumed_number
        self.last_save = time.monotonic()
        self.save_seconds = 0.0  # what the newest settled checkpoint took to write (a stop skips one that won't fit)
        self.for_serving = ForServing(checkpoints.directory)
        self.version_number = resumed_number  # the newest checkpoint for a version is named by it
        self._beside: _Beside | None = None

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

    def settled(self, path: str | None = None) -> ForVersion:
        """The newest settled checkpoint as a version's source (at `path`, when it was just written there)."""
        return ForVersion(path or self.latest_path(), self.name, self.saved_number, self.saved_ledger())

    def save(self, *, reading: Collection[str] = ()) -> str:
        """A checkpoint of the model and the ledger as they stand now (a piece still running is not done in it);
        older ones are pruned, but not those in `reading` (a version is being written from them)."""
        begun = self._begin()
        self.record.check_writer()
        path = self.checkpoints.save(begun.position, reading=reading)
        self._end(begun)
        kill_points.reached("settled_checkpoint")
        self.record.write_safe_to_delete(self.saved_ledger(), self.name, begun.step, path)
        return path

    @property
    def writing(self) -> bool:
        """Whether a checkpoint for a serving version is being written beside training."""
        return self._beside is not None

    def start_for_version(self, *, table_slots: bool) -> str:
        """Starts writing, on a thread while pieces run on, the checkpoint of the next serving version: of the
        ledger as it stands now (the pieces running are not done in it, though some of their steps may be in its
        model, as a straggler's), into for-serving/, where no resume looks: the run's own checkpoints stay settled,
        their model and ledger in agreement. Without `table_slots`, the tables' rows without their optimizer slots
        (all a version needs: half the bytes with Adagrad). Returns its name."""
        step = int(self.model.optimizer.iterations.numpy())
        self.version_number = max(step, self.version_number + 1, self.saved_number + 1)
        position = Position(0, self.version_number)
        begun = _Begun(time.monotonic(), step, position, self.ledger.done_count(), self.ledger.behind(time.time())[0])
        snapshot = self.ledger.to_json()
        prefix = self.for_serving.prefix(position.name)
        self._beside = _Beside(lambda: self.checkpoints.write_aside(prefix, table_slots=table_slots), begun,
                              snapshot)
        return self.for_serving.name(position.name)

    def written_for_version(self, wait: bool = False) -> ForVersion | None:
        """The checkpoint for a serving version once it is written (None until then, or with none being written);
        with `wait`, waits for it. Its error, if it failed, is raised here."""
        if self._beside is None or not self._beside.done(wait):
            return None
        beside, self._beside = self._beside, None
        if beside.error is not None:
            raise beside.error
        begun = beside.begun
        self.log.info("checkpoint %s (optimizer step %d) for a serving version: %d files done, %d not yet; written "
                      "in %.1f s beside training", self.for_serving.name(begun.position.name), begun.step, begun.done,
                      begun.waiting, time.monotonic() - begun.started)
        return ForVersion(beside.path, self.for_serving.name(begun.position.name), begun.step,
                          Ledger.from_json(beside.snapshot))

    def _begin(self) -> _Begun:
        step = int(self.model.optimizer.iterations.numpy())
        self.saved_number = max(step, self.saved_number + 1)
        self.saved_json = self.ledger.to_json()
        self.state.assign(self.saved_json)
        return _Begun(time.monotonic(), step, Position(0, self.saved_number), self.ledger.done_count(),
                      self.ledger.behind(time.time())[0])

    def _end(self, begun: _Begun) -> None:
        self.last_save = time.monotonic()
        self.save_seconds = self.last_save - begun.started
        self.log.info("checkpoint %s (optimizer step %d): %d files done, %d not yet; written in %.1f s",
                      begun.position.name, begun.step, begun.done, begun.waiting, self.last_save - begun.started)


@dataclasses.dataclass(frozen=True)
class ForVersion:
    """A checkpoint a serving version is written from (one written for it, or a settled one): its path, its name
    (relative to output/checkpoints), the step it began at, the ledger as it stood then."""

    path: str
    name: str
    number: int
    ledger: Ledger


@dataclasses.dataclass(frozen=True)
class _Begun:
    """A checkpoint started: when, at which optimizer step, its position, and the files done and not yet in it."""

    started: float
    step: int
    position: Position
    done: int
    waiting: int


class _Beside:
    """A checkpoint written on a thread: `write()`'s path, or its error, once done."""

    def __init__(self, write, begun: _Begun, snapshot: str):
        self.begun, self.snapshot = begun, snapshot
        self.path: str | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._write, args=(write,), name="checkpoint", daemon=True)
        self.thread.start()

    def _write(self, write) -> None:
        try:
            self.path = write()
        except BaseException as error:  # noqa: BLE001 - raised on the loop's thread by written_beside
            self.error = error

    def done(self, wait: bool) -> bool:
        if wait:
            self.thread.join()
        return not self.thread.is_alive()
