"""Slowing a running task from outside, as a busy machine would: SIGSTOP and SIGCONT in turn, for any user."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path


class Throttle:
    """Holds a process (its group, when it leads one) to about `share` of the time by SIGSTOP and SIGCONT."""

    def __init__(self, pid: int, share: float, period_s: float = 0.2):
        self.pid, self.share, self.period_s = pid, share, period_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Throttle":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()
        self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> bool:
        try:
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, number)
            else:
                os.kill(self.pid, number)
            return True
        except ProcessLookupError:  # killed meanwhile
            return False

    def _run(self) -> None:
        while not self.stopped.is_set() and self._signal(signal.SIGCONT):
            self.stopped.wait(self.share * self.period_s)
            if self.stopped.is_set() or not self._signal(signal.SIGSTOP):
                return
            self.stopped.wait((1 - self.share) * self.period_s)


def server_pid(mentioned: str, job: str, index: int) -> int:
    """The pid of the Python process serving `job` `index` whose command line mentions `mentioned` (a test's
    directory), wherever it was started from (a launcher, srun): not a wrapper that names the same arguments."""
    wanted = ["-m", "roles.server", "--role", job, "--index", str(index)]
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "python" in Path(argv[0]).name and argv[1:7] == wanted and any(mentioned in a for a in argv):
            return int(entry.name)
    raise AssertionError(f"no process serves {job}:{index} for {mentioned}")
