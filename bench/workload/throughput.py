"""Steps/s of the reference workload: one process, tutorial-style PSS and the toolkit's defaults, interleaved.

Reference workload: the tutorial CNN (28x28x1 -> Conv2D 32 -> Dense 128 -> 10, 2.8 M parameters), global batch
64, synthetic data, 1 worker + 1 ps on loopback. Each configuration runs `--repeats` times, interleaved so that
drift hits all of them; each run reports the median steps/s of its epochs after the first (which traces).

    .venv/bin/python -m bench.workload.throughput [--repeats 3] [--steps 300] [--sweep]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fire

from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster, median_after_first

SINGLE_PROCESS = """
import sys, time, json, tensorflow as tf, tf_keras
from models import zoo
from data import synthetic
steps, epochs, spe = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
source = synthetic.load()
model = zoo.cnn(source.input_shape, source.num_classes)
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"], steps_per_execution=spe)
class Timer(tf_keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None): self.t = time.monotonic()
    def on_epoch_end(self, epoch, logs=None): print("STEPS_PER_S", steps / (time.monotonic() - self.t), flush=True)
data = source.split("train").cache().repeat().batch(64).prefetch(tf.data.AUTOTUNE)
model.fit(data, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=[Timer()])
"""


def single_process(steps: int, epochs: int, steps_per_execution: int) -> float:
    """model.fit in one process with no strategy: the limit the cluster is measured against."""
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1",
           "PYTHONPATH": str(ROOT)}
    env.pop("TF_CONFIG", None)
    result = subprocess.run([PYTHON, "-c", SINGLE_PROCESS, str(steps), str(epochs), str(steps_per_execution)],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    values = [float(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("STEPS_PER_S")]
    if not values:
        raise RuntimeError(result.stderr[-2000:])
    return median_after_first(values)


def reference(repeats: int = 3, steps: int = 300, epochs: int = 4) -> dict:
    """(a) single process, (b) tutorial-style PSS (steps_per_execution=1), (c) the toolkit's defaults."""
    runs: dict[str, list[float]] = {"single_process": [], "tutorial_pss": [], "toolkit_defaults": []}
    common = {"model": "cnn", "per_worker_batch": 64, "epochs": epochs, "steps_per_epoch": steps,
              "lr_decay_epochs": []}
    with tempfile.TemporaryDirectory() as scratch, LoopbackCluster(Path(scratch)) as cluster:
        for repeat in range(repeats):
            runs["single_process"].append(single_process(steps, epochs, steps_per_execution=1))
            runs["tutorial_pss"].append(cluster.chief(Path(scratch) / f"b{repeat}", steps_per_execution=1,
                                                      **common)["steps_per_s"])
            runs["toolkit_defaults"].append(cluster.chief(Path(scratch) / f"c{repeat}", **common)["steps_per_s"])
            print(f"repeat {repeat + 1}/{repeats}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in runs.items()),
                  file=sys.stderr, flush=True)
    return {name: {"median": statistics.median(values), "runs": values} for name, values in runs.items()}


def sweep(values=(1, 10, 50, 100), steps: int = 300, epochs: int = 3, repeats: int = 2) -> dict:
    """Steps/s of the reference workload against steps_per_execution, interleaved over repeats."""
    found: dict[int, list[float]] = {v: [] for v in values}
    common = {"model": "cnn", "per_worker_batch": 64, "epochs": epochs, "steps_per_epoch": steps,
              "lr_decay_epochs": []}
    with tempfile.TemporaryDirectory() as scratch, LoopbackCluster(Path(scratch)) as cluster:
        for repeat in range(repeats):
            for value in values:
                found[value].append(cluster.chief(Path(scratch) / f"s{value}-{repeat}",
                                                  steps_per_execution=value, **common)["steps_per_s"])
                print(f"steps_per_execution {value}: {found[value][-1]:.1f} steps/s", file=sys.stderr, flush=True)
    return {value: statistics.median(runs) for value, runs in found.items()}


def main(repeats: int = 3, steps: int = 300, sweep_spe: bool = False, output: str = "") -> None:
    """Measures and prints JSON; `--sweep_spe` adds the steps_per_execution sweep."""
    started = time.monotonic()
    results = {"reference": reference(repeats=repeats, steps=steps)}
    if sweep_spe:
        results["steps_per_execution"] = sweep(steps=steps)
    results["seconds"] = round(time.monotonic() - started)
    text = json.dumps(results, indent=2)
    print(text)
    if output:
        Path(output).write_text(text)


if __name__ == "__main__":
    fire.Fire(main)
