"""`python -m bench.online.freshness_auc [--quick]`: what fresher deltas buy in predictions (issue 40), as Monolith
showed it: a follower's AUC on each click file as it lands, before any model has trained on it, with deltas every
300, 60 and 10 s; into bench/RESULTS-freshness-auc.md (machine and date; not with --quick, which only proves the
bench runs).

Drifting clicks: on 8 of the 26 categorical features each file brings `IDS_PER_FILE` new ids, each with a click
logit of its own, used over the next files as AGE_SHARES says (most in the file after their birth); a row's label
is drawn from the sum of its ids' logits, and the other features are noise. A model knows an id once a file that
holds it was trained and its rows reached the follower, so the fresher the follower, the more of the next file's
ids it knows. The oracle AUC (the true logits) is the ceiling.

Each setting, on one loopback cluster (2 workers, 2 ps): a warm-up run trains `warm_files` files and ends with a
version; the run is started again in follow mode with deltas every `delta_every_s` and no full version after the
one a resumed run publishes first, while a file lands every `drop_every_s` (hidden name, then renamed) and a judge
process (online/publish/follower.py's Follower) scores each file the moment it lands with the model it
follows, then catches up.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import fire
import numpy as np

from bench.__main__ import machine, write_keeping_notes
from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster
from bench.online.follow import criteokit, run_chief

HERE = Path(__file__).resolve().parents[1]
SIGNAL_FEATURES, IDS_PER_FILE, LOGIT_SCALE = 8, 20, 1.5
AGE_SHARES = (0.15, 0.35, 0.2, 0.15, 0.1, 0.05)  # of a row's signal ids: born in this file, the one before, ...
BIRTHS = 256  # files an id can be born in (from AGE_SHARES' length before the first)
SIZES = {"quick": {"warm_files": 1, "files": 3, "rows": 2000, "drop_every_s": 10.0, "delta_every_s": [3.0],
                   "piece_mb": 0.1},
         "full": {"warm_files": 4, "files": 20, "rows": 20_000, "drop_every_s": 20.0,
                  "delta_every_s": [300.0, 60.0, 10.0], "piece_mb": 0.5}}
MODEL = {"table_rows": 100_000, "data_poll_s": 1, "settle_s": 0, "checkpoint_every_s": 600}  # files land by rename


def drifting_rows(k: int, rows: int, seed: int = 0) -> tuple[list[tuple], np.ndarray]:
    """File `k`'s clicks as criteokit rows (label, 13 integers, 26 hex ids), and each row's true click logit."""
    random = np.random.default_rng([seed, k])
    weights = np.random.default_rng([seed, BIRTHS]).normal(0, LOGIT_SCALE,
                                                           (SIGNAL_FEATURES, BIRTHS, IDS_PER_FILE))
    births = k - random.choice(len(AGE_SHARES), size=(rows, SIGNAL_FEATURES), p=AGE_SHARES) + len(AGE_SHARES)
    slots = random.integers(0, IDS_PER_FILE, size=(rows, SIGNAL_FEATURES))
    features = np.arange(SIGNAL_FEATURES)
    logits = weights[features, births, slots].sum(axis=1)
    labels = random.random(rows) < 1 / (1 + np.exp(-logits))
    ids = (features << 24) | (births << 8) | slots
    noise = random.integers(0, 1000, size=(rows, 26 - SIGNAL_FEATURES))
    integers = random.integers(0, 100, size=(rows, 13))
    made = [(int(labels[r]), integers[r].tolist(), [f"{i:08x}" for i in ids[r]] + [f"{n:08x}" for n in noise[r]])
            for r in range(rows)]
    return made, logits


def drop_drifting(data: Path, k: int, rows: int) -> None:
    """File `k`, published the safe way: written under a hidden name, then renamed into place."""
    hidden = criteokit.write(data / f".part-{k:03d}.tmp", drifting_rows(k, rows)[0])
    hidden.rename(data / f"part-{k:03d}")


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The area under the ROC curve, from the ranks of the scores."""
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores, kind="stable")] = np.arange(1, len(scores) + 1)
    positive = labels == 1
    hits, misses = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - hits * (hits + 1) / 2) / (hits * misses))


def _score(follower, path: Path, k: int, rows: int) -> dict:
    """The follower's AUC on file `path` (its raw lines, as a client sends them) beside the oracle's."""
    import tensorflow as tf

    fields = np.array([line.split("\t") for line in path.read_text().splitlines()])
    labels = fields[:, 0].astype(int)
    oracle = auc(labels, drifting_rows(k, rows)[1])
    if follower.model is None:
        return {"auc": None, "oracle_auc": oracle}
    integers = np.where(fields[:, 1:14] == "", "0", fields[:, 1:14]).astype(np.int64)
    answer = follower.predict(integers=tf.constant(integers), categories=tf.constant(fields[:, 14:]))
    scores = next(iter(answer.values())).numpy().reshape(-1)
    return {"auc": auc(labels, scores), "oracle_auc": oracle}


def judge(data: str, serving: str, out: str, expected: int, rows: int, timeout_s: float = 3600) -> None:
    """Scores each file landing in `data` with the model followed from `serving` as it stands, then catches up;
    a JSON line per file into `out`. The files there when it starts are the warm-up's, not scored."""
    import tensorflow as tf

    from online.publish.follower import Follower

    data, follower = Path(data), Follower(serving, log=lambda _: None)
    seen = {path.name for path in data.glob("part-*")}
    deadline, changed_at = time.monotonic() + timeout_s, time.time()
    while len(seen) < expected and time.monotonic() < deadline:
        for path in sorted(data.glob("part-*")):
            if path.name not in seen:
                seen.add(path.name)
                record = {"file": path.name, "version": follower.version, "sequence": follower.sequence,
                          "since_update_s": time.time() - changed_at,
                          **_score(follower, path, int(path.name.split("-")[1]), rows)}
                with open(out, "a") as handle:
                    handle.write(json.dumps(record) + "\n")
        try:
            if follower.catch_up():
                changed_at = time.time()
        except (OSError, KeyError, ValueError, tf.errors.OpError):
            pass  # a delta pruned meanwhile: the next look catches up
        time.sleep(0.2)


DROPPER = """
import sys, time
from pathlib import Path
from bench.online.freshness_auc import drop_drifting
data, first, files, rows, every = Path(sys.argv[1]), *map(int, sys.argv[2:5]), float(sys.argv[5])
for k in range(first, first + files):
    time.sleep(every)
    drop_drifting(data, k, rows)
"""
JUDGE = ("import sys; from bench.online.freshness_auc import judge; "
         "judge(*sys.argv[1:4], int(sys.argv[4]), int(sys.argv[5]))")


def setting(cluster: LoopbackCluster, work: Path, size: dict, delta_every_s: float) -> list[dict]:
    """The warm-up run, then the followed run with deltas every `delta_every_s`: the judge's lines."""
    data, output, judged = work / "data", work / "output", work / "judged.jsonl"
    data.mkdir(parents=True)
    for k in range(size["warm_files"]):
        drop_drifting(data, k, size["rows"])
    common = {**MODEL, "data_dir": str(data), "follow_data": True, "piece_mb": size["piece_mb"]}
    run_chief(cluster, output, **common, stop_when_idle_s=5, serving_export_every_s=1)
    total = size["warm_files"] + size["files"]
    judge_process = subprocess.Popen([PYTHON, "-c", JUDGE, str(data), str(output / "serving"), str(judged),
                                      str(total), str(size["rows"])], cwd=ROOT, stdin=subprocess.DEVNULL)
    dropper = subprocess.Popen([PYTHON, "-c", DROPPER, str(data), str(size["warm_files"]), str(size["files"]),
                                str(size["rows"]), str(size["drop_every_s"])], cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        run_chief(cluster, output, timeout_s=7200, **common, stop_when_idle_s=size["drop_every_s"] + 15,
                  serving_export_every_s=86_400, serving_delta_every_s=delta_every_s)
        judge_process.wait(timeout=120)
    finally:
        for child in (dropper, judge_process):
            child.kill()
            child.wait()
    return [json.loads(line) for line in judged.read_text().splitlines()]


def _mean(values: list) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def report(figures: dict, size: dict, about: dict) -> str:
    settings = list(figures)
    lines = ["# Freshness and AUC: a follower's next-file AUC with deltas every 300, 60 and 10 s", "",
             f"Measured {about['date']} on {about['cores']} cores ({about['cpu']}) by "
             "`python -m bench.online.freshness_auc`:"
             f" dlrm with hashed tables ({MODEL['table_rows']:,} rows each), 2 workers + 2 ps on loopback; drifting "
             f"clicks ({SIGNAL_FEATURES} features carry ids born {IDS_PER_FILE} a file, used by age as "
             f"{list(AGE_SHARES)}); {size['warm_files']} warm-up files, then {size['files']} files of "
             f"{size['rows']:,} lines, one every {size['drop_every_s']:g} s; pieces of {size['piece_mb']} MB; "
             f"no full version after the first. Load average before: {about['load_before']:.1f}.", "",
             "| deltas every | mean AUC | median AUC | oracle AUC | model age when scored, median s |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for every in settings:
        rows = figures[every]
        aucs = [r["auc"] for r in rows if r["auc"] is not None]
        lines.append(f"| {every:g} s | {_mean(aucs):.4f} | {statistics.median(aucs):.4f} | "
                     f"{_mean([r['oracle_auc'] for r in rows]):.4f} | "
                     f"{statistics.median(r['since_update_s'] for r in rows):.0f} |")
    lines += ["", "Per file (AUC of the model the follower held when the file landed):", "",
              "| file | " + " | ".join(f"{every:g} s" for every in settings) + " | oracle |",
              "| --- | " + " | ".join("---:" for _ in settings) + " | ---: |"]
    for index, first in enumerate(figures[settings[0]]):
        cells = [figures[every][index]["auc"] if index < len(figures[every]) else None for every in settings]
        lines.append(f"| {first['file']} | " + " | ".join("-" if c is None else f"{c:.4f}" for c in cells)
                     + f" | {first['oracle_auc']:.4f} |")
    return "\n".join(lines + [""])


def main(quick: bool = False) -> None:
    """Runs each setting; prints the table, and without --quick writes bench/RESULTS-freshness-auc.md."""
    size = SIZES["quick" if quick else "full"]
    about = machine()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-freshness-auc-") as temporary:
        work = Path(temporary)
        with LoopbackCluster(work / "cluster", workers=2, ps=2) as cluster:
            for every in size["delta_every_s"]:
                figures[every] = setting(cluster, work / f"deltas-{every:g}", size, every)
                print(json.dumps({every: figures[every]}), flush=True)
    text = report(figures, size, about)
    print(text)
    if not quick:
        write_keeping_notes(HERE / "RESULTS-freshness-auc.md", text)


if __name__ == "__main__":
    fire.Fire(main)
