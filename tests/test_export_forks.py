"""The chief's exporters forked from one process of its own (online/publish/export_forks.py): a fork of the caller
when its runtime has not started, else a started one; each exporter in the caller's process group at niceness 10,
showing its own command line, writing its version; a forking process gone replaced by exporters started alone; a
killed caller taking its forking process and exporter with it. A real export each time, from a caller process
(tests/export_caller.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from clusterkit import PYTHON, ROOT
from common.proc import has_live_thread

pytestmark = pytest.mark.cluster
ROOM = "." * 600  # the caller's command line as long as a forked chief's can hold an exporter's
BUFFERED = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}  # a caller's stdout


def run_caller(folder: Path, *args: str) -> list[dict]:
    done = subprocess.run([PYTHON, str(ROOT / "tests" / "export_caller.py"), str(folder), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, env=BUFFERED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("buffered before the fork") == 1, done.stdout  # not again from a forked process
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def assert_exporter(seen: dict, folder: Path, *, parent: int, group: int) -> None:
    assert seen["cmdline"][1:3] == ["-m", "online.publish.exporter"], seen
    assert Path(seen["cmdline"][3]).parent == folder / ".exports", seen
    assert (seen["parent"], seen["group"], seen["nice"]) == (parent, group, 10), seen
    assert seen["error"] == "" and seen["left"] == [], seen  # written; its request, result and status removed
    assert (Path(seen["path"]) / "saved_model.pb").exists(), seen


def test_exporters_are_forked_from_a_fork_of_the_caller_made_before_its_runtime(tmp_path):
    forking, *versions = run_caller(tmp_path, "--versions", "2", "--term-forks", "--room", ROOM)
    assert forking["ready"] and forking["forking_parent"] == forking["caller"], forking
    assert forking["forking_cmdline"][1:] == ["-m", "online.publish.export_forks"], forking  # no import of its own
    for seen in versions:  # the second after a SIGTERM to the forking process, which a stop's leaves to its caller
        assert seen["forked"], seen
        assert_exporter(seen, tmp_path, parent=forking["forking"], group=os.getpgid(0))
    assert [seen["path"] for seen in versions] == [str(tmp_path / "serving" / str(n)) for n in (1, 2)]
    assert not has_live_thread(forking["forking"])  # ended with its caller


def test_a_caller_whose_runtime_runs_starts_its_forking_process_and_one_gone_is_replaced_by_started_exporters(
        tmp_path):
    forking, first, second = run_caller(tmp_path, "--versions", "2", "--late", "--kill-forks", "--room", ROOM)
    assert forking["ready"] and forking["forking_cmdline"][1:3] == ["-m", "online.publish.export_forks"], forking
    assert len(forking["forking_cmdline"]) == 6, forking  # started: its room, its requests' and replies' pipes
    assert first["forked"] and not second["forked"], (first, second)
    assert_exporter(first, tmp_path, parent=forking["forking"], group=os.getpgid(0))
    assert_exporter(second, tmp_path, parent=forking["caller"], group=os.getpgid(0))


def test_a_killed_caller_takes_its_forking_process_and_its_exporter_with_it(tmp_path):
    caller = subprocess.Popen([PYTHON, str(ROOT / "tests" / "export_caller.py"), str(tmp_path), "--versions", "0",
                               "--hold", "--room", ROOM], cwd=ROOT, stdout=subprocess.PIPE, env=BUFFERED,
                              stderr=subprocess.DEVNULL, text=True, stdin=subprocess.DEVNULL)
    try:
        assert caller.stdout.readline() == "buffered before the fork\n"
        forking = json.loads(caller.stdout.readline())
        held = json.loads(caller.stdout.readline())
        assert held["forked"] and held["parent"] == forking["forking"], held
        caller.kill()
        caller.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (has_live_thread(held["held"]) or has_live_thread(forking["forking"])):
            time.sleep(0.05)
        assert not has_live_thread(held["held"]) and not has_live_thread(forking["forking"])
        assert not (tmp_path / "serving" / "1").exists()  # the half-written version never took its name
    finally:
        caller.kill()
        caller.wait(timeout=30)


def test_no_forking_process_when_the_system_refuses_one_leaves_the_exporters_started(monkeypatch, tmp_path):
    from online.publish import export_forks

    def refused(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(export_forks.os, "fork", refused)
    monkeypatch.setattr(export_forks.subprocess, "Popen", refused)
    open_fds = set(os.listdir("/proc/self/fd"))
    assert export_forks.ExportForks.start(tmp_path / ".exports", ROOT) is None  # the chief goes on without it
    assert set(os.listdir("/proc/self/fd")) == open_fds  # its pipes closed
