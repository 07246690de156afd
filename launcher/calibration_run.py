"""Runs coordinator.calibration on a throwaway loopback cluster of one worker and one or more ps, and stops it again.

The cluster is the job's own file with its cluster, hosts and outputs replaced: a chief, one worker and the ps on
free loopback ports of this machine, logs and outputs in a temporary directory (the job's checkpoints are never
touched), the one worker's batch set to the job's global batch. Bounded in time; everything started is stopped.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from cluster import config as cluster_config
from cluster import jsonfile
from cluster.config import PROJECT_ROOT, ClusterConfig
from launcher.supervisor import RunFailed, Supervisor

TIMEOUT_S = 300


class CalibrationFailed(Exception):
    """The calibration run could not finish; the message says why and where its logs are."""


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sockets.append(socket.socket())
            sockets[-1].bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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


def calibrate(config: ClusterConfig, say, ps_count: int = 1) -> dict:
    """The figures coordinator.calibration prints, from a run on `ps_count` ps of at most TIMEOUT_S seconds."""
    with tempfile.TemporaryDirectory(prefix="pscluster-calibration-") as name:
        directory = Path(name)
        path = directory / "cluster.json"
        path.write_text(json.dumps(calibration_document(config, directory, ps_count), indent=2))
        small = cluster_config.load(path)
        supervisor = Supervisor(small, lambda line: None)
        try:
            supervisor.start_servers()
            pids = {role: [record.pid for record in supervisor.records.values() if record.task.job == role]
                    for role in ("worker", "ps")}
            say(f"calibration: the job's step on 1 worker + {ps_count} ps here (pids {pids}), at most {TIMEOUT_S} s")
            ran = subprocess.run([sys.executable, "-m", "coordinator.calibration", "--cluster", str(path),
                                  "--pids", json.dumps(pids)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                                 timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (RunFailed, subprocess.TimeoutExpired) as error:
            raise CalibrationFailed(f"calibration run: {error}") from None
        finally:
            supervisor.stop_everything()
        if ran.returncode != 0:
            raise CalibrationFailed(f"calibration run exited with code {ran.returncode}: "
                                    f"{ran.stderr.strip().splitlines()[-1] if ran.stderr.strip() else 'no output'}")
        return json.loads(ran.stdout.strip().splitlines()[-1])
