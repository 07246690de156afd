"""`python -m bench.follow_soak [--quick] [--write]`: follow mode for an hour on a folder that behaves like a real
one, into bench/RESULTS-follow-soak.md (with `--write`; machine and date).

A follow-mode DLRM with dynamic tables (2 ps, 2 workers, `sh run.sh --detach`) on a folder pre-filled with a previous
run's 20,000 trained files (mostly empty parts, as Spark writes them), then, for `--minutes`: a Criteo file landing
every 3 s (written under a hidden name and renamed), its ids drifting (a new id set each minute, the old ones
expiring), every 20th file bad in turn (empty, binary garbage, three malformed lines, a gzip cut mid-stream); a
retention job deleting good files ten minutes after they landed; a task SIGKILLed every 60 s on a seeded schedule;
one worker frozen (SIGSTOP) for a minute. Then the files stop, the run ends at `stop_when_idle_s`, and the report
gives: every good file trained exactly once (the ledger's count against what was written), every bad one counted,
freshness p50/p95 per ten minutes, each task's resident memory and the summary, checkpoint, serving and log bytes
over time, and the processes left.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from bench.cluster import ROOT
from bench.soak import launcher_running, running_tasks

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))
import criteokit  # noqa: E402
from clusterkit import cluster_document, processes_mentioning, write_cluster  # noqa: E402

SIZES = {"full": {"minutes": 60.0, "prefill": 20_000, "lines": 1000, "every_s": 3.0, "kill_every_s": 60.0,
                  "frozen_s": 60.0, "retention_s": 600.0},
         "quick": {"minutes": 3.0, "prefill": 2_000, "lines": 500, "every_s": 3.0, "kill_every_s": 45.0,
                   "frozen_s": 20.0, "retention_s": 60.0}}
MODEL = {"model": "dlrm", "dataset": "criteo", "follow_data": True, "embedding_kind": "dynamic",
         "embedding_capacity": 65_536, "expire_after_steps": 200, "embedding_dim": 8, "bottom_mlp": [32],
         "top_mlp": [32, 16], "per_worker_batch": 256, "piece_mb": 0.5, "data_poll_s": 1, "settle_s": 1,
         "checkpoint_every_s": 30, "serving_export_every_s": 10, "progress_every_s": 10, "stop_when_idle_s": 60,
         "keep_serving_versions": 2}
BAD_KINDS = ("empty", "garbage", "malformed", "cut.gz")
KILLED = ("chief-0", "ps-0", "ps-1", "worker-0", "worker-1")
SAMPLE_S = 15.0


def _say(line: str) -> None:
    print(f"[follow-soak] {time.strftime('%H:%M:%S')} {line}", flush=True)


def drifting_rows(count: int, first: int) -> list[tuple]:
    """Criteo rows whose ids belong to the minute they land in (ids born and dying)."""
    era = f"{(first // 20_000) % 256:02x}"
    made = criteokit.rows(count, first=first)
    return [(label, ints, [c and era + c[2:] for c in cats]) for label, ints, cats in made]


def write_file(data: Path, number: int, lines: int) -> tuple[str, str, int]:
    """Lands file `number` (every 20th bad, in turn); returns (name, kind, the examples it should give or -1)."""
    first = number * lines
    kind = BAD_KINDS[(number // 20) % len(BAD_KINDS)] if number % 20 == 19 else "good"
    name = f"part-{number:06d}" + (".gz" if kind == "cut.gz" else "")
    hidden = data / f".{name}.tmp"
    if kind == "empty":
        hidden.write_bytes(b"")
        expected = 0
    elif kind == "garbage":
        hidden.write_bytes(bytes(range(256)) * 64)
        expected = 0
    elif kind == "malformed":
        criteokit.write(hidden, drifting_rows(lines, first), extra_lines={10: "1\tnot a number", 50: "garbage",
                                                                          90: "2\t" + "\t" * 38})
        expected = lines
    elif kind == "cut.gz":
        whole = gzip.compress(("\n".join(map(criteokit.line, drifting_rows(lines, first))) + "\n").encode())
        hidden.write_bytes(whole[:len(whole) // 2])
        expected = -1  # some of its lines, counted as unfinished
    else:
        criteokit.write(hidden, drifting_rows(lines, first))
        expected = lines
    hidden.rename(data / name)
    return name, kind, expected


def prefill(work: Path, path: Path, size: dict) -> int:
    """The previous run: `prefill` files (all empty but the last 20) trained by a run that then idles out."""
    data = work / "data"
    data.mkdir(parents=True)
    for number in range(size["prefill"] - 20):
        (data / f"old-{number:06d}").write_bytes(b"")
    for number in range(20):
        criteokit.write(data / f"old-{size['prefill'] - 20 + number:06d}", drifting_rows(size["lines"], number))
    _say(f"the previous run: {size['prefill']:,} files, {20 * size['lines']:,} examples")
    done = subprocess.run(["sh", str(ROOT / "run.sh"), str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=3600, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return 20 * size["lines"]


class Sampler:
    """Every SAMPLE_S: each task's resident memory, the bytes under output/ and logs/, and the freshness of each
    file the summary shows served (kept before retention folds the file away)."""

    def __init__(self, work: Path):
        self.work, self.rows, self.freshness = work, [], {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self.stopped.wait(SAMPLE_S):
            memory = {}
            for name, pid in running_tasks(self.work / "logs").items():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                resident = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
                if resident:  # a process that is ending has none
                    memory[name] = int(resident[0]) / 1024
            output = self.work / "output"
            self.rows.append({"minute": (time.monotonic() - started) / 60, "rss_mb": memory,
                              **{f"{part}_mb": _bytes(output / part) / 1e6 for part in ("checkpoints", "serving")},
                              "summary_kb": _bytes(output / "summary.json") / 1e3,
                              "logs_mb": _bytes(self.work / "logs") / 1e6})
            self._freshness(output / "summary.json")

    def _freshness(self, summary: Path) -> None:
        try:
            files = json.loads(summary.read_text())["follow"]["per_file"]
        except (OSError, ValueError, KeyError):
            return
        for entry in files:
            if entry["freshness_s"] is not None and entry["name"].startswith("part-"):
                self.freshness.setdefault(entry["name"], (entry["landed"], entry["freshness_s"]))


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def soak(work: Path, path: Path, size: dict, seed: int) -> dict:
    """The run under files, retention, kills and a freeze; what was written and done, for the report."""
    data, logs = work / "data", work / "logs"
    subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], check=True, timeout=300, cwd=ROOT,
                   capture_output=True, stdin=subprocess.DEVNULL)
    rng, written, kills, events = random.Random(seed), {}, [], []
    sampler = Sampler(work)
    sampler.thread.start()
    started = time.monotonic()
    window_s, frozen_at = size["minutes"] * 60, size["minutes"] * 60 / 3
    next_kill, number, landed_at = started + size["kill_every_s"], 0, {}
    try:
        while time.monotonic() - started < window_s:
            name, kind, expected = write_file(data, number, size["lines"])
            written[name], landed_at[name] = (kind, expected), time.monotonic()
            number += 1
            for old, at in list(landed_at.items()):  # retention: good files only (the bad ones stay to be read)
                if time.monotonic() - at > size["retention_s"] and written[old][0] == "good":
                    (data / old).unlink(missing_ok=True)
                    del landed_at[old]
            if time.monotonic() >= next_kill:
                kills.append(_kill(logs, rng))
                next_kill += size["kill_every_s"]
            if frozen_at is not None and time.monotonic() - started >= frozen_at:
                events.append(_freeze(logs, "worker-1", size["frozen_s"]))
                frozen_at = None
            time.sleep(max(0.0, started + number * size["every_s"] - time.monotonic()))
        _say(f"{number} files landed in {size['minutes']:.0f} min; waiting for the run to idle out")
        deadline = time.monotonic() + 900
        while launcher_running(logs) and time.monotonic() < deadline:
            time.sleep(2)
        ended_by_itself = not launcher_running(logs)
    finally:
        sampler.stopped.set()
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], timeout=300, cwd=ROOT, capture_output=True)
    return {"written": written, "kills": kills, "events": events, "samples": sampler.rows,
            "freshness": sampler.freshness, "ended_by_itself": ended_by_itself, "wall_s": time.monotonic() - started,
            "left": [p for p in processes_mentioning(str(work)) if "bench.follow_soak" not in p]}


def _kill(logs: Path, rng: random.Random) -> str:
    running = running_tasks(logs)
    name = rng.choice([n for n in KILLED if n in running] or [None])
    if name is not None:
        try:
            os.killpg(running[name], signal.SIGKILL)
        except ProcessLookupError:
            name = None
    _say(f"killed {name or 'nothing (none running)'}")
    return name or "-"


def _freeze(logs: Path, task: str, seconds: float) -> str:
    pid = running_tasks(logs).get(task)
    if pid is None:
        return f"{task} not running: not frozen"
    os.killpg(pid, signal.SIGSTOP)
    _say(f"{task} frozen for {seconds:.0f} s")
    threading.Timer(seconds, lambda: _thaw(pid)).start()
    return f"{task} frozen for {seconds:.0f} s"


def _thaw(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


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
             f"`python -m bench.follow_soak --write`; load average before {about['load_before']:.2f}. Follow-mode "
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


def main(quick: bool = False, seed: int = 38, minutes: float | None = None, work: str = "/tmp/pscluster-follow-soak",
         write: bool = False) -> None:
    """Runs the soak; prints the report, and with `--write` writes bench/RESULTS-follow-soak.md."""
    size = {**SIZES["quick" if quick else "full"], **({"minutes": minutes} if minutes else {})}
    about, root = machine(), Path(work)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    document = cluster_document(workers=2, ps=2, evaluator=False, logs_dir=str(root / "logs"), training={
        **MODEL, "data_dir": str(root / "data"), "output_dir": str(root / "output")})
    document["launcher"].update(max_restarts=50, poll_s=0.5, restart_backoff_s=1)
    path = write_cluster(root, document)
    examples = prefill(root, path, size)
    result = soak(root, path, size, seed)
    checked = verdict(root, result, examples)
    (root / "result.json").write_text(json.dumps({"size": size, "checked": checked, **result}, indent=2))
    text = render(about, size, seed, result, checked)
    print(text)
    if write:
        write_keeping_notes(HERE / "RESULTS-follow-soak.md", text)


if __name__ == "__main__":
    fire.Fire(main)
