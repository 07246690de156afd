"""`python -m bench.online.click_freshness [--quick] [--before 46dcce1]`: issue 62's click days, freshness under
churn at two table sizes, the code before issue 62 against this one (through the chief and written by the ps), into
bench/RESULTS-click-freshness.md (machine and date; not with --quick, which only proves the bench runs; nor with
`--ways` naming some of the three or `--rows` one size, which print their rows only).

Data: bench.tables.click_days's days (six features carry the clicks, twenty are ids from 10 M values), `days` files
of `lines` lines, one renamed into an empty folder every `drop_every_s` by a helper that notes each landing's time.
Each run: a fresh loopback cluster of 2 workers + 2 ps; follow-mode dlrm with 26 hashed tables of dimension 16
(`table_rows` each), batch 256 per worker, `settle_s` 0, a look every second, serving deltas every `delta_every_s`,
every other setting its default (versions every 600 s, checkpoints every 600 s); the chief stops once idle. A
follower (the run's own online/publish/follower.py, copied alone) keeps a model fresh beside it. Measured, for each
file from the third on: landed (the helper's rename) -> first served at the follower, and trained (its last piece
done, the chief's summary) -> served; the first file's trained -> served; each file's training time (first piece
started -> last done); per delta its rows changed, MB and seconds (the chief's log); versions and their seconds.
The earlier code runs from a git worktree beside this checkout, sharing its .venv.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import fire

from bench.__main__ import machine, write_results
from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster
from bench.kit.quiet import require_quiet
from bench.tables.click_days import FULL, QUICK, worktree, write_days

HERE = Path(__file__).resolve().parents[1]
BEFORE = "46dcce1"  # the last commit before issue 62's first
SIZES = {"full": {**FULL, "days": 7, "table_rows": [100_000, 1_000_000], "drop_every_s": 20.0,
                  "delta_every_s": 10.0},
         "quick": {**QUICK, "days": 4, "table_rows": [2_000], "drop_every_s": 6.0, "delta_every_s": 2.0}}
MODEL = {"model": "dlrm", "dataset": "criteo", "loss": "binary_crossentropy", "metrics": ["auc"],
         "lr_decay_epochs": [], "embedding_dim": 16, "per_worker_batch": 256, "follow_data": True,
         "data_poll_s": 1, "settle_s": 0, "progress_every_s": 10}
WAYS = {"before": {}, "through the chief": {}, "written by the ps": {"output_dir_shared": True}}
SERVED = re.compile(r"serving \| (version|delta) ([\d.]+) .*?\| ([\d.]+) MB in ([\d.]+) s")
REPLACED = re.compile(r"serving \| delta [\d.]+ would carry ([\d.]+) MB")
CHANGED = re.compile(r"serving \| delta [\d.]+ \| steps \d+ to \d+ \| (\d+) rows? changed")
DROPPER = """
import json, shutil, sys, time
from pathlib import Path
days, data, every, landings = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
for day in sorted(days.iterdir(), key=lambda p: int(p.name.split("_")[1])):
    time.sleep(every)
    shutil.copy(day, data / f".{day.name}.tmp")
    (data / f".{day.name}.tmp").rename(data / day.name)
    with open(landings, "a") as out:
        print(json.dumps({"name": day.name, "landed": time.time()}), file=out, flush=True)
"""


def _log(message: str) -> None:
    print(f"[bench.online.click_freshness] {message}", file=sys.stderr, flush=True)


def one_run(tree: Path, work: Path, days: Path, size: dict, table_rows: int, options: dict) -> dict:
    """A follow-mode run of `tree`'s code over the days as they land, with a follower beside it; its figures."""
    data, output, events, landings = work / "data", work / "output", work / "events.jsonl", work / "landed.jsonl"
    data.mkdir(parents=True)
    alone = work / "follower"
    alone.mkdir()
    shutil.copy(tree / "online" / "publish" / "follower.py", alone / "follower.py")
    python = str(tree / ".venv" / "bin" / "python") if tree != ROOT else PYTHON
    with LoopbackCluster(work / "cluster", workers=2, ps=2) as cluster:
        dropper = subprocess.Popen([PYTHON, "-c", DROPPER, str(days), str(data), str(size["drop_every_s"]),
                                    str(landings)], stdin=subprocess.DEVNULL)
        follower = subprocess.Popen([python, str(alone / "follower.py"), "--serving", str(output / "serving"),
                                     "--every_s", "0.5", "--events", str(events)], cwd=alone,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            settings = {**MODEL, "table_rows": table_rows, "data_dir": str(data),
                        "serving_delta_every_s": size["delta_every_s"],
                        "stop_when_idle_s": size["drop_every_s"] + 20, **options}
            summary = _chief(cluster, tree, python, output, settings)
        finally:
            for child in (dropper, follower):
                child.kill()
                child.wait()
    return figures(summary, (output / "chief.log").read_text(), _lines(landings), _lines(events))


def _chief(cluster: LoopbackCluster, tree: Path, python: str, output: Path, settings: dict) -> dict:
    arguments = [f"--{key}={value if isinstance(value, bool) else json.dumps(value)}" for key, value in
                 settings.items()]
    output.mkdir(parents=True, exist_ok=True)
    with open(output / "chief.log", "w") as log:
        chief = subprocess.run([python, "-m", "coordinator.train", "--cluster", str(cluster.path), "--output_dir",
                                str(output), *arguments], cwd=tree, stdout=log, stderr=subprocess.STDOUT,
                               timeout=3600, stdin=subprocess.DEVNULL)
    if chief.returncode != 0:
        raise RuntimeError((output / "chief.log").read_text()[-3000:])
    return json.loads((output / "summary.json").read_text())


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def figures(summary: dict, log: str, landings: list[dict], events: list[dict]) -> dict:
    """Per file its landing, training and first serving at the follower; per delta and version what the log says."""
    landed = {entry["name"]: entry["landed"] for entry in landings}
    files = sorted(summary["follow"]["per_file"], key=lambda f: landed.get(f["name"], f["landed"]))
    per_file = []
    for entry in files:
        served = next((event["time"] for event in events if entry["name"] in event["files"]), None)
        at = landed.get(entry["name"], entry["landed"])
        per_file.append({"name": entry["name"], "training_s": entry["done"] - entry["started"],
                         "landed_to_served_s": None if served is None else served - at,
                         "trained_to_served_s": None if served is None else served - entry["done"]})
    served = [(kind, float(mb), float(s)) for kind, _, mb, s in SERVED.findall(log)]
    return {"files": per_file, "rows_per_delta": [int(n) for n in CHANGED.findall(log)],
            "deltas": [(mb, s) for kind, mb, s in served if kind == "delta"],
            "versions": [(mb, s) for kind, mb, s in served if kind == "version"],
            "delta_replaced_mb": [float(mb) for mb in REPLACED.findall(log)],
            "examples": summary["follow"]["examples"]}


def _percentile(values: list[float], share: float) -> float | None:
    values = sorted(v for v in values if v is not None)
    return values[min(len(values) - 1, round(share * (len(values) - 1)))] if values else None


def _span(values: list[float], digits: int = 1) -> str:
    values = [v for v in values if v is not None]
    return "-" if not values else f"{min(values):,.{digits}f}-{max(values):,.{digits}f}"


def row(table_rows: int, way: str, found: dict) -> str:
    """One line of the table: what the issue's table gives, and the targets' figures."""
    later = found["files"][2:]
    fresh = [f["landed_to_served_s"] for f in later]
    slowest = max(f["training_s"] for f in found["files"])
    p95 = _percentile(fresh, 0.95)
    first = found["files"][0]["trained_to_served_s"]
    delta = (f"{_span([mb for mb, _ in found['deltas']])} MB in {_span([s for _, s in found['deltas']])} s"
             if found["deltas"] else f"versions instead (would carry {found['delta_replaced_mb'][0]:,.1f} MB)"
             if found["delta_replaced_mb"] else "none")
    cells = [f"{26 * table_rows:,}", way, _span(found["rows_per_delta"], 0), delta,
             f"{len(found['versions'])} ({_span([s for _, s in found['versions']])} s)",
             _span(fresh), "-" if p95 is None else f"{p95:.1f}", f"{slowest:.1f}",
             "-" if p95 is None else ("met" if p95 <= slowest + 15 else "not met"),
             _span([f["trained_to_served_s"] for f in later]), "-" if first is None else f"{first:.1f}",
             f"{sum(1 for f in found['files'] if f['landed_to_served_s'] is not None)}/{len(found['files'])}"]
    return "| " + " | ".join(cells) + " |"


def report(record: dict, size: dict, about: dict, before: str) -> str:
    lines = ["# Freshness on click days at two table sizes, before issue 62 and now", "",
             f"Measured {about['date']} on {about['cores']} cores ({about['cpu']}) by `python -m "
             f"bench.online.click_freshness`: {size['days']} click days of {size['lines']:,} lines, one landing every "
             f"{size['drop_every_s']:g} s; dlrm, 26 hashed tables of dimension 16, 2 workers + 2 ps on loopback, "
             f"batch 256 per worker, `settle_s` 0, deltas every {size['delta_every_s']:g} s, every other setting its "
             f"default. `before` is {before}; `written by the ps` sets `output_dir_shared`. Load average before: "
             f"{about['load_before']:.2f}. Freshness: a file's landing to the follower serving a version or delta "
             "that holds it, from the third file on; the target is p95 at most the slowest file's training + 15 s.",
             "", "| table rows | code | rows changed per delta | a delta | versions (s each) | freshness s | p95 s | "
             "slowest file's training s | target | trained -> served s | first file: trained -> served s | "
             "files served |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    lines += [row(int(rows), way, found) for rows, ways in record.items() for way, found in ways.items()]
    return "\n".join(lines + [""])


def main(quick: bool = False, before: str = BEFORE, ways: str = ",".join(WAYS), rows: int = 0) -> None:
    """Every way (or those named, comma-separated) at both sizes (or `rows` a table), one run each, alone; prints
    the table and, for a whole run without --quick, writes the results."""
    size = SIZES["quick" if quick else "full"]
    whole = not quick and not rows and ways == ",".join(WAYS)
    size = {**size, "table_rows": [rows] if rows else size["table_rows"]}
    if not quick:
        require_quiet()
    about = machine()
    record = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-click-freshness-") as temporary:
            scratch = Path(temporary)
            days = write_days(scratch / "days", size, 0.0)
            trees = {way: worktree(before, scratch) if way == "before" else ROOT for way in ways.split(",")}
            for table_rows in size["table_rows"]:
                for way, tree in trees.items():
                    found = one_run(tree, scratch / f"run-{table_rows}-{way.replace(' ', '-')}", days, size,
                                    table_rows, WAYS[way])
                    _log(f"{26 * table_rows:,} rows, {way}: {row(table_rows, way, found)}")
                    record.setdefault(str(table_rows), {})[way] = found
    finally:
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)
    text = report(record, size, about, before)
    print(text)
    if whole:
        write_results(HERE / "results-click-freshness.json", {"machine": about, "size": size, "runs": record},
                      text)


if __name__ == "__main__":
    fire.Fire(main)
