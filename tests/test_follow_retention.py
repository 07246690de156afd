"""A retention job at safe_to_delete.json on real servers: it deletes each file the moment the signal lists it, the
chief is killed in the middle of the next file and resumed, and every deleted file's examples are in the resumed
run's model (its optimizer steps), none counted lost, while a follower sampling versions and deltas throughout never
serves a lower step; a second chief on the same output_dir stops the first."""

from __future__ import annotations

import json
import threading

import pytest

from clusterkit import derive_cluster, finish, start_module, wait_for_line
from test_follow import FOLLOW, write_day
from test_follow_deltas import _events, _follower

pytestmark = pytest.mark.cluster


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


def test_files_deleted_at_the_signal_keep_their_training_through_a_killed_chief(shared_servers, tmp_path):
    data, output, log, again = tmp_path / "data", tmp_path / "output", tmp_path / "chief.log", tmp_path / "again.log"
    data.mkdir()
    for number in range(3):
        write_day(data, f"day_{number}", 200, 200 * number)
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **FOLLOW, "data_dir": str(data), "output_dir": str(output), "checkpoint_every_s": 2,
        "serving_delta_every_s": 1})
    retention = Retention(data, output)
    retention.start()
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=log)
    follower = _follower(tmp_path)
    resumed = None
    try:
        assert wait_for_line(log, "day_2: done", 300, chief), log.read_text()[-3000:]
        write_day(data, "day_3", 8000, 600)
        assert wait_for_line(log, "day_3: started", 300, chief), log.read_text()[-3000:]
        assert wait_for_line(log, "serving | delta 1.", 120, chief) and _deleted(retention, 3), retention.deleted
        assert "day_3: done" not in log.read_text()
        chief.kill()  # in the middle of day_3, after deltas served some of it: the resume is behind what was served
        chief.wait(timeout=30)
        write_day(data, "day_4", 200, 8600)
        resumed = start_module("coordinator.train", "--cluster", str(cluster), "--stop_when_idle_s", "4",
                               log_path=again)
        assert finish(resumed, timeout_s=600) == [0], again.read_text()[-3000:]
    finally:
        retention.halt.set()
        for started in (p for p in (chief, resumed, follower) if p is not None):
            started.kill()
            started.wait()
    retention.join(timeout=10)

    summary = json.loads((output / "summary.json").read_text())
    trained = {f["name"]: (f["examples"], f["outcome"]) for f in summary["follow"]["per_file"]}
    assert trained == {"day_0": (200, "trained"), "day_1": (200, "trained"), "day_2": (200, "trained"),
                       "day_3": (8000, "trained"), "day_4": (200, "trained")}, summary["follow"]["per_file"]
    assert summary["follow"]["problems"]["lost_files"] == 0
    assert summary["optimizer_steps"] == summary["follow"]["steps"]  # each example trained once, in the model
    assert {"day_0", "day_1", "day_2"} <= set(retention.deleted)
    steps = [event["step"] for event in _events(tmp_path)]
    assert len(steps) >= 3 and steps == sorted(steps), steps  # served: never a lower step, the kill included
    listed = json.loads((output / "safe_to_delete.json").read_text())
    assert listed["checkpoint"] == summary["checkpoint"].rsplit("/", 1)[-1] and listed["generation"] == 2


def _deleted(retention: Retention, count: int, timeout_s: float = 60) -> bool:
    """Whether the retention job deleted `count` files within `timeout_s`."""
    stop = threading.Event()
    for _ in range(int(timeout_s / 0.2)):
        if len(retention.deleted) >= count:
            return True
        stop.wait(0.2)
    return False


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
