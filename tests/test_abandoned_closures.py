"""A piece given twice: its other closure, abandoned once one finished, is counted when it ends (its steps trained
again, in full when TensorFlow queued it once more after its worker was lost), and one that fails for its data is
that piece's failure, so the closures TensorFlow cancels for it come back to be handed out again instead of
stopping the chief; a run that finishes waits, for at most stop_when_idle_s, for such closures to end, so that its
last checkpoint holds their steps and its summary counts them (pure logic: futures stand for the closures)."""

from __future__ import annotations

import concurrent.futures
import threading
import types

import tensorflow as tf

from online.follow.errors import DataFailure
from online.follow.handout import PieceTrainer
from online.follow.loop import FollowLoop

CANCELLED = tf.errors.CancelledError(None, None, "The corresponding function is cancelled. Please reschedule.")


def _future(result=None, error=None) -> concurrent.futures.Future:
    future = concurrent.futures.Future()
    future.set_exception(error) if error is not None else future.set_result(result)
    return future


def _trainer(abandoned: list, running: dict) -> PieceTrainer:
    trainer = PieceTrainer.__new__(PieceTrainer)  # its ClusterCoordinator is not needed to sort results
    trainer.data_root, trainer.cancelling_until, trainer.steps_again = "/data", 0.0, 0
    trainer.abandoned, trainer.running = abandoned, running
    return trainer


def test_an_abandoned_closure_that_runs_to_its_end_counts_its_steps_as_trained_again():
    still = concurrent.futures.Future()
    trainer = _trainer([_future((800, 50, 1, {}, 0, [])), still], {})
    assert trainer.moving  # one still runs
    assert trainer.steps_again == 50 and trainer.abandoned == [still]
    still.set_result((800, 50, 0, {}, 0, []))  # queued again after its worker was lost: the whole piece once more
    assert not trainer.moving and trainer.steps_again == 100


def test_an_abandoned_closure_failing_for_its_data_does_not_stop_the_chief_through_the_closures_cancelled():
    gone = tf.errors.NotFoundError(None, None, "/data/day_3; No such file or directory")
    trainer = _trainer([_future(error=gone)], {(4, 0): [_future(error=CANCELLED)]})
    assert trainer.finished(0.0) == [DataFailure((4, 0), "cancelled", cancelled=True)]  # handed out again
    assert trainer.abandoned == [] and trainer.cancelling


def _finishing(trainer: PieceTrainer, stop_when_idle_s: float, beats: list, lines: list):
    """What FollowLoop._settle_abandoned reads of a follow loop."""
    log = types.SimpleNamespace(info=lambda text, *args: lines.append(text % args))
    run = types.SimpleNamespace(options=types.SimpleNamespace(stop_when_idle_s=stop_when_idle_s), log=log)
    parts = types.SimpleNamespace(run=run, report=types.SimpleNamespace(beat=beats.append))
    return types.SimpleNamespace(p=parts, schedule=types.SimpleNamespace(trainer=trainer))


def test_a_finishing_run_waits_for_an_abandoned_closure_so_its_summary_counts_the_steps():
    late = concurrent.futures.Future()
    trainer, beats, lines = _trainer([late], {}), [], []
    threading.Timer(1.5, late.set_result, args=((130, 5, 1, {}, 0, []),)).start()  # queued again, ends in 1.5 s
    FollowLoop._settle_abandoned(_finishing(trainer, 30, beats, lines))
    assert trainer.steps_again == 5 and trainer.abandoned == [] and lines == []
    assert beats  # the heartbeat goes on while it waits


def test_a_finishing_run_waits_no_longer_than_stop_when_idle_s_for_a_closure_on_a_frozen_worker():
    frozen = concurrent.futures.Future()
    trainer, beats, lines = _trainer([frozen], {}), [], []
    FollowLoop._settle_abandoned(_finishing(trainer, 2, beats, lines))
    assert trainer.steps_again == 0 and trainer.abandoned == [frozen]
    assert lines == ["finishing without waiting longer than 0:00:02 for 1 closure of pieces given twice, still "
                     "running on a slow worker: what they train is counted by nothing"], lines
