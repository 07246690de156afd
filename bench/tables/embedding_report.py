"""Markdown tables from the JSON records `python -m bench.tables.embeddings` writes (levers, scaling, scale case).

    .venv/bin/python -m bench.tables.embedding_report RECORD.json [RECORD.json ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

MB = 1e6


def _bytes(run: dict) -> float:
    return sum(run.get("bytes_per_step", {}).values()) / MB


def _load(runs: list[dict]) -> str:
    return ", ".join(f"{r['load_before']:.1f}→{r['load_after']:.1f}" for r in runs)


def _grouped(runs: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        groups[run["label"].rsplit(" r", 1)[0]].append(run)
    return groups


def _figure(runs: list[dict]) -> tuple[str, float | None]:
    good = [r["examples_per_s"] for r in runs if "examples_per_s" in r]
    if not good:
        return "failed: " + runs[0].get("failed", "?")[:120], None
    return ", ".join(f"{v:,.0f}" for v in good), statistics.median(good)


def _alone(runs: list[dict]) -> str:
    """Whether anything outside the benchmark used CPU before each run (checked with /proc)."""
    unchecked = [r["label"] for r in runs if "others_using_cpu" not in r]
    busy = [f"{r['label']} ({', '.join(r['others_using_cpu'])})" for r in runs if r.get("others_using_cpu")]
    if unchecked:
        return f"Not checked for other processes: {', '.join(unchecked)}."
    if busy:
        return f"Other processes used CPU before: {'; '.join(busy)}."
    return f"Before each of the {len(runs)} runs no process outside the benchmark used CPU (checked with /proc)."


def levers_table(runs: list[dict]) -> list[str]:
    lines = ["| configuration | examples/s per run | median | MB per step (ps + worker ports) "
             "| load 1-min (before→after) |",
             "| --- | --- | ---: | ---: | --- |"]
    for label, group in _grouped(runs).items():
        values, median = _figure(group)
        moved = statistics.median(_bytes(r) for r in group) if group[0].get("bytes_per_step") else 0
        lines.append(f"| {label} | {values} | **{median:,.0f}** | {moved:.3f} | {_load(group)} |"
                     if median else f"| {label} | {values} | – | – | {_load(group)} |")
    return lines


def scaling_table(runs: list[dict]) -> list[str]:
    by_rows: dict[int, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        by_rows[run["config"]["total_rows"]][run["mode"]].append(run)
    lines = ["| total rows | single ex/s | 1w+1ps ex/s | ps/single | MWMS 2w ex/s | ps/MWMS | MB/step (ps) | "
             "peak RSS MiB single / ps:0 / worker / chief | load |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| --- | --- |"]
    for rows, modes in sorted(by_rows.items()):
        single, ps, mwms = (_figure(modes.get(m, [])) [1] if modes.get(m) else None for m in ("single", "ps", "mwms"))
        ps_run = modes["ps"][0]
        rss = ps_run.get("server_rss_mib", {})
        lines.append(
            f"| {rows / 1e6:.2f} M | {single or 0:,.0f} | {ps or 0:,.0f} | {(ps or 0) / single if single else 0:.2f} | "
            f"{f'{mwms:,.0f}' if mwms else 'not run'} | {f'{ps / mwms:.2f}' if mwms and ps else '–'} | "
            f"{statistics.median(_bytes(r) for r in modes['ps']):.3f} | "
            f"{modes['single'][0].get('peak_rss_mib', 0):,.0f} / {rss.get('ps:0')} / {rss.get('worker:0')} / "
            f"{ps_run.get('peak_rss_mib', 0):,.0f} | {_load(modes['ps'] + modes['single'])} |")
    return lines


def main(*paths: str) -> None:
    """Prints each record's header, then one table per section over every record given (their runs merged)."""
    sections: dict[str, list[dict]] = defaultdict(list)
    for path in paths:
        record = json.loads(open(path).read())
        print(f"<!-- {path}: {record['date']}, load {record['load_before']} → {record['load_after']}, "
              f"group peak {record.get('group_peak_gib')} GiB -->")
        for name in ("levers", "scaling", "mwms", "scale"):
            sections[name] += record.get(name, [])
    if sections["levers"]:
        print("\n".join(["", *levers_table(sections["levers"])]))
    if sections["scaling"]:
        print("\n".join(["", *scaling_table(sections["scaling"] + sections["mwms"])]))
    print("\n" + _alone([run for runs in sections.values() for run in runs]))
    for run in sections["scale"]:
        print(f"- {run['label']}: " + json.dumps({k: run.get(k) for k in (
            "examples_per_s", "failed", "server_rss_mib", "peak_rss_mib", "cgroup_peak_mib", "oom_kills",
            "load_before", "load_after")}))


if __name__ == "__main__":
    main(*sys.argv[1:])
