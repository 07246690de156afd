"""A chief-like program for tests/test_rows_on_ps.py: `CLUSTER DIR` builds a dlrm on the cluster's ps (the chief's
own set-up code), trains 2 steps, then saves it twice through EpochCheckpoints: written by the chief, and written by
each ps (training.output_dir_shared, checked as a run checks it), noting the bytes each process wrote
(/proc/<pid>/io) and the tables' bytes in DIR/written.json; then restores the ps-written checkpoint.
`CLUSTER DIR PID` saves once written by each ps, SIGKILLs the process PID (ps:1) as soon as its first part is sent
to it, and notes in DIR/killed.json how the save ended and what the checkpoints folder holds then."""

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
from launcher.process import PidRecord  # noqa: E402

TRAINING = {"model": "dlrm", "table_rows": 4000, "embedding_dim": 16, "bottom_mlp": [8], "top_mlp": [8],
            "per_worker_batch": 32, "steps_per_epoch": 4, "steps_per_execution": 2, "epochs": 2, "lr_decay_epochs": [],
            "synthetic_examples": 256, "min_shard_bytes": 256, "dataset": "synthetic_criteo",
            "embedding_optimizer": "adagrad", "stream_chunk_mb": 0.25}


def written(pid: int) -> int:
    return int(re.search(r"^wchar: (\d+)$", Path(f"/proc/{pid}/io").read_text(), re.M).group(1))


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


def main(cluster: str, directory: str, kill_pid: str | None = None) -> None:
    config = cluster_config.load(cluster)
    taskspec.apply_to_this_process(config, config.task("chief", 0))
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
    step = train_step(model, distribution)
    for batch in run.source.split("train").batch(run.global_batch).take(2):
        step(batch)
    if kill_pid is not None:
        Path(directory, "killed.json").write_text(json.dumps(killed_mid_save(runs["rows_on_ps"], model,
                                                                              int(kill_pid))))
        sys.stdout.flush()
        os._exit(0)  # a ps is gone: TensorFlow's shutdown would wait on it
    logs = Path(config.launcher.logs_dir)
    ps_pids = [PidRecord.read(logs / f"ps-{index}.pid").pid for index in range(len(config.jobs["ps"]))]
    results = {name: saved_once(runs[name], model, ps_pids) for name in runs}
    restored = results["rows_on_ps"].pop("checkpoints").restore_latest()
    results["through_chief"].pop("checkpoints")
    results["restored"] = restored.name
    results["table_bytes"] = table_bytes(results["rows_on_ps"]["prefix"], round(TRAINING["stream_chunk_mb"] * 2**20))
    Path(directory, "written.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
