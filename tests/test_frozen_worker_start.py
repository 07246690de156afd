"""A worker frozen (SIGSTOP) when the chief starts, or at its first look at the folder, costs its own pieces only:
the chief leaves it out (or gives its pieces again), trains TFRecord files as they land, checkpoints, serves and
writes deltas on the other worker, and says when it answers again (issue 59, item 4)."""

from __future__ import annotations

import re
import signal
import time

import pytest

import datakit
from cluster.run_files import RUN_VARIABLE
from clusterkit import derive_cluster, finish, start_module
from launcher import process
from test_follow import Frozen

pytestmark = pytest.mark.cluster

CLICKS = {"model": "dlrm", "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8],
          "per_worker_batch": 16, "min_shard_bytes": 256, "dataset": "tfrecord", "follow_data": True,
          "tfrecord_features": datakit.CLICK_SCHEMA, "numeric_features": datakit.CLICK_NUMERIC,
          "categorical_features": datakit.CLICK_CATEGORICAL, "data_poll_s": 0.5, "settle_s": 1,
          "checkpoint_every_s": 4, "serving_export_every_s": 4, "serving_delta_every_s": 1, "progress_every_s": 2}


def test_a_chief_started_while_a_worker_is_frozen_trains_tfrecords_and_deltas_on_the_other(shared_servers, tmp_path,
                                                                                          monkeypatch):
    data, output, log = tmp_path / "clicks", tmp_path / "output", tmp_path / "chief.log"
    datakit.write_click_records(data, {"train": [120, 120]})
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **CLICKS, "data_dir": str(data), "output_dir": str(output)})
    worker = process.PidRecord.read(shared_servers.parent / "logs" / "worker-1.pid").pid
    monkeypatch.delenv(RUN_VARIABLE, raising=False)  # started by hand: an in-process launcher test may have set it
    chief = None
    try:
        with Frozen(worker):
            chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=log)
            wait_for(log, r"worker:1@\S+ accepts connections but answered nothing .*: training without it", chief)
            wait_for(log, r"first look at ", chief)
            wait_for(log, r"train-00001-of-00002: done", chief)
            land_clicks(data, "day-2", tmp_path)  # a new TFRecord file: its verdict is traced while it is frozen
            wait_for(log, r"day-2: done", chief)
            wait_for(log, r"serving \| delta \d+\.\d+ \|", chief)
        wait_for(log, r"worker:1 answers again; it trains from this chief's next start", chief)
        chief.send_signal(signal.SIGTERM)
        code = finish(chief, timeout_s=120)[0]
    finally:
        if chief is not None:
            finish(chief, timeout_s=1)
    text = log.read_text()
    assert code == 4, text[-3000:]
    assert re.search(r"pieces w0:3\b", text), text[-3000:]  # every piece on worker 0: worker 1 was never asked


@pytest.mark.parametrize("at_start", [[120, 120], []], ids=["files at the start", "an empty folder"])
def test_a_worker_frozen_before_the_first_checkpoints_holds_no_file_checkpoint_version_or_delta(shared_servers,
                                                                                               tmp_path, at_start):
    """Frozen at the chief's first look at the folder (files there, or none: the reference inputs then come from
    the first file that lands, through functions traced at set-up), before anything was saved or served (every
    eager op and trace the chief runs later was run at set-up: a first one waits for every task): the TFRecord
    verdicts on the watcher thread, the checkpoints, the first serving version and the deltas go on, and the new
    files train on the other worker. It is stopped within milliseconds of that look, before the look's pieces are
    handed out: a closure it then takes must not hold the chief (TensorFlow's worker index did: a copy to the
    worker, made holding the GIL)."""
    data, output, log = tmp_path / "clicks", tmp_path / "output", tmp_path / "chief.log"
    datakit.write_click_records(data, {"train": at_start})
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **CLICKS, "data_dir": str(data), "output_dir": str(output), "straggler_after_s": 0.5})
    worker = process.PidRecord.read(shared_servers.parent / "logs" / "worker-1.pid").pid
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=log)
    try:
        wait_for(log, r"first look at ", chief, poll_s=0.002)
        with Frozen(worker):
            before = len(log.read_text())
            for day in ("day-2", "day-3"):
                land_clicks(data, day, tmp_path)
                wait_for(log, rf"{day}: done", chief, after=before)
            for pattern in (r"checkpoint ckpt-\S+ \(optimizer step", r"checkpoint for-serving/\S+ \(optimizer step",
                            r"serving \| delta \d+\.\d+ \|"):
                wait_for(log, pattern, chief, after=before)
        chief.send_signal(signal.SIGTERM)
        code = finish(chief, timeout_s=120)[0]
    finally:
        finish(chief, timeout_s=1)
    assert code == 4, log.read_text()[-3000:]


def land_clicks(data, name: str, tmp_path) -> None:
    """One TFRecord file of click records, written aside and renamed into `data` (the safe way to publish one)."""
    stage = tmp_path / f"stage-{name}"
    datakit.write_click_records(stage, {"train": [120]}, seed=len(name) + ord(name[-1]))
    (stage / "train-00000-of-00001").rename(data / name)


def wait_for(log, pattern: str, chief, timeout_s: float = 120, *, after: int = 0, poll_s: float = 0.2) -> None:
    """Waits for `pattern` in the chief's log; fails at once, with the log's end, when the chief has exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace")[after:]):
            return
        if chief.poll() is not None:
            break
        time.sleep(poll_s)
    raise AssertionError(f"no {pattern!r} in the chief's log: {log.read_text(errors='replace')[-3000:]}")
