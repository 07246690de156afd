"""Dynamic against hashed embedding tables on drifting synthetic clicks (issue 27), run alone, figures with machine
and date:

    .venv/bin/python -m bench.tables.dynamic_embeddings [--sections hold,compare,memory] [--quick]

- hold: the ps bytes one held id costs (index entry, row, Adagrad slot, bookkeeping), with 1 M and 10 M ids held
  on 1 ps (bench.tables.dynamic_hold), so a ps can be sized for a hundred million.
- compare: dlrm with hashed tables (`table_rows` rows per feature) against dynamic tables given the same bytes
  (capacity: the hashed rows' and slots' bytes over what one more held id cost in `hold`), on data whose
  live ids outnumber the hashed rows: validation AUC, examples/s and bytes per step on 1 worker + 1 ps and 2 + 2.
- memory: a long drifting stream with expiry on 1 worker + 1 ps: the ps's resident memory and the rows in use
  over time; flat means within 10 % of the mean over the second half.
Targets (issue 27): AUC above the hashed table's, examples/s at least 0.8 x hashed, memory flat.

Writes bench/results-dynamic-embeddings.json and bench/RESULTS-dynamic-embeddings.md. `--quick` is a smoke run:
tiny sizes, no waiting for a quiet machine, results printed and written nowhere in bench/ (no figures).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import fire

from bench.__main__ import machine, write_results
from bench.tables.embedding_cluster import run_measured
from bench.kit.quiet import require_quiet
from data.criteo_layout import CATEGORICAL_FEATURES

HERE = Path(__file__).resolve().parents[1]
DIM = 16
FULL = {"hold_ids": (1_000_000, 10_000_000), "table_rows": 2000, "new_ids": 2000, "lifetime": 8,
        "period_examples": 65536, "steps": 3000, "memory_steps": 6000, "expire_after_steps": 256,
        "admit_after": 2, "sample_every": 200}
QUICK = {"hold_ids": (50_000,), "table_rows": 200, "new_ids": 200, "lifetime": 4, "period_examples": 8192,
         "steps": 160, "memory_steps": 240, "expire_after_steps": 32, "admit_after": 2, "sample_every": 40}
CLUSTERS = ((1, 1), (2, 2))  # (workers, ps)
FALLBACK_BYTES_PER_ID = 256  # used only when `hold` is not run: row and slot (128) plus a guess for the rest


def _log(message: str) -> None:
    print(f"[bench.tables.dynamic_embeddings] {message}", file=sys.stderr, flush=True)


def _run(module: str, label: str, config: dict, scratch: Path, *, workers: int, ps: int, quick: bool) -> dict:
    result = run_measured("ps", config, scratch / label.replace(" ", "_"), ps=ps, workers=workers, module=module,
                          wait_quiet=not quick, timeout_s=600 if quick else 3600)
    _log(f"{label}: " + json.dumps({k: v for k, v in result.items() if k != "memory"}))
    return {"label": label, "workers": workers, "ps": ps, "config": config, **result}


def hold(sizes: dict, scratch: Path, quick: bool) -> list[dict]:
    return [_run("bench.tables.dynamic_hold", f"hold {ids}", {"ids": ids, "dim": DIM}, scratch, workers=1, ps=1,
                 quick=quick) for ids in sizes["hold_ids"]]


def bytes_per_id(held: list[dict]) -> float:
    """What one more held id costs the ps: between the two sizes held (the fixed part of the ps's memory cancels
    out), else at the one size, else FALLBACK_BYTES_PER_ID."""
    done = [run for run in held if "held_mib" in run]
    if len(done) >= 2:
        small, large = done[0], done[-1]
        return round((large["held_mib"] - small["held_mib"]) * 2 ** 20 / (large["held"] - small["held"]), 1)
    return done[0]["bytes_per_held_id"] if done else FALLBACK_BYTES_PER_ID


def same_memory_capacity(sizes: dict, per_id: float) -> int:
    """Dynamic rows that take the hashed tables' bytes (a table of `table_rows` rows per feature, with Adagrad's
    slot)."""
    return int(CATEGORICAL_FEATURES * sizes["table_rows"] * 2 * DIM * 4 // per_id)


def _stream(sizes: dict, steps: int) -> dict:
    return {"table_rows": sizes["table_rows"], "dim": DIM, "new_ids": sizes["new_ids"], "lifetime": sizes["lifetime"],
            "period_examples": sizes["period_examples"], "steps": steps, "batch": 512, "spe": 10,
            "sample_every": sizes["sample_every"]}


def compare(sizes: dict, capacity: int, scratch: Path, quick: bool) -> list[dict]:
    runs = []
    for workers, ps in CLUSTERS:
        for kind in ("hashed", "dynamic"):
            config = {**_stream(sizes, sizes["steps"]), "kind": kind, "capacity": capacity,
                      "admit_after": sizes["admit_after"], "expire_after_steps": sizes["expire_after_steps"]}
            runs.append(_run("bench.tables.dynamic_run", f"{kind} {workers}w{ps}ps", config, scratch, workers=workers,
                             ps=ps, quick=quick))
    return runs


def memory(sizes: dict, capacity: int, scratch: Path, quick: bool) -> dict:
    config = {**_stream(sizes, sizes["memory_steps"]), "kind": "dynamic", "capacity": capacity,
              "admit_after": sizes["admit_after"], "expire_after_steps": sizes["expire_after_steps"]}
    run = _run("bench.tables.dynamic_run", "memory under expiry", config, scratch, workers=1, ps=1, quick=quick)
    samples = run.get("memory", [])
    later = [s["ps_rss_mib"][0] for s in samples[len(samples) // 2:] if s["ps_rss_mib"]]
    if later:
        mean = sum(later) / len(later)
        run["second_half_rss_spread"] = round(max(abs(v - mean) for v in later) / mean, 4)
    return run


def main(sections: str = "hold,compare,memory", quick: bool = False,
         output: str = str(HERE / "results-dynamic-embeddings.json"), table_rows: int | None = None) -> None:
    """Runs the chosen sections; a full run writes `output` and its RESULTS-*.md beside it (results-x.json:
    RESULTS-x.md). `--table_rows`: the hashed rows per feature compared (the dynamic capacity follows: same bytes)."""
    wanted = sections.split(",") if isinstance(sections, str) else list(sections)
    sizes = {**(QUICK if quick else FULL), **({"table_rows": table_rows} if table_rows else {})}
    if not quick:
        require_quiet()
    record = {"machine": machine(), "quick": quick, "sizes": sizes}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        record["hold"] = hold(sizes, scratch, quick) if "hold" in wanted else []
        per_id = bytes_per_id(record["hold"])
        capacity = same_memory_capacity(sizes, per_id)
        record["same_memory"] = {"capacity": capacity, "bytes_per_held_id": per_id,
                                 "hashed_rows": CATEGORICAL_FEATURES * sizes["table_rows"]}
        if "compare" in wanted:
            record["compare"] = compare(sizes, capacity, scratch, quick)
        if "memory" in wanted:
            record["memory"] = memory(sizes, capacity, scratch, quick)
    text = render(record)
    if quick:
        print(text)
        return
    write_results(Path(output), record, text)
    _log(f"written to {output}")


def render(record: dict) -> str:
    """The results as Markdown: one table per section, the targets checked."""
    lines = [f"# Dynamic against hashed tables ({record['machine']['cpu']}, {record['machine']['cores']} cores, "
             f"{record['machine']['date']}{', quick smoke sizes' if record['quick'] else ''})", "",
             "| ids held | bytes per held id | index bytes per id | row + slot | bookkeeping per row |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r.get('held', r.get('failed'))} | {r.get('bytes_per_held_id')} | {r.get('index_bytes_per_id')} | "
              f"{r.get('row_and_slot_bytes')} | {r.get('bookkeeping_bytes_per_row')} |" for r in record["hold"]]
    same = record["same_memory"]
    lines += ["", f"Same memory: {same['hashed_rows']} hashed rows = {same['capacity']} dynamic rows at "
              f"{same['bytes_per_held_id']} bytes per more id held.", "",
              "| run | validation AUC | examples/s | bytes/step (ps) | rows in use at the end |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for run in record.get("compare", []):
        rows = sum(entry["rows_in_use"] for entry in run.get("tables", {}).values()) or "-"
        auc = run.get("validation_auc")
        lines.append(f"| {run['label']} | {round(auc, 4) if auc is not None else run.get('failed')} | "
                     f"{round(run.get('examples_per_s', 0))} | {round(run.get('bytes_per_step', {}).get('ps', 0))} | "
                     f"{rows} |")
    if "memory" in record:
        memory_run = record["memory"]
        lines += ["", f"Memory under expiry: second-half spread of the ps's resident memory "
                  f"{memory_run.get('second_half_rss_spread')} (flat: at most 0.10)", "",
                  "| step | ps RSS MiB | rows in use |", "| ---: | ---: | ---: |"]
        lines += [f"| {s['step']} | {s['ps_rss_mib']} | {s['rows_in_use']} |" for s in memory_run.get("memory", [])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    fire.Fire(main)
