"""`python -m bench.online.follow [--quick]`: follow mode against a fixed data set, and a slowed worker, into
bench/RESULTS-follow.md (machine and date; not with --quick, which only proves the bench runs).

On one loopback cluster (2 workers, 1 ps; each scenario a fresh chief and output directory), the same generated
Criteo files (dlrm, batch 256 per worker) are trained once:
- `fixed`: Keras fit, one epoch over train-* (pre-split: each worker reads its own files);
- `follow`: follow mode over the same files, there from the start, handed out in pieces of `piece_mb`;
- `fixed, slowed` and `follow, slowed`: the same with worker 1 held to `cpu_share` of one core by a CPU cgroup
  (v1 cpu.cfs_quota_us or v2 cpu.max, bench/kit/cpu_cgroup.py: a quota the kernel enforces, whatever else runs);
- `freshness`: follow mode on an empty folder into which a file is dropped every `drop_every_s` (written under a
  hidden name, then renamed): seconds from each landing to the first serving version holding all of it.
Examples/s count training only (the chief's start-up is left out): fit's from its summary (steps x batch over
its train_seconds); follow mode's from the first piece started to the last file done.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import fire

from bench.__main__ import machine
from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster
from bench.kit.cpu_cgroup import CpuCap

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import criteokit  # noqa: E402

MODEL = {"model": "dlrm", "dataset": "criteo", "loss": "binary_crossentropy", "metrics": ["auc"],
         "table_rows": 20_000, "embedding_dim": 16, "per_worker_batch": 256, "lr_decay_epochs": [],
         "steps_per_execution": 10, "progress_every_s": 10, "checkpoint_every_s": 60}
SIZES = {"quick": {"files": 2, "rows": 1000, "drop_every_s": 5.0, "piece_mb": 0.1},
         "full": {"files": 8, "rows": 50_000, "drop_every_s": 30.0, "piece_mb": 2.0}}


def drop(data: Path, name: str, rows: int, first: int) -> None:
    """A Criteo file published the safe way: written under a hidden name, then renamed into place."""
    hidden = criteokit.write(data / f".{name}.tmp", criteokit.rows(rows, first=first))
    hidden.rename(data / name)


def write_files(data: Path, files: int, rows: int, prefix: str = "train-") -> None:
    data.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        drop(data, f"{prefix}{k:03d}", rows, k * rows)


def run_chief(cluster: LoopbackCluster, output: Path, timeout_s: float = 1800, **options) -> dict:
    """coordinator.train with these options; its summary (fails with the log's tail)."""
    arguments = [f"--{key}={value if isinstance(value, bool) else json.dumps(value)}"  # Fire reads True, not true
                 for key, value in {**MODEL, **options}.items()]
    output.mkdir(parents=True, exist_ok=True)
    with open(output / "chief.log", "w") as log:
        chief = subprocess.run([PYTHON, "-m", "coordinator.train", "--cluster", str(cluster.path),
                                "--output_dir", str(output), *arguments], cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT, timeout=timeout_s, stdin=subprocess.DEVNULL)
    if chief.returncode != 0:
        raise RuntimeError((output / "chief.log").read_text()[-3000:])
    return json.loads((output / "summary.json").read_text())


def fixed(cluster: LoopbackCluster, work: Path, data: Path) -> dict:
    summary = run_chief(cluster, work, data_dir=str(data), epochs=1)
    examples = summary["optimizer_steps"] * summary["global_batch"]
    return {"examples": examples, "examples_per_s": examples / summary["train_seconds"]}


def follow(cluster: LoopbackCluster, work: Path, data: Path, piece_mb: float) -> dict:
    summary = run_chief(cluster, work, data_dir=str(data), follow_data=True, follow_pattern="train-*",
                        piece_mb=piece_mb, data_poll_s=1, settle_s=0, stop_when_idle_s=5,
                        serving_export_every_s=600)
    files = summary["follow"]["per_file"]
    seconds = max(f["done"] for f in files) - min(f["started"] for f in files)
    examples = summary["follow"]["examples"]
    return {"examples": examples, "examples_per_s": examples / seconds}


def slowed(cluster: LoopbackCluster, share: float, run) -> dict:
    """`run()` with worker 1 held to `share` of one core."""
    cap = CpuCap("pscluster-bench-follow", share)
    try:
        cap.add(cluster.server_pids("worker")[1])
        return run()
    finally:
        cap.remove()


def freshness(cluster: LoopbackCluster, work: Path, files: int, rows: int, drop_every_s: float,
              piece_mb: float) -> dict:
    """Follow mode on an empty folder; a file dropped every `drop_every_s` by a helper process."""
    data = work / "data"
    data.mkdir(parents=True)
    dropper = subprocess.Popen([PYTHON, "-c", DROPPER, str(data), str(files), str(rows), str(drop_every_s)],
                               cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        summary = run_chief(cluster, work / "output", data_dir=str(data), follow_data=True, piece_mb=piece_mb,
                            data_poll_s=1, settle_s=0, stop_when_idle_s=drop_every_s + 10,
                            serving_export_every_s=5)
    finally:
        dropper.kill()
        dropper.wait()
    served = [f["freshness_s"] for f in summary["follow"]["per_file"] if f["freshness_s"] is not None]
    return {"files": len(served), "median_s": statistics.median(served), "max_s": max(served)}


DROPPER = """
import sys, time
from pathlib import Path
from bench.online.follow import drop
data, files, rows, every = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for k in range(files):
    time.sleep(every)
    drop(data, f"part-{k:03d}", rows, k * rows)
"""


def report(figures: dict, size: dict, about: dict) -> str:
    lines = ["# Follow mode: freshness, and examples/s against a fixed data set", "",
             f"Measured {about['date']} on {about['cores']} cores ({about['cpu']}) by `python -m bench.online.follow`: "
             f"{size['files']} Criteo files of {size['rows']:,} lines, dlrm, 2 workers + 1 ps on loopback, pieces "
             f"of {size['piece_mb']} MB; the slowed worker had {size['cpu_share']:.0%} of one core (CPU cgroup). "
             f"Load average before: {about['load_before']:.1f}.", "",
             "| run | examples | examples/s |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {row['examples']:,} | {row['examples_per_s']:,.0f} |"
              for name, row in figures.items() if name != "freshness"]
    fresh = figures["freshness"]
    lines += ["", f"Freshness (a file dropped every {size['drop_every_s']:g} s, serving versions every 5 s): median "
              f"{fresh['median_s']:.0f} s, max {fresh['max_s']:.0f} s over {fresh['files']} files.", ""]
    return "\n".join(lines)


def main(quick: bool = False, cpu_share: float = 0.25) -> None:
    """Runs every scenario; prints the table, and without --quick writes bench/RESULTS-follow.md."""
    size = {**SIZES["quick" if quick else "full"], "cpu_share": cpu_share}
    about = machine()
    with tempfile.TemporaryDirectory(prefix="bench-follow-") as temporary:
        work = Path(temporary)
        data = work / "data"
        write_files(data, size["files"], size["rows"])
        write_files(data, 1, 1000, prefix="validation-")  # fit's layout wants one; follow mode leaves it out
        with LoopbackCluster(work / "cluster", workers=2, ps=1) as cluster:
            figures = {
                "fixed (fit, pre-split)": fixed(cluster, work / "fixed", data),
                "follow (handed out)": follow(cluster, work / "follow", data, size["piece_mb"]),
                "fixed, worker 1 slowed": slowed(cluster, cpu_share, lambda: fixed(cluster, work / "f2", data)),
                "follow, worker 1 slowed": slowed(cluster, cpu_share,
                                                  lambda: follow(cluster, work / "o2", data, size["piece_mb"])),
                "freshness": freshness(cluster, work / "fresh", size["files"], size["rows"], size["drop_every_s"],
                                       size["piece_mb"])}
    text = report(figures, size, about)
    print(text)
    if not quick:
        (HERE / "RESULTS-follow.md").write_text(text)


if __name__ == "__main__":
    fire.Fire(main)
