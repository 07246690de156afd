"""Slowing a running task from outside, as a busy machine would: SIGSTOP and SIGCONT in turn, for any user."""

from __future__ import annotations

import os
import signal
import threading
import time
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


class ThrottledWorkers:
    """Every worker server whose command line mentions `mentioned` (a test's directory) held to about `share` of
    the time, those started later too (restarted, added, in a new job step or pod): looked for again every
    `look_every_s`. For a test that needs training to outlast what it does, not the steps themselves: an epoch as
    long in wall time for a fraction of its steps, and of the CPU they cost."""

    def __init__(self, mentioned: str, share: float, period_s: float = 0.2, look_every_s: float = 1.0):
        self.mentioned, self.share, self.period_s, self.look_every_s = mentioned, share, period_s, look_every_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.pids: set[int] = set()
        self.seen: set[int] = set()  # every worker held: a test asserts there were some

    def __enter__(self) -> "ThrottledWorkers":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "ThrottledWorkers":
        self.thread.start()
        return self

    def stop(self) -> None:
        """Every worker runs freely again (before a kill.sh, whose SIGTERM a stopped process would not see yet)."""
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()
        self._signal_all(signal.SIGCONT)

    def _signal_all(self, number: int) -> None:
        for pid in list(self.pids):
            try:
                os.kill(pid, number)
            except ProcessLookupError:  # ended: a restart's new one is found at the next look
                self.pids.discard(pid)

    def _run(self) -> None:
        looked = 0.0
        while not self.stopped.is_set():
            if time.monotonic() - looked >= self.look_every_s:
                self._signal_all(signal.SIGCONT)  # none stays stopped when it leaves the set
                self.pids, looked = set(server_pids(self.mentioned, "worker")), time.monotonic()
                self.seen |= self.pids
            self._signal_all(signal.SIGCONT)
            self.stopped.wait(self.share * self.period_s)
            if self.stopped.is_set():
                return
            self._signal_all(signal.SIGSTOP)
            self.stopped.wait((1 - self.share) * self.period_s)


def server_pids(mentioned: str, job: str) -> list[int]:
    """The pids of the Python processes serving `job` (any index) whose command lines mention `mentioned`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "python" in Path(argv[0]).name and argv[1:5] == ["-m", "roles.server", "--role", job] and \
                any(mentioned in a for a in argv):
            found.append(int(entry.name))
    return found


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
