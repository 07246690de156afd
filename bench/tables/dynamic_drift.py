"""Dynamic tables as they run for months (issue 41), run alone, figures with machine and date:

    .venv/bin/python -m bench.tables.dynamic_drift [--sections drift,admission] [--quick]

- drift: dlrm on drifting synthetic clicks (ids born and dying) with 4 workers + 2 ps and a small expiry
  (`expire_after_steps` 16: two steps between sweeps), hashed tables against dynamic ones given the same bytes:
  validation AUC, examples/s, and the run's own counts (ids admitted, expired, turned away, misdirected updates
  dropped). Run it on main and on this code to compare.
- admission: one dynamic table (one process, no cluster) fed, at three batch sizes, steps of ids seen once each
  (a flood) beside probe ids seen `admit_after` times within one window (to be admitted) and probe ids seen once a
  window (never to be): the share of each admitted against the configured threshold. Under the sketch that halved
  by lookups, big batches admitted almost none of the first; by windows of steps they all are.

Writes bench/results-dynamic-drift.json and bench/RESULTS-dynamic-drift.md. `--quick` is a smoke run: tiny
sizes, no waiting for a quiet machine, results printed and written nowhere in bench/ (no figures).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import fire

from bench.__main__ import machine, write_results
from bench.tables.dynamic_embeddings import FALLBACK_BYTES_PER_ID, _run, _stream, same_memory_capacity
from bench.kit.quiet import require_quiet

HERE = Path(__file__).resolve().parents[1]
FULL = {"table_rows": 2000, "new_ids": 2000, "lifetime": 8, "period_examples": 65536, "steps": 3000,
        "expire_after_steps": 16, "admit_after": 2, "admit_window_steps": 100, "sample_every": 500,
        "batches": (512, 4096, 32768), "admission_steps": 40, "probes": 200}
QUICK = {"table_rows": 200, "new_ids": 200, "lifetime": 4, "period_examples": 8192, "steps": 80,
         "expire_after_steps": 16, "admit_after": 2, "admit_window_steps": 10, "sample_every": 40,
         "batches": (64, 512, 4096), "admission_steps": 20, "probes": 20}
WORKERS, PS = 4, 2


def _log(message: str) -> None:
    print(f"[bench.tables.dynamic_drift] {message}", file=sys.stderr, flush=True)


def drift(sizes: dict, scratch: Path, quick: bool) -> list[dict]:
    capacity = same_memory_capacity(sizes, FALLBACK_BYTES_PER_ID)
    runs = []
    for kind in ("hashed", "dynamic"):
        config = {**_stream(sizes, sizes["steps"]), "kind": kind, "capacity": capacity,
                  "admit_after": sizes["admit_after"], "admit_window_steps": sizes["admit_window_steps"],
                  "expire_after_steps": sizes["expire_after_steps"]}
        runs.append(_run("bench.tables.dynamic_run", f"{kind} {WORKERS}w{PS}ps", config, scratch, workers=WORKERS,
                         ps=PS, quick=quick))
    return runs


def admission(sizes: dict) -> list[dict]:
    """Per batch size: the share admitted of probes seen admit_after times in one window, of probes seen once a
    window, and of the flood's ids (seen once)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bench.tables.admission_table import admission_shares

    found = []
    for batch in sizes["batches"]:
        shares = admission_shares(batch, admit_after=sizes["admit_after"], window=sizes["admit_window_steps"],
                                  steps=sizes["admission_steps"], probes=sizes["probes"])
        _log(f"admission at {batch} ids a step: {shares}")
        found.append({"batch": batch, **shares})
    return found


def main(sections: str = "drift,admission", quick: bool = False,
         output: str = str(HERE / "results-dynamic-drift.json")) -> None:
    """Runs the chosen sections; a full run writes `output` and its RESULTS-*.md beside it."""
    wanted = sections.split(",") if isinstance(sections, str) else list(sections)
    sizes = QUICK if quick else FULL
    if not quick:
        require_quiet()
    record = {"machine": machine(), "quick": quick, "sizes": {k: list(v) if isinstance(v, tuple) else v
                                                             for k, v in sizes.items()}}
    with tempfile.TemporaryDirectory() as scratch:
        if "drift" in wanted:
            record["drift"] = drift(sizes, Path(scratch), quick)
    if "admission" in wanted:
        record["admission"] = admission(sizes)
    text = render(record)
    if quick:
        print(text)
        return
    write_results(Path(output), record, text)
    _log(f"written to {output}")


def render(record: dict) -> str:
    sizes = record["sizes"]
    lines = [f"# Dynamic tables over drift, {WORKERS} workers ({record['machine']['cpu']}, "
             f"{record['machine']['cores']} cores, {record['machine']['date']}"
             f"{', quick smoke sizes' if record['quick'] else ''})", "",
             f"expire_after_steps {sizes['expire_after_steps']}, admit_after {sizes['admit_after']} within "
             f"{sizes['admit_window_steps']} steps", "",
             "| run | validation AUC | examples/s | admitted | expired | turned away | misdirected |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for run in record.get("drift", []):
        tables = run.get("tables", {}).values()
        count = {field: sum(entry.get(field, 0) for entry in tables) for field in
                 ("admitted", "expired", "turned_away", "misdirected")}
        auc = run.get("validation_auc")
        lines.append(f"| {run['label']} | {round(auc, 4) if auc is not None else run.get('failed')} | "
                     f"{round(run.get('examples_per_s', 0))} | {count['admitted']} | {count['expired']} | "
                     f"{count['turned_away']} | {count['misdirected']} |")
    lines += ["", f"Admission at admit_after {sizes['admit_after']} (share admitted):", "",
              "| ids a step | seen admit_after times in a window | seen once a window | flood (seen once) |",
              "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {a['batch']} | {a['due']:.2%} | {a['once_a_window']:.2%} | {a['flood']:.3%} |"
              for a in record.get("admission", [])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    fire.Fire(main)
