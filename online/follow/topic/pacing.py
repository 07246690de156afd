"""Reading a topic pauses while what is not trained yet (the follow loop's count each beat, and the ranges cut
since) holds SPOOL_AHEAD_PIECES pieces, and resumes below half: a producer faster than training grows lag, not
the chief's memory or disk."""

from __future__ import annotations

from online.follow.intake import size_text

SPOOL_AHEAD_PIECES = 64  # ranges written but not yet trained, in pieces, before reading pauses


class Pacing:
    """Pauses and resumes a consumer's partitions; `lag` shows whether reading is paused, `log` says when it
    pauses."""

    def __init__(self, piece_bytes: int, lag, log, address):
        self.bound, self.lag, self.log, self.address = SPOOL_AHEAD_PIECES * piece_bytes, lag, log, address
        self.untrained = self.cut_since = 0  # bytes: as the loop last counted them, and cut since

    def pending(self, untrained_bytes: int) -> None:
        self.untrained, self.cut_since = untrained_bytes, 0

    def cut(self, size: int) -> None:
        self.cut_since += size

    def apply(self, consumer) -> None:
        ahead = self.untrained + self.cut_since
        if ahead >= self.bound and not self.lag.paused:
            consumer.pause(consumer.assignment())
            self.lag.paused = True
            self.log.info("%s: %s read and not yet trained: reading pauses until training catches up",
                          self.address, size_text(ahead))
        elif self.lag.paused and ahead < self.bound // 2:
            consumer.resume(consumer.assignment())
            self.lag.paused = False
