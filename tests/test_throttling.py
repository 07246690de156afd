"""tests/throttling.py, which holds a test's workers to part of the time: on real processes that spin."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from clusterkit import PYTHON
from common.proc import proc_stat, start_ticks
from throttling import Throttle, ThrottledWorkers, listens, server_pid, server_pids

SPINNER = """import os, socket
server = None
while True:  # spins on one core; listens (as a started server does) once its folder holds `listen`
    if server is None and os.path.exists("listen"):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
"""


def spinning_worker(folder: Path, index: int) -> subprocess.Popen:
    """A process whose command line is a worker server's of `folder`'s cluster, that spins on one core."""
    (folder / "roles").mkdir(exist_ok=True)
    (folder / "roles" / "__init__.py").write_text("")
    (folder / "roles" / "server.py").write_text(SPINNER)
    return subprocess.Popen([PYTHON, "-m", "roles.server", "--role", "worker", "--index", str(index), "--cluster",
                             str(folder / "cluster.json")], cwd=folder, stdin=subprocess.DEVNULL)


def cpu_s(pid: int) -> float:
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime


def state(pid: int) -> str:
    return proc_stat(pid)[0]


def share_held(pid: int, seconds: float) -> float:
    """The share of `seconds` of wall time that `pid` spent on a core."""
    before, started = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - before) / (time.monotonic() - started)


def test_the_workers_of_a_folder_are_held_to_their_share_and_run_freely_after(tmp_path):
    (tmp_path / "listen").touch()
    workers = [spinning_worker(tmp_path, index) for index in range(2)]
    try:
        deadline = time.monotonic() + 30
        while not (len(server_pids(str(tmp_path), "worker")) == 2 and all(listens(w.pid) for w in workers)) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server_pid(str(tmp_path), "worker", 1) == workers[1].pid
        with ThrottledWorkers(str(tmp_path), share=0.2, look_every_s=0.2) as throttled:
            time.sleep(1)  # found at the first look
            held = share_held(workers[0].pid, 3)
            workers[1].kill()
            workers[1].wait(timeout=30)
            deadline = time.monotonic() + 30
            while set(throttled.pids) != {workers[0].pid}:  # the one gone is let be, at the throttle's next turn
                assert time.monotonic() < deadline, throttled.pids
                time.sleep(0.05)
        assert throttled.seen == {worker.pid for worker in workers}
        assert held < 0.4, held  # about 0.2; never the whole core it spins on alone
        assert state(workers[0].pid) != "T" and share_held(workers[0].pid, 1) > 0  # running again
    finally:
        for worker in workers:
            worker.kill()
            worker.wait(timeout=30)
    assert start_ticks(workers[0].pid) is None  # gone: a pid taken later would not be signalled


def test_a_worker_still_starting_runs_freely_and_is_held_once_it_listens(tmp_path):
    worker = spinning_worker(tmp_path, 0)
    try:
        with ThrottledWorkers(str(tmp_path), share=0.2, look_every_s=0.2) as throttled:
            deadline = time.monotonic() + 30
            while not server_pids(str(tmp_path), "worker"):
                assert time.monotonic() < deadline, "the worker never showed"
                time.sleep(0.05)
            for _ in range(3):  # three looks of the throttle with the worker there to find
                looked = throttled.looked
                while throttled.looked == looked:
                    assert time.monotonic() < deadline, "the throttle took no look"
                    time.sleep(0.05)
            assert throttled.seen == set() and state(worker.pid) != "T"  # found, not listening: let be
            (tmp_path / "listen").touch()
            while worker.pid not in throttled.pids:
                assert time.monotonic() < deadline, throttled.pids
                time.sleep(0.05)
            assert throttled.seen == {worker.pid}
    finally:
        worker.kill()
        worker.wait(timeout=30)


def test_a_throttled_process_is_held_to_its_share_and_the_throttle_ends_with_it(tmp_path):
    worker = spinning_worker(tmp_path, 0)
    try:
        with Throttle(worker.pid, share=0.2) as throttle:
            held = share_held(worker.pid, 3)
            worker.kill()
            worker.wait(timeout=30)
            throttle.thread.join(timeout=5)
            assert not throttle.thread.is_alive()  # nothing left to hold
        assert held < 0.4, held
    finally:
        worker.kill()
        worker.wait(timeout=30)
