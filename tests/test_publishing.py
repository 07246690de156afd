"""Serving versions beside training, whole or not at all (issue 39): versions are written by an exporter process while
the workers go on; a chief killed while a checkpoint or a version is being written leaves nothing a reader opens
half written; the next chief clears what was left, publishes the checkpoint no version holds yet first, and every
file trained is served. Real servers; hashed tables (the dynamic ones are in tests/test_follow.py)."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from clusterkit import derive_cluster, finish, processes_mentioning, start_module, wait_for_line
from test_follow import FOLLOW, write_day

pytestmark = pytest.mark.cluster

TINY_CHUNKS = {"stream_chunk_mb": 0.008, "table_rows": 3000}  # 8 KB chunks: a write lasts long enough to kill


def wait_for_path(folder, pattern: str, timeout_s: float, process) -> str | None:
    """The first entry of `folder` whose name matches `pattern`, polled every 10 ms while `process` runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        found = next((p.name for p in folder.iterdir() if re.fullmatch(pattern, p.name)), None) \
            if folder.exists() else None
        if found:
            return found
        time.sleep(0.01)
    return None


def niceness(pid: str) -> int | None:
    """A live process's niceness (/proc/<pid>/stat's 19th field), None once it has ended."""
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16])
    except (OSError, IndexError):
        return None


def test_a_chief_killed_mid_write_leaves_nothing_half_visible_and_the_next_publishes_first(shared_servers, tmp_path):
    data, output = tmp_path / "data", tmp_path / "output"
    data.mkdir()
    rows = {"day_0": 400, "day_1": 300, "day_2": 300}
    write_day(data, "day_0", 400, 0)
    cluster = derive_cluster(shared_servers, tmp_path, training={
        **FOLLOW, **TINY_CHUNKS, "data_dir": str(data), "output_dir": str(output), "checkpoint_every_s": 3,
        "serving_export_every_s": 3, "keep_serving_versions": 3, "serving_checkpoint": "settled"})
    logs = [tmp_path / f"chief-{n}.log" for n in range(3)]
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=logs[0])
    try:
        assert wait_for_line(logs[0], "serving | version 1 |", 300, chief), logs[0].read_text()[-3000:]
        write_day(data, "day_1", 300, 400)  # more to train: another checkpoint comes, and is killed midway
        temp = wait_for_path(output / "checkpoints", r"ckpt-.*_temp", 300, chief)
        assert temp, logs[0].read_text()[-3000:]
        killed_save = (output / "checkpoints" / temp).stat().st_ino
        chief.send_signal(signal.SIGKILL)
        chief.wait(timeout=30)
        listed = (output / "checkpoints" / "checkpoint").read_text()
        assert temp.removesuffix("_temp") not in listed  # never listed: a resume cannot open it

        chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=logs[1])
        assert wait_for_line(logs[1], "resuming", 300, chief), logs[1].read_text()[-3000:]
        left = output / "checkpoints" / temp  # gone at the start (a save of that name may have begun again since)
        assert not left.exists() or left.stat().st_ino != killed_save
        assert wait_for_line(logs[1], "day_1: done", 300, chief), logs[1].read_text()[-3000:]
        writing = wait_for_path(output / "serving", r"\.writing-\d+", 300, chief)  # a version being written
        assert writing, logs[1].read_text()[-3000:]
        exporters = [line.split(":")[0] for line in processes_mentioning("online.publish.exporter")
                     if str(output) in line]
        assert all(niceness(pid) in (10, None) for pid in exporters), exporters  # below training (None: ended)
        chief.send_signal(signal.SIGKILL)
        chief.wait(timeout=30)
        deadline = time.monotonic() + 30
        while processes_mentioning(str(output)) and time.monotonic() < deadline:  # its exporter dies with it
            time.sleep(0.2)
        assert processes_mentioning(str(output)) == []
        half = writing.removeprefix(".writing-")
        assert not (output / "serving" / half).exists()  # a reader never sees the half-written version

        write_day(data, "day_2", 300, 700)
        chief = start_module("coordinator.train", "--cluster", str(cluster), "--stop_when_idle_s", "6",
                             log_path=logs[2])
        assert finish(chief, timeout_s=600) == [0], logs[2].read_text()[-3000:]
    finally:
        finish(chief, timeout_s=1)
    every, last = "".join(log.read_text() for log in logs), logs[2].read_text()
    meanwhile = [int(n) for n in re.findall(r"(\d+) pieces trained meanwhile", every)]
    assert meanwhile and max(meanwhile) > 0  # training went on while a version was written
    assert "newer than the newest serving version: publishing it first" in last
    assert not any(p.name.startswith(".writing-") for p in (output / "serving").iterdir())
    summary = json.loads((output / "summary.json").read_text())
    per_file = {f["name"]: f for f in summary["follow"]["per_file"]}
    assert {name: f["examples"] for name, f in per_file.items()} == rows  # every file trained once
    assert all(f["served_version"] for f in per_file.values())  # and served
