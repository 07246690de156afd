"""The report of bench/online/follow_soak.py: the ledger's counts against what was written, freshness per ten minutes,
and each task's memory and the bytes on disk over time, as Markdown."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

KILLED = ("chief-0", "ps-0", "ps-1", "worker-0", "worker-1")  # the tasks the soak kills, as their log files name them


def verdict(work: Path, result: dict, prefill_examples: int) -> dict:
    """The summary's counts against what was written."""
    summary = json.loads((work / "output" / "summary.json").read_text())
    follow = summary["follow"]
    per_file = {f["name"]: f for f in follow["per_file"]}
    cut = sum(per_file[name]["examples"] for name, (kind, _) in result["written"].items() if kind == "cut.gz"
              and name in per_file)
    expected = prefill_examples + cut + sum(e for kind, e in result["written"].values() if e > 0)
    wrong = [name for name, (kind, e) in result["written"].items()
             if e >= 0 and name in per_file and per_file[name]["examples"] != e]
    return {"status": summary["status"], "examples": follow["examples"], "expected_examples": expected,
            "files_done": follow["files_done"], "files": follow["files"], "wrong_files": wrong[:10],
            "wrong_count": len(wrong), "problems": follow["problems"], "steps": follow["steps"],
            "optimizer_steps": summary["optimizer_steps"]}


def freshness_by_interval(freshness: dict, minutes: float = 10) -> list[tuple[int, int, float, float]]:
    """(interval start minute, files, p50, p95) by landing time."""
    if not freshness:
        return []
    first = min(landed for landed, _ in freshness.values())
    buckets: dict[int, list[float]] = {}
    for landed, seconds in freshness.values():
        buckets.setdefault(int((landed - first) / 60 // minutes), []).append(seconds)
    return [(int(k * minutes), len(v), statistics.median(v), sorted(v)[int(0.95 * (len(v) - 1))])
            for k, v in sorted(buckets.items())]


def render(about: dict, size: dict, seed: int, result: dict, checked: dict) -> str:
    kinds = {}
    for kind, _ in result["written"].values():
        kinds[kind] = kinds.get(kind, 0) + 1
    lines = ["# Follow-mode soak: a real folder, kills and a frozen worker", "",
             f"Measured {about['date']} on {about['cores']} cores ({about['cpu']}, {about['memory_gib']} GiB) by "
             f"`python -m bench.online.follow_soak --write`; load average before {about['load_before']:.2f}. "
             f"Follow-mode "
             f"DLRM, dynamic tables, 2 ps + 2 workers on loopback through `sh run.sh --detach`, over "
             f"{size['prefill']:,} files of a previous run; {size['minutes']:.0f} min of a {size['lines']:,}-line "
             f"file every {size['every_s']:g} s, good ones deleted {size['retention_s']:.0f} s after landing, a "
             f"task SIGKILLed every {size['kill_every_s']:.0f} s (seed {seed}), {'; '.join(result['events'])}.", "",
             f"- files landed: {len(result['written'])} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})",
             f"- kills: {len(result['kills'])} ({', '.join(sorted(set(result['kills'])))})",
             f"- the run ended by itself (stop_when_idle_s): {result['ended_by_itself']}, status "
             f"{checked['status']}; processes left after `sh kill.sh`: {len(result['left'])}",
             f"- examples in the ledger: {checked['examples']:,}, written: {checked['expected_examples']:,}; files "
             f"whose count differs: {checked['wrong_count']} {checked['wrong_files']}",
             f"- files done {checked['files_done']:,} of {checked['files']:,}; not trained: {checked['problems']}",
             f"- steps: {checked['steps']:,} in the ledger, {checked['optimizer_steps']:,} taken (the difference: "
             "pieces trained again after a kill)", "",
             "| landed in minutes | files served | freshness p50 s | p95 s |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {start}-{start + 10} | {count} | {p50:.0f} | {p95:.0f} |"
              for start, count, p50, p95 in freshness_by_interval(result["freshness"])]
    lines += ["", "| minute | " + " | ".join(f"{t} MB" for t in KILLED) + " | summary kB | checkpoints MB | serving MB "
              "| logs MB |", "| ---: |" + " ---: |" * (len(KILLED) + 4)]
    samples = result["samples"]
    for row in samples[::max(1, len(samples) // 12)] + samples[-1:]:
        rss = " | ".join(f"{row['rss_mb'].get(t, 0):.0f}" for t in KILLED)
        lines.append(f"| {row['minute']:.0f} | {rss} | {row['summary_kb']:.0f} | {row['checkpoints_mb']:.0f} | "
                     f"{row['serving_mb']:.0f} | {row['logs_mb']:.1f} |")
    return "\n".join(lines) + "\n"
