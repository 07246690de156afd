"""Memory caps for benchmark processes: a child cgroup of our own (v2 `memory.max`, or v1 `memory.limit_in_bytes`).

RLIMIT_AS cannot cap TensorFlow (its imports reserve far more address space than they use), so a process is
capped by starting it inside a cgroup: `preexec` writes the child's pid into `cgroup.procs` before exec. An
overrun is then killed by the kernel's OOM killer inside that cgroup only; `oom_kills()` says whether it was.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory"))


def _own_cgroup() -> Path | None:
    """This process's memory cgroup directory, if it is writable (v2 unified first, then v1 `memory`)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (ROOTS[0] / "cgroup.controllers").exists():
            candidate = ROOTS[0] / path.lstrip("/")
        elif "memory" in controllers.split(","):
            candidate = ROOTS[1] / path.lstrip("/")
        else:
            continue
        if os.access(candidate, os.W_OK):
            return candidate
    return None


class MemoryCap:
    """A cgroup capping the memory of every process started with `preexec_fn=cap.preexec`."""

    def __init__(self, name: str, limit_bytes: int):
        parent = _own_cgroup()
        if parent is None:
            raise RuntimeError("no writable memory cgroup: cannot cap benchmark processes")
        self.path = parent / name
        self.path.mkdir(exist_ok=True)
        self.v2 = (self.path / "memory.max").exists()
        (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(str(limit_bytes))
        self.limit_bytes = limit_bytes

    def preexec(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak_bytes(self) -> int:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        return int((self.path / name).read_text()) if (self.path / name).exists() else -1

    def oom_kills(self) -> int:
        if self.v2:
            events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            return int(events.get("oom_kill", 0))
        control = dict(line.split() for line in (self.path / "memory.oom_control").read_text().splitlines())
        return int(control.get("oom_kill", 0))

    def remove(self, timeout_s: float = 10) -> None:
        """Removes the cgroup once its processes are gone (the kernel refuses while any is left)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)
