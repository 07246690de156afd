"""Where a followed run's data stands (pure logic): pieces handed out and done, resume, what a version trained on."""

from __future__ import annotations

from online.follow.ledger import Ledger
from online.follow.served import freshness_summary, trained_through
from online.follow.landing import Landed
from data.pieces import WHOLE, Piece
from evaluator.progressive import unseen_pieces


def ledger_of_two() -> Ledger:
    ledger = Ledger()
    ledger.add(Landed("day_0", 300, 1.0, 100.0), [Piece("day_0", 0, 100), Piece("day_0", 100, 200),
                                                  Piece("day_0", 200, 300)], now=101.0)
    ledger.add(Landed("day_1.gz", 50, 2.0, 110.0), [Piece("day_1.gz", 0, WHOLE)], now=111.0)
    return ledger


def test_pieces_are_handed_out_in_order_and_a_file_is_done_with_its_last_piece():
    ledger = ledger_of_two()
    assert list(ledger.pending(busy={(0, 0)})) == [(0, 1), (0, 2), (1, 0)]
    assert ledger.start((0, 1), now=120.0) and not ledger.start((0, 2), now=121.0)
    assert not ledger.finish((0, 2), 40, now=122.0)
    assert ledger.files[0].through_byte() == 0  # the first piece is not done: nothing from the start yet
    assert not ledger.finish((0, 0), 30, now=123.0) and ledger.files[0].through_byte() == 100
    assert not ledger.finish((0, 0), 30, now=124.0)  # a piece reported twice counts once
    assert ledger.finish((0, 1), 35, now=125.0)
    assert ledger.files[0].examples == 105 and ledger.files[0].complete and list(ledger.pending(set())) == [(1, 0)]
    assert ledger.behind(now=130.0) == (1, 20.0) and ledger.done_count() == 1


def test_a_resumed_ledger_redoes_exactly_the_pieces_not_done_in_its_checkpoint():
    ledger = ledger_of_two()
    ledger.finish((0, 1), 35, now=120.0)
    resumed = Ledger.from_json(ledger.to_json())
    assert list(resumed.pending(set())) == [(0, 0), (0, 2), (1, 0)]
    assert {name: i.version for name, i in resumed.known().items()} == {"day_0": (300, 1.0), "day_1.gz": (50, 2.0)}
    assert Ledger.from_json("").files == []


def test_a_version_records_what_it_trained_on_and_the_first_version_of_each_file_gives_its_freshness():
    ledger = ledger_of_two()
    ledger.finish((1, 0), 10, now=120.0)
    ledger.finish((0, 0), 30, now=121.0)
    record = trained_through(ledger, version=1, written=130.0, checkpoint="ckpt-0-9", step=9)
    assert [f["name"] for f in record["files_done"]] == ["day_1.gz"]
    assert record["in_progress"] == [{"name": "day_0", "pieces_done": 1, "pieces": 3, "through_byte": 100,
                                      "size": 300, "examples": 30, "steps": 0}]
    assert [e.name for e in ledger.serve(1, 130.0, names={"day_1.gz"})] == ["day_1.gz"]
    for key in ((0, 1), (0, 2)):
        ledger.finish(key, 30, now=140.0)
    assert [e.name for e in ledger.serve(2, 150.0, names={"day_0", "day_1.gz"})] == ["day_0"]
    summary = freshness_summary(ledger)
    assert summary["freshness_s"] == {"last": 20.0, "median": 35.0, "max": 50.0}  # last: the newest file served
    assert [(f["served_version"], f["freshness_s"]) for f in summary["per_file"]] == [(2, 50.0), (1, 20.0)]


def test_a_resumed_run_learns_what_the_newest_version_holds():
    ledger = ledger_of_two()
    ledger.finish((1, 0), 10, now=120.0)
    ledger.served_from({"version": 4, "written": 125.0, "files_done": [{"name": "day_1.gz"}]})
    assert (ledger.files[1].served_version, ledger.files[1].freshness_s) == (4, 15.0)


def test_a_checkpoint_is_scored_on_pieces_it_has_not_trained_newest_file_first():
    older = ledger_of_two()
    older.finish((0, 1), 35, now=120.0)
    newest = Ledger.from_json(older.to_json())
    newest.add(Landed("day_2", 10, 3.0, 130.0), [Piece("day_2", 0, 10)], now=131.0)
    assert unseen_pieces(older, newest) == [Piece("day_2", 0, WHOLE), Piece("day_1.gz", 0, WHOLE),
                                            Piece("day_0", 0, 100), Piece("day_0", 200, 300)]
    for key in ((0, 0), (0, 1), (0, 2), (1, 0), (2, 0)):
        newest.finish(key, 1, now=140.0)
    assert unseen_pieces(newest, newest) == []


def test_a_delta_is_wanted_for_a_file_that_finished_after_the_last_delta_began():
    """The last delta read the file's last steps, but the file finished after it began, so it did not list it: the
    next delta is due for it alone, not at the next file's steps (20 s later when files land every 20 s)."""
    from online.follow.deltas import Chain, FollowDeltas

    deltas = object.__new__(FollowDeltas)  # its choice alone: no model, no tables
    deltas.chain, deltas.source = None, type("Steps", (), {"step": staticmethod(lambda: 9)})()
    ledger = ledger_of_two()
    ledger.finish((1, 0), 10, now=120.0)
    assert not deltas._wanted(ledger)  # no version to build on yet
    deltas.chain = Chain(version=1, sequence=2, from_step=9, through=9, rows_from=5)  # no step since its read
    assert deltas._wanted(ledger)  # day_1.gz is trained and served by none
    ledger.serve(1, 130.0, names={"day_1.gz"})
    assert not deltas._wanted(ledger)  # nothing new: no empty deltas
    deltas.chain = Chain(version=1, sequence=3, from_step=9, through=8, rows_from=5)
    assert deltas._wanted(ledger)  # a step since


def test_deltas_start_on_their_clock_not_at_the_first_steps_after_a_quiet_spell():
    """Deltas every 10 s: steps beginning at 23 s after a quiet spell wait for the tick at 30 s (a delta at 23 s would
    miss the file those steps train, finishing a moment later, and that file would wait until 33 s)."""
    from online.follow.deltas import Chain, FollowDeltas

    deltas = object.__new__(FollowDeltas)  # its clock alone: no model, no tables
    steps = {"now": 9}
    deltas.source = type("Steps", (), {"step": staticmethod(lambda: steps["now"])})()
    deltas.chain = Chain(version=1, sequence=2, from_step=9, through=9, rows_from=5)
    deltas.every_s, deltas.origin, deltas.last_tick, deltas.wanted_at = 10.0, 0.0, 0.0, None
    ledger = ledger_of_two()
    assert not deltas._ticked(ledger, 15.0)  # nothing trained since the last delta
    steps["now"] = 12
    assert not deltas._ticked(ledger, 23.0)  # wanted from 23 s on: not at once
    assert not deltas._ticked(ledger, 29.9)
    assert deltas._ticked(ledger, 30.2)  # the clock's tick
    deltas.last_tick, deltas.wanted_at = 30.0, 30.0  # that delta started; steps went on while it was written
    assert not deltas._ticked(ledger, 39.0) and deltas._ticked(ledger, 41.5)  # the next tick, late if need be
    deltas.last_tick = deltas.wanted_at = float("-inf")  # a new version's chain: its first delta at once
    assert deltas._ticked(ledger, 42.0)
