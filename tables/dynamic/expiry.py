"""When a partition sweeps and how long a row may sit idle: in optimizer steps, or in seconds by a step clock.

Rows carry the step they were last looked up at (an int64 stamp), never a time: a row costs no more for expiry in
seconds. Expiry in steps frees a row idle for more than `expire_after_steps` steps, in a sweep every eighth of
that. Expiry in seconds (`expire_after_s`) sweeps every eighth of it by the ps's own clock and records at each
sweep the step and the time it ran at (the last RING sweeps): a row is idle too long when its stamp is older than
the step of the newest sweep at least `expire_after_s` ago, so it is freed between `expire_after_s` and a quarter
more after its last lookup, whatever the steps per second do meanwhile (more workers, a slow phase, a pause). The
clock is not checkpointed: after a restore it starts again, so a run that was stopped for a day does not free
every row at its first sweep. Both kinds live on the partition's ps and are used only under its lock.
"""

from __future__ import annotations

import tensorflow as tf

SWEEPS_PER_EXPIRY = 8  # a row idle for its expiry is freed within 1/8 of it more (by seconds: 2/8)
RING = SWEEPS_PER_EXPIRY + 2  # sweeps a step clock remembers: more than an expiry's worth
NEVER = tf.int64.max


class StepExpiry:
    """Rows idle for more than `expire_after` steps go, at a sweep every `expire_after // 8` steps."""

    def __init__(self, expire_after: int):
        self.expire_after, self.every = int(expire_after), max(1, int(expire_after) // SWEEPS_PER_EXPIRY)
        self.swept_at = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="swept_at_step")

    def due(self, step: tf.Tensor) -> tf.Tensor:
        return step - self.swept_at >= self.every  # a difference: right where the steps themselves would wrap

    def idle_limit(self, step: tf.Tensor) -> tf.Tensor:
        """Idle steps beyond which a row is freed at a sweep at `step`."""
        return tf.constant(self.expire_after, tf.int64)

    def mark(self, step: tf.Tensor) -> tf.Operation:
        return self.swept_at.assign(step).op

    def restart(self) -> None:
        self.swept_at.assign(0)


class TimeExpiry:
    """Rows idle for more than `expire_after_s` seconds (of the ps's clock) go, at a sweep every eighth of it."""

    def __init__(self, expire_after_s: float):
        self.expire_after_s, self.every_s = float(expire_after_s), float(expire_after_s) / SWEEPS_PER_EXPIRY
        self.steps = tf.Variable(tf.zeros([RING], tf.int64), trainable=False, name="clock_steps")
        self.times = tf.Variable(tf.fill([RING], tf.constant(float("inf"), tf.float64)), trainable=False,
                                 name="clock_times")
        self.sweeps = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="clock_sweeps")
        self.swept_time = tf.Variable(tf.constant(float("-inf"), tf.float64), trainable=False, name="swept_time")

    def due(self, step: tf.Tensor) -> tf.Tensor:
        return tf.timestamp() - self.swept_time >= self.every_s

    def idle_limit(self, step: tf.Tensor) -> tf.Tensor:
        """Idle steps beyond which a row is freed now: those since the newest sweep `expire_after_s` ago (none
        while the clock does not reach that far back)."""
        old_enough = self.times <= tf.timestamp() - self.expire_after_s
        newest = tf.reduce_max(tf.where(old_enough, self.steps, tf.int64.min))
        return tf.where(tf.reduce_any(old_enough), step - newest, NEVER)

    def mark(self, step: tf.Tensor) -> tf.Operation:
        now = tf.timestamp()
        slot = tf.reshape(self.sweeps % RING, [1])
        return tf.group(self.steps.scatter_update(tf.IndexedSlices(tf.reshape(step, [1]), slot)),
                        self.times.scatter_update(tf.IndexedSlices(tf.reshape(now, [1]), slot)),
                        self.sweeps.assign_add(1), self.swept_time.assign(now))

    def restart(self) -> None:
        self.times.assign(tf.fill([RING], tf.constant(float("inf"), tf.float64)))
        self.swept_time.assign(float("-inf"))


def make_expiry(expire_after_steps: int, expire_after_s: float):
    """The expiry of one partition (create it beside the partition's rows), or None when rows never expire."""
    if expire_after_s:
        return TimeExpiry(expire_after_s)
    return StepExpiry(expire_after_steps) if expire_after_steps else None
