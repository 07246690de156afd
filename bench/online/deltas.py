"""`python -m bench.online.deltas [--quick]`: serving deltas against full versions, into bench/RESULTS-deltas.md
(machine and date; not with --quick, which only proves the bench runs).

On one loopback cluster (2 workers, 2 ps), dlrm on Criteo files with hashed tables of `table_rows` rows each (26
tables of dimension 16), at two table sizes ten times apart:
- `tracking`: steps/s of one model without row stamps and with them (tests/delta_chief.py `time`: the same
  batches scheduled on both workers, alternated twice), the cost of tracking changed rows;
- `follow, deltas` and `follow, no deltas`: follow mode on an empty folder into which a file is dropped every
  `drop_every_s` (hidden name, then renamed), full versions every `version_every_s`, and deltas every
  `delta_every_s` or none; a follower (online/publish/follower.py, a process of its own) keeps a model
  fresh meanwhile. Reported: median bytes and seconds per full version and per delta (the chief's log), rows
  per delta against the table's, examples/s (first piece started to last file done) with deltas against
  without, and freshness at the follower: from a file landing to the follower serving a version or delta that
  holds it (its events), p50 and p95.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster
from bench.online.follow import DROPPER, run_chief

HERE = Path(__file__).resolve().parents[1]
SIZES = {"quick": {"table_rows": [500, 5000], "files": 6, "rows": 600, "drop_every_s": 5.0, "delta_every_s": 2.0,
                   "version_every_s": 8.0, "piece_mb": 0.05, "timed_steps": 20},
         "full": {"table_rows": [100_000, 1_000_000], "files": 12, "rows": 10_000, "drop_every_s": 20.0,
                  "delta_every_s": 10.0, "version_every_s": 120.0, "piece_mb": 2.0, "timed_steps": 300}}
SERVED = re.compile(r"serving \| (version|delta) ([\d.]+) .*?\| ([\d.]+) MB in ([\d.]+) s")
CHANGED = re.compile(r"serving \| delta [\d.]+ \| steps \d+ to \d+ \| (\d+) rows? changed")


def tracking(cluster: LoopbackCluster, work: Path, table_rows: int, steps: int) -> dict:
    spec = json.loads(cluster.path.read_text())["cluster"]
    tf_config = {"cluster": {job: spec[job] for job in ("chief", "worker", "ps")}, "task": {"type": "chief",
                                                                                           "index": 0}}
    run = subprocess.run([PYTHON, str(ROOT / "tests" / "delta_chief.py"), "time", str(work), str(steps),
                          str(table_rows)], capture_output=True, text=True, cwd=ROOT, timeout=3600,
                         stdin=subprocess.DEVNULL, env={**os.environ, "TF_CONFIG": json.dumps(tf_config),
                                                        "TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": str(ROOT)})
    line = next((line for line in run.stdout.splitlines() if line.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(run.stderr[-3000:])
    return json.loads(line.removeprefix("RESULT "))


def following(cluster: LoopbackCluster, work: Path, size: dict, table_rows: int, deltas: bool) -> dict:
    """A follow-mode run fed by a dropper, with a follower beside it; its figures."""
    data, output, events = work / "data", work / "output", work / "events.jsonl"
    data.mkdir(parents=True)
    alone = work / "follower"  # the follower as a user runs it: the file alone, no toolkit on its path
    alone.mkdir()
    shutil.copy(ROOT / "online" / "publish" / "follower.py", alone / "follower.py")
    dropper = subprocess.Popen([PYTHON, "-c", DROPPER, str(data), str(size["files"]), str(size["rows"]),
                                str(size["drop_every_s"])], cwd=ROOT, stdin=subprocess.DEVNULL)
    follower = subprocess.Popen([PYTHON, str(alone / "follower.py"), "--serving", str(output / "serving"),
                                 "--every_s", "0.5", "--events", str(events)], cwd=alone, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        summary = run_chief(cluster, output, timeout_s=7200, data_dir=str(data), follow_data=True,
                            table_rows=table_rows, piece_mb=size["piece_mb"], data_poll_s=1,
                            stop_when_idle_s=size["drop_every_s"] + 15, checkpoint_every_s=600, settle_s=0,
                            serving_export_every_s=size["version_every_s"],
                            serving_delta_every_s=size["delta_every_s"] if deltas else 0)
    finally:
        for child in (dropper, follower):
            child.kill()
            child.wait()
    files = summary["follow"]["per_file"]
    seconds = max(f["done"] for f in files) - min(f["started"] for f in files)
    log = (output / "chief.log").read_text()
    served = {kind: [(float(mb), float(s)) for k, _, mb, s in SERVED.findall(log) if k == kind]
              for kind in ("version", "delta")}
    figures = {"examples_per_s": summary["follow"]["examples"] / seconds, "table_rows": 26 * table_rows,
               "rows_per_delta": _median([int(n) for n in CHANGED.findall(log)])}
    for kind, pairs in served.items():
        figures[f"{kind}_mb"] = _median([mb for mb, _ in pairs])
        figures[f"{kind}_s"] = _median([s for _, s in pairs])
    figures.update(_freshness(files, events))
    return figures


def _freshness(files: list[dict], events: Path) -> dict:
    """Per file: from its landing to the first follower event (a version or delta) that holds it."""
    seen = [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
    waits = []
    for entry in files:
        first = next((event["time"] for event in seen if entry["name"] in event["files"]), None)
        if first is not None:
            waits.append(first - entry["landed"])
    if not waits:
        return {"fresh_files": 0}
    waits.sort()
    return {"fresh_files": len(waits), "fresh_p50_s": statistics.median(waits),
            "fresh_p95_s": waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))]}


def _median(values: list) -> float | None:
    return statistics.median(values) if values else None


def report(figures: dict, size: dict, about: dict) -> str:
    lines = ["# Serving deltas against full versions", "",
             f"Measured {about['date']} on {about['cores']} cores ({about['cpu']}) by `python -m bench.online.deltas`: "
             f"dlrm, 26 hashed tables of dimension 16, 2 workers + 2 ps on loopback; {size['files']} Criteo files "
             f"of {size['rows']:,} lines dropped every {size['drop_every_s']:g} s; full versions every "
             f"{size['version_every_s']:g} s, deltas every {size['delta_every_s']:g} s; pieces of "
             f"{size['piece_mb']} MB. Load average before: {about['load_before']:.1f}.", "",
             "| table rows | steps/s without stamps | with | version MB | s | delta MB | s | rows per delta | "
             "examples/s with deltas | without | freshness p50 s | p95 s |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for rows, row in figures.items():
        on, off, timed = row["deltas"], row["no deltas"], row["tracking"]
        cells = [f"{26 * rows:,}", timed["steps_per_s_without"], timed["steps_per_s_with"], on.get("version_mb"),
                 on.get("version_s"), on.get("delta_mb"), on.get("delta_s"), _whole(on.get("rows_per_delta")),
                 on["examples_per_s"], off["examples_per_s"], on.get("fresh_p50_s"), on.get("fresh_p95_s")]
        lines.append("| " + " | ".join("-" if c is None else f"{c:,.2f}" if isinstance(c, float) else
                                       f"{c:,}" if isinstance(c, int) else c for c in cells) + " |")
    return "\n".join(lines + [""])


def _whole(value) -> int | None:
    return None if value is None else round(value)


def main(quick: bool = False) -> None:
    """Runs every scenario at both sizes; prints the table, and without --quick writes bench/RESULTS-deltas.md."""
    size = SIZES["quick" if quick else "full"]
    about = machine()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-deltas-") as temporary:
        work = Path(temporary)
        with LoopbackCluster(work / "cluster", workers=2, ps=2) as cluster:
            for rows in size["table_rows"]:
                figures[rows] = {
                    "tracking": tracking(cluster, work / f"timed-{rows}", rows, size["timed_steps"]),
                    "deltas": following(cluster, work / f"deltas-{rows}", size, rows, deltas=True),
                    "no deltas": following(cluster, work / f"versions-{rows}", size, rows, deltas=False)}
    text = report(figures, size, about)
    print(text)
    print(json.dumps(figures, indent=1))
    if not quick:
        write_keeping_notes(HERE / "RESULTS-deltas.md", text)


if __name__ == "__main__":
    fire.Fire(main)
