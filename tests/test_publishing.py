"""Serving versions beside training, whole or not at all (issue 39): versions are written by an exporter process while
the workers go on; a chief killed while a checkpoint or a version is being written leaves nothing a reader opens
half written; the next chief clears what was left, publishes the checkpoint no version holds yet first, and every
file trained is served. Real servers; hashed tables (the dynamic ones are in tests/test_follow.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from clusterkit import derive_cluster, finish, processes_mentioning, start_module, wait_for_line
from common.proc import proc_stat
from test_follow import FOLLOW, write_day
from throttling import frozen_while

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


def caught_writing(folder, pattern: str, timeout_s: float, process) -> str | None:
    """wait_for_path, with `process` and what it started stopped while the entry is still there (frozen_while):
    the kill that follows finds it half written, however long this test took to look; None if none was caught."""
    deadline = time.monotonic() + timeout_s
    while (found := wait_for_path(folder, pattern, deadline - time.monotonic(), process)) is not None:
        if frozen_while(process.pid, lambda: (folder / found).exists()):
            return found
    return None


def niceness(pid: str) -> int | None:
    """A live process's niceness (/proc/<pid>/stat's 19th field), None once it has ended."""
    fields = proc_stat(int(pid))
    return int(fields[16]) if fields else None


def test_a_chief_killed_mid_write_leaves_nothing_half_visible_and_the_next_publishes_first(shared_servers, tmp_path):
    """With output_dir declared shared (loopback: it is), so the chief dies while each ps writes its own parts."""
    data, output = tmp_path / "data", tmp_path / "output"
    data.mkdir()
    rows = {"day_0": 400, "day_1": 300, "day_2": 300}
    write_day(data, "day_0", 400, 0)
    cluster = derive_cluster(shared_servers, tmp_path, training={
        **FOLLOW, **TINY_CHUNKS, "data_dir": str(data), "output_dir": str(output), "checkpoint_every_s": 3,
        "serving_export_every_s": 3, "keep_serving_versions": 3, "serving_checkpoint": "settled",
        "output_dir_shared": True})
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
        writing = caught_writing(output / "serving", r"\.writing-\d+", 300, chief)  # a version being written
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
    assert every.count("each ps writes its own tables' rows of every checkpoint") == 3
    meanwhile = [int(n) for n in re.findall(r"(\d+) pieces trained meanwhile", every)]
    assert meanwhile and max(meanwhile) > 0  # training went on while a version was written
    assert "newer than the newest serving version: publishing it first" in last
    assert not any(p.name.startswith(".writing-") for p in (output / "serving").iterdir())
    summary = json.loads((output / "summary.json").read_text())
    per_file = {f["name"]: f for f in summary["follow"]["per_file"]}
    assert {name: f["examples"] for name, f in per_file.items()} == rows  # every file trained once
    assert all(f["served_version"] for f in per_file.values())  # and served


def test_the_checkpoint_a_lagging_exporter_reads_stays_until_its_version_is_out(shared_servers, tmp_path):
    """An exporter slower than `keep_checkpoints` checkpoints (stopped here; a loaded machine's start of TensorFlow
    did the same in CI): the settled checkpoint its version is written from is spared by every save meanwhile, the
    version is written from it, and the first save after it is out removes it."""
    data, output, log = tmp_path / "data", tmp_path / "output", tmp_path / "chief.log"
    data.mkdir()
    write_day(data, "day_0", 400, 0)
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **FOLLOW, "data_dir": str(data), "output_dir": str(output), "checkpoint_every_s": 1, "keep_checkpoints": 2,
        "serving_export_every_s": 600, "serving_checkpoint": "settled", "stop_when_idle_s": 60})
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=log)
    try:
        pid, request = wait_for_exporter(output, chief)
        source = json.loads(Path(request).read_text())["checkpoint"]
        os.kill(pid, signal.SIGSTOP)
        try:
            saves = land_until_saved(data, log, 3, chief, first_row=400)  # keep_checkpoints 2: pruned twice
            assert Path(source + ".index").exists(), (source, saves)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert wait_for_line(log, f"serving | version 1 | {Path(source).name} |", 300, chief), log.read_text()[-3000:]
        land_until_saved(data, log, 1, chief, first_row=10_000)  # the first save after it is out
        assert not Path(source + ".index").exists()
        chief.send_signal(signal.SIGTERM)  # a stop as asked: the last version, then exit 4
        assert finish(chief, timeout_s=300) == [4], log.read_text()[-3000:]
    finally:
        finish(chief, timeout_s=1)
    assert "not written" not in log.read_text()


def wait_for_exporter(output, chief, timeout_s: float = 300) -> tuple[int, str]:
    """The pid and request file of the first exporter of `output`'s run, polled every 10 ms."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and chief.poll() is None:
        for line in processes_mentioning("online.publish.exporter"):
            if str(output) in line:
                return int(line.split(":")[0]), line.split()[-1]
        time.sleep(0.01)
    raise AssertionError(f"no exporter of {output} within {timeout_s} s")


def land_until_saved(data, log, saves: int, chief, *, first_row: int, most: int = 20) -> list[str]:
    """Lands a small file at a time until `saves` more settled checkpoints are in `log`; returns their names."""
    start = len(log.read_text())
    for n in range(most):
        write_day(data, f"more_{first_row}_{n}", 100, first_row + 100 * n)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and chief.poll() is None:
            names = re.findall(r"checkpoint (ckpt-\S+) \(optimizer step", log.read_text()[start:])
            if len(names) >= saves:
                return names
            if re.search(rf"more_{first_row}_{n}: done", log.read_text()[start:]):
                break
            time.sleep(0.1)
    raise AssertionError(f"fewer than {saves} checkpoints after {most} files: {log.read_text()[-3000:]}")


def _served_soon(log, name: str, chief) -> str:
    """The version line that first serves `name` (its file trained, the next version due at once, not 600 s later)."""
    assert wait_for_line(log, f"{name}: done", 300, chief), log.read_text()[-3000:]
    pattern = r"serving \| version \d+ \| \S+ \| [1-9]\d* files? newly served .*"
    deadline = time.monotonic() + 300  # two versions may be written back to back on a busy host
    while time.monotonic() < deadline and chief.poll() is None:
        found = re.search(pattern, log.read_text())
        if found:
            return found.group(0)
        time.sleep(0.2)
    raise AssertionError(f"{name} not served within 300 s of being trained: {log.read_text()[-3000:]}")


def test_the_first_file_trained_is_served_soon_in_a_fresh_run_and_after_a_crash(shared_servers, tmp_path):
    """Versions every 600 s: a fresh run's first version may come after its first piece, before the file is whole;
    the file is served by the next one, due as soon as it is trained; a chief restarted after it was SIGKILLed
    serves its first trained file as soon too."""
    data, output, log, again = tmp_path / "data", tmp_path / "output", tmp_path / "chief.log", tmp_path / "again.log"
    data.mkdir()
    write_day(data, "day_0", 900, 0)
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        **FOLLOW, "data_dir": str(data), "output_dir": str(output), "serving_export_every_s": 600})
    chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=log)
    try:
        _served_soon(log, "day_0", chief)
        chief.send_signal(signal.SIGKILL)  # a crash: no stop of its own
        assert finish(chief, timeout_s=60) == [-signal.SIGKILL], log.read_text()[-3000:]
        write_day(data, "day_1", 300, 900)
        chief = start_module("coordinator.train", "--cluster", str(cluster), log_path=again)
        assert wait_for_line(again, "follow mode: training on", 120, chief), again.read_text()[-3000:]
        _served_soon(again, "day_1", chief)
        chief.send_signal(signal.SIGTERM)
        assert finish(chief, timeout_s=120) == [4], again.read_text()[-3000:]
    finally:
        finish(chief, timeout_s=1)
    newest = max(int(p.name) for p in (output / "serving").iterdir() if p.name.isdigit())
    through = json.loads((output / "serving" / str(newest) / "assets.extra" / "trained_through.json").read_text())
    assert sorted(f["name"] for f in through["files_done"]) == ["day_0", "day_1"]
