"""What a follow-mode run keeps for weeks stays the size of a constant (pure logic, no TensorFlow run): the report's
once-only lines, the stamp clocks' advances and the ledger's hand-out, driven through 100,000 beats and 10,000
files."""

from __future__ import annotations

from collections.abc import Iterator

from common.bounded import KEYS_KEPT, OnceKeys
from data.pieces import Piece
from online.follow.landing import Landed
from online.follow.ledger import Ledger
from online.publish.deltas import ADVANCES_KEPT, ClockAdvances

BEATS, FILES = 100_000, 10_000


def test_once_only_lines_keep_the_newest_keys_and_say_a_long_gone_one_at_most_once_more():
    said = OnceKeys()
    assert all(said.first(f"day_{n}\0not taken yet") for n in range(BEATS))
    assert len(said) == KEYS_KEPT
    assert not said.first(f"day_{BEATS - 1}\0not taken yet")  # a recent key: not said again
    assert said.first("day_0\0not taken yet") and not said.first("day_0\0not taken yet")  # pushed out: once more


def test_the_clocks_advances_keep_the_newest_and_an_older_step_gets_the_safe_watermark():
    advances = ClockAdvances()
    for beat in range(BEATS + ADVANCES_KEPT):
        advances.record(beat * 10, beat * 10 + 3)  # advanced to 10 k, the counter read 10 k + 3 once they were
    assert len(advances) == ADVANCES_KEPT
    newest = (BEATS + ADVANCES_KEPT - 1) * 10
    assert advances.watermark_before(newest + 4) == newest  # the newest advance the counter had passed
    assert advances.watermark_before(newest) == newest - 10
    assert advances.watermark_before(10) == 0  # older than every kept advance: a delta reads every stamped row


def test_a_beat_that_hands_out_a_few_pieces_does_not_list_a_backlog_of_thousands():
    ledger = Ledger()
    for number in range(FILES):
        ledger.add(Landed(f"day_{number}", 100, 1.0, 1.0), [Piece(f"day_{number}", 0, 50), Piece(f"day_{number}",
                                                                                               50, 100)], 1.0)
    pieces = ledger.pending(set())
    assert isinstance(pieces, Iterator)  # made as they are taken: a beat looks at the first files, not all 10,000
    assert [next(pieces), next(pieces), next(pieces)] == [(0, 0), (0, 1), (1, 0)]
    assert sum(1 for _ in ledger.pending(set())) == 2 * FILES
