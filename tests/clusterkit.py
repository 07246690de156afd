"""Test helpers: free loopback ports, generated cluster files, and a scan for processes a test left behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import forkedkit
from cluster import taskspec
from launcher.process import has_live_thread

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def free_ports(count: int) -> list[int]:
    """Ports that were free on 127.0.0.1 a moment ago (held open together so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cluster_document(*, workers: int = 2, ps: int = 2, evaluator: bool = True, training: dict | None = None,
                     logs_dir: str = "logs") -> dict:
    """A valid all-loopback cluster.json document on fresh ports."""
    ports = iter(free_ports(1 + workers + ps + int(evaluator)))
    cluster = {"chief": [f"localhost:{next(ports)}"],
               "worker": [f"localhost:{next(ports)}" for _ in range(workers)],
               "ps": [f"localhost:{next(ports)}" for _ in range(ps)]}
    if evaluator:
        cluster["evaluator"] = [f"localhost:{next(ports)}"]
    return {"cluster": cluster, "launcher": {"logs_dir": logs_dir, "ready_timeout_s": 60},
            "training": training or {}}


def write_cluster(directory: Path, document: dict, name: str = "cluster.json") -> Path:
    path = directory / name
    path.write_text(json.dumps(document, indent=2))
    return path


def run_module(module: str, *args: str, timeout_s: float = 120, env: dict | None = None,
               cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Runs `python -m module args` from the project root with the project's venv. A chief, evaluator or server
    run with this environment is forked from the session's fork server when it can be (tests/forkedkit.py), as
    `start_module`'s are: its output, stdout and stderr together as a launcher's task log, is then both."""
    if env is None and cwd == ROOT:
        with tempfile.TemporaryDirectory(prefix="pscluster-task-") as folder:
            log = Path(folder) / "task.log"
            forked = forkedkit.fork_module(PYTHON, ROOT, module, list(args), log)
            if forked is not None:
                return forkedkit.completed(forked, log, timeout_s)
    return subprocess.run([PYTHON, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def run_python(*args: str, env_changes: dict[str, str] | None = None, cwd: Path = ROOT,
               timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Runs `python ARGS` (a helper script of tests/, or `-c` code, that imports TensorFlow) to its end with the
    project's venv and the variables `env_changes` sets. It is forked from the session's fork server when it can
    be (tests/forkedkit.py), with that server's task environment: its output, stdout and stderr together, is then
    both; else started with this process's environment less its proxies (they break gRPC), its output apart."""
    forked = forkedkit.run_python(PYTHON, list(args), cwd=cwd, env_changes=env_changes or {}, timeout_s=timeout_s)
    if forked is not None:
        return forked
    env = {key: value for key, value in os.environ.items() if key not in taskspec.PROXY_VARIABLES}
    return subprocess.run([PYTHON, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          env={**env, **(env_changes or {})}, stdin=subprocess.DEVNULL)


def last_line_starting(output: str, prefix: str) -> str | None:
    """The last line of `output` that starts with `prefix` (a helper's result line among its log lines)."""
    return next((line for line in reversed(output.splitlines()) if line.startswith(prefix)), None)


def served_predictions(saved_model: Path, kind: str, path: Path, count: int | None):
    """Predictions of an exported SavedModel for the first `count` raw rows of `path` (kind "criteo" or
    "examples"), or for the JSON request in `path` (kind "features"), made by tests/serving_client.py, which
    imports no toolkit code, in a process of its own (forked from the session's fork server: TensorFlow alone
    imported, run_python)."""
    import numpy as np

    served = run_python(str(ROOT / "tests" / "serving_client.py"), str(saved_model), kind, str(path),
                        str(count or "-"), timeout_s=180)
    predictions = last_line_starting(served.stdout, "[")
    assert served.returncode == 0 and predictions, served.stderr[-2000:]
    return np.array(json.loads(predictions))


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes whose arguments contain `text` (e.g. a test's temporary directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and has_live_thread(int(entry.name)):
            found.append(f"{entry.name}: {cmdline}")
    return found


def assert_no_traceback(output: str) -> None:
    assert "Traceback" not in output, output



def read_scalars(event_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a TensorBoard run directory, as tag -> [(step, value)] in file order."""
    import tensorflow as tf  # imported here: most tests never need TensorFlow in the test process

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(event_dir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                scalars.setdefault(value.tag, []).append((event.step, number))
    return scalars


def wait_until(condition, timeout_s: float, poll_s: float = 0.1) -> bool:
    """Polls `condition` until it holds (True) or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def wait_for_line(path: Path, text: str, timeout_s: float, process=None) -> bool:
    """Polls a log file until a line holds `text`; stops early if `process` exits. Reads only the lines added since
    the last look (a chief's log can be megabytes, looked at ten times a second)."""
    deadline = time.monotonic() + timeout_s
    offset = 0
    while time.monotonic() < deadline:
        ended = process is not None and process.poll() is not None
        added = _added_lines(path, offset, whole=not ended)
        if text in added.decode(errors="replace"):
            return True
        offset = 0 if path.exists() and path.stat().st_size < offset else offset + len(added)
        if ended:
            return False
        time.sleep(0.1)
    return False


def _added_lines(path: Path, offset: int, *, whole: bool) -> bytes:
    """What `path` holds from byte `offset` on: up to its last newline when `whole` (a line still being written is
    read again once it ends), else all of it."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return b""
    return data[:data.rfind(b"\n") + 1] if whole else data


def wait_for_launcher(logs: Path, timeout_s: float = 420) -> str:
    """Waits for a detached launcher (pid file in `logs`) to finish; returns its log."""
    from launcher import process

    record = process.PidRecord.read(logs / "launcher.pid")
    deadline = time.monotonic() + timeout_s
    while record and process.is_running(record) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not (record and process.is_running(record)), "the launcher did not finish in time"
    return (logs / "launcher.log").read_text()


def derive_cluster(base: Path, directory: Path, *, evaluator: bool = True, **sections) -> Path:
    """A copy of cluster file `base` (same ps and worker addresses) with an evaluator and other sections."""
    document = json.loads(base.read_text())
    if evaluator:
        document["cluster"]["evaluator"] = [f"localhost:{free_ports(1)[0]}"]
    for name, values in sections.items():
        document[name] = {**document.get(name, {}), **values}
    return write_cluster(directory, document)


def start_module(module: str, *args: str, log_path: Path, preexec_fn=None):
    """Starts `python -m module args` from the project root, its output going to `log_path` (`preexec_fn` runs in
    the child before it starts, e.g. to enter a memory cgroup); a chief, evaluator or server is forked from the
    session's fork server when it can be (tests/forkedkit.py), with subprocess.Popen's poll, wait and kill."""
    forked = None if preexec_fn else forkedkit.fork_module(PYTHON, ROOT, module, list(args), log_path)
    if forked is not None:
        return forked
    with open(log_path, "wb") as log:
        return subprocess.Popen([PYTHON, "-m", module, *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)


def finish(*processes, timeout_s: float = 300) -> list[int]:
    """Each process's exit code, waiting up to `timeout_s` for each; one still running then is killed (its code
    then -9), and never raises: a test's cleanup after it still runs."""
    codes = []
    try:
        for p in processes:
            try:
                codes.append(p.wait(timeout=timeout_s))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
    finally:
        for p in processes:
            p.kill()
            p.wait()
    return codes
