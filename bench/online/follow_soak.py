"""`python -m bench.online.follow_soak [--quick] [--write]`: follow mode for an hour on a folder that behaves like a
real one, into bench/RESULTS-follow-soak.md (with `--write`; machine and date).

Follow-mode DLRM with dynamic tables (2 ps, 2 workers, `sh run.sh --detach`) over a previous run's 20,000 files
(mostly empty parts, as Spark writes them), then for `--minutes` a Criteo file every 3 s (renamed into place) with
drifting ids, every 20th bad in turn (empty, garbage, three malformed lines, a cut gzip), good files deleted ten
minutes after landing, a task SIGKILLed every 60 s (seeded), one worker frozen for a minute; then it idles out (a
cut gzip waits `unfinished_after_s`, 120 s here, before it is taken as it is: until then the run is not idle).
Reported: the ledger's counts against what was written, freshness p50/p95 per ten minutes, each task's memory and
the bytes on disk over time, and the processes left.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from bench.kit.cluster import ROOT
from bench.online.follow_soak_report import KILLED, render, verdict
from bench.faults.soak import launcher_running, running_tasks

HERE = Path(__file__).resolve().parents[1]
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
         "unfinished_after_s": 120,  # files land by rename: a cut gzip is broken, not being written; taken in 2 min
         "keep_serving_versions": 2}
BAD_KINDS = ("empty", "garbage", "malformed", "cut.gz")
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
    """Bytes under `path` (0 when absent); files that go while it counts are left out."""
    found = [os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names]
    total = 0
    for item in found if not path.is_file() else [path]:
        with contextlib.suppress(OSError):
            total += os.stat(item).st_size
    return total


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
            "left": [p for p in processes_mentioning(str(work)) if "bench.online.follow_soak" not in p]}


def _kill(logs: Path, rng: random.Random) -> str:
    running = running_tasks(logs)
    name = rng.choice([n for n in KILLED if n in running] or [None])
    if name is not None and not _signal(running[name], signal.SIGKILL):
        name = None
    _say(f"killed {name or 'nothing (none running)'}")
    return name or "-"


def _freeze(logs: Path, task: str, seconds: float) -> str:
    pid = running_tasks(logs).get(task)
    if pid is None:
        return f"{task} not running: not frozen"
    _signal(pid, signal.SIGSTOP)
    _say(f"{task} frozen for {seconds:.0f} s")
    threading.Timer(seconds, _signal, (pid, signal.SIGCONT)).start()
    return f"{task} frozen for {seconds:.0f} s"


def _signal(pid: int, number: int) -> bool:
    """Signals a task's process group (each task leads its own); False when it is gone."""
    try:
        os.killpg(pid, number)
        return True
    except ProcessLookupError:
        return False


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
