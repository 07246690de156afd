"""Pieces of data handed to workers as they are free: one scheduled closure per piece, which builds that piece's
dataset on its worker and trains on all of it.

`ClusterCoordinator.schedule` queues closures and each worker takes the next when it is free, so a slow worker
takes fewer pieces; a closure whose worker fails is queued again and run by another (at-least-once: the steps
the lost worker had taken stay in the model). A piece stuck on a frozen or slow worker is scheduled once more
(a running closure cannot be moved): whichever closure finishes first is the piece's result, and the other runs
on, its steps in the model and its result ignored. One traced function serves every piece (the piece is its
argument), and a piece holds many steps, as building a dataset per closure has a cost. The closure returns the
examples and steps it trained, its worker's index, the training metrics, and how many malformed records it
skipped and where the first of them are; each is waited for on a daemon thread, so the chief's loop never blocks
on one piece and its exit never waits for one. A piece that fails for its data (online/follow/errors.py)
comes back as a DataFailure of that piece alone, and the closures TensorFlow cancels for it (for a while after,
whatever their wording) come back cancelled and are handed out again; any other failure (a lost task) is raised.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute.coordinator import coordinator_context

from online.follow.errors import is_cancelled, is_data_error, piece_failure
from online.follow.quarantine import POSITIONS_PER_PIECE
from data import contract
from data.source import SHUFFLE_BUFFER

PIECES_AHEAD_PER_WORKER = 2  # queued or running per worker: a worker that finishes one finds the next waiting
CANCELLING_S = 60.0  # after a piece's data failed, TensorFlow's cancelling of the other closures comes back this long


class Trained(NamedTuple):
    """One piece's result: `key` as handed out, examples and steps trained, the worker that ran it last, the
    model's training metrics as that worker saw them after its last step (as Keras fit reports them), the
    malformed records it skipped and the positions of the first of them (data/followed.py says what a position
    is)."""

    key: tuple[int, int]
    examples: int
    steps: int
    worker: int
    metrics: dict
    skipped: int = 0
    where: tuple = ()


class PieceTrainer:
    """Schedules one closure per piece under ParameterServerStrategy and reports pieces as they finish."""

    def __init__(self, distribution, model, data, *, global_batch: int, seed: int, workers: int):
        self.data_root = str(data.root)
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(distribution)
        self.workers, self.ahead = workers, PIECES_AHEAD_PER_WORKER * workers
        self.running: dict[tuple[int, int], list[concurrent.futures.Future]] = {}  # two once given twice
        self.abandoned: list[concurrent.futures.Future] = []  # a piece's other closure, once one finished
        self.steps_again = 0  # steps of abandoned closures that ran to their end (in the model, counted by no file)
        self.cancelling_until = 0.0  # monotonic: CancelledErrors before then are a data failure's cancel
        self._train = _piece_function(distribution, model, data, global_batch, seed, workers)
        self._train.get_concrete_function()  # traced now: the model's metrics exist before the first piece runs
        _trace_as_scheduled(distribution, self._train)  # and as the hand-out runs it
        data.trace_readers()  # and the watcher thread's check of a landing file: it never traces

    @property
    def moving(self) -> bool:
        """Whether a closure may still be changing the model: a piece running, or a finished piece's other one."""
        self._settle_abandoned()
        return bool(self.running or self.abandoned)

    def _settle_abandoned(self) -> None:
        """Abandoned closures that ended: the steps of one that ran to its end are counted (`steps_again`; run in
        full again when TensorFlow queued it once more after its worker was lost), and one that failed for its data
        is taken as such a failure: TensorFlow then cancels the running closures, which come back cancelled and are
        handed out again, not raised as a lost task."""
        running = []
        for future in self.abandoned:
            if not future.done():
                running.append(future)
            elif future.exception() is None:
                self.steps_again += int(future.result()[1])
            elif is_data_error(future.exception(), self.data_root):
                self._cancelled_by_data()
        self.abandoned = running

    def settle_abandoned(self, timeout_s: float) -> int:
        """Waits up to `timeout_s` for the other closures of pieces given twice to end (their steps counted in
        `steps_again`); returns how many still run (on a frozen or slow worker: their steps, if any, counted by
        nothing)."""
        concurrent.futures.wait(self.abandoned, timeout=timeout_s)
        self._settle_abandoned()
        return len(self.abandoned)

    @property
    def room(self) -> int:
        """Pieces that may be handed out now."""
        return self.ahead - sum(len(closures) for closures in self.running.values())

    def hand_out(self, key: tuple[int, int], path: str, begin: int, end: int) -> bool:
        """Schedules piece `key` (called again while it runs, the piece goes to another worker as well); False when
        it was not (another piece's data failed: TensorFlow then cancels what was queued, and those pieces come back
        cancelled)."""
        try:
            remote = self.coordinator.schedule(self._train, args=(tf.constant(path), tf.constant(begin, tf.int64),
                                                                  tf.constant(end, tf.int64)))
        except tf.errors.OpError as error:
            if is_data_error(error, self.data_root) or is_cancelled(error, self.cancelling):
                self._cancelled_by_data()  # TensorFlow now cancels every closure: the running ones fail cancelled
                return False
            raise
        self.running.setdefault(key, []).append(_waited(remote))
        return True

    def finished(self, timeout_s: float) -> list:
        """Pieces that finished, waiting up to `timeout_s` for the first: a Trained for each that trained, a
        DataFailure for each that failed for its data (or was cancelled by such a failure); any other error is
        raised (the root cause first: a failed piece cancels the others, which then fail as cancelled)."""
        self._settle_abandoned()
        if not self.running:
            return []
        concurrent.futures.wait([future for closures in self.running.values() for future in closures],
                                timeout=timeout_s, return_when=concurrent.futures.FIRST_COMPLETED)
        done = {key: next(future for future in closures if future.done())
                for key, closures in self.running.items() if any(future.done() for future in closures)}
        for key, future in done.items():  # a piece's other closure, if any, runs on: the first to finish counts
            self.abandoned += [other for other in self.running.pop(key) if other is not future]
        errors = {key: future.exception() for key, future in done.items()}
        if any(error is not None and is_data_error(error, self.data_root) for error in errors.values()):
            self._cancelled_by_data()  # before the others are told apart: one may be its cancel already
        results, raised = [], []
        for key, error in errors.items():
            if error is None:
                results.append(_trained(key, done[key].result()))
                continue
            failure = piece_failure(key, error, self.data_root, cancelling=self.cancelling)
            results.append(failure) if failure is not None else raised.append(error)
        if raised:
            raise min(raised, key=lambda error: isinstance(error, tf.errors.CancelledError))
        return results

    @property
    def cancelling(self) -> bool:
        """Whether TensorFlow may still be cancelling closures for a piece whose data failed."""
        return time.monotonic() < self.cancelling_until

    def _cancelled_by_data(self) -> None:
        """A piece's data failed (or a closure came back cancelled by such a failure): TensorFlow cancels the
        running closures at the next `schedule` (one cancelled closure's error starting another round), so
        CancelledErrors for a while after are that, not a lost task (TensorFlow's own rule: a lost task also fails
        with something other than a CancelledError)."""
        self.cancelling_until = time.monotonic() + CANCELLING_S

    def all_finished(self, timeout_s: float) -> list:
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


def _trained(key: tuple[int, int], result) -> Trained:
    examples, steps, worker, metrics, skipped, where = result
    return Trained(key, int(examples), int(steps), int(worker), {name: float(v) for name, v in metrics.items()},
                   int(skipped), tuple(sorted(int(position) for position in np.asarray(where))))


def _piece_function(distribution, model, data, global_batch: int, seed: int, workers: int):
    """The traced closure: a piece's examples, shuffled within the piece, in global batches (the last may be
    smaller: every example trains), each one step of the model's own train_step (both optimizers of a
    recommender) on the batch's well-formed examples; malformed records (flagged by the reader) are counted, the
    first POSITIONS_PER_PIECE positions kept, and a batch of none trains no step. The steps run in a while loop
    over an iterator, not in a loop over the dataset: AutoGraph would make that a dataset reduction, and a step
    run inside tf.data's function runtime cannot reach a dynamic table's index (an anonymous resource on the ps:
    "Resource Anonymous/... does not exist")."""
    worker_indexes = [tf.constant(index, tf.int64) for index in range(workers)]  # on the chief, made once

    @tf.function(input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64),
                                  tf.TensorSpec([], tf.int64)])
    def train_piece(path, begin, end):
        flagged = data.flagged_examples(path, begin, end).shuffle(SHUFFLE_BUFFER, seed=seed)
        iterator = iter(contract.batch(flagged, global_batch).prefetch(2))
        examples, steps, skipped = tf.constant(0, tf.int64), tf.constant(0, tf.int64), tf.constant(0, tf.int64)
        where = tf.zeros([0], tf.int64)
        batch = iterator.get_next_as_optional()
        while batch.has_value():
            tf.autograph.experimental.set_loop_options(shape_invariants=[(where, tf.TensorShape([None]))])
            features, labels, ok, positions = batch.get_value()
            good = tf.reduce_sum(tf.cast(ok, tf.int64))
            skipped += tf.size(ok, out_type=tf.int64) - good
            where = tf.concat([where, tf.boolean_mask(positions, tf.logical_not(ok))], 0)[:POSITIONS_PER_PIECE]
            for _ in tf.range(tf.minimum(good, 1)):  # a loop of one step, or none when every record was malformed
                distribution.run(model.train_step, args=((_kept(features, ok), _kept(labels, ok)),))
            examples += good
            steps += tf.minimum(good, 1)
            batch = iterator.get_next_as_optional()
        worker = _running_worker(worker_indexes)
        metrics = {metric.name: metric.result() for metric in model.metrics}  # read on the worker, as fit does
        return examples, steps, worker, metrics, skipped, where

    return train_piece


def _running_worker(worker_indexes):
    """The index of the worker a scheduled closure runs on, bound at each call to one of `worker_indexes` (tensors
    made on the chief). TensorFlow's experimental_get_current_worker_index makes its tensor on the worker at each
    call, a copy that waits for the worker while holding the GIL: a frozen worker given a closure would hold every
    thread of the chief (its loop, its checkpoints, its versions)."""

    def at_call():
        return worker_indexes[coordinator_context.get_current_dispatch_context().worker_index]

    return tf.compat.v1.get_default_graph().capture_call_time_value(at_call, tf.TensorSpec([], tf.int64))


def _trace_as_scheduled(distribution, function) -> None:
    """Traces `function` as ClusterCoordinator.schedule does (in the strategy's scope, marked as being scheduled),
    so the first piece finds it traced: a function traced mid-run is first registered on every task of the cluster,
    and a frozen worker would hold the hand-out."""
    extended = distribution.extended
    with distribution.scope():
        extended._being_scheduled = True  # what schedule sets while it traces (TensorFlow 2.21)
        try:
            function.get_concrete_function()
        finally:
            extended._being_scheduled = False


def _kept(structure, ok):
    """The batch's examples where `ok` (dense or ragged features alike)."""
    return tf.nest.map_structure(lambda one: tf.ragged.boolean_mask(one, ok) if isinstance(one, tf.RaggedTensor)
                                 else tf.boolean_mask(one, ok), structure)
