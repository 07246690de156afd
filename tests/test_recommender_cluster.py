"""dlrm from cluster.json on loopback (2 ps, 2 workers): trained, evaluated by val_auc, exported, loaded alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

import criteokit
from clusterkit import derive_cluster, finish, run_module, served_predictions, start_module

pytestmark = pytest.mark.cluster

TINY = {"model": "dlrm", "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8],
        "per_worker_batch": 32, "steps_per_epoch": 4, "steps_per_execution": 2, "epochs": 2, "lr_decay_epochs": [],
        "synthetic_examples": 1024, "min_shard_bytes": 256}



def test_dlrm_on_synthetic_criteo_is_evaluated_by_auc_and_exported(shared_servers, tmp_path):
    output = tmp_path / "output"
    cluster = derive_cluster(shared_servers, tmp_path, training={
        **TINY, "dataset": "synthetic_criteo", "output_dir": str(output)},
        evaluation={"poll_s": 0.5, "idle_timeout_s": 200, "best_metric": "val_auc", "best_mode": "max",
                    "batch": 4096})
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=tmp_path / "chief.log")
    evaluator = start_module("evaluator.sidecar", "--cluster", str(cluster), log_path=tmp_path / "evaluator.log")
    codes = finish(chief, evaluator)
    assert codes == [0, 0], (tmp_path / "chief.log").read_text()[-3000:] + (tmp_path / "evaluator.log").read_text()
    summary = json.loads((output / "summary.json").read_text())
    assert any(len(devices) == 2 for devices in summary["variable_placement"].values())  # a table split over 2 ps
    assert set(summary["ps_report"]) == {"ps:0", "ps:1"}  # bytes held and moved per step on each ps
    assert "per ps: " in (tmp_path / "chief.log").read_text()
    best = json.loads((output / "best_model" / "best.json").read_text())
    assert best["best_metric"] == "val_auc" and 0.0 <= best["metrics"]["val_auc"] <= 1.0
    report = tmp_path / "best_eval.json"
    fresh = run_module("evaluator.sidecar", "--cluster", str(cluster), "--model",
                       str(output / "best_model" / "model.keras"), "--split", "validation",
                       "--output_json", str(report))
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(report.read_text())["metrics"]["validation_auc"] == pytest.approx(
        best["metrics"]["val_auc"], abs=1e-4)


def _named(data):
    criteokit.write(data / "train-0", criteokit.rows(300), extra_lines={5: "1\tnot a Criteo line"})
    criteokit.write(data / "train-1.gz", criteokit.rows(300, first=300), gz=True)
    criteokit.write(data / "validation-0", criteokit.rows(100, first=1000))


def _kaggle(data):
    criteokit.write(data / "train.txt", criteokit.rows(700))
    (data / "test.txt").write_text("\t".join(["1"] * 39) + "\n")  # Kaggle's test.txt: no label column


def _terabyte(data):
    criteokit.write(data / "day_0", criteokit.rows(300))
    criteokit.write(data / "day_1.gz", criteokit.rows(300, first=300), gz=True)
    criteokit.write(data / "day_2", criteokit.rows(200, first=600))


@pytest.mark.parametrize("write, said", [
    (_named, "sharded by file: 2 training files over 2 workers"),
    (_kaggle, "sharded by byte range: 1 training file part(s) for 2 workers"),
    (_terabyte, "validation and test are the halves of day_2 (as MLPerf does)"),
], ids=["named", "kaggle", "terabyte"])
def test_dlrm_trains_on_criteo_files_as_published(shared_servers, tmp_path, write, said):
    data = tmp_path / "criteo"
    data.mkdir()
    write(data)
    names = sorted(p.name for p in data.iterdir())
    output = tmp_path / "output"
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **TINY, "dataset": "criteo", "data_dir": str(data), "output_dir": str(output), "skip_corrupt": True},
        evaluation={"best_metric": "val_auc", "best_mode": "max"})
    trained = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert said in trained.stderr
    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and set(summary["final_metrics"]) >= {"auc", "log_loss"}
    # the bad line, skipped on a worker, counted in the summary (once per pass over train-0)
    assert summary["skipped_records"] >= 1 if write is _named else summary["skipped_records"] == 0
    assert (output / "model" / "model.keras").exists()
    assert sorted(p.name for p in data.iterdir()) == names  # nothing renamed, split or written beside the data
    if write is _named:  # the export takes Criteo rows as they are, served by a program that knows no toolkit
        served = served_predictions(output / "model" / "saved_model", "criteo", data / "validation-0", 16)
        reference = np.load(output / "model" / "reference_predictions.npz")
        assert np.abs(served - reference["predictions"].reshape(-1)).max() <= 1e-4
        assert reference["inputs_categories"].shape == (16, 26) and "export check" in trained.stderr
