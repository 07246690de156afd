"""A chief that writes serving deltas of a hashed dlrm while its steps run on a real cluster, for
tests/test_follow_deltas.py and bench/online/deltas.py; prints `RESULT {json}` last.

`python tests/delta_chief.py check OUT` (TF_CONFIG of a chief): a base checkpoint, then deltas each read while
steps scheduled just before it run on the workers, a last one once they are done; base plus every delta against
the live tables, stamps included. `... time OUT STEPS [TABLE_ROWS]` times STEPS steps with and without row stamps.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import deltakit  # noqa: E402
from cluster.config import PROJECT_ROOT  # noqa: E402
from cluster.training_parse import parse_training_options  # noqa: E402
from tables.changed_rows import step_clock  # noqa: E402
from tables.kinds import track_changes  # noqa: E402
from models.compiled import build_compiled  # noqa: E402
from tables.placement import BalancedPartitioner  # noqa: E402
from online.publish.deltas import DeltaFiles, DeltaSource, write_delta  # noqa: E402
from tables.streaming import checkpoint_io  # noqa: E402
from data import contract, source_for  # noqa: E402

CHIEF_CPU = "/job:chief/replica:0/task:0/device:CPU:0"
CHUNK = 64 << 10
STALLED_PS = "DELTA_CHIEF_STALLED_PS"  # the pid of a ps that `check` stops for STALL_S during its second delta
STALL_S = 1.5


def stall(pid: int, seconds: float) -> None:
    """SIGSTOPs process `pid` now and SIGCONTs it `seconds` later, on a timer thread."""
    os.kill(pid, signal.SIGSTOP)
    threading.Timer(seconds, os.kill, args=(pid, signal.SIGCONT)).start()


def cluster(table_rows: int, dim: int = 8, batch: int = 256):
    """(strategy, coordinator, model, scheduled step, batches) for a hashed dlrm on the cluster of TF_CONFIG."""
    num_ps = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["ps"])
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver(),
        variable_partitioner=BalancedPartitioner(num_ps, min_shard_bytes=256))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    options = parse_training_options({"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": table_rows,
                                      "embedding_dim": dim, "bottom_mlp": [16], "top_mlp": [16]})
    source = source_for(options, PROJECT_ROOT)
    with strategy.scope():
        model = build_compiled(options, source)
    batches = [batch_ for batch_ in contract.batch(source.split("train"), batch).take(64)]
    step = tf.function(lambda features, labels: strategy.run(model.train_step, args=((features, labels),)))
    return strategy, coordinator, model, step, batches


def schedule(coordinator, step, batches, count: int, first: int) -> None:
    for number in range(first, first + count):
        features, labels = batches[number % len(batches)]
        coordinator.schedule(step, args=(features, labels))


def check(out: str) -> dict:
    strategy, coordinator, model, step, batches = cluster(table_rows=2000)
    tracked = track_changes(model, strategy)
    source, files = DeltaSource(model, tracked), DeltaFiles(Path(out) / "serving")
    schedule(coordinator, step, batches, 10, 0)
    coordinator.join()
    source.advance()  # as the chief does each beat
    schedule(coordinator, step, batches, 1, 10)
    coordinator.join()
    root = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    base = checkpoint_io.save(root, str(Path(out) / "ckpt-base"), device=CHIEF_CPU, chunk_bytes=CHUNK)
    from_step = rows_from = source.watermark_before(int(step_clock(model).numpy()))
    during = []
    for sequence in range(1, 6):
        if sequence < 5:
            schedule(coordinator, step, batches, 12, 10 + 12 * sequence)  # running while the delta is read
        else:
            coordinator.join()
        if sequence == 2 and os.environ.get(STALLED_PS):  # a ps stalled while updates and this delta's reads run
            stall(int(os.environ[STALLED_PS]), STALL_S)
        before = int(step_clock(model).numpy())
        written = write_delta(source, files, version=1, sequence=sequence, from_step=from_step, rows_from=rows_from,
                              chunk_bytes=CHUNK)
        during.append(int(step_clock(model).numpy()) - before)
        from_step, rows_from = written.read_step, written.from_step  # as the follow loop's chain does
    live = deltakit.live_tables(model, tracked)
    deltas = deltakit.deltas_on_disk(Path(out) / "serving", 1)
    replayed = deltakit.replayed(deltakit.base_tables(base, {t: list(f) for t, f in live.items()}), deltas)
    return {"differences": deltakit.differences(live, replayed), "steps_during_reads": during,
            "rows": [sum(m["rows"].values()) for m, _ in deltas], "table_rows": sum(
                len(fields["rows"]) for fields in live.values())}


def timed(out: str, steps: int, table_rows: int = 100_000) -> dict:
    """Steps per second of one model without row stamps and with them (its step traced again), alternated."""
    strategy, coordinator, model, plain, batches = cluster(table_rows=table_rows, dim=16, batch=512)
    schedule(coordinator, plain, batches, 20, 0)  # traced before any stamp: it never stamps
    coordinator.join()
    track_changes(model, strategy)
    stamped = tf.function(lambda features, labels: strategy.run(model.train_step, args=((features, labels),)))
    schedule(coordinator, stamped, batches, 20, 0)
    coordinator.join()
    rates = {"without": [], "with": []}
    for kind, step in (("without", plain), ("with", stamped)) * 2:
        started = time.monotonic()
        schedule(coordinator, step, batches, steps, 0)
        coordinator.join()
        rates[kind].append(steps / (time.monotonic() - started))
    return {f"steps_per_s_{kind}": round(float(np.mean(values)), 2) for kind, values in rates.items()}


if __name__ == "__main__":
    action, out, *rest = sys.argv[1:]
    result = check(out) if action == "check" else timed(out, *(int(value) for value in rest))
    print("RESULT " + json.dumps(result), flush=True)
