"""A task's exit code, written by the task itself to the file its launcher names, so no wrapper process is needed."""

from __future__ import annotations

import gc
import os
import sys
from typing import Callable

EXIT_FILE_VARIABLE = "PSCLUSTER_EXIT_FILE"
AUTOGRAPH_PREFIX = "__autograph_generated_file"  # tensorflow/python/autograph/pyct/loader.py's temporary modules


def record_exit(code: int) -> None:
    """Writes `code` to the exit file the launcher named (nothing when started by hand)."""
    path = os.environ.get(EXIT_FILE_VARIABLE)
    if path:
        with open(path, "w") as handle:
            handle.write(f"{code}\n")


def code_of(exit_request: SystemExit) -> int:
    """The exit code a SystemExit asks for, as the interpreter reads it."""
    if exit_request.code is None:
        return 0
    return exit_request.code if isinstance(exit_request.code, int) else 1


def run_recording_exit(main: Callable[[], object]) -> None:
    """Runs an entry point and records how it ended: 0, its sys.exit code, or 1 for an exception.

    A process killed by a signal records nothing; its launcher reads the missing file as "died".
    """
    code = 1
    try:
        main()
        code = 0
    except SystemExit as exit_request:
        code = code_of(exit_request)
        raise
    finally:
        record_exit(code)


def end_process(code: int) -> None:
    """Records `code` and ends the process at once, its output flushed: an interpreter's shutdown waits for every
    non-daemon thread, and can wait tens of seconds on TensorFlow's cluster coordinator threads and channels."""
    record_exit(code)
    remove_generated_sources()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def remove_generated_sources() -> None:
    """Deletes the Python files AutoGraph wrote in the temporary folder for this process's converted functions, as
    its exit handlers would: a process that ends at once (os._exit) skips them, and a follow-mode chief left some 40
    files behind at each end."""
    for name, module in list(sys.modules.items()):
        if name.startswith(AUTOGRAPH_PREFIX) and getattr(module, "__file__", None):
            try:
                os.unlink(module.__file__)
            except OSError:
                pass  # gone already: another exit handler, or a cleaner of the temporary folder


def skip_collection_at_exit() -> None:
    """Lets an ending process leave without the interpreter's garbage collection at shutdown; all else still runs.

    A process that has trained still holds TensorFlow's object graph (hundreds of thousands of objects: traced
    functions, the strategy, its cluster coordinator). Python's shutdown walks all of it in full collections and
    finalizes every traced function found in a cycle (each one removed here and, under parameter_server, a
    RemoveFunction sent to every remote task): seconds on a busy machine, for nothing the run needs. Everything
    the run writes (exit file, checkpoints, export, summary, TensorBoard events, progress) is written and flushed
    before this point; atexit handlers and the flush of stdout and stderr still run. `gc.freeze()` moves every
    live object out of the collector's reach, so those collections find almost nothing; call it only when the
    process is about to end.
    """
    gc.freeze()
