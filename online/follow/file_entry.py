"""One landed file as the ledger holds it: its identity, its pieces and which are done, what became of it."""

from __future__ import annotations

import dataclasses

from data.pieces import WHOLE
from online.follow.identity import Identity

TRAINED, BAD, QUARANTINED, LOST = "", "bad", "quarantined", "lost"  # what became of a file


@dataclasses.dataclass
class FileEntry:
    """One landed file: `pieces` as [begin, end] (emptied once the file is done, but kept by a LOST file, whose pieces
    running when it went still count once they finish), `done` their indices; `outcome`
    TRAINED, BAD (trained, but more than max_bad_fraction of its records were malformed), QUARANTINED or LOST,
    with `note` saying why; `unfinished`: why its format said it was not whole when taken as it was; `changed`:
    times it was found changed in place after it was taken; `gone`: when its last name left the folder."""

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
    seq: int = -1
    dev: int | None = None
    ino: int | None = None
    head: str | None = None
    aliases: list[str] = dataclasses.field(default_factory=list)
    skipped: int = 0
    outcome: str = TRAINED
    note: str = ""
    unfinished: str = ""
    changed: int = 0
    lost_bytes: int = 0
    gone: float | None = None

    @property
    def complete(self) -> bool:
        return self.finished is not None

    @property
    def trained(self) -> bool:
        return self.complete and self.outcome in (TRAINED, BAD)

    @property
    def identity(self) -> Identity:
        return Identity(self.size, self.mtime, self.dev, self.ino, self.head)

    @property
    def freshness_s(self) -> float | None:
        """Seconds from landing to the first serving version that trained on all of it."""
        return None if self.served is None else self.served - self.landed

    def through_byte(self) -> int:
        """The end of the run of done pieces from the file's start (pieces are contiguous; its size once done)."""
        done = set(self.done)
        return next((begin for index, (begin, _) in enumerate(self.pieces) if index not in done), self.size)

    def untrained_bytes(self) -> int:
        """Bytes of the pieces not done (a whole-file piece counts the file's size)."""
        done = set(self.done)
        return sum((self.size if end == WHOLE else end) - begin
                   for index, (begin, end) in enumerate(self.pieces) if index not in done)
