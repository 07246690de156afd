"""The time a stop asked by SIGTERM has: a deadline (SIGTERM's arrival, plus the launcher's grace, less a margin for
the exit) that every step of the stop is held to, a step that cannot finish by it skipped and one still running at it
abandoned, each with one line, so the chief exits with PREEMPTED_EXIT_CODE before the launcher's SIGKILL."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from common.errors import PREEMPTED_EXIT_CODE
from common.exit_file import end_process

MARGIN_SHARE = 0.2  # of the grace, kept for the exit itself: the process ending and the launcher seeing it gone
MARGIN_MIN_S = 2.0
MARGIN_MAX_S = 10.0
# Tests only: "<step>=<seconds>" makes step <step> of a stop take that many seconds more before it runs, as a
# huge table's checkpoint does (tests/test_stop_deadlines.py). Never set it in a real run.
SLOW_STEP_FOR_TESTS = "PSCLUSTER_TEST_SLOW_STOP_STEP"
BEFORE_THE_STOP = ("the work in progress when SIGTERM came", "the next start resumes from the newest checkpoint "
                   "written before it")


def exit_margin_s(grace_s: float) -> float:
    """What a stop leaves of `grace_s` for the exit: a fifth of it, from 2 to 10 s."""
    return min(MARGIN_MAX_S, max(MARGIN_MIN_S, MARGIN_SHARE * grace_s))


class StopBudget:
    """One stop, from SIGTERM at `arrived_at` (on `clock`), with `grace_s` before the launcher's SIGKILL. Each step
    calls `begin` (the step skipped when it returns False) and takes at most `share` of what is left where it can
    wait for less; `watch` starts the watch that, at the deadline, says which step was abandoned and calls `end`
    (by default: exit with PREEMPTED_EXIT_CODE at once)."""

    def __init__(self, *, arrived_at: float, grace_s: float, log, end: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.arrived_at, self.grace_s, self.log, self.clock = arrived_at, grace_s, log, clock
        self.margin_s = exit_margin_s(grace_s)
        self.deadline = arrived_at + grace_s - self.margin_s
        self.end = end or (lambda: end_process(PREEMPTED_EXIT_CODE))
        self.current, self.then = BEFORE_THE_STOP  # the step running now
        self.ended: str | None = None  # the step skipped or abandoned
        self._lock = threading.Lock()
        self._over = threading.Event()

    def left(self) -> float:
        """Seconds left before the deadline (0 past it)."""
        return max(0.0, self.deadline - self.clock())

    def elapsed(self) -> float:
        return self.clock() - self.arrived_at

    def share(self, most_s: float, fraction: float = 1.0) -> float:
        """A wait of at most `most_s`, and at most `fraction` of what is left (what comes after needs the rest)."""
        return max(0.0, min(most_s, fraction * self.left()))

    def begin(self, step: str, then: str, *, expected_s: float = 0.0) -> bool:
        """Step `step` starts now; `then` says what the next start does if it does not finish. When it cannot finish
        in what is left (nothing is, or less than `expected_s`, what it took last time), it and the steps after it
        are skipped: one line, then `end` (False returned only when `end` returns)."""
        left = self.left()
        if left <= 0.0 or expected_s > left:
            took = f", and it took {expected_s:.1f} s last time" if expected_s > left > 0.0 else ""
            self.log.warning("stop: %s skipped %.1f s after SIGTERM: %.1f s left of launcher.stop_grace_s (%g s, "
                             "less %g s for the exit)%s; %s; exiting (code %d)", step, self.elapsed(), left,
                             self.grace_s, self.margin_s, took, then, PREEMPTED_EXIT_CODE)
            self._ending(step)
            return False
        with self._lock:
            self.current, self.then = step, then
        _slow_for_tests(step)
        return True

    def watch(self) -> StopBudget:
        """Starts the watch of the deadline (on a daemon thread); returns self."""
        threading.Thread(target=self._watch, name="stop-deadline", daemon=True).start()
        return self

    def over(self) -> None:
        """The stop is done (the process exits now): the watch ends without a word."""
        self._over.set()

    def _watch(self) -> None:
        if self._over.wait(max(0.0, self.deadline - self.clock())):
            return
        with self._lock:
            step, then = self.current, self.then
        self.log.warning("stop: %s not done %.1f s after SIGTERM (launcher.stop_grace_s %g s, less %g s for the "
                         "exit): abandoned, nothing of it made visible; %s; exiting (code %d)", step, self.elapsed(),
                         self.grace_s, self.margin_s, then, PREEMPTED_EXIT_CODE)
        self._ending(step)

    def _ending(self, step: str) -> None:
        self.ended = step
        self._over.set()
        self.end()


def _slow_for_tests(step: str) -> None:
    """Tests only (SLOW_STEP_FOR_TESTS): step `step` takes the seconds the variable names, before it runs."""
    name, _, seconds = os.environ.get(SLOW_STEP_FOR_TESTS, "").partition("=")
    if name == step and seconds:
        threading.Event().wait(float(seconds))
