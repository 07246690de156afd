"""Slowing a running task from outside, as a busy machine would: SIGSTOP and SIGCONT in turn, for any user; and
stopping a process tree in the middle of what it writes, for a kill to find it there."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from common.proc import proc_stat, start_ticks


class _StopAndGo:
    """SIGCONT, `share` of `period_s`, SIGSTOP, the rest of it, in a thread, until stopped or no target is left;
    every target runs freely again at the stop."""

    def __init__(self, share: float, period_s: float):
        self.share, self.period_s = share, period_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self):
        self.thread.start()
        return self

    def stop(self) -> None:
        """Every target runs freely again (before a kill.sh, whose SIGTERM a stopped process would not see yet)."""
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()
        self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> bool:
        """Sends `number` to every target; False when none is left."""
        raise NotImplementedError

    def _look(self) -> None:
        """Finds the targets again, if they change."""

    def _run(self) -> None:
        while not self.stopped.is_set():
            self._look()
            if not self._signal(signal.SIGCONT):
                return
            self.stopped.wait(self.share * self.period_s)
            if self.stopped.is_set() or not self._signal(signal.SIGSTOP):
                return
            self.stopped.wait((1 - self.share) * self.period_s)


class Throttle(_StopAndGo):
    """Holds a process (its group, when it leads one) to about `share` of the time by SIGSTOP and SIGCONT."""

    def __init__(self, pid: int, share: float, period_s: float = 0.2):
        super().__init__(share, period_s)
        self.pid = pid

    def _signal(self, number: int) -> bool:
        try:
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, number)
            else:
                os.kill(self.pid, number)
            return True
        except ProcessLookupError:  # killed meanwhile
            return False


class ThrottledWorkers(_StopAndGo):
    """Every worker server whose command line mentions `mentioned` (a test's directory) held to about `share` of
    the time once it listens, those started later too (restarted, added, in a new job step or pod): looked for again
    every `look_every_s`. For a test that needs training to outlast what it does, not the steps themselves: an epoch
    as long in wall time for a fraction of its steps, and of the CPU they cost. A worker still starting runs freely:
    held while it imports TensorFlow on a loaded machine, it missed the launcher's ready_timeout_s (CI, a Slurm
    test's workers, 60 s, where the ps took 39 s unheld)."""

    def __init__(self, mentioned: str, share: float, period_s: float = 0.2, look_every_s: float = 1.0):
        super().__init__(share, period_s)
        self.mentioned, self.look_every_s, self.looked = mentioned, look_every_s, 0.0
        self.pids: dict[int, int] = {}  # each worker's pid and start time: a pid another process took is let be
        self.seen: set[int] = set()  # every worker held: a test asserts there were some

    def _signal(self, number: int) -> bool:
        for pid, started in list(self.pids.items()):
            try:
                if start_ticks(pid) != started:
                    raise ProcessLookupError(pid)
                os.kill(pid, number)
            except ProcessLookupError:  # ended: a restart's new one is found at the next look
                del self.pids[pid]
        return True  # workers may come later

    def _look(self) -> None:
        if time.monotonic() - self.looked >= self.look_every_s:
            self._signal(signal.SIGCONT)  # none stays stopped when it leaves the set
            found = {pid: start_ticks(pid) for pid in server_pids(self.mentioned, "worker") if listens(pid)}
            self.pids, self.looked = {pid: started for pid, started in found.items() if started}, time.monotonic()
            self.seen |= set(self.pids)


def listens(pid: int) -> bool:
    """Whether process `pid` holds a listening TCP socket (in its own network namespace): a server that is up."""
    try:
        sockets = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
        tables = [Path(f"/proc/{pid}/net/{table}").read_text() for table in ("tcp", "tcp6")]
    except OSError:  # gone meanwhile (or an fd closed while read): the next look tells
        return False
    inodes = {target[len("socket:["):-1] for target in sockets if target.startswith("socket:[")}
    return any(fields[3] == "0A" and fields[9] in inodes  # 0A: LISTEN
               for table in tables for fields in (line.split() for line in table.splitlines()[1:]))


def server_pids(mentioned: str, job: str, index: int | None = None) -> list[int]:
    """The pids of the Python processes serving `job` (`index`, or any) whose command lines mention `mentioned` (a
    test's directory), wherever they were started from (a launcher, srun): not a wrapper that names the same
    arguments."""
    wanted = ["-m", "roles.server", "--role", job] + ([] if index is None else ["--index", str(index)])
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "python" in Path(argv[0]).name and argv[1:1 + len(wanted)] == wanted and any(mentioned in a for a in argv):
            found.append(int(entry.name))
    return found


def server_pid(mentioned: str, job: str, index: int) -> int:
    """The pid of the one process serving `job` `index` for `mentioned` (see `server_pids`)."""
    found = server_pids(mentioned, job, index)
    if not found:
        raise AssertionError(f"no process serves {job}:{index} for {mentioned}")
    return found[0]


def frozen_while(pid: int, there) -> bool:
    """SIGSTOPs `pid`, then every process under it; True when `there()` still holds after, with them left stopped
    (a SIGKILL then finds what they were writing half done, however long the test took to look); otherwise they go
    on (SIGCONT) and False."""
    frozen = [pid]
    os.kill(pid, signal.SIGSTOP)  # first: it starts no new process meanwhile
    for _ in range(3):  # a child forked just before the stop is found at the next pass
        new = [child for child in _descendants(frozen) if child not in frozen]
        for child in new:
            _send(child, signal.SIGSTOP)
        frozen += new
    if there():
        return True
    for stopped in frozen:
        _send(stopped, signal.SIGCONT)
    return False


def _send(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:  # ended since it was found
        pass


def _descendants(roots: list[int]) -> list[int]:
    """The live processes under any of `roots` (/proc's parent ids)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        fields = proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if fields:
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [], list(roots)
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier and pid not in found]
        found += children
        frontier = children
    return found
