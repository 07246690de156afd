"""A retention job at safe_to_delete.json on real servers: it deletes each file the moment the signal lists it, the
chief and a ps are killed at each of publication's named steps and healed by the launcher, and every file's examples
are in the model (its optimizer steps), none counted lost, while a follower sampling versions and deltas throughout
never serves a lower step; a second chief on the same output_dir stops the first."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading

import pytest

from clusterkit import (ROOT, cluster_document, derive_cluster, finish, start_module, wait_for_launcher,
                        wait_for_line, write_cluster)
from launcher import process
from online.follow import kill_points
from test_follow import FOLLOW, write_day
from test_follow_deltas import _events, _follower, _wait

pytestmark = pytest.mark.cluster
VERSIONS = 10  # version switches the follower sees, with a delta every second between them


class Retention(threading.Thread):
    """Deletes from `data` every file `safe_to_delete.json` lists, as a team's retention job would, until stopped."""

    def __init__(self, data, output):
        super().__init__(daemon=True)
        self.data, self.signal, self.deleted, self.halt = data, output / "safe_to_delete.json", [], threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.3):
            try:
                listed = json.loads(self.signal.read_text())["files"]
            except (OSError, ValueError, KeyError):
                continue
            for name in listed:
                if (self.data / name).exists():
                    (self.data / name).unlink()
                    self.deleted.append(name)


def test_a_chief_and_a_ps_killed_at_each_named_step_under_retention_lose_nothing(tmp_path):
    """The chief SIGKILLed at each of publication's named steps (kill_points.py: a hook, not timing), a ps killed
    with it each time, the launcher healing both, while files land and a retention job deletes what the signal
    lists: every file trained once with all its examples, in the model's optimizer steps; each resume at least
    where the signal stood at the kill; a follower and a reader of the newest version (TensorFlow Serving's view)
    sampling throughout never saw a lower step across ten version switches."""
    data, logs, output, marks = (tmp_path / name for name in ("data", "logs", "output", "marks"))
    for folder in (data, marks):
        folder.mkdir()
    training = {**FOLLOW, "data_dir": str(data), "output_dir": str(output), "checkpoint_every_s": 2,
                "serving_delta_every_s": 1, "stop_when_idle_s": 5}
    document = cluster_document(workers=1, ps=1, evaluator=False, logs_dir=str(logs), training=training)
    document["launcher"].update(restart_backoff_s=0.5, poll_s=0.5, max_restarts=30)
    path = write_cluster(tmp_path, document)
    feeder, retention, newest = Feeder(data, logs / "chief-0.log"), Retention(data, output), NewestVersion(output)
    environment = {**os.environ, kill_points.KILL_AT: f"{marks}:{','.join(kill_points.STEPS)}"}
    follower, listed_at_kill = None, {}
    try:
        feeder.start()
        retention.start()
        newest.start()
        follower = _follower(tmp_path)
        started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True, text=True,
                                 timeout=120, stdin=subprocess.DEVNULL, env=environment)
        assert started.returncode == 0, started.stderr
        for step in kill_points.STEPS:
            listed_at_kill[step] = _kill_a_ps_with_the_chief_at(step, marks, logs, output)
        _wait(lambda: len({event["version"] for event in _events(tmp_path)}) >= VERSIONS, 400,
              f"{VERSIONS} versions served by the follower")
        feeder.halt.set()  # the chief finishes after stop_when_idle_s without new files
        launcher_log = wait_for_launcher(logs, timeout_s=600)
    finally:
        for thread in (feeder, retention, newest):
            thread.halt.set()
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, timeout=180)
        if follower is not None:
            follower.kill()
            follower.wait()
    retention.join(timeout=10)
    _assert_nothing_lost(output, feeder.written, launcher_log)
    _assert_each_resume_keeps_the_signal(logs / "chief-0.log", listed_at_kill)
    assert len(retention.deleted) >= 2, retention.deleted
    events = _events(tmp_path)
    steps = [event["step"] for event in events]
    assert steps == sorted(steps), steps  # served: never a lower step, the kills included
    assert len({event["version"] for event in events}) >= VERSIONS, events  # across version switches
    assert len(newest.steps) >= VERSIONS - 2 and newest.steps == sorted(newest.steps), newest.steps  # TF Serving's


class NewestVersion(threading.Thread):
    """Samples what TensorFlow Serving's default policy serves (the highest version number under serving/): the
    optimizer step of each newest version seen, in order."""

    def __init__(self, output):
        super().__init__(daemon=True)
        self.serving, self.steps, self.halt = output / "serving", [], threading.Event()

    def run(self) -> None:
        seen = None
        while not self.halt.wait(0.3):
            numbers = [int(p.name) for p in self.serving.glob("*") if p.name.isdigit()]
            if not numbers or max(numbers) == seen:
                continue
            through = self.serving / str(max(numbers)) / "assets.extra" / "trained_through.json"
            try:
                self.steps.append(json.loads(through.read_text())["optimizer_step"])
            except (OSError, ValueError, KeyError):
                continue
            seen = max(numbers)


class Feeder(threading.Thread):
    """Lands a file of 150 examples (day_0, day_1, ...) once the chief has done the one before, or after 15 s,
    until stopped: a trickle the chief keeps up with, whatever its kills."""

    def __init__(self, data, chief_log):
        super().__init__(daemon=True)
        self.data, self.chief_log, self.written, self.halt = data, chief_log, {}, threading.Event()

    def run(self) -> None:
        for number in range(100):
            if self.halt.is_set():
                return
            write_day(self.data, f"day_{number}", 150, 150 * number)
            self.written[f"day_{number}"] = 150
            for _ in range(75):
                if self.halt.wait(0.2) or self._done(f"day_{number}"):
                    break

    def _done(self, name: str) -> bool:
        return self.chief_log.exists() and f"{name}: done" in self.chief_log.read_text(errors="replace")


def _kill_a_ps_with_the_chief_at(step: str, marks, logs, output) -> int:
    """Waits for the chief to stop at `step`, kills ps:0 and lets the chief's hook kill it; returns the optimizer
    step of the checkpoint safe_to_delete.json named then (0 before the first)."""
    mark = marks / step
    assert wait_for_path(mark, 300), f"the chief never reached {step}: {sorted(p.name for p in marks.iterdir())}"
    signal_file = output / "safe_to_delete.json"
    listed = json.loads(signal_file.read_text())["optimizer_step"] if signal_file.exists() else 0
    os.kill(process.PidRecord.read(logs / "ps-0.pid").pid, signal.SIGKILL)
    (marks / f"{step}.go").touch()
    return listed


def wait_for_path(path, timeout_s: float) -> bool:
    waited = threading.Event()
    for _ in range(int(timeout_s / 0.1)):
        if path.exists():
            return True
        waited.wait(0.1)
    return False


def _assert_nothing_lost(output, written: dict, launcher_log: str) -> None:
    summary = json.loads((output / "summary.json").read_text())
    follow, count = summary["follow"], len(written)
    assert (follow["files_done"], follow["files"], follow["examples"]) == (count, count, sum(written.values())), \
        launcher_log[-3000:]
    assert all(written[f["name"]] == f["examples"] and f["outcome"] == "trained" for f in follow["per_file"]), \
        follow["per_file"]  # files compacted out of per_file count in the totals
    assert follow["problems"]["lost_files"] == 0, follow["problems"]
    assert summary["optimizer_steps"] == follow["steps"]  # each example trained once, in the model
    assert f"followed the data: {count} of {count} files" in launcher_log, launcher_log[-3000:]


def _assert_each_resume_keeps_the_signal(chief_log, listed_at_kill: dict) -> None:
    """Each chief started after a kill resumed from a checkpoint at least as new as the one safe_to_delete.json
    named when it was killed: what the signal let go is in the model."""
    resumed = [int(found) for found in re.findall(r"resuming .* \(optimizer step (\d+)\)", chief_log.read_text())]
    assert len(resumed) >= len(listed_at_kill), resumed
    for listed, step in zip(listed_at_kill.values(), resumed[-len(listed_at_kill):]):
        assert step >= listed, (listed_at_kill, resumed)


def test_a_second_chief_on_the_same_output_dir_stops_the_first(shared_servers, tmp_path):
    data, output = tmp_path / "data", tmp_path / "output"
    data.mkdir()
    write_day(data, "day_0", 200, 0)
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **FOLLOW, "data_dir": str(data), "output_dir": str(output)})
    first = start_module("coordinator.train", "--cluster", str(cluster), log_path=tmp_path / "first.log")
    try:
        assert wait_for_line(tmp_path / "first.log", "day_0: done", 300, first)
        (output / "writers" / "2.json").write_text(json.dumps({"generation": 2, "host": "node-7", "pid": 4242}))
        assert finish(first, timeout_s=60) == [2], (tmp_path / "first.log").read_text()[-3000:]
    finally:
        first.kill()
        first.wait()
    text = (tmp_path / "first.log").read_text()
    assert "is written by a newer chief now (generation 2, on node-7 (pid 4242))" in text, text[-3000:]
    assert "Traceback" not in text
