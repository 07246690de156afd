"""What one held id costs a ps: a dynamic table filled with `ids` ids on one ps, its memory before and after.

    python -m bench.tables.dynamic_hold '{"ids": 1000000, "dim": 16, "ps_ports": [...], "worker_ports": [...]}'

(started by bench.tables.dynamic_embeddings through bench.tables.embedding_cluster, 1 worker + 1 ps.) The table has
exactly `ids` rows, legacy Adagrad (one slot), admission at the first sighting; ids are inserted in steps of CHUNK
random 62-bit ids. Prints `RESULT {json}`: the ps's resident memory (MiB) before the table, once its rows, slots
and bookkeeping exist, and once every id is held; bytes per held id in all and for the index alone, beside what
the variables hold per row.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.tables.dynamic_run import rss_mib, server_pids  # noqa: E402
from tables.dynamic.layer import DynamicTables  # noqa: E402
from tables.placement import BalancedPartitioner  # noqa: E402
from tables.sparse import LeanAdagrad  # noqa: E402

CHUNK = 100_000


def _filled_table(strategy, ids: int, dim: int) -> tuple[DynamicTables, dict]:
    """The table on the one ps, its memory recorded before and after it is made."""
    pid = server_pids("ps")[0]
    memory = {"before_mib": rss_mib(pid)}
    with strategy.scope():
        layer = DynamicTables(ids, dim)
        layer.build(tf.TensorShape([None, 1]))
        optimizer = LeanAdagrad(learning_rate=0.1)
        optimizer._create_all_weights(layer.trainable_weights)
    layer.bind_optimizer(optimizer)
    memory["made_mib"] = rss_mib(pid)
    return layer, memory


def run(config: dict) -> dict:
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver(),
        variable_partitioner=BalancedPartitioner(1, min_shard_bytes=256 * 1024))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    ids, dim = config["ids"], config.get("dim", 16)
    layer, memory = _filled_table(strategy, ids, dim)
    insert = tf.function(lambda chunk: strategy.run(lambda c: tf.size(layer(c, training=True)), args=(chunk,)))
    generator = np.random.default_rng(0)
    for first in range(0, ids, CHUNK):
        chunk = generator.integers(0, 2 ** 62, size=(min(CHUNK, ids - first), 1), dtype=np.int64)
        coordinator.schedule(insert, args=(tf.constant(chunk),))
    coordinator.join()
    memory["held_mib"] = rss_mib(server_pids("ps")[0])
    held = int(layer.stats().numpy()[:, 2].sum())
    partition = layer.partitions[0]
    return {"ids": ids, "held": held, **{k: round(v, 1) for k, v in memory.items()},
            "bytes_per_held_id": round((memory["held_mib"] - memory["before_mib"]) * 2 ** 20 / held, 1),
            "index_bytes_per_id": round((memory["held_mib"] - memory["made_mib"]) * 2 ** 20 / held, 1),
            "row_and_slot_bytes": 2 * dim * 4, "bookkeeping_bytes_per_row": round(partition.nbytes() / ids, 1)}


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
