"""A follow-mode run started on 0.5 and killed mid-file (tests/fixtures/run-0.5.tar.xz, made by 0.5's own code: see
upgrade_fixture.py) resumes on this code on real servers: from its settled checkpoint, no file trained twice, the one
file a 0.5 retention job deleted before a resume could keep it counted lost by name and no other, nothing published
older than the step 0.5's deltas served, while 0.5's follower goes on serving what this code publishes."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

import upgrade_fixture
from clusterkit import PYTHON, derive_cluster, finish, start_module, wait_for_line
from test_follow import write_day
from test_follow_deltas import _wait

pytestmark = pytest.mark.cluster


def _old_follower(run):
    """0.5's follower.py as users copied it, alone in its folder (no toolkit on its path), sampling every 0.3 s."""
    log = open(run / "follower.log", "wb")
    return subprocess.Popen([PYTHON, "follower.py", "--serving", str(run / "output" / "serving"), "--every_s", "0.3",
                             "--events", str(run / "events.jsonl")], cwd=run / "follower", stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


def _events(run) -> list[tuple[int, int]]:
    path = run / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(event["version"], event["sequence"]) for event in map(json.loads, lines)]


def _newest_served(serving) -> tuple[int, int]:
    """(the newest version, its last delta's sequence or 0) on disk."""
    newest = max(int(p.name) for p in serving.iterdir() if p.name.isdigit())
    deltas = [tuple(map(int, p.name.split("."))) for p in (serving / "deltas").iterdir() if p.name[0].isdigit()]
    return newest, max((sequence for version, sequence in deltas if version == newest), default=0)


def test_a_run_killed_on_0_5_resumes_on_this_code(shared_servers, tmp_path):
    run = upgrade_fixture.unpack(upgrade_fixture.FIXTURE, tmp_path / "run")
    saw, output, log = json.loads((run / "saw.json").read_text()), run / "output", run / "chief.log"
    old_last = _newest_served(output / "serving")  # 0.5's version and its last delta
    upgrade_fixture.write_days(run / "data", ["day_1", "day_2", "day_4"])  # day_0, day_3: gone, as 0.5's docs allowed
    assert all(upgrade_fixture.digest(run / "data" / name) == saw["days"][name] for name in ("day_1", "day_2", "day_4")
               ), "tests/criteokit.py writes other rows now: make the fixture again (tests/upgrade_fixture.py)"
    cluster = derive_cluster(shared_servers, run, evaluator=False, training={
        **upgrade_fixture.TRAINING, "data_dir": str(run / "data"), "output_dir": str(output), "checkpoint_every_s": 4})
    follower, chief = _old_follower(run), None
    try:
        _wait(lambda: _events(run), 120, "0.5's follower serving the 0.5 run's version")  # its deltas take ms
        chief = start_module("coordinator.train", "--cluster", str(cluster), "--stop_when_idle_s", "3", log_path=log)
        assert wait_for_line(log, "resuming", 300, chief), log.read_text()[-3000:]
        write_day(run / "data", "day_5", 200, 4200)  # lands while the resumed run trains
        assert finish(chief, timeout_s=300) == [0], log.read_text()[-3000:]
        newest = _newest_served(output / "serving")
        _wait(lambda: newest in _events(run), 120, f"0.5's follower at {newest}")
    finally:
        for started in (p for p in (chief, follower) if p is not None):
            started.kill()
            started.wait()

    text = log.read_text()
    assert f"from {saw['checkpoint']} (optimizer step {saw['checkpoint_step']})" in text, text[-3000:]
    assert "publishing it first" not in text and "the served model never goes back" in text  # it is behind
    assert "1 file deleted before safe_to_delete.json listed it: day_3" in text
    summary = json.loads((output / "summary.json").read_text())
    files = {f["name"]: (f["examples"], f["outcome"]) for f in summary["follow"]["per_file"]}
    assert files == {"day_0": (300, "trained"), "day_1": (300, "trained"), "day_2": (300, "trained"),
                     "day_3": (0, "lost"), "day_4": (1500, "trained"), "day_5": (200, "trained")}, files
    assert summary["follow"]["problems"]["lost_files"] == 1
    assert summary["optimizer_steps"] == summary["follow"]["steps"]  # every example trained once, in the model
    assert "Traceback" not in (run / "follower.log").read_text()
    served = [int(s) for s in re.findall(r"serving (?:version|delta) \S+ \(step (\d+)\)",
                                         (run / "follower.log").read_text())]
    assert saw["served_step"] in served and served == sorted(served), served  # as 0.5 served, never back
    events = _events(run)
    ours = next(number for number, event in enumerate(events) if event[0] > old_last[0])
    assert events.index(old_last) < ours and events[-1] == newest  # 0.5's deltas served, then this code's
    listed = json.loads((output / "safe_to_delete.json").read_text())
    assert listed["generation"] == 1 and listed["checkpoint"] == summary["checkpoint"].rsplit("/", 1)[-1]
    assert {"day_1", "day_2", "day_4", "day_5"} <= set(listed["files"])
    assert sorted(p.name for p in (output / "writers").iterdir()) == ["1.json"]
