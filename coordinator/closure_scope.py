"""A closure's end waits on nothing but its own worker, so one frozen worker cannot stand the whole run still.

TensorFlow's `ClusterCoordinator` runs each closure inside `context.executor_scope(worker.executor)`. That scope
keeps a Python `Executor` wrapping the thread's former executor, the context's default one, and that wrapper's
`__del__` waits for every pending op of it. Among them is the request that frees a remote tensor once nothing
holds it, whichever worker it lives on, with no deadline. So when a worker is stopped (SIGSTOP: its connection up,
no answer) while one of its values is dropped, the next closure to end on a live worker waited for ever, and so did
training (seen in CI, then reproduced by `tests/test_abandoned_closure_requeued.py`). The scope here sets and
restores the same executor, and frees its handle on the former one without that wait (`TFE_DeleteExecutor` does
not wait; only the Python wrapper did).
"""

from __future__ import annotations

import contextlib

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context


@contextlib.contextmanager
def executor_scope_without_waiting(executor):
    """`context.executor_scope`, without waiting at its end for the former executor's pending ops."""
    ctx = context.context()
    ctx.ensure_initialized()
    former = pywrap_tfe.TFE_ContextGetExecutorForThread(ctx._context_handle)  # a handle this scope owns
    try:
        pywrap_tfe.TFE_ContextSetExecutorForThread(ctx._context_handle, executor.handle())
        yield
    finally:
        pywrap_tfe.TFE_ContextSetExecutorForThread(ctx._context_handle, former)
        pywrap_tfe.TFE_DeleteExecutor(former)


def closures_end_without_waiting_on_other_workers() -> None:
    """Installs the scope for every closure of this process (ClusterCoordinator looks it up at each closure)."""
    context.executor_scope = executor_scope_without_waiting
