"""`python -m bench.faults.soak`: DLRM on 2 ps + 3 workers (and chief and evaluator) with a task killed at random every
20 s, against the same job run without kills, into bench/RESULTS-soak.md (with `--write`).

The killed run must finish its plan; the report gives the restarts, the steps redone, the training time each kind
of kill cost, and the final validation AUC of both runs (the exported model evaluated on the validation split).
Kills (SIGKILL to the task's process group, as `kill -9` of what `sh run.sh status` shows) follow a fixed seed over
the tasks running at that moment, from the first training step for `--minutes`; the plan is sized to outlast
them. `--quick` is a smoke size (about 3 minutes for both runs on an idle 2-core machine).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import fire

from bench.__main__ import machine
from bench.kit.cluster import PYTHON, ROOT
from bench.faults.soak_report import ProgressTrail, render, summarise

HERE = Path(__file__).resolve().parents[1]
SIZES = {  # the job, the kill window, and what the run may take at most before the soak gives up on it
    "full": {"epochs": 8, "steps_per_epoch": 4000, "minutes": 10.0, "limit_minutes": 60.0},
    "quick": {"epochs": 2, "steps_per_epoch": 600, "minutes": 1.0, "limit_minutes": 15.0},
}
MODEL = {"model": "dlrm", "dataset": "synthetic_criteo", "synthetic_examples": 1 << 22, "table_rows": 20000,
         "embedding_dim": 8,
         "bottom_mlp": [32], "top_mlp": [32, 16], "per_worker_batch": 256, "steps_per_execution": 5,
         "lr_decay_epochs": [], "learning_rate": 0.001, "checkpoint_every_s": 10, "progress_every_s": 5,
         "keep_checkpoints": 3}


def cluster_file(work: Path, size: dict) -> Path:
    """2 ps + 3 workers + chief + evaluator on loopback, with restarts enough for a task killed many times."""
    sys.path.insert(0, str(ROOT / "tests"))
    from clusterkit import cluster_document, write_cluster

    training = {**MODEL, "epochs": size["epochs"], "steps_per_epoch": size["steps_per_epoch"],
                "output_dir": str(work / "output")}
    document = {**cluster_document(workers=3, ps=2, logs_dir=str(work / "logs"), training=training),
                "evaluation": {"poll_s": 2, "idle_timeout_s": 600, "best_metric": "val_auc", "best_mode": "max"}}
    document["launcher"].update(max_restarts=50, poll_s=0.5, restart_backoff_s=1)
    work.mkdir(parents=True, exist_ok=True)
    return write_cluster(work, document)


def running_tasks(logs: Path) -> dict[str, int]:
    """Task file name (e.g. `ps-1`) -> pid, of the tasks whose process runs now."""
    from launcher import process

    found = {}
    for pid_file in sorted(logs.glob("*-*.pid")):
        record = process.PidRecord.read(pid_file)
        if record and process.is_running(record):
            found[pid_file.stem] = record.pid
    return found


def run_job(work: Path, size: dict, *, kill_every_s: float | None, seed: int, say) -> dict:
    """One run through `sh run.sh --detach`; with `kill_every_s`, SIGKILLs a random running task that often."""
    shutil.rmtree(work, ignore_errors=True)
    path = cluster_file(work, size)
    logs, output = work / "logs", work / "output"
    subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], check=True, timeout=300, cwd=ROOT,
                   capture_output=True)
    trail, kills, rng = ProgressTrail(output), [], random.Random(seed)
    started = time.monotonic()
    deadline = started + size["limit_minutes"] * 60
    try:
        while launcher_running(logs) and time.monotonic() < deadline:
            trail.poll()
            if kill_every_s and kill_due(trail, kills, kill_every_s, size["minutes"] * 60):
                kills.append(kill_one(logs, rng, trail, say, number=len(kills) + 1))
            time.sleep(0.5)
        finished = not launcher_running(logs)
    finally:
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], timeout=300, cwd=ROOT, capture_output=True)
    result = summarise(work, trail, kills, finished=finished, wall_s=time.monotonic() - started)
    result["validation"] = validation_metrics(path, output) if result["complete"] else {}
    return result


def kill_due(trail: ProgressTrail, kills: list[dict], every_s: float, window_s: float) -> bool:
    """`every_s` after the last kill (or the first step), while training runs and the window lasts."""
    if trail.first_step_at is None or trail.phase != "train":
        return False
    now = time.monotonic()
    return now - trail.first_step_at < window_s and now - (kills[-1]["at"] if kills else trail.first_step_at) >= every_s


def launcher_running(logs: Path) -> bool:
    from launcher import process

    record = process.PidRecord.read(logs / "launcher.pid")
    return bool(record and process.is_running(record))


def kill_one(logs: Path, rng: random.Random, trail: ProgressTrail, say, number: int) -> dict:
    """SIGKILLs one task drawn from those running now; returns when, which, and the step training had reached."""
    running = running_tasks(logs)
    name = rng.choice(sorted(running)) if running else None
    if name is not None:
        try:
            os.killpg(running[name], signal.SIGKILL)  # the task leads its own process group
        except ProcessLookupError:
            name = None
    kill = {"at": time.monotonic(), "task": name, "step": trail.max_step}
    say(f"kill {number}: {name or 'nothing running'} at step {trail.max_step}")
    return kill


def validation_metrics(cluster: Path, output: Path) -> dict:
    """The exported model's metrics on the validation split, evaluated on its own."""
    report = output / "soak-validation.json"
    done = subprocess.run([PYTHON, "-m", "evaluator.sidecar", "--cluster", str(cluster), "--model",
                           str(output / "model" / "model.keras"), "--split", "validation", "--output_json",
                           str(report)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["no output"]}
    return json.loads(report.read_text())["metrics"]


def main(quick: bool = False, seed: int = 26, kill_every_s: float = 20.0, minutes: float | None = None,
         epochs: int | None = None, steps_per_epoch: int | None = None, work: str = "/tmp/pscluster-bench-soak",
         write: bool = False, killed_only: bool = False) -> None:
    """Runs the soak (kills) and the same job clean; prints the report, and with `--write` writes
    bench/RESULTS-soak.md and bench/soak.json. `--minutes`, `--epochs` and `--steps_per_epoch` override the size's;
    `--killed_only` skips the clean run (to hunt bugs)."""
    size = dict(SIZES["quick" if quick else "full"])
    overrides = {"minutes": minutes, "epochs": epochs, "steps_per_epoch": steps_per_epoch}
    size.update({name: value for name, value in overrides.items() if value is not None})

    def say(line: str) -> None:
        print(f"[soak] {time.strftime('%H:%M:%S')} {line}", flush=True)

    results = {"machine": machine(), "size": size, "seed": seed, "kill_every_s": kill_every_s, "model": MODEL}
    say(f"killed run: {size['epochs']} epochs x {size['steps_per_epoch']} steps, a kill every {kill_every_s:.0f} s "
        f"for {size['minutes']:.0f} min (seed {seed}); work in {work}")
    results["killed"] = run_job(Path(work) / "killed", size, kill_every_s=kill_every_s, seed=seed, say=say)
    if not killed_only:
        say("clean run: the same job without kills")
        results["clean"] = run_job(Path(work) / "clean", size, kill_every_s=None, seed=seed, say=say)
    text = render(results)
    print(text)
    if write:
        (HERE / "soak.json").write_text(json.dumps(results, indent=2))
        (HERE / "RESULTS-soak.md").write_text(text)


if __name__ == "__main__":
    fire.Fire(main)
