"""CPU caps for benchmark processes: a cgroup of our own with a CFS quota (v1 `cpu.cfs_quota_us`, or v2 `cpu.max`).

A running process is moved in with `add(pid)` (all its threads follow), and gets at most `share` of one core
whatever else runs: a worker slowed on purpose, reproducibly. `remove()` moves what is left back out first.
"""

from __future__ import annotations

import os
from pathlib import Path

PERIOD_US = 100_000
V1_ROOT, V2_ROOT = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")


def _writable_root() -> tuple[Path, bool]:
    """The cpu cgroup directory to create ours under, and whether it is cgroup v2."""
    if (V1_ROOT / "cpu.cfs_quota_us").exists() and os.access(V1_ROOT, os.W_OK):
        return V1_ROOT, False
    controls = V2_ROOT / "cgroup.subtree_control"
    if controls.exists() and "cpu" in controls.read_text().split() and os.access(V2_ROOT, os.W_OK):
        return V2_ROOT, True
    raise RuntimeError("no writable cpu cgroup (v1 /sys/fs/cgroup/cpu, or v2 with the cpu controller enabled): "
                       "run as root on a host that allows CPU quotas")


class CpuCap:
    """At most `share` of one core for every process added."""

    def __init__(self, name: str, share: float):
        root, self.v2 = _writable_root()
        self.parent, self.path = root, root / name
        self.path.mkdir(exist_ok=True)
        quota = max(1000, round(share * PERIOD_US))
        if self.v2:
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        self.share = share

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for pid in (self.path / "cgroup.procs").read_text().split():
            try:
                (self.parent / "cgroup.procs").write_text(pid)
            except OSError:  # exited meanwhile
                continue
        self.path.rmdir()
