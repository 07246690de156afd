"""Which pieces out are stuck and go to another worker as well: running past `straggler_after_s` and STUCK_FACTOR
times the time the run's finished pieces of their kind took for their bytes, once a worker has surely taken them
(a piece handed out after them has finished, or no more pieces are out than there are workers: none waits in the
queue).

A piece's time is measured from when its worker could take it: the later of its hand-out and that worker's
previous finish (the coordinator's queue is first in, first out, and a free worker takes the next piece); a
worker's first piece, which also builds its function and pipeline, sets no pace. Whole files (gzip, TFRecord) and
byte ranges of plain files are timed apart, as a gzip byte holds several of text. With nothing finished yet of a
kind, `straggler_after_s` alone is the bound. A piece goes to a second worker once; the first to finish is its
result. Pure Python: no TensorFlow.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics

STUCK_FACTOR = 4.0  # a piece is stuck past this many times what its bytes took in the pieces finished before it
SAMPLES = 32  # the newest finished pieces of each kind that set the pace


@dataclasses.dataclass
class _Out:
    order: int
    at: float
    size: int
    whole: bool
    given_twice: bool = False


class Stragglers:
    """The pieces out (`(file, piece)` keys), their pace, and which are stuck."""

    def __init__(self, after_s: float, *, workers: int):
        self.after_s, self.workers = after_s, workers
        self.out: dict[tuple[int, int], _Out] = {}
        self.handed = 0
        self.newest_finished = -1  # hand-out order of the latest-handed piece that finished
        self.pace: dict[bool, collections.deque] = {kind: collections.deque(maxlen=SAMPLES) for kind in (True, False)}
        self.worker_free_at: dict[int, float] = {}

    def handed_out(self, key: tuple[int, int], size: int, *, whole: bool, now: float) -> None:
        self.out[key] = _Out(self.handed, now, size, whole)
        self.handed += 1

    def finished(self, key: tuple[int, int], worker: int, now: float) -> None:
        """Piece `key` finished on `worker` (by either of its closures), which is free from `now`."""
        out = self.out.pop(key, None)
        free_at = self.worker_free_at.get(worker)
        self.worker_free_at[worker] = now
        if out is None:
            return
        self.newest_finished = max(self.newest_finished, out.order)
        took_s = now - max(out.at, free_at or 0.0)
        if free_at is not None and took_s > 0 and not out.given_twice:  # run twice: the second worker's time
            self.pace[out.whole].append(out.size / took_s)

    def bound_s(self, key: tuple[int, int]) -> float:
        """How long piece `key` may run before it counts as stuck."""
        out = self.out[key]
        pace = self.pace[out.whole]
        expected_s = out.size / statistics.median(pace) if pace else 0.0
        return max(self.after_s, STUCK_FACTOR * expected_s)

    def stuck(self, now: float) -> list[tuple[int, int]]:
        """Pieces that are stuck now and were not given to a second worker yet (each is returned once)."""
        queue_empty = len(self.out) <= self.workers
        found = [key for key, out in self.out.items() if not out.given_twice
                 and (queue_empty or out.order < self.newest_finished) and now - out.at >= self.bound_s(key)]
        for key in found:
            self.out[key].given_twice = True
        return found
