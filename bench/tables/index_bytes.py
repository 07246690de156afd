"""The id -> row index's memory per id: `.venv/bin/python -m bench.tables.index_bytes 1000000` inserts that many random
int64 ids into a fresh MutableHashTable (what each partition of a dynamic table keeps on its ps) and prints the
growth of this process's resident memory per id. Run each size in a process of its own (the heap keeps what it
freed). The figures are cluster/dynamic_table_memory.py's INDEX_BYTES_PER_ID."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import fire  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

CHUNK = 100_000


def resident_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))


def main(ids: int = 1_000_000, seed: int = 0) -> None:
    table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=-1)
    rows, rng = tf.range(CHUNK, dtype=tf.int64), np.random.default_rng(seed)
    table.insert(rows, rows)  # the ops' own memory before the measure
    table.remove(rows)
    before = resident_bytes()
    for _ in range(max(1, ids // CHUNK)):
        table.insert(tf.constant(rng.integers(-(2**62), 2**62, size=CHUNK), tf.int64), rows)
    held = int(table.size())
    print(f"{held:,} ids: {(resident_bytes() - before) / held:.1f} bytes per id")


if __name__ == "__main__":
    fire.Fire(main)
