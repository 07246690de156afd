"""`python -m bench.online.rows_on_ps [--quick]`: a checkpoint's time written through the chief against written by
each ps (training.output_dir_shared), with 1, 2 and 4 ps, into bench/RESULTS-rows-on-ps.md (machine and date; not
with --quick, which only proves the bench runs).

For each ps count, one loopback cluster (1 worker) holds a dlrm of 26 hashed tables of dimension 16 with Adagrad
slots (2.6 M rows in all: 333 MB a checkpoint); the chief trains one step, then saves alternately through the chief
and by the ps, `repeats` times each (with a serving version of each checkpoint, which the rack-like bench reports),
timing each save and counting the bytes the chief and each ps wrote
(/proc/<pid>/io) and the bytes sent over loopback. Loopback and one disk, not a rack: the links are not shaped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster, loopback_bytes

HERE = Path(__file__).resolve().parents[1]
TRAINING = {"model": "dlrm", "dataset": "synthetic_criteo", "embedding_dim": 16, "bottom_mlp": [16], "top_mlp": [16],
            "per_worker_batch": 256, "lr_decay_epochs": [], "synthetic_examples": 512,
            "embedding_optimizer": "adagrad"}
SIZES = {"quick": {"rows": 26_000, "ps": (1, 2), "repeats": 1, "chunk_mb": 0.1},  # chunks small enough to stream
         "full": {"rows": 2_600_000, "ps": (1, 2, 4), "repeats": 3, "chunk_mb": 16.0}}
MB = 1 << 20


def written(pid: int | str) -> int:
    return int(re.search(r"^wchar: (\d+)$", Path(f"/proc/{pid}/io").read_text(), re.M).group(1))


def chief(cluster: str, output: str, rows: str, repeats: str, chunk_mb: str, ps_pids: str, results: str = "") -> None:
    """The chief's side (run as its own process): builds the model, trains a step, times the saves and deltas of
    every row (the ps' bytes when `ps_pids` names them); into `results` (default `output`/saves.json), each one's
    files removed after it."""
    from cluster import config as cluster_config
    from cluster import taskspec
    from cluster.training_parse import parse_training_options

    config = cluster_config.load(cluster)
    taskspec.apply_to_this_process(config, config.task("chief", 0))
    import tensorflow as tf

    from coordinator import setup, strategy
    from models.checkpoints import Position
    from online.publish.deltas import DeltaFiles, DeltaSource
    from tables.kinds import track_changes

    pids, runs = [int(p) for p in str(ps_pids).split(",") if p], {}
    for way, shared in (("through_chief", False), ("rows_on_ps", True)):
        options = parse_training_options({**TRAINING, "table_rows": int(rows) // 26, "output_dir": f"{output}/{way}",
                                          "output_dir_shared": shared, "stream_chunk_mb": float(chunk_mb)})
        runs[way] = setup.plan(dataclasses.replace(config, training=options), options, logging.getLogger("bench"),
                               workers=1, batch_note="")
    distribution = strategy.build(config, runs["through_chief"].options)
    model = setup.build_model(runs["through_chief"], distribution)
    tracked = track_changes(model, distribution)  # before the step is traced
    batch = next(iter(runs["through_chief"].source.split("train").batch(256)))
    tf.function(lambda b: distribution.run(model.train_step, args=(b,)))(batch)  # the slots exist from here
    series = {way: setup.epoch_checkpoints(run, model, io_device=strategy.CHIEF_CPU) for way, run in runs.items()}
    sources = {way: DeltaSource(model, tracked, rows_on_ps=way == "rows_on_ps") for way in runs}
    deltas = {way: DeltaFiles(run.files.serving) for way, run in runs.items()}
    for way in runs:
        sources[way].warm_up(deltas[way].directory)
    saves = []
    reference = _reference(runs["through_chief"].source, Path(output))
    for repeat in range(int(repeats)):
        for way, checkpoints in series.items():
            saved = _timed(way, "checkpoint", lambda c=checkpoints, r=repeat: c.save(Position(r + 1)) + ".*", pids,
                           remove=False)
            saves.append(saved)
            prefix = f"{checkpoints.directory}/{Position(repeat + 1).name}"
            saves.append(_version(way, saved, prefix, runs[way], reference, repeat + 1, pids))
            for path in tf.io.gfile.glob(prefix + ".*") if results else []:
                tf.io.gfile.remove(path)
            saves.append(_timed(way, "delta", lambda w=way, r=repeat: f"{_every_row(sources[w], deltas[w], r)}/*",
                                pids, remove=bool(results)))
    Path(results or Path(output, "saves.json")).write_text(json.dumps(saves))
    os._exit(0)


def _every_row(source, files, repeat: int):
    """A serving delta of every row (from step -1: before any stamp); its folder."""
    from online.publish.deltas import write_delta

    return write_delta(source, files, version=1, sequence=repeat + 1, from_step=-1, settle_s=0).path


def _reference(source, output: Path) -> str:
    """Raw inputs for the export check (predictions the checkpoint's own: `against_checkpoint`), as an .npz."""
    import numpy as np

    from models import export

    raw = export.reference_inputs(source.split("test", raw=True), count=16)
    path = output / "reference.npz"
    np.savez(path, predictions=np.zeros([16, 1], np.float32), **export.saved_inputs(raw))
    return str(path)


def _version(way: str, saved: dict, checkpoint: str, run, reference: str, number: int, pids: list[int]) -> dict:
    """A serving version of `checkpoint` written by the exporter (here in the chief's process, on its host, as the
    follow loop's exporter runs), timed; the record's seconds are the checkpoint's and the export's together."""
    from online.publish.exporter import export_checkpoint
    from online.publish.request import VERSION, ExportRequest

    answers = []

    def write() -> str:
        request = ExportRequest(kind=VERSION, checkpoint=checkpoint, destination=str(run.files.serving),
                                options=dataclasses.asdict(run.options), reference=reference, version=number,
                                trained_through={"optimizer_step": 1}, keep=1, against_checkpoint=True)
        answers.append(export_checkpoint(request, logging.getLogger("exporter")))
        if answers[-1].error:
            raise RuntimeError(f"the version failed: {answers[-1].error}")
        return f"{answers[-1].path}/variables/*"

    record = _timed(way, "version", write, pids, remove=False)
    record = {**record, "export_s": record["seconds"], "seconds": round(record["seconds"] + saved["seconds"], 2),
              "linked_mb": round(answers[-1].linked_bytes / MB, 1)}
    print(f"[bench] the version: {record['seconds']} s with its checkpoint, {record['linked_mb']} MB linked",
          flush=True)
    return record


def _timed(way: str, what: str, write, pids: list[int], *, remove: bool) -> dict:
    """Times `write()` (it returns the glob of the files it wrote), with the bytes each process wrote meanwhile."""
    import tensorflow as tf

    before, sent, started = [written(p) for p in ["self", *pids]], loopback_bytes(), time.monotonic()
    files = tf.io.gfile.glob(write())
    seconds = time.monotonic() - started
    growth = [b - a for a, b in zip(before, [written(p) for p in ["self", *pids]], strict=True)]
    record = {"way": way, "what": what, "seconds": round(seconds, 2), "chief_mb": round(growth[0] / MB, 1),
              "ps_mb": [round(g / MB, 1) for g in growth[1:]],
              "loopback_mb": round((loopback_bytes() - sent) / MB, 1),
              "written_mb": round(sum(tf.io.gfile.stat(path).length for path in files) / MB, 1)}
    print(f"[bench] {record}", flush=True)
    for path in files if remove else []:
        tf.io.gfile.remove(path)
    return record


def measure(ps: int, size: dict, directory: Path) -> list[dict]:
    with LoopbackCluster(directory / f"ps{ps}", workers=1, ps=ps) as cluster:
        pids = ",".join(str(p) for p in cluster.server_pids("ps"))
        output = directory / f"ps{ps}" / "output"
        output.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([PYTHON, "-m", "bench.online.rows_on_ps", "chief", str(cluster.path), str(output),
                               str(size["rows"]), str(size["repeats"]), str(size["chunk_mb"]), pids], cwd=ROOT,
                              stdin=subprocess.DEVNULL, timeout=3600, stdout=sys.stdout,
                              stderr=open(output / "chief.log", "w"))
        if done.returncode:
            raise RuntimeError(f"the chief failed: {(output / 'chief.log').read_text()[-3000:]}")
        return json.loads((output / "saves.json").read_text())


def report(results: dict) -> str:
    lines = [f"# A checkpoint written through the chief or by each ps ({results['machine']['date']})", "",
             f"Machine: {results['machine']}.", "",
              f"{results['rows']:,} rows in 26 tables of dimension 16 with Adagrad slots; 1 worker; loopback and one "
             "disk (links not shaped); each save timed alone, the two ways alternating, "
             f"{results['repeats']} times each (`python -m bench.online.rows_on_ps`).", "",
             "| ps | way | seconds (median) | MB/s | chief wrote MB | each ps wrote MB | loopback MB |",
             "| ---: | --- | ---: | ---: | ---: | --- | ---: |"]
    for ps, saves in results["by_ps"].items():
        for way in ("through_chief", "rows_on_ps"):
            mine = [s for s in saves if s["way"] == way and s.get("what", "checkpoint") == "checkpoint"]
            seconds = statistics.median(s["seconds"] for s in mine)
            total = mine[-1]["chief_mb"] + sum(mine[-1]["ps_mb"])
            lines.append(f"| {ps} | {way} | {seconds:.2f} ({', '.join(str(s['seconds']) for s in mine)}) | "
                         f"{total / seconds:.0f} | {mine[-1]['chief_mb']} | {mine[-1]['ps_mb']} | "
                         f"{mine[-1]['loopback_mb']} |")
    return "\n".join(lines) + "\n"


def main(quick: bool = False) -> None:
    from bench.kit.quiet import require_quiet

    size = SIZES["quick" if quick else "full"]
    require_quiet()
    results = {"machine": machine(), "rows": size["rows"], "repeats": size["repeats"], "by_ps": {}}
    with tempfile.TemporaryDirectory(prefix="bench-rows-on-ps-") as directory:
        for ps in size["ps"]:
            results["by_ps"][ps] = measure(ps, size, Path(directory))
    text = report(results)
    print(text)
    if not quick:
        (HERE / "results-rows-on-ps.json").write_text(json.dumps(results, indent=2))
        write_keeping_notes(HERE / "RESULTS-rows-on-ps.md", text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["chief"]:
        chief(*sys.argv[2:])
    else:
        fire.Fire(main)
