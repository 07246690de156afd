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
each window's start every cell is halved (once per window passed, however few lookups came); sightings of earlier
windows count half, a quarter... An id seen once per window never reaches N = 2 alone. With `halve_by_load` (the
default, `admission_halving` by_load) it also halves before a lookup once a quarter of its width of sightings came
in since the last halving, so its cells never fill: a sketch narrower than the distinct ids without a row in a
window would otherwise over-admit (their cells collide, and nearly every id seen twice, or once, passes): drifting
clicks lost 0.02 AUC that way. The price: when one lookup alone brings more than a quarter of the width, every
lookup halves, and an id must be seen N times within about one lookup (big batches admit the hot ids only).
Without it (by_window), N sightings within one window admit an id whatever the batch: bench/tables/admission_sketch.py
measures how much a narrow sketch then over-admits, and docs/dynamic-embeddings.md gives the load it is sized for.
"""

from __future__ import annotations

import tensorflow as tf

from cluster.dynamic_table_memory import BYTES_PER_CELL, DEPTH, MIN_WIDTH, width_for  # noqa: F401 - the shape
from tables.dynamic.mixing import sketch_cells


class AdmissionSketch:
    """One partition's sighting counts (create it beside the partition's rows); use it only under its lock."""

    def __init__(self, rows: int, threshold: int, window_steps: int, *, halve_by_load: bool = True):
        self.width, self.threshold, self.window_steps = width_for(rows), threshold, int(window_steps)
        self.halve_by_load = halve_by_load
        self.counts = tf.Variable(tf.zeros([DEPTH * self.width], tf.int32), trainable=False, name="sightings")
        self.window = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="sightings_window")
        # sightings since the last halving (by_load); not checkpointed: a restored sketch counts it afresh
        self.load = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="sightings_since_halving")

    def admit(self, ids: tf.Tensor, sightings: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        """Counts `sightings` (int64) of each distinct id at `step`; True where the id has now been seen
        `threshold` times (in this window, or more in earlier ones)."""
        decayed = self._decay(step, tf.reduce_sum(sightings))
        with tf.control_dependencies([decayed]):
            cells = sketch_cells(ids, DEPTH, self.width)
            counted = tf.gather(self.counts, cells)
            estimate = tf.reduce_min(counted, axis=1) + tf.cast(tf.minimum(sightings, tf.int32.max // 2), tf.int32)
        raised = self.counts.scatter_max(tf.IndexedSlices(
            tf.reshape(tf.maximum(counted, estimate[:, tf.newaxis]), [-1]), tf.reshape(cells, [-1])))
        with tf.control_dependencies([raised]):
            return estimate >= self.threshold

    def _decay(self, step: tf.Tensor, added: tf.Tensor) -> tf.Tensor:
        """Halves every cell once for each window that began since the last lookup, and (by load) once when this
        lookup's `added` sightings bring those since the last halving over a quarter of the width."""
        window = step // self.window_steps
        passed = window - self.window
        if self.halve_by_load:
            passed = tf.where((passed <= 0) & (self.load + added > self.width // 4), tf.ones_like(passed), passed)

        def halve():
            shift = tf.cast(tf.minimum(passed, 31), tf.int32)
            with tf.control_dependencies([self.counts.assign(tf.bitwise.right_shift(self.counts, shift)),
                                          self.window.assign(tf.maximum(window, self.window)),
                                          self.load.assign(0)]):
                return tf.constant(True)

        halved = tf.cond(passed > 0, halve, lambda: tf.constant(False))
        with tf.control_dependencies([halved]):
            return self.load.assign_add(added)

    def state(self) -> tuple[tf.Tensor, tf.Tensor]:
        return self.counts.read_value(), self.window.read_value()

    def load_state(self, counts: tf.Tensor, window: tf.Tensor) -> None:
        self.counts.assign(counts)
        self.window.assign(window)

    def clear(self) -> None:
        self.load_state(tf.zeros_like(self.counts), tf.constant(0, tf.int64))
        self.load.assign(0)

    def nbytes(self) -> int:
        return DEPTH * self.width * BYTES_PER_CELL + 16
