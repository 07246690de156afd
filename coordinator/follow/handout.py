"""Pieces of data handed to workers as they are free: one scheduled closure per piece, which builds that piece's
dataset on its worker and trains on all of it.

`ClusterCoordinator.schedule` queues closures and each worker takes the next when it is free, so a slow worker
takes fewer pieces; a closure whose worker fails is queued again and run by another (at-least-once: the steps
the lost worker had taken stay in the model). A piece stuck on a frozen or slow worker is scheduled once more
(a running closure cannot be moved): whichever closure finishes first is the piece's result, and the other runs
on, its steps in the model and its result ignored. One traced function serves every piece (the piece is its
argument), and a piece holds many steps, as building a dataset per closure has a cost. The closure returns the
examples and steps it trained, its worker's index and the training metrics; each is waited for on a daemon
thread, so the chief's loop never blocks on one piece and its exit never waits for one.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
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
        self.workers, self.ahead = workers, PIECES_AHEAD_PER_WORKER * workers
        self.running: dict[tuple[int, int], list[concurrent.futures.Future]] = {}  # two once given twice
        self.abandoned: list[concurrent.futures.Future] = []  # a piece's other closure, once one finished
        self._train = _piece_function(distribution, model, data, global_batch, seed)

    @property
    def moving(self) -> bool:
        """Whether a closure may still be changing the model: a piece running, or a finished piece's other one."""
        self.abandoned = [future for future in self.abandoned if not future.done()]
        return bool(self.running or self.abandoned)

    @property
    def room(self) -> int:
        """Pieces that may be handed out now."""
        return self.ahead - sum(len(closures) for closures in self.running.values())

    def hand_out(self, key: tuple[int, int], path: str, begin: int, end: int) -> None:
        """Schedules piece `key`; called again while it runs, the piece goes to another worker as well."""
        remote = self.coordinator.schedule(self._train, args=(tf.constant(path), tf.constant(begin, tf.int64),
                                                              tf.constant(end, tf.int64)))
        self.running.setdefault(key, []).append(_waited(remote))

    def finished(self, timeout_s: float) -> list[Trained]:
        """Pieces that finished, waiting up to `timeout_s` for the first; a piece's error (e.g. a malformed
        line) is raised here."""
        if not self.running:
            return []
        concurrent.futures.wait([future for closures in self.running.values() for future in closures],
                                timeout=timeout_s, return_when=concurrent.futures.FIRST_COMPLETED)
        done = {key: next(future for future in closures if future.done())
                for key, closures in self.running.items() if any(future.done() for future in closures)}
        errors = [future.exception() for future in done.values() if future.exception() is not None]
        if errors:  # the root cause first: a failed piece cancels the others, which then fail as cancelled
            raise min(errors, key=lambda error: isinstance(error, tf.errors.CancelledError))
        for key, future in done.items():  # a piece's other closure, if any, runs on: the first to finish counts
            self.abandoned += [other for other in self.running.pop(key) if other is not future]
        return [Trained(key, *(int(value) for value in future.result()[:3]),
                        {name: float(value) for name, value in future.result()[3].items()})
                for key, future in done.items()]

    def all_finished(self, timeout_s: float) -> list[Trained]:
        """Waits up to `timeout_s` for every running piece; returns those that finished (the rest keep running)."""
        deadline, results = time.monotonic() + timeout_s, []
        while True:
            results += self.finished(max(0.0, deadline - time.monotonic()))
            if not self.running or time.monotonic() >= deadline:
                return results


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
