"""A variable partitioner for tables: the same number of shards on every ps, each small enough to create in place.

ParameterServerStrategy places shards round-robin over the ps in creation order, so a variable split into a
multiple of the ps count lands evenly (the same bytes on each ps) wherever the round-robin stands. Creating a
shard briefly needs a second buffer of its size on its ps (the initial value, then the variable), so shards
are also kept under `max_shard_bytes`: a ps capped near its share of the table still gets through creation.
Variables under `min_shard_bytes` (the dense layers) stay whole.
"""

from __future__ import annotations

import math

import tensorflow as tf

MAX_SHARD_BYTES = 256 * 2 ** 20
COLOCATED_SCOPE = "colocated_with_rows"  # names the variables a table creates beside its rows: they take no
# round-robin turn (a dynamic table's bookkeeping)


def ps_of(device: str) -> str:
    """`/job:ps/replica:0/task:1/device:CPU:0` -> `ps:1`; a variable with no remote device -> `local`."""
    parts = dict(p.split(":", 1) for p in device.split("/") if ":" in p)
    return f"{parts['job']}:{parts.get('task', 0)}" if "job" in parts else "local"


class BalancedPartitioner:
    """Splits axis 0 into ps x k shards, the smallest k that keeps each shard under `max_shard_bytes`."""

    def __init__(self, num_ps: int, *, min_shard_bytes: int = 256 * 1024, max_shard_bytes: int = MAX_SHARD_BYTES):
        if num_ps < 1 or min_shard_bytes < 1 or max_shard_bytes < min_shard_bytes:
            raise ValueError(f"num_ps ({num_ps}) >= 1 and 1 <= min_shard_bytes ({min_shard_bytes}) <= "
                             f"max_shard_bytes ({max_shard_bytes}) are required")
        self.num_ps, self.min_shard_bytes, self.max_shard_bytes = num_ps, min_shard_bytes, max_shard_bytes

    def shards(self, shape, dtype) -> int:
        """How many shards a variable of `shape` and `dtype` gets (1: not split)."""
        total = math.prod(shape) * tf.as_dtype(dtype).size
        if total < self.min_shard_bytes or shape[0] < 2:
            return 1
        per_ps = max(1, math.ceil(total / (self.num_ps * self.max_shard_bytes)))
        return max(1, min(shape[0], self.num_ps * per_ps))

    def __call__(self, shape, dtype, axis: int = 0):
        partitions = [1] * len(shape)
        partitions[axis] = self.shards(list(shape), dtype)
        return partitions
