"""Keeps Keras from scheduling a whole epoch ahead under ParameterServerStrategy, so batch hooks fire all epoch.

tf_keras `fit` under this strategy schedules every step of an epoch at once (ClusterCoordinator's queue holds
256 K closures) and then waits in `coordinator.join()` until the epoch ends. Batch hooks fire as steps are
scheduled, so after the first few seconds of an epoch none fires: no heartbeat, no progress line, however long
the epoch runs (an epoch longer than `launcher.stall_timeout_s` looked like a stall and restarted the chief).
`SchedulePacing` waits in the hook for the step scheduled `ahead` chunks earlier, so scheduling keeps pace with
the workers and every later callback sees the epoch go by.
"""

from __future__ import annotations

import collections

import tensorflow as tf
import tf_keras

CHUNKS_AHEAD_PER_WORKER = 4  # queued chunks per worker: enough that no worker waits for the chief to schedule


class SchedulePacing(tf_keras.callbacks.Callback):
    """Holds at most `ahead` scheduled chunks (steps_per_execution steps each) not yet done; list it first.

    Batch logs under ParameterServerStrategy are remote values (`_supports_tf_logs`): the hook waits for the
    oldest one beyond `ahead`. Under a synchronous strategy logs are plain values and it never waits.
    """

    def __init__(self, ahead: int):
        super().__init__()
        if ahead < 1:
            raise ValueError(f"`ahead` ({ahead}) must be a positive number of chunks")
        self._supports_tf_logs = True
        self.ahead = ahead
        self.pending: collections.deque = collections.deque()

    def on_train_batch_end(self, batch, logs=None):
        if not hasattr(logs, "fetch"):
            return
        self.pending.append(logs)
        while len(self.pending) > self.ahead:
            try:
                self.pending.popleft().fetch()
            except tf.errors.OpError:
                # a step cancelled, or lost with its worker (TensorFlow runs it again elsewhere): pacing only
                # waits, so it lets go; a failure that matters surfaces at the next schedule or join
                self.pending.clear()
                return

    def on_epoch_end(self, epoch, logs=None):
        self.pending.clear()  # Keras has joined: every step of the epoch is done
