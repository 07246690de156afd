"""Levers tried on the reference workload: thread pools of the servers, and the per-worker batch.

Thread settings go to the ps and worker processes through TensorFlow's own variables
(TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS). A larger per-worker batch changes the workload (fewer
transfers per example), so it is compared in examples/s, not steps/s.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench.kit.cluster import LoopbackCluster

REFERENCE = {"model": "cnn", "epochs": 3, "lr_decay_epochs": [], "steps_per_execution": 10}
THREADS = {"default": {}, "ps 1 intra-op thread": {"TF_NUM_INTRAOP_THREADS": "1"},
           "1 inter-op thread": {"TF_NUM_INTEROP_THREADS": "1"}}


def threads(steps: int = 150) -> dict:
    """Steps/s of the toolkit's defaults with each thread setting for the servers (one run each)."""
    found = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, env in THREADS.items():
            directory = Path(scratch) / name.replace(" ", "_")
            with LoopbackCluster(directory, env=env) as cluster:
                try:
                    found[name] = cluster.chief(directory / "output", timeout_s=150, per_worker_batch=64,
                                                steps_per_epoch=steps, **REFERENCE)["steps_per_s"]
                except TimeoutError as error:
                    found[name] = None  # a setting that hangs training is a finding too
                    print(f"threads {name}: {error}", file=sys.stderr, flush=True)
                    continue
            print(f"threads {name}: {found[name]:.1f} steps/s", file=sys.stderr, flush=True)
    return found


def batch(steps: int = 100, sizes=(64, 128, 256)) -> dict:
    """Examples/s of 1 worker + 1 ps against the per-worker batch."""
    found = {}
    with tempfile.TemporaryDirectory() as scratch, LoopbackCluster(Path(scratch)) as cluster:
        for size in sizes:
            figures = cluster.chief(Path(scratch) / f"b{size}", per_worker_batch=size, steps_per_epoch=steps,
                                    **REFERENCE)
            found[size] = {"steps_per_s": figures["steps_per_s"], "examples_per_s": figures["steps_per_s"] * size}
            print(f"per_worker_batch {size}: {found[size]['examples_per_s']:.0f} examples/s", file=sys.stderr,
                  flush=True)
    return found
