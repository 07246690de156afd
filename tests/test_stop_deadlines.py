"""A stop within the launcher's grace on real servers (2 ps, 2 workers): a follow-mode chief stopped the launcher's
way (SIGTERM to its process group, launcher.stop_grace_s, then SIGKILL) while its stop's checkpoint is slow (made so
for tests by common/stop_budget.py's SLOW_STEP_FOR_TESTS, as a huge table's save is) exits 4 inside the grace with
one line naming the step abandoned; the next start resumes from the checkpoint before and trains each file once."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from clusterkit import PYTHON, ROOT, derive_cluster, finish, start_module, wait_for_line
from common.stop_budget import SLOW_STEP_FOR_TESTS
from launcher import process
from test_follow import FOLLOW, wait_for_pattern, write_day

pytestmark = pytest.mark.cluster

GRACE_S = 30.0  # launcher.stop_grace_s: the stop's deadline is 24 s after SIGTERM (6 s kept for the exit: at 15 s
# the 3 s kept could be short for a busy host)


def test_a_stop_whose_checkpoint_cannot_finish_exits_4_inside_the_grace_and_the_next_start_resumes(
        shared_servers, tmp_path):
    data, output, log, again = tmp_path / "data", tmp_path / "output", tmp_path / "chief.log", tmp_path / "again.log"
    data.mkdir()
    write_day(data, "day_0", 300, 0)
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, launcher={"stop_grace_s": GRACE_S},
                             training={**FOLLOW, "data_dir": str(data), "output_dir": str(output),
                                       "checkpoint_every_s": 2, "serving_export_every_s": 600, "keep_checkpoints": 100})
    slow = {**os.environ, SLOW_STEP_FOR_TESTS: "the stop's checkpoint=60"}  # far past the grace
    chief, record = process.start([PYTHON, "-m", "coordinator.train", "--cluster", str(cluster)], cwd=ROOT, env=slow,
                                  log_path=log, pid_path=tmp_path / "chief.pid")  # its own group, as the launcher's
    resumed = None
    try:
        assert wait_for_pattern(log, r"checkpoint ckpt-0-\d+ \(optimizer step \d+\): 1 files done", 240), \
            log.read_text()[-3000:]
        write_day(data, "day_1", 1200, 300)
        assert wait_for_line(log, "day_1: started", 120, chief), log.read_text()[-3000:]
        sent = time.monotonic()
        outcome = process.stop(record, grace_s=GRACE_S)  # the launcher's own stop: SIGTERM, the grace, SIGKILL
        took_s = time.monotonic() - sent
        assert (outcome, chief.wait(timeout=10)) == (process.StopOutcome.STOPPED, 4), log.read_text()[-3000:]
        assert took_s < GRACE_S, took_s
        text = log.read_text()
        (line,) = [line for line in text.splitlines() if "stop: " in line and "SIGTERM" in line]
        before = re.search(r"the stop's checkpoint not done [\d.]+ s after SIGTERM \(launcher.stop_grace_s 30 s, less "
                           r"6 s for the exit\): abandoned, nothing of it made visible; the next start resumes from "
                           r"(ckpt-0-\d+) and trains again", line)
        assert before and "stopped as asked" not in text, line
        resumed = start_module("coordinator.train", "--cluster", str(cluster), "--stop_when_idle_s", "4",
                               log_path=again)
        assert finish(resumed, timeout_s=240) == [0], again.read_text()[-3000:]
    finally:
        if process.group_alive(record):
            process.stop(record, grace_s=1)
        finish(chief, *([resumed] if resumed else []), timeout_s=1)
    assert f"from {before.group(1)} (optimizer step" in again.read_text()  # the checkpoint before the stop
    summary = json.loads((output / "summary.json").read_text())
    assert {f["name"]: f["examples"] for f in summary["follow"]["per_file"]} == {"day_0": 300, "day_1": 1200}
    assert summary["optimizer_steps"] == summary["follow"]["steps"]  # no piece trained twice into the model
    print(f"stopped {took_s:.1f} s after SIGTERM (grace {GRACE_S:g} s), exit 4; resumed from {before.group(1)}")
