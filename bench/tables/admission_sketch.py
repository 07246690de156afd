"""How often the admission sketch lets an id in early: ids seen once each, at loads around the sketch's width.

`.venv/bin/python -m bench.tables.admission_sketch` feeds one partition's AdmissionSketch (tables/dynamic/sketch.py,
4096 wide, its smallest) windows of distinct ids seen once each (never again: junk traffic), `load` times the width
per window of `admit_window_steps` steps, and counts the ids it admits at `admit_after` 2 and 3 over the windows
after the first (the sketch then holds the halved counts of earlier windows, as it does in a long run). Any
admission is a false one. One process, no cluster, no timing: it runs in seconds and needs no quiet machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import fire  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tables.dynamic.sketch import MIN_WIDTH, AdmissionSketch  # noqa: E402

LOADS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)


def false_admissions(load: float, threshold: int, *, windows: int = 4, steps_per_window: int = 8,
                     width: int = MIN_WIDTH, seed: int = 0) -> float:
    """The fraction of once-seen ids admitted, `load` x `width` distinct ids per window."""
    sketch = AdmissionSketch(width, threshold, steps_per_window)
    per_step = max(1, int(load * width / steps_per_window))
    rng = np.random.default_rng(seed)
    admitted = seen = 0
    for step in range(windows * steps_per_window):
        ids = tf.constant(rng.integers(-(2**62), 2**62, size=per_step), tf.int64)
        passed = sketch.admit(ids, tf.ones([per_step], tf.int64), tf.constant(step, tf.int64)).numpy()
        if step >= steps_per_window:  # the first window starts from an empty sketch
            admitted, seen = admitted + int(passed.sum()), seen + per_step
    return admitted / seen


def main(windows: int = 4, width: int = MIN_WIDTH) -> None:
    """Prints the false-admission rate per load (distinct ids without a row per window, over the width)."""
    print(f"admission sketch {width} wide, ids seen once each, {windows - 1} windows measured")
    for load in LOADS:
        rates = [false_admissions(load, threshold, windows=windows, width=width) for threshold in (2, 3)]
        print(f"load {load:5.3f} x width: admit_after 2 {rates[0]:8.4%}, admit_after 3 {rates[1]:8.4%}")


if __name__ == "__main__":
    fire.Fire(main)
