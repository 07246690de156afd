"""Counting the sightings of ids that have no row yet, in bounded memory: a count-min sketch per partition.

`admit_after` N means an id gets a row of its own at its Nth sighting within a window of `admit_window_steps`
optimizer steps. Counting every id ever seen exactly would take memory without bound (a flood of ids seen once
each, as junk traffic or an attack sends, would fill the ps), so sightings go into a count-min sketch of DEPTH
rows, as wide as the partition has rows (at least MIN_WIDTH): each id adds its sightings to one cell per row (only
to the cells at its current minimum: the conservative update, as a maximum, so two ids raising one cell in the
same lookup both count) and is estimated at the smallest of its cells: never below the truth, and above it only
when all DEPTH cells are shared with other ids. (Cells were once written rather than maxed, to save time: in a
lookup of thousands of ids, two ids met in a cell often enough that an id could wait many sightings more.)

The sketch decays on the step clock: windows are the steps [k W, (k + 1) W) of W = `admit_window_steps`, and at
each window's start every cell is halved (once per window passed, however few lookups came), so N sightings
within one window admit an id whatever the batch, the ps count or how full the table is; sightings of earlier
windows count half, a quarter... An id seen once per window never reaches N = 2 alone. A sketch narrower than
the distinct ids without a row in a window over-admits instead (their cells collide): bench/tables/admission_sketch.py
measures how much, and docs/dynamic-embeddings.md gives the load the width is sized for.
"""

from __future__ import annotations

import tensorflow as tf

from cluster.dynamic_table_memory import BYTES_PER_CELL, DEPTH, MIN_WIDTH, width_for  # noqa: F401 - the shape
from tables.dynamic.mixing import sketch_cells


class AdmissionSketch:
    """One partition's sighting counts (create it beside the partition's rows); use it only under its lock."""

    def __init__(self, rows: int, threshold: int, window_steps: int):
        self.width, self.threshold, self.window_steps = width_for(rows), threshold, int(window_steps)
        self.counts = tf.Variable(tf.zeros([DEPTH * self.width], tf.int32), trainable=False, name="sightings")
        self.window = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="sightings_window")

    def admit(self, ids: tf.Tensor, sightings: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        """Counts `sightings` (int64) of each distinct id at `step`; True where the id has now been seen
        `threshold` times (in this window, or more in earlier ones)."""
        decayed = self._decay(step)
        with tf.control_dependencies([decayed]):
            cells = sketch_cells(ids, DEPTH, self.width)
            counted = tf.gather(self.counts, cells)
            estimate = tf.reduce_min(counted, axis=1) + tf.cast(tf.minimum(sightings, tf.int32.max // 2), tf.int32)
        raised = self.counts.scatter_max(tf.IndexedSlices(
            tf.reshape(tf.maximum(counted, estimate[:, tf.newaxis]), [-1]), tf.reshape(cells, [-1])))
        with tf.control_dependencies([raised]):
            return estimate >= self.threshold

    def _decay(self, step: tf.Tensor) -> tf.Tensor:
        """Halves every cell once for each window that began since the last lookup."""
        window = step // self.window_steps
        passed = window - self.window

        def halve():
            shift = tf.cast(tf.minimum(passed, 31), tf.int32)
            with tf.control_dependencies([self.counts.assign(tf.bitwise.right_shift(self.counts, shift)),
                                          self.window.assign(window)]):
                return tf.constant(True)

        return tf.cond(passed > 0, halve, lambda: tf.constant(False))

    def state(self) -> tuple[tf.Tensor, tf.Tensor]:
        return self.counts.read_value(), self.window.read_value()

    def load_state(self, counts: tf.Tensor, window: tf.Tensor) -> None:
        self.counts.assign(counts)
        self.window.assign(window)

    def clear(self) -> None:
        self.load_state(tf.zeros_like(self.counts), tf.constant(0, tf.int64))

    def nbytes(self) -> int:
        return DEPTH * self.width * BYTES_PER_CELL + 8
