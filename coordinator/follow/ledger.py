"""Where a follow-mode run's data stands: each file landed (in landing order), its pieces, which are done, how many
examples each file trained, and when it first reached a serving version. Saved in every checkpoint (as JSON).

A piece is done once its closure returned; a file is done once all its pieces are. Pieces running when a
checkpoint is written are not done in it, so a run resumed from that checkpoint trains them again: nothing is
skipped, and at most what ran since the checkpoint is trained twice. Pure Python: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import statistics

from coordinator.follow.landing import Landed
from data.pieces import Piece

CHECKPOINT_NAME = "data_ledger"  # the object holding the ledger's JSON in every follow-mode checkpoint


@dataclasses.dataclass
class FileEntry:
    """One landed file: `pieces` as [begin, end] (emptied once the file is done), `done` their indices."""

    name: str
    size: int
    mtime: float
    landed: float
    pieces: list[list[int]]
    done: list[int] = dataclasses.field(default_factory=list)
    piece_count: int = 0
    examples: int = 0
    steps: int = 0
    started: float | None = None
    finished: float | None = None
    served_version: int | None = None
    served: float | None = None

    @property
    def complete(self) -> bool:
        return self.finished is not None

    @property
    def freshness_s(self) -> float | None:
        """Seconds from landing to the first serving version that trained on all of it."""
        return None if self.served is None else self.served - self.landed

    def through_byte(self) -> int:
        """The end of the run of done pieces from the file's start (pieces are contiguous; its size once done)."""
        done = set(self.done)
        return next((begin for index, (begin, _) in enumerate(self.pieces) if index not in done), self.size)


class Ledger:
    """The files of a follow-mode run in landing order; `(file index, piece index)` names a piece."""

    def __init__(self, files: list[FileEntry] | None = None):
        self.files = files or []

    def add(self, landed: Landed, pieces: list[Piece], now: float) -> FileEntry:
        entry = FileEntry(landed.name, landed.size, landed.mtime, landed.landed, [[p.begin, p.end] for p in pieces],
                          piece_count=len(pieces))
        self.files.append(entry)
        if not pieces:  # an empty file: nothing to train, done at once
            entry.started = entry.finished = now
        return entry

    def pending(self, busy: set[tuple[int, int]]) -> list[tuple[int, int]]:
        """Pieces neither done nor in `busy`, oldest file first, in file order."""
        return [(f, p) for f, entry in enumerate(self.files) if not entry.complete
                for p in range(len(entry.pieces)) if p not in entry.done and (f, p) not in busy]

    def piece(self, key: tuple[int, int]) -> Piece:
        entry = self.files[key[0]]
        begin, end = entry.pieces[key[1]]
        return Piece(entry.name, begin, end)

    def start(self, key: tuple[int, int], now: float) -> bool:
        """Notes a piece handed out; True when it is its file's first."""
        entry = self.files[key[0]]
        first = entry.started is None
        entry.started = now if first else entry.started
        return first

    def finish(self, key: tuple[int, int], examples: int, now: float, steps: int = 0) -> bool:
        """Marks a piece done with the examples and steps it trained; True when that completes its file."""
        entry = self.files[key[0]]
        if entry.complete or key[1] in entry.done:
            return False
        entry.done.append(key[1])
        entry.examples += examples
        entry.steps += steps
        if len(entry.done) == len(entry.pieces):
            entry.finished, entry.pieces, entry.done = now, [], []
            return True
        return False

    def taken(self) -> dict[str, tuple[int, float]]:
        """Size and modification time of every file in the ledger (a resumed run's watcher skips them)."""
        return {entry.name: (entry.size, entry.mtime) for entry in self.files}

    def serve(self, version: int, now: float, names: set[str]) -> list[FileEntry]:
        """Records that serving version `version` holds the files `names` (those done in its checkpoint);
        returns the files it is the first version to hold."""
        fresh = [entry for entry in self.files if entry.name in names and entry.served_version is None]
        for entry in fresh:
            entry.served_version, entry.served = version, now
        return fresh

    def served_from(self, trained_through: dict) -> None:
        """A resumed run learns which files an already written serving version holds (its trained_through.json)."""
        versions = {item["name"]: item for item in trained_through.get("files_done", [])}
        for entry in self.files:
            if entry.served_version is None and entry.name in versions:
                entry.served_version = trained_through["version"]
                entry.served = trained_through["written"]

    def behind(self, now: float) -> tuple[int, float]:
        """Files landed and not yet done, and how long ago the oldest of them landed (0 when caught up)."""
        waiting = [entry for entry in self.files if not entry.complete]
        return len(waiting), (now - min(entry.landed for entry in waiting)) if waiting else 0.0

    def done_count(self) -> int:
        return sum(entry.complete for entry in self.files)

    def to_json(self) -> str:
        return json.dumps([dataclasses.asdict(entry) for entry in self.files], separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Ledger":
        return cls([FileEntry(**raw) for raw in json.loads(text)] if text else [])


def trained_through(ledger: Ledger, *, version: int, written: float, checkpoint: str, step: int) -> dict:
    """What a serving version has trained on: each file done, and each file it stands inside (and where)."""
    return {"version": version, "written": written, "checkpoint": checkpoint, "optimizer_step": step,
            "files_done": [{"name": e.name, "examples": e.examples, "steps": e.steps, "landed": e.landed,
                            "done": e.finished} for e in ledger.files if e.complete],
            "in_progress": [{"name": e.name, "pieces_done": len(e.done), "pieces": e.piece_count,
                             "through_byte": e.through_byte(), "size": e.size, "examples": e.examples,
                             "steps": e.steps}
                            for e in ledger.files if not e.complete and e.done],
            "not_started": [e.name for e in ledger.files if not e.complete and not e.done]}


def freshness_summary(ledger: Ledger) -> dict:
    """Per file and overall: examples and steps trained, and seconds from landing to the first serving version
    that trained on all of it (its freshness); in a healthy run the steps of the files add up to the optimizer's."""
    served = [entry.freshness_s for entry in ledger.files if entry.freshness_s is not None]
    freshness = {"last": round(served[-1], 1), "median": round(statistics.median(served), 1),
                 "max": round(max(served), 1)} if served else {}
    return {"files_done": ledger.done_count(), "files": len(ledger.files), "freshness_s": freshness,
            "examples": sum(entry.examples for entry in ledger.files),
            "steps": sum(entry.steps for entry in ledger.files),
            "per_file": [{"name": e.name, "examples": e.examples, "steps": e.steps, "landed": e.landed,
                          "started": e.started, "done": e.finished, "served_version": e.served_version,
                          "freshness_s": None if e.freshness_s is None else round(e.freshness_s, 1)}
                         for e in ledger.files]}
