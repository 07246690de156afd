"""Runs coordinator.calibration on a throwaway loopback cluster of one worker and one or more ps, and stops it again.

The cluster is the job's own file with its cluster, hosts and outputs replaced: a chief, one worker and the ps on
free loopback ports of this machine, logs and outputs in a temporary directory (the job's checkpoints are never
touched), the one worker's batch set to the job's global batch. Given a rate, the worker and its one ps talk
through a throttled link (launcher/throttled_link.py): the chief's file names the relays' ports, which TensorFlow's
tasks then use to reach each other. Bounded in time, ended by a server that exits (with its error), on ports
below the kernel's ephemeral range; everything started is stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster import config as cluster_config
from cluster import jsonfile, taskspec
from cluster.config import PROJECT_ROOT, ClusterConfig
from common.forking import ForkedChild
from launcher import task_forks
from launcher.supervisor import RunFailed, Supervisor
from launcher.throttled_link import ThrottledLink

TIMEOUT_S = 300
WATCH_S = 1.0  # how often the servers are checked while the calibration runs
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
PORTS_BELOW_EPHEMERAL, PORT_TRIES = 10_000, 64


class CalibrationFailed(Exception):
    """The calibration run could not finish; the message says why and where its logs are."""


def _ephemeral_low() -> int:
    """The first port the kernel hands to outgoing connections (Linux: ip_local_port_range)."""
    try:
        return int(Path(EPHEMERAL_RANGE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1 now, below the kernel's ephemeral range: no outgoing connection takes one
    between this choice and the servers' start (one took a port bind(0) had chosen, and the calibration hung on
    a foreign server there)."""
    low = _ephemeral_low()
    candidates = random.sample(range(max(1024, low - PORTS_BELOW_EPHEMERAL), low), PORT_TRIES)
    chosen = [port for port in candidates if _bindable(port)][:count]
    if len(chosen) < count:
        raise CalibrationFailed(f"{PORT_TRIES} ports tried between {low - PORTS_BELOW_EPHEMERAL} and {low - 1} on "
                                f"127.0.0.1 and fewer than {count} free for the calibration run: stop what holds "
                                "them (`ss -ltn` lists them) and plan again")
    return chosen


def calibration_document(config: ClusterConfig, directory: Path, ps_count: int = 1) -> dict:
    """The job's cluster.json, narrowed to a loopback chief, one worker and `ps_count` ps, writing only in
    `directory`."""
    document = jsonfile.read_document(config.source)
    chief, worker, *ps = (f"localhost:{port}" for port in _free_ports(2 + ps_count))
    training = dict(document.get("training", {}))
    workers = len(config.jobs.get("worker", ())) or 1
    training.update(per_worker_batch=config.training.per_worker_batch * workers, output_dir=str(directory / "output"),
                    epochs=1, checkpoint_every_s=0)
    return {"cluster": {"chief": [chief], "worker": [worker], "ps": ps},
            "hosts": {"localhost": {"python": sys.executable}},
            "launcher": {"logs_dir": str(directory / "logs"), "ready_timeout_s": 60},
            "training": training}


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def throttled(document: dict, bytes_per_s: float) -> tuple[dict, ThrottledLink]:
    """The chief's copy of a calibration cluster of one ps whose worker and ps are reached through relays at
    `bytes_per_s` each way, and the link that runs those relays."""
    (ps,), (worker,) = document["cluster"]["ps"], document["cluster"]["worker"]
    taken = {_port(address) for addresses in document["cluster"].values() for address in addresses}
    ps_relay, worker_relay = [port for port in _free_ports(2 + len(taken)) if port not in taken][:2]
    relayed = {**document, "cluster": {**document["cluster"], "ps": [f"localhost:{ps_relay}"],
                                       "worker": [f"localhost:{worker_relay}"]}}
    return relayed, ThrottledLink(bytes_per_s, ps=(ps_relay, _port(ps)), worker=(worker_relay, _port(worker)))


def calibrate(config: ClusterConfig, say, ps_count: int = 1, link_bytes_per_s: float | None = None) -> dict:
    """The figures coordinator.calibration prints, from a run on `ps_count` ps of at most TIMEOUT_S seconds; with
    `link_bytes_per_s`, on one ps through a link of that rate each way."""
    with tempfile.TemporaryDirectory(prefix="pscluster-calibration-") as name:
        directory = Path(name)
        document = calibration_document(config, directory, ps_count)
        path = chief_path = directory / "cluster.json"
        path.write_text(json.dumps(document, indent=2))
        link = contextlib.nullcontext()
        if link_bytes_per_s is not None:
            relayed, link = throttled(document, link_bytes_per_s)
            chief_path = directory / "chief-cluster.json"
            chief_path.write_text(json.dumps(relayed, indent=2))
        small = cluster_config.load(path)
        supervisor = Supervisor(small, lambda line: None)
        try:
            supervisor.start_servers()
            pids = {role: [record.pid for record in supervisor.records.values() if record.task.job == role]
                    for role in ("worker", "ps")}
            through = "" if link_bytes_per_s is None else f" through a {link_bytes_per_s * 8 / 1e9:.3f} Gbit/s link"
            say(f"calibration: the job's step on 1 worker + {ps_count} ps here{through} (pids {pids}), at most "
                f"{TIMEOUT_S} s")
            with link:
                code = _run_chief([sys.executable, "-m", "coordinator.calibration", "--cluster", str(chief_path),
                                   "--pids", json.dumps(pids)], small, supervisor, directory / "chief.log")
        except RunFailed as error:
            raise CalibrationFailed(f"calibration run: {error}") from None
        finally:
            supervisor.stop_everything()
        lines = (directory / "chief.log").read_text(errors="replace").strip().splitlines()
        if code != 0:
            raise CalibrationFailed(f"calibration run exited with code {code}: {lines[-1] if lines else 'no output'}")
        return json.loads(next(line for line in reversed(lines) if line.startswith("{")))  # its one JSON line


def _run_chief(command: list[str], config: ClusterConfig, supervisor: Supervisor, log: Path) -> int:
    """Runs the calibration's chief to its end (its output to `log`) and returns its exit code, or stops it when a
    server has exited (it would wait for that server for ever) or after TIMEOUT_S."""
    tasks = [record.task for record in supervisor.records.values() if record.task.job in ("worker", "ps")]
    backend = supervisor.hosts["localhost"]
    deadline = time.monotonic() + TIMEOUT_S
    chief = _start_chief(command, config, log)
    while True:
        try:
            return chief.wait(timeout=WATCH_S)
        except subprocess.TimeoutExpired:
            gone = [row for row in backend.status(tasks) if not row.running]
            if gone or time.monotonic() > deadline:
                chief.kill()
                chief.wait(timeout=30)
                why = ", ".join(f"{row.task} exited ({row.last_line or 'no log'})" for row in gone)
                raise CalibrationFailed(f"calibration run: {why or f'not done within {TIMEOUT_S} s'}") from None


def _start_chief(command: list[str], config: ClusterConfig, log: Path):
    """The calibration's chief, forked as the servers are (launcher/task_forks.py: no import of TensorFlow of its
    own), else started; Popen's poll, wait and kill either way."""
    env = {key: value for key, value in taskspec.task_environment(config, config.task("chief", 0), os.environ).items()
           if key != "TF_CONFIG"}  # the chief works out its own from the file it is given
    status = log.with_name(log.name + ".status")
    record = task_forks.start(command, cwd=PROJECT_ROOT, env=env, log_path=log, status_path=status,
                              pid_path=log.with_name(log.name + ".pid"))
    if record is not None:
        return ForkedChild(record.pid, status, command)
    with log.open("wb") as output:
        return subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=output, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL)
