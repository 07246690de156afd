"""`kill -USR1 <pid>` makes a task write every thread's Python stack to its log: where a wedged process waits."""

import faulthandler
import signal
import sys


def on_sigusr1() -> None:
    """Writes all threads' stacks to stderr (the task's log) on SIGUSR1; the process goes on."""
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)
