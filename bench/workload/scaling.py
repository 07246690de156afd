"""How the cost of a step grows: with model size, with the number of ps, and with the number of workers.

Each point is one run of coordinator.train on synthetic data (global batch 64 per worker, steps_per_execution
10) against a loopback cluster started for it; the figures are the median steps/s of the epochs after the
first, the bytes sent over loopback per step, and each role's peak RSS. On 2 cores, more processes mostly show
overhead, not speed-up; that is recorded as it is.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench.kit.cluster import LoopbackCluster
from bench.workload.models import SIZES

COMMON = {"per_worker_batch": 64, "epochs": 3, "lr_decay_epochs": [], "steps_per_execution": 10}


def _point(directory: Path, *, workers: int, ps: int, steps: int, **options) -> dict:
    with LoopbackCluster(directory, workers=workers, ps=ps) as cluster:
        figures = cluster.chief(directory / "output", steps_per_epoch=steps, **COMMON, **options)
    print(f"workers {workers}, ps {ps}, {options}: {figures['steps_per_s']:.1f} steps/s, "
          f"{figures['loopback_mb_per_step']:.1f} MB/step over loopback", file=sys.stderr, flush=True)
    return figures


def model_size(steps: int = 100) -> dict:
    """1 worker + 1 ps, the tutorial CNN from 0.1 M to 44 M parameters."""
    with tempfile.TemporaryDirectory() as scratch:
        return {size: _point(Path(scratch) / size.replace(".", "_"), workers=1, ps=1, steps=steps, model=model)
                for size, model in SIZES.items()}


def ps_count(steps: int = 100, counts=(1, 2, 4)) -> dict:
    """1 worker, the 11 M-parameter CNN (one 10.8 M-parameter layer) split over 1, 2 or 4 ps."""
    with tempfile.TemporaryDirectory() as scratch:
        return {n: _point(Path(scratch) / f"ps{n}", workers=1, ps=n, steps=steps, model=SIZES["11M"])
                for n in counts}


def worker_count(steps: int = 100, counts=(1, 2, 4)) -> dict:
    """1 ps, the tutorial CNN, 1, 2 or 4 workers (global batch grows with them)."""
    with tempfile.TemporaryDirectory() as scratch:
        return {n: _point(Path(scratch) / f"w{n}", workers=n, ps=1, steps=steps, model="cnn") for n in counts}
