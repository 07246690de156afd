"""Malformed records skipped (`training.skip_corrupt`) counted in the process that reads them, for the run summary.

A fixed run's pipelines read on the workers (under parameter_server), where a skipped record is said in that
worker's log; each skip is also added to a count kept by the reading process, through a Python function every
process that runs pipelines registers under one fixed token (as data/line_ranges.py's reader). At the end of
training the chief takes each worker's count (`taken_on_workers`) and the summary says the sum.
"""

from __future__ import annotations

import threading

import numpy as np

COUNT = "pscluster_count_skipped"  # adds to this process's count
TAKE = "pscluster_take_skipped"  # returns this process's count and starts it again from 0
_REGISTERED: list = []
_lock = threading.Lock()
_count = [0]


def _add(skipped) -> np.int64:
    with _lock:
        _count[0] += int(skipped)
    return np.int64(0)


def _take() -> np.int64:
    with _lock:
        taken, _count[0] = _count[0], 0
    return np.int64(taken)


def register() -> None:
    """Makes COUNT and TAKE callable by pipelines this process runs (roles.server, the chief, the evaluator)."""
    import tensorflow as tf
    from tensorflow.python.ops import script_ops

    for token, function in ((COUNT, _add), (TAKE, _take)):
        if script_ops._py_funcs.get(token) is None:  # noqa: SLF001 - no public way to name a py_function
            _REGISTERED.append(script_ops.EagerFunc(function, [tf.int64], False))
            script_ops._py_funcs._funcs[token] = _REGISTERED[-1]  # noqa: SLF001 - weak values: _REGISTERED keeps it


def counted(skipped):
    """In-graph: adds `skipped` (an int64 scalar) to the count of the process that runs it; returns the op."""
    import tensorflow as tf

    register()
    return tf.raw_ops.EagerPyFunc(input=[tf.cast(skipped, tf.int64)], token=COUNT, Tout=[tf.int64])


def taken_here() -> int:
    """This process's count, started again from 0."""
    return int(_take())


def taken_on_workers(model) -> int | None:
    """Under parameter_server, the sum of every worker's count (each started again from 0), read by one small
    function run on each worker; None when the model trains in this process."""
    import tensorflow as tf

    coordinator = getattr(model, "_cluster_coordinator", None)
    if coordinator is None:
        return None
    take = tf.function(lambda: tf.raw_ops.EagerPyFunc(input=[], token=TAKE, Tout=[tf.int64])[0])
    per_worker = coordinator._create_per_worker_resources(take)  # noqa: SLF001 - no public way to run on each worker
    return sum(int(value.fetch()) for value in per_worker._values)  # noqa: SLF001
