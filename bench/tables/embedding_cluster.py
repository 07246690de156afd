"""Loopback TensorFlow servers and measured runs of bench.tables.embedding_run, each process optionally memory-capped.

Every process is started in a new session (killed by process group) and, when a MemoryCap is given, inside
that cgroup; servers are started afresh for each run so no variable of an earlier run stays on a ps.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.kit.memory_cgroup import MemoryCap
from bench.kit.quiet import wait_for_quiet

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
SERVER = """
import json, sys, tensorflow as tf
spec = tf.train.ClusterSpec(json.loads(sys.argv[1]))
tf.distribute.Server(spec, job_name=sys.argv[2], task_index=int(sys.argv[3]), protocol="grpc", start=True).join()
"""
BASE_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1",
            "GRPC_FAIL_FAST": "use_caller", "PYTHONPATH": str(ROOT)}


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return -1.0


def _start(arguments: list[str], env: dict, log: Path, cap: MemoryCap | None) -> subprocess.Popen:
    with open(log, "wb") as handle:
        return subprocess.Popen(arguments, cwd=ROOT, env={**os.environ, **BASE_ENV, **env}, stdout=handle,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=cap.preexec if cap else None)


def _wait_listening(port: int, process: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"server on port {port} did not start (exit {process.poll()})")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL after 10 s."""
    for signum, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue


def _result(process: subprocess.Popen, log: Path, timeout_s: float) -> dict:
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        stop(process)
        return {"failed": f"timed out after {timeout_s:.0f} s"}
    text = log.read_text(errors="replace")
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"failed": f"exit {process.returncode}: " + " | ".join(text.strip().splitlines()[-3:])[-600:]}


def run_measured(mode: str, config: dict, directory: Path, *, ps: int = 1, workers: int = 1,
                 caps: dict[str, MemoryCap] | None = None, timeout_s: float = 1200,
                 module: str = "bench.tables.embedding_run", wait_quiet: bool = True) -> dict:
    """One run of `module` (bench.tables.embedding_run's contract) in `mode` (single, ps or mwms), with the servers it
    needs, after waiting (bounded) for a quiet machine unless `wait_quiet` is off; adds load and RSS."""
    caps = caps or {}
    directory.mkdir(parents=True, exist_ok=True)
    others = wait_for_quiet() if wait_quiet else ["not waited for (a smoke run)"]
    load_before, started = load_average(), time.monotonic()
    servers, tasks = [], []
    try:
        if mode == "ps":
            result = _run_ps(config, directory, ps, workers, caps, servers, timeout_s, module)
        elif mode == "mwms":
            result = _run_mwms(config, directory, workers, caps, tasks, timeout_s)
        else:
            chief = _start([PYTHON, "-m", module, json.dumps({**config, "mode": mode})],
                           {"TF_CONFIG": ""}, directory / "single.log", caps.get("chief"))
            tasks.append(chief)
            result = _result(chief, directory / "single.log", timeout_s)
    finally:
        for process in servers + tasks:
            stop(process)
    return {**result, "others_using_cpu": others, "load_before": load_before, "load_after": load_average(),
            "run_s": round(time.monotonic() - started, 1)}


def _run_ps(config, directory, ps, workers, caps, servers, timeout_s, module="bench.tables.embedding_run") -> dict:
    ports = free_ports(1 + workers + ps)
    spec = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:1 + workers]],
            "ps": [f"localhost:{p}" for p in ports[1 + workers:]]}
    for job in ("ps", "worker"):
        for index in range(len(spec[job])):
            process = _start([PYTHON, "-c", SERVER, json.dumps(spec), job, str(index)], {"TF_CONFIG": ""},
                             directory / f"{job}-{index}.log", caps.get(f"{job}:{index}") or caps.get(job))
            servers.append(process)
    for process, address in zip(servers, spec["ps"] + spec["worker"], strict=True):
        _wait_listening(int(address.rsplit(":", 1)[1]), process)
    tf_config = json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
    run_config = {**config, "mode": "ps", "workers": workers, "ps_ports": ports[1 + workers:],
                  "worker_ports": ports[1:1 + workers]}
    chief = _start([PYTHON, "-m", module, json.dumps(run_config)], {"TF_CONFIG": tf_config},
                   directory / "chief.log", caps.get("chief"))
    servers.append(chief)
    result = _result(chief, directory / "chief.log", timeout_s)
    names = [f"{job}:{index}" for job in ("ps", "worker") for index in range(len(spec[job]))]
    return {**result, "server_rss_mib": {name: round(peak_rss_mib(process.pid)) if process.poll() is None else None
                                         for name, process in zip(names, servers[:-1], strict=True)}}


def _run_mwms(config, directory, workers, caps, tasks, timeout_s) -> dict:
    ports = free_ports(workers)
    spec = {"worker": [f"localhost:{p}" for p in ports]}
    for index in range(workers):
        tf_config = json.dumps({"cluster": spec, "task": {"type": "worker", "index": index}})
        tasks.append(_start([PYTHON, "-m", "bench.tables.embedding_run",
                             json.dumps({**config, "mode": "mwms", "workers": workers})],
                            {"TF_CONFIG": tf_config}, directory / f"worker-{index}.log", caps.get(f"worker:{index}")))
    results = [_result(task, directory / f"worker-{index}.log", timeout_s) for index, task in enumerate(tasks)]
    return {**results[0], "worker_rss_mib": [r.get("peak_rss_mib") for r in results],
            "failed_workers": [r["failed"] for r in results if "failed" in r]}
