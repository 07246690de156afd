"""Pieces of data handed to workers as they are free: one scheduled closure per piece, which builds that piece's
dataset on its worker and trains on all of it.

`ClusterCoordinator.schedule` queues closures and each worker takes the next when it is free, so a slow worker
takes fewer pieces; a closure whose worker fails is queued again and run by another (at-least-once: the steps
the lost worker had taken stay in the model). One traced function serves every piece (the piece is its
argument), and a piece holds many steps, as building a dataset per closure has a cost. The closure returns the
examples and steps it trained, its worker's index and the training metrics; each is waited for on a daemon
thread, so the chief's loop never blocks on one piece and its exit never waits for one.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import NamedTuple

import tensorflow as tf

from data import contract
from data.source import SHUFFLE_BUFFER

PIECES_AHEAD_PER_WORKER = 2  # queued or running per worker: a worker that finishes one finds the next waiting


class Trained(NamedTuple):
    """One piece's result: `key` as handed out, examples and steps trained, the worker that ran it last, and the
    model's training metrics as that worker saw them after its last step (as Keras fit reports them)."""

    key: tuple[int, int]
    examples: int
    steps: int
    worker: int
    metrics: dict


class PieceTrainer:
    """Schedules one closure per piece under ParameterServerStrategy and reports pieces as they finish."""

    def __init__(self, distribution, model, data, *, global_batch: int, seed: int, workers: int):
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(distribution)
        self.ahead = PIECES_AHEAD_PER_WORKER * workers
        self.running: dict[tuple[int, int], concurrent.futures.Future] = {}
        self._train = _piece_function(distribution, model, data, global_batch, seed)

    @property
    def room(self) -> int:
        """Pieces that may be handed out now."""
        return self.ahead - len(self.running)

    def hand_out(self, key: tuple[int, int], path: str, begin: int, end: int) -> None:
        remote = self.coordinator.schedule(self._train, args=(tf.constant(path), tf.constant(begin, tf.int64),
                                                              tf.constant(end, tf.int64)))
        self.running[key] = _waited(remote)

    def finished(self, timeout_s: float) -> list[Trained]:
        """Pieces that finished, waiting up to `timeout_s` for the first; a piece's error (e.g. a malformed
        line) is raised here."""
        if not self.running:
            return []
        concurrent.futures.wait(self.running.values(), timeout=timeout_s,
                                return_when=concurrent.futures.FIRST_COMPLETED)
        done = {key: self.running.pop(key) for key, future in list(self.running.items()) if future.done()}
        errors = [future.exception() for future in done.values() if future.exception() is not None]
        if errors:  # the root cause first: a failed piece cancels the others, which then fail as cancelled
            raise min(errors, key=lambda error: isinstance(error, tf.errors.CancelledError))
        return [Trained(key, *(int(value) for value in future.result()[:3]),
                        {name: float(value) for name, value in future.result()[3].items()})
                for key, future in done.items()]

    def all_finished(self, timeout_s: float) -> list[Trained]:
        """Waits up to `timeout_s` for every running piece; returns those that finished (the rest keep running)."""
        concurrent.futures.wait(self.running.values(), timeout=timeout_s)
        return self.finished(0.0)


def _waited(remote) -> concurrent.futures.Future:
    """A future of `remote`'s value, fetched on a daemon thread: nothing at exit waits for a piece."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def fetch() -> None:
        try:
            future.set_result(remote.fetch())
        except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(error)

    threading.Thread(target=fetch, name="piece-waiter", daemon=True).start()
    return future


def _piece_function(distribution, model, data, global_batch: int, seed: int):
    """The traced closure: a piece's examples, shuffled within the piece, in global batches (the last may be
    smaller: every example trains), each one step of the model's own train_step (both optimizers of a
    recommender). The steps run in a while loop over an iterator, not in a loop over the dataset: AutoGraph would
    make that a dataset reduction, and a step run inside tf.data's function runtime cannot reach a dynamic table's
    index (an anonymous resource on the ps: "Resource Anonymous/... does not exist")."""

    @tf.function(input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64),
                                  tf.TensorSpec([], tf.int64)])
    def train_piece(path, begin, end):
        batches = contract.batch(data.examples(path, begin, end).shuffle(SHUFFLE_BUFFER, seed=seed), global_batch)
        iterator = iter(batches.prefetch(2))
        examples, steps = tf.constant(0, tf.int64), tf.constant(0, tf.int64)
        batch = iterator.get_next_as_optional()
        while batch.has_value():
            features, labels = batch.get_value()
            distribution.run(model.train_step, args=((features, labels),))
            examples += tf.shape(labels, out_type=tf.int64)[0]
            steps += 1
            batch = iterator.get_next_as_optional()
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        metrics = {metric.name: metric.result() for metric in model.metrics}  # read on the worker, as fit does
        return examples, steps, tf.cast(worker, tf.int64), metrics

    return train_piece
