"""Counting the sightings of ids that have no row yet, in bounded memory: a count-min sketch per partition.

`admit_after` N means an id gets a row of its own at its Nth sighting. Counting every id ever seen exactly would
take memory without bound (a flood of ids seen once each, as junk traffic or an attack sends, would fill the ps), so
sightings go into a count-min sketch of DEPTH rows, as wide as the partition has rows: each id adds its sightings to
one cell per row (only to the cells at its current minimum: the conservative update) and is estimated at the
smallest of its cells. The estimate is above the truth only when all DEPTH cells are shared with other ids; it is
below it only when two ids raised one cell in the same lookup (the cells are written, not maxed, to save half the
update's time: the smaller count may win), which costs an id one more sighting, never admits one early. So that a
flood cannot fill the cells, the sketch halves every cell each time it has taken a quarter of its width in new
sightings: an id must be seen N times within about that window, at most some 22 % of a row's cells are in use
(1 - e^-1/4), and an id seen once passes for N = 2 with odds of about 0.22 ** DEPTH (0.2 %) at worst.
"""

from __future__ import annotations

import tensorflow as tf

from coordinator.dynamic.mixing import sketch_cells

DEPTH = 4
MIN_WIDTH = 4096


class AdmissionSketch:
    """One partition's sighting counts (create it beside the partition's rows); use it only under its lock."""

    def __init__(self, rows: int, threshold: int):
        self.width, self.threshold = max(MIN_WIDTH, rows), threshold
        self.counts = tf.Variable(tf.zeros([DEPTH * self.width], tf.int32), trainable=False, name="sightings")
        self.load = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="sightings_since_halving")

    def admit(self, ids: tf.Tensor, sightings: tf.Tensor) -> tf.Tensor:
        """Counts `sightings` (int64) of each distinct id; True where the id has now been seen `threshold` times."""
        added = tf.reduce_sum(sightings)
        halved = tf.cond(self.load + added > self.width // 4, self._halve, lambda: tf.constant(False))
        with tf.control_dependencies([halved]):
            cells = sketch_cells(ids, DEPTH, self.width)
            counted = tf.gather(self.counts, cells)
            estimate = tf.reduce_min(counted, axis=1) + tf.cast(sightings, tf.int32)
        raised = self.counts.scatter_update(tf.IndexedSlices(
            tf.reshape(tf.maximum(counted, estimate[:, tf.newaxis]), [-1]), tf.reshape(cells, [-1])))
        loaded = self.load.assign_add(added)
        with tf.control_dependencies([raised, loaded]):
            return estimate >= self.threshold

    def _halve(self) -> tf.Tensor:
        with tf.control_dependencies([self.counts.assign(tf.bitwise.right_shift(self.counts, 1)), self.load.assign(0)]):
            return tf.constant(True)

    def state(self) -> tuple[tf.Tensor, tf.Tensor]:
        return self.counts.read_value(), self.load.read_value()

    def load_state(self, counts: tf.Tensor, load: tf.Tensor) -> None:
        self.counts.assign(counts)
        self.load.assign(load)

    def clear(self) -> None:
        self.load_state(tf.zeros_like(self.counts), tf.constant(0, tf.int64))

    def nbytes(self) -> int:
        return DEPTH * self.width * 4 + 8
