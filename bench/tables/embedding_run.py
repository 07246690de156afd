"""One measured DLRM training run, in its own process: single process, the chief of a ps cluster, or an MWMS worker.

    python -m bench.tables.embedding_run '{"mode": "single", "total_rows": 1000000, ...}'

Prints one line `RESULT {json}`: median examples/s of the epochs after the first, optimizer steps, bytes the
ps and worker ports carried during the measured epochs (from `ss`), peak RSS of this process, final AUC.
TF_CONFIG comes from the caller for `ps` (chief) and `mwms` (worker) modes.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bench import socket_bytes  # noqa: E402
from models import recommenders  # noqa: E402
from tables.placement import BalancedPartitioner  # noqa: E402
from tables.shard_report import shard_report  # noqa: E402
from data import synthetic_criteo  # noqa: E402
from data.criteo_layout import CATEGORICAL_FEATURES  # noqa: E402

MIN_SHARD_BYTES = 256 * 1024


class Meter(tf_keras.callbacks.Callback):
    """Epoch times, and socket byte snapshots at the start of epoch 2 and the end of the last epoch."""

    def __init__(self, ports: dict[str, list[int]], epochs: int):
        super().__init__()
        self.ports, self.epochs, self.seconds, self.snapshots = ports, epochs, [], {}
        self._supports_tf_logs = True

    def _snapshot(self, label: str) -> None:
        self.snapshots[label] = {job: socket_bytes.snapshot(ports) for job, ports in self.ports.items() if ports}
        self.snapshots[label]["steps"] = int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            self._snapshot("before")
        self.started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.monotonic() - self.started)
        if epoch == self.epochs - 1:
            self._snapshot("after")

    def bytes_per_step(self) -> dict[str, float]:
        if "before" not in self.snapshots:
            return {}
        before, after = self.snapshots["before"], self.snapshots["after"]
        steps = max(1, after["steps"] - before["steps"])
        return {job: socket_bytes.moved(before[job], after[job])["total"] / steps for job in self.ports
                if job in before}


def _model(config: dict):
    options = recommenders.RecommenderOptions(
        table_rows=config["total_rows"] // CATEGORICAL_FEATURES, embedding_dim=config.get("dim", 16),
        fused_tables=config.get("fused", True), deduplicate_ids=config.get("dedup", True),
        packed_mlp=config.get("packed", False),  # the recorded sweep ran unpacked
        embedding_optimizer=config.get("embedding_optimizer", "adagrad"))
    dense_optimizer = tf_keras.optimizers.Adam(1e-3)
    model = recommenders.build_and_compile("dlrm", options, dense_optimizer,
                                           steps_per_execution=config.get("spe", 10))
    return model, options


def _strategy(mode: str, config: dict):
    if mode == "ps" and config.get("max_shard_mib"):
        partitioner = BalancedPartitioner(len(config["ps_ports"]), min_shard_bytes=MIN_SHARD_BYTES,
                                          max_shard_bytes=config["max_shard_mib"] * 2 ** 20)
    elif mode == "ps":
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=MIN_SHARD_BYTES, max_shards=len(config["ps_ports"]))
    if mode == "ps":
        return tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver(), variable_partitioner=partitioner)
    if mode == "mwms":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def _dataset(mode: str, config: dict, source, workers: int):
    batch = config.get("batch", 512)
    if mode == "ps":
        return tf_keras.utils.experimental.DatasetCreator(source.train_dataset_fn(batch, 0, workers=workers))
    if mode == "mwms":
        return tf_keras.utils.experimental.DatasetCreator(source.train_dataset_fn(batch * workers, 0))
    return source.train_dataset_fn(batch, 0)(tf.distribute.InputContext())


def run(config: dict) -> dict:
    mode = config["mode"]
    strategy = _strategy(mode, config)
    tf_keras.utils.set_random_seed(0)
    with strategy.scope():
        model, options = _model(config)
    source = synthetic_criteo.load(options.rows_per_table, seed=0)
    workers = config.get("workers", 1)
    meter = Meter({"ps": config.get("ps_ports", []), "worker": config.get("worker_ports", [])}, config["epochs"])
    started = time.monotonic()
    model.fit(_dataset(mode, config, source, workers), epochs=config["epochs"], steps_per_epoch=config["steps"],
              verbose=0, callbacks=[meter])
    batch = config.get("batch", 512) * (workers if mode == "mwms" else 1)
    sample_ids = next(iter(source.split("train").batch(config.get("batch", 512))))[0]["ids"].numpy()
    per_epoch = [config["steps"] * batch / s for s in meter.seconds]
    return {"examples_per_s": statistics.median(per_epoch[1:] or per_epoch),
            "epoch_examples_per_s": [round(e) for e in per_epoch], "steps": int(model.optimizer.iterations.numpy()),
            "bytes_per_step": meter.bytes_per_step(), "wall_s": round(time.monotonic() - started, 1),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "train_auc": float(model.metrics[-2].result().numpy()) if mode != "ps" else None,
            "shard_report": shard_report(model, sample_ids) if mode == "ps" else None}


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
