"""TCP probes of task ports: TensorFlow hangs on an unreachable task, so we ask first, with a deadline."""

from __future__ import annotations

import socket
import time
from typing import Callable, Iterable

from roles.config import Task


def answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when something accepts a TCP connection at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_until_listening(tasks: Iterable[Task], timeout_s: float, *, poll_s: float = 0.25,
                         alive: Callable[[], bool] = lambda: True) -> list[Task]:
    """Polls until every task's port answers or `timeout_s` passes; returns the tasks that never answered.

    `alive` lets the caller stop early, e.g. when a process it started has already exited.
    """
    waiting = list(tasks)
    deadline = time.monotonic() + timeout_s
    while waiting and alive():
        waiting = [t for t in waiting if not answers(t.address.host, t.address.port)]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    return waiting
