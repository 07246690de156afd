"""`sh run.sh status` from the files a run leaves: progress, validation and the per-ps report of a recommender."""

from __future__ import annotations

import json

from clusterkit import cluster_document, write_cluster
from cluster import config as cluster_config
from launcher import agent
from launcher.status import render_status, run_progress

CHIEF_LOG = """[chief:0] 10:00:00 per ps:   ps:1 | held      90.0 MiB | lookups/step    2000 | moved/step    0.50 MiB
[chief:0] 10:00:01 per ps:   ps:0 | held     100.0 MiB | lookups/step    2250 | moved/step    0.55 MiB
[chief:0] 10:00:01 per ps:   ps:1 | held     100.0 MiB | lookups/step    2230 | moved/step    0.54 MiB
[chief:0] 10:00:09 train | epoch 2/6 | step 44/132 | 43.1 steps/s | 2755 ex/s | loss 0.7288 | lr 1.0e-03 | ETA 0:00:02
"""


def test_status_shows_progress_and_the_per_ps_report(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(logs_dir=str(logs))))
    (logs / "chief-0.log").write_text(CHIEF_LOG)
    progress = run_progress(config)
    assert progress["epoch"] == "2/6" and progress["step"] == "44/132" and progress["steps_per_s"] == 43.1
    assert [line.split("|")[0].strip() for line in progress["per_ps"]] == ["ps:0", "ps:1"]

    tasks = [{"task": "chief:0", "host": "localhost", "pid": 7, "state": "running", "restarts": 0,
              "uptime_s": 9.0, "last_line": "train | epoch 2/6"}]
    (logs / "status.json").write_text(json.dumps({"updated": 0, "wall_s": 9, "finished": True, "tasks": tasks,
                                                   "run": progress}))
    shown = render_status(config).splitlines()
    assert shown[-2].startswith("per ps:   ps:0 | held     100.0 MiB | lookups/step    2250")
    assert shown[-3].startswith("epoch 2/6 | step 44/132 | steps per s 43.1")


def test_the_last_log_line_skips_tensorflows_start_up_notices(tmp_path):
    log = tmp_path / "ps-0.log"
    log.write_text("[ps:0] 10:00:00 ps:0 listening on n02:22223\n"
                   "2026-11-24 10:00:01.1 I tensorflow/core/util/port.cc:153] oneDNN custom operations are on. You "
                   "may see slightly different numerical results. To turn them off, set TF_ENABLE_ONEDNN_OPTS=0.\n"
                   "2026-11-24 10:00:01.2 I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow "
                   "binary is optimized to use available CPU instructions\n")
    assert agent.last_line(log) == "[ps:0] 10:00:00 ps:0 listening on n02:22223"
    log.write_text("2026-11-24 10:00:01.1 I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.\n")
    assert "oneDNN" in agent.last_line(log)  # nothing else yet: the notice is still better than nothing


FOLLOW_LOG = "\n".join([
    "[chief:0] 10:00:05 serving | version 3 | ckpt-0-44 | 1 file newly served | freshness 0:00:16 | export check "
    "0.0e+00 | out/serving/3",
    "[chief:0] 10:00:09 follow | files 3/4 done | step 58 | 4.2 steps/s | 118 ex/s | behind 1 file, 0:00:11 | not "
    "trained: 30 records skipped, 1 files quarantined | pieces w0:3 | loss 1",
    "[chief:0] 10:00:12 serving | version 4 | ckpt-0-61 | 0 files newly served | freshness - | export check 0.0e+00 | "
    "out/serving/4"]) + "\n"


def test_status_of_a_followed_run_shows_files_lag_and_freshness(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = cluster_config.load(write_cluster(tmp_path, cluster_document(logs_dir=str(logs))))
    (logs / "chief-0.log").write_text(FOLLOW_LOG)
    progress = run_progress(config)
    assert (progress["files_done"], progress["step"], progress["examples_per_s"]) == ("3/4", "58", 118)
    assert progress["data"] == "behind 1 file, 0:00:11" and progress["serving_version"] == 4
    assert progress["not_trained"] == "30 records skipped, 1 files quarantined"
    assert progress["freshness"] == "0:00:16 (landed to served in version 3)"  # version 4 served no new file
    delta = ("[chief:0] 10:00:14 serving | delta 4.2 | steps 61 to 70 | 812 rows changed | 1 file newly served | "
             "freshness 0:00:07 | 0.12 MB in 0.6 s\n")
    (logs / "chief-0.log").write_text(FOLLOW_LOG + delta)
    progress = run_progress(config)
    assert progress["freshness"] == "0:00:07 (landed to served in delta 4.2)" and progress["serving_version"] == 4
