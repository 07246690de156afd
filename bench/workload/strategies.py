"""Accuracy of the same model trained with each strategy on the embedded digits, each run by the real launcher.

Every strategy trains the tutorial CNN for the same epochs at the same global batch (64) with the same seed
list; the exported model is then scored on the test split in a separate process (`evaluator.sidecar --model
... --split test`). Runs are interleaved over seeds so that drift hits every strategy alike.

    .venv/bin/python -m bench.workload.strategies [--seeds 0,1] [--epochs 6]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fire

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
STRATEGIES = ("parameter_server", "multi_worker_mirrored", "mirrored", "one_device")
GLOBAL_BATCH = 64


def _cluster_file(directory: Path, strategy: str, seed: int, epochs: int) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from clusterkit import cluster_document, write_cluster

    directory.mkdir(parents=True, exist_ok=True)
    workers = 1 if strategy in ("mirrored", "one_device") else 2
    training = {"strategy": strategy, "seed": seed, "epochs": epochs, "per_worker_batch": GLOBAL_BATCH // workers,
                "output_dir": str(directory / "output"), "lr_decay_epochs": [epochs - 1]}
    return write_cluster(directory, cluster_document(evaluator=False, logs_dir=str(directory / "logs"),
                                                     training=training))


def run_once(directory: Path, strategy: str, seed: int, epochs: int) -> dict:
    """Trains with the launcher, then scores the exported model on the test split; returns the figures."""
    path = _cluster_file(directory, strategy, seed, epochs)
    started = time.monotonic()
    run = subprocess.run([PYTHON, "-m", "roles.launch", "run", str(path)], capture_output=True, text=True,
                         cwd=ROOT, timeout=1800, stdin=subprocess.DEVNULL)
    wall_s = time.monotonic() - started
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-3000:])
    summary = json.loads((directory / "output" / "summary.json").read_text())
    scores = directory / "test.json"
    score = subprocess.run([PYTHON, "-m", "evaluator.sidecar", "--cluster", str(path), "--model",
                            summary["model"]["keras"], "--split", "test", "--output_json", str(scores)],
                           capture_output=True, text=True, cwd=ROOT, timeout=600, stdin=subprocess.DEVNULL)
    if score.returncode != 0:
        raise RuntimeError(score.stderr[-3000:])
    metrics = json.loads(scores.read_text())["metrics"]
    return {"test_accuracy": metrics["test_accuracy"], "test_loss": metrics["test_loss"],
            "train_loss": summary["final_metrics"].get("loss"), "train_seconds": summary["train_seconds"],
            "wall_s": round(wall_s, 1), "steps": summary["optimizer_steps"]}


def main(seeds: str = "0,1", epochs: int = 6) -> None:
    """Runs every strategy for each seed (interleaved) and prints a JSON record and a Markdown table."""
    seed_list = [int(s) for s in str(seeds).split(",")]
    runs: dict[str, list[dict]] = {s: [] for s in STRATEGIES}
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seed_list:
            for strategy in STRATEGIES:
                figures = run_once(Path(scratch) / f"{strategy}-{seed}", strategy, seed, epochs)
                runs[strategy].append(figures)
                print(f"seed {seed} {strategy}: {figures}", file=sys.stderr, flush=True)
    print(json.dumps(runs, indent=2))
    print("\n| strategy | test accuracy per seed | median | test loss (median) | steps | train s (median) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for strategy, figures in runs.items():
        accuracies = [f["test_accuracy"] for f in figures]
        print(f"| {strategy} | {', '.join(f'{a:.4f}' for a in accuracies)} | {statistics.median(accuracies):.4f} | "
              f"{statistics.median(f['test_loss'] for f in figures):.4f} | {figures[0]['steps']} | "
              f"{statistics.median(f['train_seconds'] for f in figures):.1f} |")


if __name__ == "__main__":
    fire.Fire(main)
