"""The Criteo reader's examples/s on one Kaggle-layout train.txt with 2 workers, byte-range against element sharding.

    .venv/bin/python bench/data/criteo_sharding.py [--gigabytes 1.0] [--workers 2] [--max_seconds 90]

Writes a train.txt of about `gigabytes` (a block of generated Criteo lines, repeated) into a temporary directory,
then for each sharding runs `workers` processes at once, each making one pass over its own shard: the pipeline
a worker runs under ParameterServerStrategy (`_worker_examples`: read, parse, hash, shuffle), batched by 512,
without the gRPC around it, for at most `max_seconds` (about 4 minutes in all at the defaults). Each reports
its examples, seconds and what /proc/self/io says it read (rchar: every read; read_bytes: what came from disk,
0 when train.txt sits in the page cache). Writes bench/RESULTS-criteo-sharding.md (a file of its own: one machine and
day per results file).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import fire  # noqa: E402

import criteokit  # noqa: E402
from bench.kit.quiet import busy_processes  # noqa: E402

PYTHON = str(ROOT / ".venv" / "bin" / "python")
BATCH = 512
BLOCK_ROWS = 20_000
SECTION = "# Criteo reader: byte-range against element sharding"
WORKER = """
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
from data import criteo
from data.criteo_splits import criteo_files
data_dir, workers, index, byte_ranges = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "range"
source = criteo.load(criteo_files(__import__("pathlib").Path(data_dir)),
                     byte_ranges=byte_ranges)
batches = source._worker_examples(workers, tf.constant(index), 0).batch(512).prefetch(2)
def io():
    return {k: int(v) for k, v in (line.split(": ") for line in open("/proc/self/io").read().splitlines())}
before, started, examples = io(), time.perf_counter(), 0
for features, labels in batches:
    examples += int(labels.shape[0])
    if time.perf_counter() - started > float(sys.argv[5]):
        break
after = io()
print(json.dumps({"examples": examples, "seconds": time.perf_counter() - started, "policy": source.sharding(workers),
                  "rchar": after["rchar"] - before["rchar"], "read_bytes": after["read_bytes"] - before["read_bytes"]}))
"""


def write_kaggle(directory: Path, gigabytes: float) -> Path:
    """train.txt of about `gigabytes`: BLOCK_ROWS generated lines, repeated."""
    block = ("\n".join(criteokit.line(row) for row in criteokit.rows(BLOCK_ROWS)) + "\n").encode()
    path = directory / "train.txt"
    with open(path, "wb") as out:
        for _ in range(max(1, round(gigabytes * 1e9 / len(block)))):
            out.write(block)
    return path


def run_workers(data: Path, workers: int, mode: str, max_seconds: float) -> tuple[float, list[dict]]:
    """(wall seconds, each worker's report) for `workers` processes reading their shards at once."""
    started = time.perf_counter()
    processes = [subprocess.Popen([PYTHON, "-c", WORKER, str(data), str(workers), str(k), mode, str(max_seconds)],
                                  cwd=ROOT, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
                 for k in range(workers)]
    outputs = [p.communicate(timeout=max_seconds + 300)[0] for p in processes]
    if any(p.returncode for p in processes):
        raise SystemExit(f"a worker failed: exit codes {[p.returncode for p in processes]}")
    return time.perf_counter() - started, [json.loads(o.strip().splitlines()[-1]) for o in outputs]


def report(size: int, workers: int, rows: dict[str, tuple[float, list[dict]]], load: tuple[float, float],
           busy: list[str], max_seconds: float) -> str:
    lines = [SECTION, "",
             f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores "
             f"by `bench/data/criteo_sharding.py`: one train.txt of {size / 1e9:.2f} GB (Kaggle layout), {workers} "
             "worker processes reading their shards at once (one pass, batch 512). Load average "
             f"{load[0]:.1f} before, {load[1]:.1f} after; other processes using over 5% of a core (from /proc): "
             f"{', '.join(busy) or 'none'}.", "",
             "| sharding | examples/s (all workers) | bytes read per example kept | per worker: examples, "
             "seconds, rchar MB, read_bytes MB |", "| --- | ---: | ---: | --- |"]
    for _, reports in rows.values():
        total = sum(r["examples"] for r in reports)
        seconds = max(r["seconds"] for r in reports)  # from each worker's first batch request, start-up excluded
        each = "; ".join(f"{r['examples']:,}, {r['seconds']:.0f} s, {r['rchar'] / 1e6:,.0f}, "
                         f"{r['read_bytes'] / 1e6:,.0f}" for r in reports)
        read = sum(r["rchar"] for r in reports) / max(total, 1)
        lines.append(f"| {reports[0]['policy'].split(':')[0]} | {total / seconds:,.0f} | {read:,.0f} | {each} |")
    lines += ["", f"A worker stops after {max_seconds:g} s if its pass is not done: bytes read per example kept is "
              f"the figure to compare (a full pass over the 6/7 of train.txt that trains reads about "
              f"{size * 6 / 7 / workers / 1e6:,.0f} MB per worker by byte range, {size * 6 / 7 / 1e6:,.0f} MB by "
              "element).", ""]
    return "\n".join(lines)


def main(gigabytes: float = 1.0, workers: int = 2, max_seconds: float = 90.0) -> None:
    """Times byte-range then element sharding; prints the table and writes bench/RESULTS-criteo-sharding.md."""
    with tempfile.TemporaryDirectory(prefix="bench-criteo-") as temporary:
        data = Path(temporary)
        size = write_kaggle(data, gigabytes).stat().st_size
        load_before, busy = os.getloadavg()[0], busy_processes()
        rows = {mode: run_workers(data, workers, mode, max_seconds) for mode in ("range", "element")}
        text = report(size, workers, rows, (load_before, os.getloadavg()[0]), busy, max_seconds)
    print(text)
    (ROOT / "bench" / "RESULTS-criteo-sharding.md").write_text(text)


if __name__ == "__main__":
    fire.Fire(main)
