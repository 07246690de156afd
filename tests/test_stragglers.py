"""Which pieces out count as stuck and go to a second worker (pure logic): past straggler_after_s and four times
what their bytes took before, once a worker has surely taken them; each at most once."""

from __future__ import annotations

from online.follow.stragglers import STUCK_FACTOR, Stragglers


def test_a_piece_is_stuck_past_its_bound_once_a_later_piece_finished_and_only_once():
    out = Stragglers(20.0, workers=2)
    for index, key in enumerate([(0, 0), (1, 0), (2, 0), (3, 0)]):
        out.handed_out(key, 1000, whole=True, now=float(index))
    assert out.stuck(now=100.0) == []  # four out for two workers, none finished: some only wait in the queue
    out.finished((1, 0), worker=0, now=5.0)  # its worker's first piece: no pace (it also built the pipeline)
    assert out.stuck(now=15.0) == []  # (0, 0) was taken, but 15 s is within its bound
    assert out.stuck(now=21.0) == [(0, 0)]  # taken (a later piece finished) and 21 s out: to another worker
    assert out.stuck(now=500.0) == []  # once; (2, 0) and (3, 0) are later than every finished piece
    out.finished((0, 0), worker=0, now=501.0)  # the first of its two closures to finish
    assert (0, 0) not in out.out and list(out.pace[True]) == []  # a piece run twice sets no pace either


def test_a_big_file_gets_four_times_what_its_bytes_took_in_earlier_pieces_not_the_floor():
    out = Stragglers(20.0, workers=2)
    for index in range(3):
        out.handed_out((index, 0), 1_000, whole=True, now=0.0)  # worker 0 takes each once the one before is done
    out.finished((0, 0), worker=0, now=9.0)  # its first piece: no pace
    out.finished((1, 0), worker=0, now=11.0)  # timed from when its worker was free: 2 s, not 11
    out.finished((2, 0), worker=0, now=13.0)
    assert list(out.pace[True]) == [500.0, 500.0]
    out.handed_out((2, 0), 100_000, whole=True, now=10.0)  # 200 s at that pace
    out.handed_out((3, 0), 50, whole=False, now=10.0)  # a byte range: no pace of its kind yet, the floor alone
    assert out.bound_s((2, 0)) == STUCK_FACTOR * 200.0 and out.bound_s((3, 0)) == 20.0
    assert out.stuck(now=10.0 + 799.0) == [(3, 0)]  # two out, two workers: both run
    assert out.stuck(now=10.0 + 800.0) == [(2, 0)]


def test_pieces_out_no_more_than_the_workers_are_all_running():
    out = Stragglers(20.0, workers=2)
    out.handed_out((0, 0), 10, whole=False, now=0.0)
    out.handed_out((0, 1), 10, whole=False, now=0.0)
    assert sorted(out.stuck(now=20.0)) == [(0, 0), (0, 1)]  # nothing finished, but none can be waiting its turn
