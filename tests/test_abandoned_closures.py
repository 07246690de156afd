"""A piece given twice: its other closure, abandoned once one finished, is counted when it ends (its steps trained
again, in full when TensorFlow queued it once more after its worker was lost), and one that fails for its data is
that piece's failure, so the closures TensorFlow cancels for it come back to be handed out again instead of
stopping the chief (pure logic: futures stand for the closures)."""

from __future__ import annotations

import concurrent.futures

import tensorflow as tf

from online.follow.errors import DataFailure
from online.follow.handout import PieceTrainer

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
