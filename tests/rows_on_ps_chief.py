"""A chief-like program for tests/test_rows_on_ps.py: `CLUSTER DIR` builds a dlrm on the cluster's ps (the chief's
own set-up code, its tables tracked for deltas), trains 2 steps, then saves it twice through EpochCheckpoints and
writes two serving deltas twice (one of every row, one of the rows the steps changed): written by the chief, and
written by each ps (training.output_dir_shared, checked as a run checks it), noting the bytes each process wrote
(/proc/<pid>/io) and the tables' bytes in DIR/written.json; then zeroes the model and restores the ps-written
checkpoint, each ps reading its own rows.
`CLUSTER DIR PID WHAT` writes WHAT (checkpoint or delta) once by each ps, SIGKILLs the process PID (ps:1) as soon as
its first part is sent to it, and notes in DIR/killed.json how the write ended and what its folder holds then."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import sys
from pathlib import Path

import roundtrip_chief  # noqa: F401 (puts the project on the path)
from roundtrip_chief import build, train_step

from cluster import config as cluster_config  # noqa: E402
from cluster import taskspec  # noqa: E402
from cluster.training_parse import parse_training_options  # noqa: E402
from common.graph_style import trace_toolkit_code_as_written  # noqa: E402
from launcher.process import PidRecord  # noqa: E402

TRAINING = {"model": "dlrm", "table_rows": 4000, "embedding_dim": 16, "bottom_mlp": [8], "top_mlp": [8],
            "per_worker_batch": 32, "steps_per_epoch": 4, "steps_per_execution": 2, "epochs": 2, "lr_decay_epochs": [],
            "synthetic_examples": 256, "min_shard_bytes": 256, "dataset": "synthetic_criteo",
            "embedding_optimizer": "adagrad", "stream_chunk_mb": 0.25}


def delta_sources(model, distribution) -> dict:
    """What deltas read of `model` (its tables tracked from now on: before the first step is traced), written
    through the chief and by each ps."""
    from online.publish.deltas import DeltaSource
    from tables.kinds import track_changes

    tracked = track_changes(model, distribution)
    return {"through_chief": DeltaSource(model, tracked), "rows_on_ps": DeltaSource(model, tracked, rows_on_ps=True)}


def written(pid: int, what: str = "wchar") -> int:
    return int(re.search(rf"^{what}: (\d+)$", Path(f"/proc/{pid}/io").read_text(), re.M).group(1))


def restored_once(checkpoints, model, ps_pids: list[int]) -> dict:
    """Zeroes every weight of `model`, restores the newest checkpoint of `checkpoints` and says whether every weight
    came back, and what each process read meanwhile."""
    import numpy as np

    saved = [weight.numpy() for weight in model.weights]
    for weight in model.weights:
        weight.assign(np.zeros(weight.shape, weight.dtype.as_numpy_dtype))
    before = [written(pid, "rchar") for pid in ["self", *ps_pids]]
    position = checkpoints.restore_latest()
    after = [written(pid, "rchar") for pid in ["self", *ps_pids]]
    same = all(np.array_equal(kept, weight.numpy()) for kept, weight in zip(saved, model.weights, strict=True))
    return {"name": position.name, "same": same, "chief": after[0] - before[0],
            "ps": [b - a for a, b in zip(before[1:], after[1:], strict=True)]}


def saved_once(run, model, ps_pids: list[int], **extra) -> dict:
    """Saves `model` as the series of `run` (position 1) and says what each process wrote meanwhile."""
    from coordinator import setup, strategy
    from models.checkpoints import Position

    checkpoints = setup.epoch_checkpoints(run, model, io_device=strategy.CHIEF_CPU)
    before = [written(pid) for pid in ["self", *ps_pids]]
    prefix = checkpoints.save(Position(1))
    after = [written(pid) for pid in ["self", *ps_pids]]
    growth = [b - a for a, b in zip(before, after, strict=True)]
    return {"prefix": prefix, "chief": growth[0], "ps": growth[1:], "rows_on_ps": checkpoints.rows_on_ps,
            "checkpoints": checkpoints, **extra}


def table_bytes(prefix: str, chunk_bytes: int) -> int:
    import tensorflow as tf

    from tables.streaming.rows import is_table

    reader = tf.train.load_checkpoint(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    shapes = reader.get_variable_to_shape_map()
    return sum(int(tf.TensorShape(shape).num_elements()) * dtypes[key].size
               for key, shape in shapes.items() if is_table(shape, dtypes[key], chunk_bytes))


def kill_at_first_part(pid: int) -> None:
    """SIGKILLs `pid` just after the first part of a save is sent to ps:1 (its SaveV2 queued there)."""
    from tables.streaming.bundle import BundleWriter

    original = BundleWriter.add

    def add(self, key, tensor, spec="", *, device=None):
        original(self, key, tensor, spec, device=device)
        if device and "/job:ps/replica:0/task:1/" in device:
            BundleWriter.add = original
            os.kill(pid, signal.SIGKILL)

    BundleWriter.add = add


def killed_mid_save(run, model, pid: int) -> dict:
    import tensorflow as tf

    from coordinator import setup, strategy
    from models.checkpoints import Position, listed_checkpoints

    checkpoints = setup.epoch_checkpoints(run, model, io_device=strategy.CHIEF_CPU)
    kill_at_first_part(pid)
    try:
        checkpoints.save(Position(1))
        ended = "saved"
    except tf.errors.OpError as error:
        ended = type(error).__name__
    return {"ended": ended, "rows_on_ps": checkpoints.rows_on_ps, "listed": listed_checkpoints(checkpoints.directory),
            "files": sorted(path.name for path in checkpoints.directory.iterdir())}


def killed_mid_delta(run, source, pid: int) -> dict:
    import tensorflow as tf

    from online.publish.deltas import DeltaFiles, write_delta

    files = DeltaFiles(run.files.serving)
    source.warm_up(files.directory)
    kill_at_first_part(pid)
    try:
        write_delta(source, files, version=1, sequence=1, from_step=-1, settle_s=0)
        ended = "saved"
    except tf.errors.OpError as error:
        ended = type(error).__name__
    return {"ended": ended, "rows_on_ps": source.rows_on_ps, "listed": files.listed(),
            "files": sorted(path.name for path in files.directory.iterdir())}


def deltas_once(run, source, ps_pids: list[int]) -> dict:
    """Writes a delta of every row (from step -1: a stamp is -1 before its row's first change) and one of the rows
    the steps changed (from step 0: the clocks were never advanced) as the run `run`, saying what each process
    wrote for the first."""
    from online.publish.deltas import DeltaFiles, write_delta

    files = DeltaFiles(run.files.serving)
    source.warm_up(files.directory)
    before = [written(pid) for pid in ["self", *ps_pids]]
    every = write_delta(source, files, version=1, sequence=1, from_step=-1, settle_s=0)
    after = [written(pid) for pid in ["self", *ps_pids]]
    changed = write_delta(source, files, version=1, sequence=2, from_step=0, settle_s=0)
    growth = [b - a for a, b in zip(before, after, strict=True)]
    return {"every": str(every.path), "changed": str(changed.path), "rows": [every.rows, changed.rows],
            "chief": growth[0], "ps": growth[1:]}


def main(cluster: str, directory: str, kill_pid: str | None = None, kill_in: str = "checkpoint") -> None:
    config = cluster_config.load(cluster)
    taskspec.apply_to_this_process(config, config.task("chief", 0))
    trace_toolkit_code_as_written()  # as the chief does (common/graph_style.py)
    from coordinator import setup, strategy

    log = logging.getLogger("rows-on-ps")
    logging.basicConfig(level=logging.INFO)
    runs = {}
    for name, shared in (("through_chief", False), ("rows_on_ps", True)):
        options = parse_training_options({**TRAINING, "output_dir": str(Path(directory) / name),
                                          "output_dir_shared": shared})
        runs[name] = setup.plan(dataclasses.replace(config, training=options), options, log,
                                workers=len(config.jobs["worker"]), batch_note="")
    run = runs["through_chief"]
    distribution = strategy.build(config, run.options)
    model = build(run, distribution, True)
    sources = delta_sources(model, distribution)
    step = train_step(model, distribution)
    for batch in run.source.split("train").batch(run.global_batch).take(2):
        step(batch)
    if kill_pid is not None:
        killed = (killed_mid_save(runs["rows_on_ps"], model, int(kill_pid)) if kill_in == "checkpoint" else
                  killed_mid_delta(runs["rows_on_ps"], sources["rows_on_ps"], int(kill_pid)))
        Path(directory, "killed.json").write_text(json.dumps(killed))
        sys.stdout.flush()
        os._exit(0)  # a ps is gone: TensorFlow's shutdown would wait on it
    logs = Path(config.launcher.logs_dir)
    ps_pids = [PidRecord.read(logs / f"ps-{index}.pid").pid for index in range(len(config.jobs["ps"]))]
    results = {name: saved_once(runs[name], model, ps_pids) for name in runs}
    results["deltas"] = {name: deltas_once(runs[name], sources[name], ps_pids) for name in runs}
    results["through_chief"].pop("checkpoints")
    results["restored"] = restored_once(results["rows_on_ps"].pop("checkpoints"), model, ps_pids)
    results["table_bytes"] = table_bytes(results["rows_on_ps"]["prefix"], round(TRAINING["stream_chunk_mb"] * 2**20))
    Path(directory, "written.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
