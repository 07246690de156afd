"""`python -m bench.online.publication [--quick]`: what each task holds, and what serving versions cost, as the table
grows ten times, into bench/RESULTS-memory.md (machine and date; not with --quick, which only proves the bench runs).

For each table size (26 hashed tables of dimension 16, Adagrad slots: 2.6 M and 26 M rows in all), one loopback
cluster (2 workers, 2 ps) runs follow-mode DLRM on an empty folder into which a Criteo file is dropped every
`drop_every_s` (under a hidden name, then renamed), serving versions every `version_every_s`, until it idles out;
then the chief is started once more over the same output with one more file, to time a restore. Measured:
- each task's peak resident memory (VmHWM, sampled every 0.5 s; an exporter's own from its serving line);
- seconds and bytes per serving version, seconds per version's checkpoint (beside training), per settled
  checkpoint and per restore (from the chief's lines);
- examples/s of the progress lines while a version is written (its checkpoint, then its exporter) against those
  while none is (lines that are not caught up only, and none that holds a settled checkpoint: counted apart);
- examples/s of a file (median), from its first piece handed out to its last done: every pause it met counts;
- freshness p50/p95 (landing to the first version holding all of the file, summary.json).
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
import subprocess
import tempfile
import threading
from pathlib import Path

import fire

from bench.__main__ import machine, write_keeping_notes
from bench.kit.cluster import PYTHON, ROOT, LoopbackCluster, peak_rss_mib
from bench.online.follow import DROPPER, drop

HERE = Path(__file__).resolve().parents[1]
TABLES, DIM = 26, 16
CHUNK_MB = 16.0  # training.stream_chunk_mb's default
MODEL = {"model": "dlrm", "dataset": "criteo", "loss": "binary_crossentropy", "metrics": ["auc"], "lr_decay_epochs": [],
         "embedding_dim": DIM, "per_worker_batch": 256,
         "steps_per_execution": 10, "follow_data": True, "data_poll_s": 1, "settle_s": 0, "piece_mb": 1.0,
         "progress_every_s": 2, "checkpoint_every_s": 30}
SIZES = {"quick": {"rows": [26_000, 260_000], "files": 2, "lines": 2_000, "drop_every_s": 10.0,
                   "version_every_s": 5.0},
         "full": {"rows": [2_600_000, 26_000_000], "files": 30, "lines": 40_000, "drop_every_s": 20.0,
                  "version_every_s": 10.0}}
LINE_TIME = re.compile(r"^\[chief:0\] (\d\d:\d\d:\d\d) ")
SERVING = re.compile(r"serving \| version \d+ \| .*? \| ([\d.]+) MB in ([\d.]+) s, (\d+) pieces trained meanwhile, "
                     r"exporter peak (\d+) MB")
CHECKPOINT = re.compile(r"checkpoint ckpt-\S+ \(optimizer step \d+\): .*? written in ([\d.]+) s")  # settled
FOR_VERSION = re.compile(r"checkpoint for-serving/\S+ \(optimizer step \d+\) for a serving version: .*? "
                         r"written in ([\d.]+) s")  # beside training
RESTORED = re.compile(r"resuming .*? restored in ([\d.]+) s")
PROGRESS = re.compile(r"follow \| .*? \| ([\d.]+) steps/s \| (\d+) ex/s \| (caught up)?")


class Peaks:
    """The peak resident memory of every process whose command line names `marker`, sampled every 0.5 s."""

    def __init__(self, marker: str):
        self.marker, self.peaks, self._stop = marker, {}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Peaks":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if self.marker in command and "coordinator.train" in command:
                    self.peaks["chief"] = max(self.peaks.get("chief", 0.0), peak_rss_mib(int(entry.name)))


def _clock(line: str, day: datetime.date) -> float | None:
    found = LINE_TIME.match(line)
    return datetime.datetime.combine(day, datetime.time.fromisoformat(found[1])).timestamp() if found else None


def _windows(lines: list[str], pattern: re.Pattern, seconds_group: int, day: datetime.date) -> list[tuple]:
    """(begin, end) of each logged piece of work `pattern` matches: its line's time, less the seconds it took."""
    windows = []
    for line in lines:
        found, end = pattern.search(line), _clock(line, day)
        if found and end is not None:
            windows.append((end - float(found[seconds_group]), end))
    return windows


def during_versions(log: str) -> dict:
    """Median examples/s of the progress lines inside a version's writing (its checkpoint, written beside training,
    then its exporter's run) against those outside; only lines whose interval was all training (not the first, nor
    one after a caught-up line, whose interval holds the wait), and none whose interval holds a settled checkpoint
    (the workers drained: its cost is the checkpoint's, not the version's); those are counted apart."""
    day, lines = datetime.date.today(), log.splitlines()
    writing = _windows(lines, SERVING, 2, day) + _windows(lines, FOR_VERSION, 1, day)
    checkpoints = _windows(lines, CHECKPOINT, 1, day)
    interval = MODEL["progress_every_s"]
    inside, outside, at_checkpoint, after_wait = [], [], [], True
    for line in lines:
        found, when = PROGRESS.search(line), _clock(line, day)
        if found and when is not None:
            if not after_wait:  # a line after a wait (or the first) counts the idle time in its rate
                if any(a <= when and when - interval <= b for a, b in checkpoints):
                    at_checkpoint.append(int(found[2]))
                else:
                    (inside if any(a <= when <= b for a, b in writing) else outside).append(int(found[2]))
            after_wait = found[3] is not None
    median = statistics.median  # not the mean: a line whose interval began late (after a checkpoint) is a spike
    return {"examples_per_s_during": median(inside) if inside else None,
            "examples_per_s_without": median(outside) if outside else None,
            "examples_per_s_at_checkpoint": median(at_checkpoint) if at_checkpoint else None,
            "lines": [len(inside), len(outside), len(at_checkpoint)]}


def run_size(cluster: LoopbackCluster, work: Path, rows: int, size: dict, chunk_mb: float) -> dict:
    """One follow-mode run at `rows` table rows in all, then a restart that restores its checkpoint."""
    data, output = work / "data", work / "output"
    data.mkdir(parents=True)
    options = {**MODEL, "table_rows": rows // TABLES, "stream_chunk_mb": chunk_mb,
               "serving_export_every_s": size["version_every_s"], "stop_when_idle_s": size["drop_every_s"] + 20,
               "data_dir": str(data), "output_dir": str(output),
               **({"serving_delta_every_s": size["deltas_every_s"]} if size.get("deltas_every_s") else {}),
               **({"serving_checkpoint": "beside"} if size.get("beside") else {})}
    arguments = [f"--{key}={value if isinstance(value, bool) else json.dumps(value)}" for key, value in
                 options.items()]
    dropper = subprocess.Popen([PYTHON, "-c", DROPPER, str(data), str(size["files"]), str(size["lines"]),
                                str(size["drop_every_s"])], cwd=ROOT, stdin=subprocess.DEVNULL)
    ps_pids = cluster.server_pids("ps")
    with Peaks(str(output)) as peaks:
        first = _chief(cluster, arguments, work / "chief-1.log")
        dropper.wait()
        drop(data, "last", size["lines"], 10**8)
        second = _chief(cluster, arguments, work / "chief-2.log")
    summary = json.loads((output / "summary.json").read_text())
    served = sorted(f["freshness_s"] for f in summary["follow"]["per_file"] if f["freshness_s"] is not None)
    versions = [m.groups() for m in map(SERVING.search, first.splitlines()) if m]
    return {"rows": rows, "table_mb": rows * DIM * 4 / 1e6,
            "peak_mb": {"chief": peaks.peaks.get("chief"), "exporter": max(float(v[3]) for v in versions),
                        "ps": max(peak_rss_mib(p) for p in ps_pids),
                        "worker": max(peak_rss_mib(p) for p in cluster.server_pids("worker"))},
            "version_mb": statistics.mean(float(v[0]) for v in versions),
            "version_s": statistics.mean(float(v[1]) for v in versions), "versions": len(versions),
            "checkpoint_s": _mean_seconds(CHECKPOINT, first), "version_checkpoint_s": _mean_seconds(FOR_VERSION, first),
            "restore_s": float(RESTORED.search(second)[1]),
            "freshness_p50_s": statistics.median(served), "freshness_p95_s": served[int(0.95 * (len(served) - 1))],
            **file_rates(summary), **during_versions(first)}


def file_rates(summary: dict) -> dict:
    """The median examples/s of the files, each from when its first piece was handed out to when its last was
    done: every pause of hand-out it met (a settled checkpoint, a version) is in it, as a progress line's is not."""
    rates = [f["examples"] / (f["done"] - f["started"]) for f in summary["follow"]["per_file"]
             if f["examples"] and f["started"] and f["done"] and f["done"] > f["started"]]
    return {"file_examples_per_s": round(statistics.median(rates)) if rates else None, "files_timed": len(rates)}


def _mean_seconds(pattern: re.Pattern, log: str) -> float:
    """The mean of the seconds `pattern`'s lines in `log` give (0 with none)."""
    seconds = [float(m[1]) for m in map(pattern.search, log.splitlines()) if m]
    return statistics.mean(seconds) if seconds else 0.0


def _chief(cluster: LoopbackCluster, arguments: list[str], log_path: Path) -> str:
    with open(log_path, "w") as log:
        chief = subprocess.run([PYTHON, "-m", "coordinator.train", "--cluster", str(cluster.path), *arguments],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=3600)
    text = log_path.read_text(errors="replace")
    if chief.returncode != 0:
        raise RuntimeError(text[-3000:])
    return text


def report(rows: list[dict], size: dict, about: dict, chunk_mb: float) -> str:
    deltas = f" and serving deltas every {size['deltas_every_s']:g} s" if size.get("deltas_every_s") else ""
    lines = ["# What each task holds, and what a serving version costs, as the table grows", "",
             f"Measured {about['date']} on {about['cores']} cores ({about['cpu']}, {about['memory_gib']} GiB) by "
             f"`python -m bench.online.publication`: follow-mode dlrm, {TABLES} hashed tables of dimension {DIM} with "
             f"Adagrad slots, 2 workers + 2 ps on loopback; a Criteo file of {size['lines']:,} lines every "
             f"{size['drop_every_s']:g} s ({size['files']} files), a serving version every "
             f"{size['version_every_s']:g} s{deltas}, a checkpoint every {MODEL['checkpoint_every_s']} s, "
             f"`stream_chunk_mb` {chunk_mb:g}. Load average before: {about['load_before']:.2f}.", "",
             "| table rows | table MB | chief peak MB | exporter peak MB | ps peak MB | worker peak MB | version MB | "
             "version s | its checkpoint s | checkpoint s | restore s | ex/s during a version | ex/s without | "
             "ex/s at a checkpoint | lines during / without / at a checkpoint | ex/s of a file | "
             "freshness p50 / p95 s |",
             "|" + " ---: |" * 17]
    for row in rows:
        peak = row["peak_mb"]
        during, without = row["examples_per_s_during"], row["examples_per_s_without"]
        lines.append(f"| {row['rows']:,} | {row['table_mb']:,.0f} | {peak['chief']:,.0f} | {peak['exporter']:,.0f} | "
                     f"{peak['ps']:,.0f} | {peak['worker']:,.0f} | {row['version_mb']:,.0f} | {row['version_s']:.1f} | "
                     f"{row['version_checkpoint_s']:.1f} | {row['checkpoint_s']:.1f} | {row['restore_s']:.1f} | "
                     f"{during or 0:,.0f} | {without or 0:,.0f} | {row['examples_per_s_at_checkpoint'] or 0:,.0f} | "
                     f"{' / '.join(map(str, row['lines']))} | {row['file_examples_per_s'] or 0:,.0f} | "
                     f"{row['freshness_p50_s']:.0f} / {row['freshness_p95_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(quick: bool = False, chunk_mb: float = CHUNK_MB, control: bool = False, deltas_every_s: float = 0.0,
         rows: int = 0, beside: bool = False) -> None:
    """Runs each table size on a fresh cluster; prints the table, and without --quick writes RESULTS-memory.md
    (with another --chunk_mb it only prints: a check that a peak is flat once both sizes fill the chunk; with
    --control, half the files and one version an hour, it only prints: examples/s without versions; with
    --deltas_every_s, half the files and serving deltas that often, it only prints: deltas mode, whose versions'
    checkpoints are written beside training; with --beside, versions' checkpoints beside training without deltas too
(`serving_checkpoint`), and it only prints; with --rows, that table size alone, and it only prints)."""
    size = SIZES["quick" if quick else "full"]
    if control:
        size = {**size, "files": size["files"] // 2, "version_every_s": 3600.0}
    if deltas_every_s:
        size = {**size, "files": size["files"] // 2, "deltas_every_s": deltas_every_s}
    if rows:
        size = {**size, "rows": [rows]}
    if beside:
        size = {**size, "beside": True}
    about = machine()
    measured = []
    for count in size["rows"]:
        with tempfile.TemporaryDirectory(prefix="bench-publication-") as temporary:
            work = Path(temporary)
            with LoopbackCluster(work / "cluster", workers=2, ps=2) as cluster:
                measured.append(run_size(cluster, work, count, size, chunk_mb))
        print(json.dumps(measured[-1]), flush=True)
    text = report(measured, size, about, chunk_mb)
    print(text)
    if not quick and chunk_mb == CHUNK_MB and not control and not deltas_every_s and not rows and not beside:
        write_keeping_notes(HERE / "RESULTS-memory.md", text)


if __name__ == "__main__":
    fire.Fire(main)
