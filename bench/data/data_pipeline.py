"""Examples per second of each data source's training pipeline alone, beside the loopback cluster's training rate.

    .venv/bin/python bench/data/data_pipeline.py [--seconds 3] [--train/--notrain]

Writes small generated data sets into a temporary directory, times each source's training `dataset_fn` (one
input pipeline, global batch 64, as one worker builds it) for a few seconds after a warm-up, then trains the
shipped cluster.json's job (digits, CNN, 2 ps + 2 workers) on free loopback ports and reads the chief's rate.
Prints a table and writes bench/RESULTS-data.md.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import fire  # noqa: E402
import tensorflow as tf  # noqa: E402

import datakit  # noqa: E402
from clusterkit import PYTHON, cluster_document, write_cluster  # noqa: E402
from data import load_source  # noqa: E402
from cluster import config as cluster_config  # noqa: E402
from launcher.supervisor import Supervisor  # noqa: E402

BATCH = 64
WARM_UP_BATCHES = 20
IMAGE_SIZE = (64, 64)
RATE_LINE = re.compile(r"train \| epoch (\d+)/\d+ .*?\| ([\d.]+) steps/s \| (\d+) ex/s")


def write_data_sets(root: Path) -> list[tuple[str, str, dict]]:
    """(label, dataset name, load_source keywords) for every source, with files written under `root`."""
    per_class = {split: {f"class{c}": count for c in range(10)} for split, count in
                 (("train", 200), ("validation", 20), ("test", 20))}
    datakit.write_image_folders(root / "folders", per_class, size=(96, 96), image_format="jpg")
    datakit.write_cifar(root / "cifar", train_per_file=2000, test=1000)
    datakit.write_idx(root / "mnist", train=10000, test=1000)
    datakit.write_npz(root / "npz" / "mnist.npz", train=10000, test=1000)
    datakit.write_tfrecords(root / "tfrecord", {"train": [250] * 8, "validation": [100], "test": [100]},
                            size=(96, 96))
    images = {"image_size": IMAGE_SIZE}
    return [
        ("digits (embedded, in memory)", "digits", {}),
        ("synthetic (28x28x1, generated)", "synthetic", {}),
        ("image_folder (96x96 jpg -> 64x64)", "image_folder", {"data_dir": str(root / "folders"), **images}),
        ("image_folder + augment", "image_folder", {"data_dir": str(root / "folders"), "augment": True, **images}),
        ("cifar10 (binary batches)", "cifar10", {"data_dir": str(root / "cifar")}),
        ("mnist (idx, gzipped)", "mnist", {"data_dir": str(root / "mnist")}),
        ("mnist (mnist.npz)", "mnist", {"data_dir": str(root / "npz")}),
        ("tfrecord (8 shards, 96x96 png -> 64x64)", "tfrecord", {"data_dir": str(root / "tfrecord"), **images}),
    ]


def pipeline_rate(name: str, settings: dict, seconds: float) -> float:
    """Training examples per second one input pipeline delivers, batches drawn as fast as it makes them."""
    source = load_source(name, **settings)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)
    batches = iter(source.train_dataset_fn(BATCH, seed=0)(context))
    for _ in range(WARM_UP_BATCHES):
        next(batches)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        next(batches)
        count += 1
    return count * BATCH / (time.perf_counter() - started)


def training_rate(directory: Path) -> tuple[float, float]:
    """(steps/s, examples/s) of the last epoch of the shipped job, on a loopback cluster with free ports."""
    import json

    directory.mkdir()
    training = {**json.loads((ROOT / "cluster.json").read_text())["training"], "output_dir": str(directory / "out")}
    path = write_cluster(directory, cluster_document(evaluator=False, training=training,
                                                     logs_dir=str(directory / "logs")))
    config = cluster_config.load(path)
    supervisor = Supervisor(config, print)
    supervisor.start_servers()
    try:
        chief = subprocess.run([PYTHON, "-m", "coordinator.train", "--cluster", str(path)], cwd=ROOT,
                               capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    finally:
        supervisor.stop_everything()
    rates = RATE_LINE.findall(chief.stderr)
    if chief.returncode != 0 or not rates:
        raise SystemExit(f"training failed (exit {chief.returncode}):\n{chief.stderr[-3000:]}")
    return float(rates[-1][1]), float(rates[-1][2])


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
                 platform.processor() or "unknown CPU")
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, TensorFlow {tf.__version__}"


def report(rows: list[tuple[str, float]], training: tuple[float, float] | None, seconds: float,
           load: tuple[float, float]) -> str:
    lines = [
        "# Data pipeline throughput",
        "",
        f"Measured {datetime.date.today().isoformat()} on {machine()} by `bench/data/data_pipeline.py`: each source's",
        f"training `dataset_fn` alone (one input pipeline, batch {BATCH}, shuffled, {seconds:g} s after "
        f"{WARM_UP_BATCHES} warm-up batches), on small data sets generated in a temporary directory.",
        f"The 1-minute load average was {load[0]:.1f} before and {load[1]:.1f} after the pipeline timings: other",
        "jobs share this machine, and the figures move with them.",
        "",
        "| source | examples/s |",
        "| --- | ---: |",
        *[f"| {label} | {rate:,.0f} |" for label, rate in rows],
        "",
    ]
    if training:
        steps, examples = training
        lines += [f"Training for comparison: the shipped job (digits, CNN, global batch 64, 2 ps + 2 workers on "
                  f"loopback) ran its last epoch at **{steps:.1f} steps/s = {examples:,.0f} examples/s**.",
                  "A source whose figure is not well above the rate its model trains at would hold training back",
                  "(that figure is for 8×8 digits; a model on 64×64 images trains far slower: the chief logs the",
                  "ex/s of every epoch). On this 2-core machine the workers' pipelines share the cores with the ps,",
                  "the workers' training steps and the chief, so a pipeline gets only part of its figure while",
                  "training runs.", ""]
    return "\n".join(lines)


def main(seconds: float = 3.0, train: bool = True) -> None:
    """Times every source's pipeline, then (unless --notrain) the cluster's training rate; writes the report."""
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-data-") as temporary:
        rows = []
        for label, name, settings in write_data_sets(Path(temporary)):
            rows.append((label, pipeline_rate(name, settings, seconds)))
            print(f"{label:45s} {rows[-1][1]:10,.0f} examples/s", flush=True)
        load = (load_at_start, os.getloadavg()[0])
        training = training_rate(Path(temporary) / "cluster") if train else None
    text = report(rows, training, seconds, load)
    (ROOT / "bench" / "RESULTS-data.md").write_text(text)
    print(text)


if __name__ == "__main__":
    fire.Fire(main)
