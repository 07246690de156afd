"""The dynamic tables' quality guard (issue 64): validation AUC on drifting click days, this code against an earlier
release on the same data and settings, each run alone:

    .venv/bin/python -m bench.tables.click_days [--runs 3] [--against c84abc7] [--setting dynamic] [--quick]

Data: `days` files of `lines` lines in the Criteo 1 TB layout (day_0 ... day_7; the last day's first half
validates): six features carry the clicks (each day brings `new_ids` new ids per feature, each living `lifetime`
days, popularity within its day Zipf's with exponent `zipf`, each id's hidden click weight scaled by `weight`),
twenty features are noise ids from 10 M values. Exponent 1.3 and weight 1.6 (a strong head of learnable ids):
with 1.1 and 0.8 every code learnt too little to tell 0.5's admission from 0.4's (RESULTS-click-days-0.5.md's
notes). The junk setting
replaces 30 % of the click features' values by ids never seen again. Runs: dlrm, 2 ps + 2 workers, 2 epochs,
`per_worker_batch` 256, through the launcher (`roles.launch run`) of each code (the earlier one in a git worktree
beside this checkout, sharing its .venv): hashed tables of 1,000 rows, dynamic ones of 26,000 rows (`admit_after`
2, `expire_after_steps` 400), and dynamic on the junk data. The AUC is the evaluator's on the last checkpoint.

Writes bench/results-click-days.json and bench/RESULTS-click-days.md (the mean of each setting on both codes and
their difference). `--quick` is a smoke run: tiny days, one run, no waiting for a quiet machine, printed only.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import fire
import numpy as np

from bench.__main__ import machine, write_results
from bench.kit.quiet import require_quiet

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
PREVIOUS = "c84abc7"  # 0.4.0, the release whose dynamic tables' AUC issue 64 asks back
FULL = {"days": 8, "lines": 60_000, "new_ids": 15_000, "lifetime": 3, "epochs": 2, "zipf": 1.3, "weight": 1.6}
QUICK = {"days": 3, "lines": 3_000, "new_ids": 800, "lifetime": 2, "epochs": 1, "zipf": 1.1, "weight": 0.8}
CLICK_FEATURES, NOISE_FEATURES, NOISE_VALUES, JUNK_SHARE = 6, 20, 10_000_000, 0.3
MODEL = {"model": "dlrm", "dataset": "criteo", "per_worker_batch": 256, "embedding_dim": 16,
         "bottom_mlp": [64, 16], "top_mlp": [64, 32]}
SETTINGS = {"hashed": ({"embedding_kind": "hashed", "table_rows": 1000}, 0.0),
            "dynamic": ({"embedding_kind": "dynamic", "embedding_capacity": 26_000, "admit_after": 2,
                         "expire_after_steps": 400}, 0.0)}
SETTINGS["dynamic, 30 % junk ids"] = (SETTINGS["dynamic"][0], JUNK_SHARE)
RUN_TIMEOUT_S = 3600


def _log(message: str) -> None:
    print(f"[bench.tables.click_days] {message}", file=sys.stderr, flush=True)


def day_lines(day: int, sizes: dict, junk: float, rng: np.random.Generator) -> list[str]:
    """One day's lines: label, 13 counts, 26 hex ids (tab-separated), the label drawn from the click features'
    hidden weights and three counts."""
    lines = sizes["lines"]
    born = day - rng.integers(0, sizes["lifetime"], (lines, CLICK_FEATURES))
    rank = (rng.zipf(sizes["zipf"], (lines, CLICK_FEATURES)) - 1) % sizes["new_ids"]  # the tail wraps round
    clicks = (born * sizes["new_ids"] + rank) * CLICK_FEATURES + np.arange(CLICK_FEATURES)  # unique per feature
    weight = np.where(_mix(clicks) & 1, 1.0, -1.0)
    counts = rng.poisson(3.0, (lines, 13))
    logit = -1.0 + sizes["weight"] * weight.sum(1) / np.sqrt(CLICK_FEATURES) + 0.3 * (counts[:, :3] - 3.0).sum(1) / 3.0
    labels = (rng.random(lines) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    junked = rng.random(clicks.shape) < junk
    clicks = np.where(junked, rng.integers(1 << 40, 1 << 48, clicks.shape), clicks)  # never seen again
    noise = rng.integers(0, NOISE_VALUES, (lines, NOISE_FEATURES)) * NOISE_FEATURES + np.arange(NOISE_FEATURES)
    noise += 1 << 56  # apart from every click id
    ids = np.concatenate([_mix(clicks), _mix(noise)], 1) & 0xFFFFFFFF
    return ["\t".join([str(label), *map(str, count), *(f"{value:08x}" for value in row)])
            for label, count, row in zip(labels, counts, ids, strict=True)]


def _mix(values: np.ndarray) -> np.ndarray:
    """A 64-bit mix of each value (splitmix64's finaliser): ids spread over the hex space."""
    x = values.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (x ^ (x >> np.uint64(31))).astype(np.int64) & 0x7FFFFFFFFFFFFFFF


def write_days(folder: Path, sizes: dict, junk: float) -> Path:
    """day_0 ... day_N in `folder`, the same lines for the same sizes (junk aside)."""
    folder.mkdir(parents=True, exist_ok=True)
    for day in range(sizes["days"]):
        rng = np.random.default_rng([day, int(junk * 100)])
        (folder / f"day_{day}").write_text("\n".join(day_lines(day, sizes, junk, rng)) + "\n")
    return folder


def one_run(tree: Path, work: Path, data: Path, options: dict, epochs: int) -> dict:
    """One run of `tree`'s code to an evaluated model: the evaluator's AUC on its last checkpoint, and the time."""
    sys.path.insert(0, str(ROOT / "tests"))
    from clusterkit import cluster_document, write_cluster

    work.mkdir(parents=True)
    training = {**MODEL, **options, "epochs": epochs, "data_dir": str(data), "output_dir": str(work / "output")}
    path = write_cluster(work, cluster_document(training=training, logs_dir=str(work / "logs")))
    with open(work / "launcher.log", "w") as log:
        done = subprocess.run([str(tree / ".venv/bin/python"), "-m", "roles.launch", "run", str(path)], cwd=tree,
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        return {"failed": f"exit {done.returncode}: see {work / 'launcher.log'}"}
    return {"validation_auc": last_auc(work / "output" / "checkpoints" / "evaluated.json")}


def last_auc(evaluated: Path) -> float | None:
    """The AUC the evaluator gave the newest checkpoint it evaluated (evaluated.json, this release's and 0.4's)."""
    results = json.loads(evaluated.read_text()).get("results", {})
    newest = max(results.values(), key=lambda result: result.get("step", -1), default={})
    return next((value for name, value in newest.get("metrics", {}).items() if name.endswith("auc")), None)


def worktree(ref: str, scratch: Path) -> Path:
    """`ref` checked out beside this checkout's history, sharing its .venv."""
    tree = scratch / f"code-{ref}"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True,
                   capture_output=True)
    (tree / ".venv").symlink_to(ROOT / ".venv")
    return tree


def measure(codes: dict[str, Path], sizes: dict, runs: int, scratch: Path, settings: dict) -> dict:
    """settings -> code -> the runs' figures, the codes taking turns run by run (a drift of the machine's speed
    or load falls on both)."""
    found = {setting: {code: [] for code in codes} for setting in settings}
    data = {junk: write_days(scratch / f"days-{junk:g}", sizes, junk) for _, junk in settings.values()}
    for run in range(runs):
        for setting, (options, junk) in settings.items():
            for code, tree in codes.items():
                figures = one_run(tree, scratch / f"run-{len(list(scratch.glob('run-*')))}", data[junk], options,
                                  sizes["epochs"])
                _log(f"{setting}, {code}, run {run + 1}: {figures}")
                found[setting][code].append(figures)
    return found


def render(record: dict) -> str:
    about, codes = record["machine"], list(next(iter(record["runs"].values())))
    lines = [f"# Dynamic tables' quality guard: AUC on drifting click days ({about['cpu']}, {about['cores']} cores, "
             f"{about['date']}, load {about['load_before']:.1f} before)", "",
             f"{record['sizes']['days']} days of {record['sizes']['lines']:,} lines; "
             f"{', '.join(codes)}; runs alone, one after another, the codes taking turns.", "",
             f"| setting | {' | '.join(f'{code}: runs' for code in codes)} | "
             f"{' | '.join(f'{code}: mean' for code in codes)} | difference |",
             "| --- |" + " --- |" * len(codes) + " ---: |" * (len(codes) + 1)]
    for setting, by_code in record["runs"].items():
        aucs = {code: [r["validation_auc"] for r in runs if r.get("validation_auc") is not None]
                for code, runs in by_code.items()}
        means = {code: statistics.mean(values) if values else None for code, values in aucs.items()}
        shown = [", ".join(f"{value:.4f}" for value in values) or "failed" for values in aucs.values()]
        difference = (f"{means[codes[0]] - means[codes[-1]]:+.4f}" if None not in means.values() else "")
        lines.append(f"| {setting} | {' | '.join(shown)} | "
                     f"{' | '.join('' if m is None else f'{m:.4f}' for m in means.values())} | {difference} |")
    return "\n".join(lines) + "\n"


def main(runs: int = 3, against: str = PREVIOUS, quick: bool = False,
         output: str = str(HERE / "results-click-days.json"), setting: str | None = None) -> None:
    """Runs every setting (or only `setting`) `runs` times on this code and on `against`; a full run writes
    `output` and its RESULTS."""
    settings = SETTINGS if setting is None else {setting: SETTINGS[setting]}
    sizes = QUICK if quick else FULL
    if not quick:
        require_quiet()
    record = {"machine": machine(), "quick": quick, "sizes": sizes, "against": against}
    with tempfile.TemporaryDirectory(prefix="bench-click-days-") as temporary:
        scratch = Path(temporary)
        try:
            codes = {"this code": ROOT, against: worktree(against, scratch)}
            record["runs"] = measure(codes, sizes, 1 if quick else runs, scratch, settings)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(scratch / f"code-{against}")], cwd=ROOT,
                           capture_output=True)
    text = render(record)
    print(text)
    if not quick:
        write_results(Path(output), record, text)


if __name__ == "__main__":
    fire.Fire(main)
