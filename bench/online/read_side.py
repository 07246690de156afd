"""`python -m bench.online.read_side [--quick]`: what a serving delta costs where it is read, a follower and a
TensorFlow Serving replica fed through its REST Predict API, at click days' delta sizes; into
bench/RESULTS-read-side.md (machine and date; not with --quick, which only proves the bench runs).

In one process: dlrm with 26 hashed tables of dimension 16 (Adagrad) at `table_rows` rows each, 2.6 M and 26 M rows
in all; a version written from its checkpoint as a run writes one; then `deltas` deltas, each after training on
`examples` examples whose ids are drawn uniformly, so that about as many rows change per delta as on issue 62's
click days (about 1.0 M of 2.6 M, 1.2-2.5 M of 26 M). For each delta, once it is in place:
- the follower (online/publish/follower.py) catches up: reads the delta's bundle and runs `apply_delta` on the
  model `tf.saved_model.load` gave it;
- a replica is caught up through REST as the follower's `--rest` does (`applied_through`, then `apply_delta` with
  the delta's rows as columnar JSON), sent to a stand-in of TensorFlow Serving's Predict API on loopback
  (tests/rest_standin.py: Python's json parses the request, where TensorFlow Serving parses in C++), split into the
  stand-in's parsing, the signature's run, and the rest (the follower reading and encoding, HTTP).
Also the follower's load of the version, which a version switch costs it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from bench.kit.cluster import ROOT

HERE = Path(__file__).resolve().parents[1]
SIZES = {"quick": [{"table_rows": 2_000, "examples": 3_000, "deltas": 2}],
         "full": [{"table_rows": 100_000, "examples": 50_000, "deltas": 3},
                  {"table_rows": 1_000_000, "examples": 100_000, "deltas": 3}]}
BATCH = 8192
LOG = logging.getLogger("read_side")


def main(quick: bool = False) -> None:
    """Measures every size; prints the table, and without --quick writes bench/RESULTS-read-side.md and its json."""
    from bench.kit.quiet import require_quiet

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT / "tests"))
    require_quiet()
    results = {"machine": machine(), "sizes": []}
    for size in SIZES["quick" if quick else "full"]:
        with tempfile.TemporaryDirectory(prefix="bench-read-side-") as directory:
            results["sizes"].append({**size, **measure(size, Path(directory))})
    text = report(results)
    print(text)
    if not quick:
        (HERE / "results-read-side.json").write_text(json.dumps(results, indent=2))
        write_keeping_notes(HERE / "RESULTS-read-side.md", text)


def measure(size: dict, work: Path) -> dict:
    """A version and its deltas at `size`, each delta applied by the follower and through REST, timed."""
    from online.publish.deltas import DeltaFiles, write_delta
    from online.publish.follower import Follower, replicas
    from rest_standin import RestStandIn

    trainer = Trainer.build(size["table_rows"])
    serving, staging = work / "serving", work / "staging"
    from_step = trainer.version(work, serving)
    follower, loaded = Follower(serving, log=LOG.info), time.perf_counter()
    follower.catch_up()
    figures = {"version_mb": _mb(serving / "1"), "follower_load_s": time.perf_counter() - loaded, "deltas": []}
    stand_in = RestStandIn(serving, 1)
    try:
        for sequence in range(1, size["deltas"] + 1):
            trainer.train(size["examples"], seed=sequence)
            written = write_delta(trainer.source, DeltaFiles(staging), version=1, sequence=sequence,
                                  from_step=from_step, settle_s=0)
            from_step = written.read_step
            (serving / "deltas").mkdir(exist_ok=True)
            shutil.move(str(written.path), str(serving / "deltas" / written.path.name))
            (replica,) = replicas([stand_in.base], serving, log=LOG.info)
            figures["deltas"].append(_applied(written, follower, replica, stand_in))
            print(f"[read_side] {size['table_rows']:,} rows a table, delta {sequence}: {figures['deltas'][-1]}",
                  flush=True)
    finally:
        stand_in.close()
    return figures


def _applied(written, follower, replica, stand_in) -> dict:
    """Times the follower's and the replica's catch-up on delta `written`, now in place."""
    started = time.perf_counter()
    assert follower.catch_up() and follower.sequence == written.sequence, follower.sequence
    followed = time.perf_counter()
    replica.catch_up()
    sent = time.perf_counter()
    (apply,) = [t for t in stand_in.timings[-2:] if t["signature"] == "apply_delta"]
    assert int(stand_in.model.signatures["applied_through"]()["sequence"]) == written.sequence
    rest_s = sent - followed
    return {"rows": sum(written.rows.values()), "delta_mb": written.bytes / 1e6, "written_s": written.seconds,
            "follower_s": followed - started, "rest_s": rest_s, "json_mb": apply["bytes"] / 1e6,
            "parse_s": apply["parse_s"], "run_s": apply["run_s"],
            "client_s": rest_s - sum(t["parse_s"] + t["run_s"] for t in stand_in.timings[-2:])}


@dataclasses.dataclass
class Trainer:
    """The model trained here, its changed rows tracked (`source`: the DeltaSource deltas read)."""

    options: object
    data: object
    model: object
    source: object

    @classmethod
    def build(cls, table_rows: int) -> "Trainer":
        import tensorflow as tf

        from cluster.training_parse import parse_training_options
        from data import source_for
        from models.compiled import build_compiled
        from online.publish.deltas import DeltaSource
        from tables.kinds import track_changes

        options = parse_training_options({"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": table_rows,
                                          "embedding_dim": 16, "embedding_optimizer": "adagrad"})
        data = source_for(options, ROOT)
        tf.keras.utils.set_random_seed(0)
        model = build_compiled(options, data)
        return cls(options, data, model, DeltaSource(model, track_changes(model)))

    def train(self, examples: int, *, seed: int) -> None:
        """Trains on `examples` examples of uniformly drawn ids, a batch of BATCH at a time."""
        import numpy as np

        random = np.random.default_rng(seed)
        for begin in range(0, examples, BATCH):
            count = min(BATCH, examples - begin)
            features = {"dense": random.random((count, 13), np.float32),
                        "ids": random.integers(0, 1 << 40, (count, 26), np.int64)}
            self.model.train_on_batch(features, random.integers(0, 2, count).astype(np.float32))

    def version(self, work: Path, serving: Path) -> int:
        """Version 1 in `serving`, written from a checkpoint of the model trained on a first batch; returns the
        step its deltas start from."""
        import numpy as np
        import tensorflow as tf

        from models import export
        from online.publish.exporter import export_checkpoint
        from online.publish.request import VERSION, ExportRequest
        from tables.streaming import checkpoint_io

        self.train(BATCH, seed=0)
        checkpoint = checkpoint_io.save(tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer),
                                        str(work / "ckpt"))
        from_step = self.source.advance()
        raw = export.reference_inputs(self.data.split("test", raw=True), count=64)
        reference = work / "reference.npz"
        np.savez(reference, predictions=self.model(export.model_inputs(self.data, raw), training=False).numpy(),
                 **export.saved_inputs(raw))
        serving.mkdir()
        result = export_checkpoint(ExportRequest(
            kind=VERSION, checkpoint=checkpoint, destination=str(serving), options=dataclasses.asdict(self.options),
            reference=str(reference), version=1, keep=3, delta_from_step=from_step,
            trained_through={"version": 1}), LOG)
        assert not result.error, result
        return from_step


def _mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


def report(results: dict) -> str:
    about = results["machine"]
    lines = [f"# The read side of serving deltas ({about['cpu']}, {about['cores']} cores, {about['date']}, load "
             f"{about['load_before']:.2f} before)", "",
             "One process; dlrm, 26 hashed tables of dimension 16, Adagrad; each delta after training on "
             "uniformly drawn ids. Seconds per delta: the follower's catch-up (read the bundle, `apply_delta`), "
             "and a replica's through REST Predict (a loopback stand-in parsing with Python's json), split into "
             "the stand-in's parse, the signature's run and the client's side (reading, encoding, HTTP).", "",
             "| table rows | version | follower loads it | rows changed | delta | follower applies | REST: all | "
             "JSON | parse | run | client |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
             "---: | ---: |"]
    for size in results["sizes"]:
        deltas = size["deltas"]
        lines.append(f"| {26 * size['table_rows']:,} | {size['version_mb']:.0f} MB | {size['follower_load_s']:.1f} s "
                     f"| {_spread(deltas, 'rows', '{:,.0f}')} | {_spread(deltas, 'delta_mb', '{:.0f} MB')} | "
                     + " | ".join(_spread(deltas, key, "{:.2f} s") for key in ("follower_s", "rest_s")) + " | "
                     + _spread(deltas, "json_mb", "{:.0f} MB") + " | "
                     + " | ".join(_spread(deltas, key, "{:.2f} s") for key in ("parse_s", "run_s", "client_s"))
                     + " |")
    return "\n".join(lines) + "\n"


def _spread(deltas: list[dict], key: str, form: str) -> str:
    """The median of `key` over the deltas, with its range when they differ."""
    values = [delta[key] for delta in deltas]
    low, middle, high = (form.format(v) for v in (min(values), statistics.median(values), max(values)))
    return middle if low == high else f"{middle} ({low}-{high})"


if __name__ == "__main__":
    fire.Fire(main)
