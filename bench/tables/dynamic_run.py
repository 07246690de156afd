"""One measured dlrm run on drifting synthetic clicks, hashed or dynamic tables, as the chief of a ps cluster.

    python -m bench.tables.dynamic_run '{"kind": "dynamic", "table_rows": 2000, "capacity": 34000, ...}'

(started by bench.tables.dynamic_embeddings through bench.tables.embedding_cluster, which starts the servers and passes
their ports.) Prints one line `RESULT {json}`: median examples/s of the epochs after the first, bytes per step
on the ps and worker ports (from `ss`), validation AUC (on the last period's ids), the tables' rows per ps at
the end, and every `sample_every` steps the ps processes' resident memory beside the dynamic table's rows in use.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bench.tables.embedding_run import Meter  # noqa: E402
from models import recommenders  # noqa: E402
from tables.dynamic.report import table_stats  # noqa: E402
from tables.kinds import table_report  # noqa: E402
from tables.placement import BalancedPartitioner  # noqa: E402
from data import synthetic_criteo  # noqa: E402
from data.criteo_layout import CATEGORICAL_FEATURES  # noqa: E402

MIN_SHARD_BYTES = 256 * 1024
EVAL_BATCH = 4096


def server_pids(job: str) -> list[int]:
    """Pids of this cluster's `job` servers (bench.tables.embedding_cluster starts them with the spec on the command
    line), in task order."""
    spec = json.dumps(json.loads(os.environ["TF_CONFIG"])["cluster"])
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            arguments = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if len(arguments) > 5 and arguments[1] == "-c" and arguments[3] == spec and arguments[4] == job:
            found[int(arguments[5])] = int(entry.name)
    return [found[index] for index in sorted(found)]


def rss_mib(pid: int) -> float:
    """Resident memory of a process now (VmRSS), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return -1.0


class MemorySampler(tf_keras.callbacks.Callback):
    """Every `every` optimizer steps: the ps processes' resident memory and the dynamic tables' rows in use."""

    def __init__(self, every: int, layers: list):
        super().__init__()
        self._supports_tf_logs = True
        self.every, self.layers, self.samples, self.next = every, layers, [], 0
        self.pids = server_pids("ps")

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step >= self.next:
            rows = sum(entry["rows_in_use"] for entry in table_stats(self.layers).values()) if self.layers else None
            self.samples.append({"step": step, "ps_rss_mib": [round(rss_mib(pid), 1) for pid in self.pids],
                                 "rows_in_use": rows})
            self.next = step + self.every


def _options(config: dict) -> recommenders.RecommenderOptions:
    dynamic = config["kind"] == "dynamic"
    return recommenders.RecommenderOptions(
        table_rows=config["table_rows"], embedding_dim=config.get("dim", 16), embedding_kind=config["kind"],
        embedding_capacity=config["capacity"] if dynamic else 1_000_000,
        admit_after=config.get("admit_after", 1) if dynamic else 1,
        **({"admit_window_steps": config["admit_window_steps"]} if dynamic and "admit_window_steps" in config else {}),
        expire_after_steps=config.get("expire_after_steps", 0) if dynamic else 0)


def validation_auc(model, source) -> float:
    """AUC over the validation split, predicted by the chief (inference lookups on the ps)."""
    auc = tf_keras.metrics.AUC()
    for features, labels in source.split("validation").batch(EVAL_BATCH):
        auc.update_state(labels, model(features, training=False))
    return float(auc.result().numpy())


def run(config: dict) -> dict:
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver(),
        variable_partitioner=BalancedPartitioner(len(config["ps_ports"]), min_shard_bytes=MIN_SHARD_BYTES))
    tf_keras.utils.set_random_seed(0)
    options = _options(config)
    with strategy.scope():
        model = recommenders.build_and_compile("dlrm", options, tf_keras.optimizers.Adam(1e-3),
                                               steps_per_execution=config.get("spe", 10))
    batch, workers, epochs = config.get("batch", 512), config["workers"], config.get("epochs", 4)
    steps = config["steps"] // epochs
    drift = synthetic_criteo.Drift(config["new_ids"], config["lifetime"], config["period_examples"])
    source = synthetic_criteo.load((config["table_rows"],) * CATEGORICAL_FEATURES, seed=0,
                                   train_examples=steps * epochs * batch, drift=drift)
    tables = table_report(model)
    meter = Meter({"ps": config["ps_ports"], "worker": config["worker_ports"]}, epochs)
    sampler = MemorySampler(config.get("sample_every", steps), tables.layers if tables else [])
    callbacks = [meter, sampler]
    started = time.monotonic()
    model.fit(tf_keras.utils.experimental.DatasetCreator(source.train_dataset_fn(batch, 0, workers=workers)),
              epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    per_epoch = [steps * batch / seconds for seconds in meter.seconds]
    return {"kind": config["kind"], "examples_per_s": statistics.median(per_epoch[1:] or per_epoch),
            "epoch_examples_per_s": [round(e) for e in per_epoch], "bytes_per_step": meter.bytes_per_step(),
            "validation_auc": validation_auc(model, source), "wall_s": round(time.monotonic() - started, 1),
            "tables": tables.summary() if tables else {}, "memory": sampler.samples, "note": source.note}


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
