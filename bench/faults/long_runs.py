"""`python -m bench.faults.long_runs`: what long-run failures cost, into bench/RESULTS-long-runs.md.

Measures, on loopback: the time to write a checkpoint within an epoch against model size (the seed CNN, and a
16 M-row DLRM with its Adagrad slots), SIGTERM to the chief's exit (its checkpoint included), and, through the
launcher, the time from a worker's loss (and from `sh run.sh reload`) to training again. Run it with nothing
else on the machine: it checks that no other process uses CPU first and records the load average.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import fire

from bench.__main__ import machine
from bench.kit.cluster import LoopbackCluster, PYTHON, ROOT
from bench.kit.quiet import require_quiet

HERE = Path(__file__).resolve().parents[1]
WRITTEN = re.compile(r"checkpoint (ckpt-[\d-]+) \(optimizer step \d+\) written in ([\d.]+) s")
DLRM_ROWS_PER_TABLE = 615_385  # x 26 tables = 16.0 M rows
MODELS = {
    "cnn (seed CNN, 28x28 synthetic)": {"model": "cnn", "dataset": "synthetic", "per_worker_batch": 64},
    "dlrm, 16.0 M rows x 16, Adagrad": {"model": "dlrm", "dataset": "synthetic_criteo", "per_worker_batch": 512,
                                        "table_rows": DLRM_ROWS_PER_TABLE, "loss": "binary_crossentropy",
                                        "metrics": ["auc"]},
}


def _checkpoint_bytes(directory: Path, name: str) -> int:
    return sum(p.stat().st_size for p in directory.glob(f"{name}.*"))


def checkpoint_and_sigterm(work: Path, label: str, options: dict) -> dict:
    """Runs a chief that checkpoints every 4 s; after three saves sends SIGTERM and times its exit."""
    with LoopbackCluster(work / "cluster", workers=1, ps=2) as cluster:
        output = work / "output"
        arguments = [f"--{k}={json.dumps(v)}" for k, v in {**options, "epochs": 1, "steps_per_epoch": 100000,
                                                           "steps_per_execution": 10, "checkpoint_every_s": 4,
                                                           "lr_decay_epochs": []}.items()]
        log_path = work / "chief.log"
        with open(log_path, "w") as log:
            chief = subprocess.Popen([PYTHON, "-m", "coordinator.train", "--cluster", str(cluster.path),
                                      "--output_dir", str(output), *arguments], cwd=ROOT, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 900
            while len(WRITTEN.findall(log_path.read_text())) < 3 and time.monotonic() < deadline:
                if chief.poll() is not None:
                    raise RuntimeError(log_path.read_text()[-3000:])
                time.sleep(0.2)
            sent = time.monotonic()
            chief.send_signal(signal.SIGTERM)
            code = chief.wait(timeout=300)
            exit_s = time.monotonic() - sent
        finally:
            chief.kill()
            chief.wait()
    saves = WRITTEN.findall(log_path.read_text())
    seconds = [float(s) for _, s in saves]
    return {"model": label, "checkpoint_mb": _checkpoint_bytes(output / "checkpoints", saves[-1][0]) / 1e6,
            "saves": len(saves), "save_s_median": statistics.median(seconds[:3]), "save_s_max": max(seconds[:3]),
            "sigterm_to_exit_s": exit_s, "exit_code": code}


def _launch(work: Path, workers: int, launcher: dict) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from clusterkit import cluster_document, write_cluster

    logs = work / "logs"
    work.mkdir(parents=True, exist_ok=True)
    training = {"epochs": 1, "steps_per_epoch": 100000, "steps_per_execution": 10, "lr_decay_epochs": [],
                "checkpoint_every_s": 30, "output_dir": str(work / "output"), "dataset": "synthetic"}
    document = cluster_document(workers=workers, ps=1, evaluator=False, logs_dir=str(logs), training=training)
    document["launcher"].update(poll_s=0.5, restart_backoff_s=0.5, **launcher)
    path = write_cluster(work, document)
    subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], check=True, timeout=300, cwd=ROOT,
                   capture_output=True)
    return path, logs


def _wait_for(path: Path, pattern: str, timeout_s: float) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, path.read_text(errors="replace")) if path.exists() else None
        if found:
            return found
        time.sleep(0.2)
    raise TimeoutError(f"no {pattern!r} in {path} within {timeout_s} s")


def _progress_step(output: Path) -> int | None:
    try:
        document = json.loads((output / "progress.json").read_text())
    except (OSError, ValueError):
        return None
    return document["step"] if document.get("phase") == "train" else None


def worker_loss_and_reload(work: Path, lost_after_s: float = 10.0) -> dict:
    """A worker killed with no restarts left: seconds from the loss to training again (as the launcher reports
    it); then a reload adding a worker: seconds from the command to the chief's step moving again."""
    from launcher import process

    path, logs = _launch(work, workers=2, launcher={"max_restarts": 0, "worker_lost_after_s": lost_after_s})
    try:
        _wait_for(logs / "chief-0.log", r"train \| epoch", 300)
        record = process.PidRecord.read(logs / "worker-1.pid")
        os.killpg(record.pid, signal.SIGKILL)  # the worker's whole process group
        lost = _wait_for(logs / "launcher.log", r"dropped worker:1: training again (\d+) s after the loss, "
                                                r"(\d+) step\(s\) redone", 300)
        document = json.loads(path.read_text())
        document["cluster"]["worker"].append(f"localhost:{_free_port()}")
        path.write_text(json.dumps(document))
        before, started = _progress_step(work / "output"), time.monotonic()
        subprocess.run(["sh", str(ROOT / "run.sh"), "reload", str(path)], check=True, timeout=600, cwd=ROOT,
                       capture_output=True)
        resumed = None
        while time.monotonic() - started < 300:
            step = _progress_step(work / "output")
            if resumed is None and step is not None and step != before:
                resumed = step
            elif resumed is not None and step is not None and step > resumed:
                break
            time.sleep(0.2)
        reload_s = time.monotonic() - started
    finally:
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], timeout=300, cwd=ROOT, capture_output=True)
    return {"worker_lost_after_s": lost_after_s, "loss_to_training_s": int(lost[1]),
            "after_the_decision_s": int(lost[1]) - lost_after_s, "steps_redone": int(lost[2]),
            "reload_to_training_s": reload_s}


def _free_port() -> int:
    from bench.tables.embedding_cluster import free_ports

    return free_ports(1)[0]


def render(results: dict) -> str:
    m = results["machine"]
    lines = ["# Long runs: what a failure costs", "",
             f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Python {m['python']}, "
             f"tensorflow-cpu {m['tensorflow-cpu']}; load average {m['load_before']:.2f} before the run (it counts "
             f"this benchmark's own tasks too); no other process used CPU ({results['quiet']}). "
             "Loopback, 1 worker + 2 ps for the checkpoints; `python -m bench.faults.long_runs`.", "",
             "| model | checkpoint size | save within an epoch (median of 3, max) | SIGTERM to exit "
             "(with its checkpoint) |",
             "| --- | ---: | ---: | ---: |"]
    for row in results["checkpoints"]:
        lines.append(f"| {row['model']} | {row['checkpoint_mb']:.0f} MB | {row['save_s_median']:.2f} s "
                     f"({row['save_s_max']:.2f} s) | {row['sigterm_to_exit_s']:.1f} s (exit code {row['exit_code']}) |")
    e = results["elastic"]
    lines += ["", "| through the launcher (2 workers, 1 ps, seed CNN) | seconds |", "| --- | ---: |",
              f"| worker:1 killed with no restarts left → training again without it | "
              f"{e['loss_to_training_s']} "
              f"({e['worker_lost_after_s']:.0f} of them `worker_lost_after_s`; {e['steps_redone']} steps redone) |",
              f"| `sh run.sh reload` adding a worker → the chief's step moves again | "
              f"{e['reload_to_training_s']:.1f} |",
              ""]
    return "\n".join(lines)


def main(work: str = "/tmp/pscluster-bench-long-runs", resume: bool = False) -> None:
    """Measures and writes bench/RESULTS-long-runs.md (and long_runs.json); `--resume` keeps the parts that
    long_runs.json already holds."""
    kept = json.loads((HERE / "long_runs.json").read_text()) if resume and (HERE / "long_runs.json").exists() else {}
    results = {"machine": machine(), "quiet": "checked with /proc before each part", **kept}
    root = Path(work)
    shutil.rmtree(root, ignore_errors=True)  # a previous run's checkpoints would be resumed
    if "checkpoints" not in results:
        require_quiet()
        results["checkpoints"] = [checkpoint_and_sigterm(root / f"checkpoints-{index}", label, options)
                                  for index, (label, options) in enumerate(MODELS.items())]
        (HERE / "long_runs.json").write_text(json.dumps(results, indent=2))
    require_quiet()
    results["elastic"] = worker_loss_and_reload(root / "elastic")
    (HERE / "long_runs.json").write_text(json.dumps(results, indent=2))
    (HERE / "RESULTS-long-runs.md").write_text(render(results))
    print(render(results))


if __name__ == "__main__":
    fire.Fire(main)
