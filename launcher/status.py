"""The run's status file (`logs/status.json`), written by the launcher each tick and shown by `run.sh status`."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from cluster.config import ClusterConfig
from launcher import process
from launcher.log_tail import LogTail

STATUS_NAME = "status.json"
EPOCH = re.compile(r"train \| epoch (\d+/\d+) \| step (\d+/\d+) \| ([\d.]+) steps/s")
PER_PS = "per ps: "
VALIDATION = re.compile(r"eval \| (ckpt-[\d-]+) \| step \d+ \| (.*?) \| best")
FOLLOW = re.compile(r"follow \| files (\d+/\d+) done \| step (\d+) \| ([\d.]+) steps/s \| (\d+) ex/s \| ([^|]*)")
SERVING = re.compile(r"serving \| version (\d+) \|")
NOT_TRAINED = re.compile(r"follow \| files .*?\| not trained: ([^|]*)")
KEPT = re.compile(r"follow \| files .*?\| kept ([^|]*)")  # what the chief keeps (online/follow/kept.py)
EVALUATOR_KEPT = re.compile(r"\| kept (\d+ names)$")
FRESHNESS = re.compile(r"serving \| (version|delta) ([\d.]+) \| .*? \| freshness (\d+:\d\d:\d\d) \|")
LEAD_LINES = {"epoch": EPOCH, "follow": FOLLOW, "serving": SERVING, "freshness": FRESHNESS}


_TAILS: dict[Path, LogTail] = {}  # per log, kept by the launcher from tick to tick


def _tail(path: Path, patterns: dict[str, re.Pattern], marker: str = "") -> LogTail:
    """The log's newest matching lines, updated with what it gained since the last look."""
    if path not in _TAILS:
        _TAILS[path] = LogTail(path, patterns, marker)
    return _TAILS[path].update()


def run_progress(config: ClusterConfig) -> dict:
    """Epoch, step and steps/s from the lead trainer's last progress line (follow mode: files, lag, serving and
    freshness), its last per-ps report; the last validation from the evaluator's."""
    logs = config.path(config.launcher.logs_dir)
    lead = config.lead
    chief = _tail(logs / f"{lead.job}-{lead.index}.log", LEAD_LINES, PER_PS)
    progress = {}
    epoch = chief.found.get("epoch")
    if epoch:
        progress.update(epoch=epoch[1], step=epoch[2], steps_per_s=float(epoch[3]))
    progress.update(_follow_progress(chief.found))
    if chief.block:
        progress["per_ps"] = list(chief.block)
    validation = _tail(logs / "evaluator-0.log", {"validation": VALIDATION}).found.get("validation")
    if validation:
        progress["last_validation"] = f"{validation[1]}: {validation[2]}"
        kept = EVALUATOR_KEPT.search(validation.string.rstrip())
        if kept:
            progress["evaluator_kept"] = f"{kept[1]} in evaluated.json"
    return progress


def _follow_progress(found: dict[str, re.Match]) -> dict:
    """Follow mode: files done, rates and lag from the last progress line; the newest serving version and the time
    from the newest file it was the first to hold landing to it being written (its freshness)."""
    follow, serving, fresh = (found.get(key) for key in ("follow", "serving", "freshness"))
    result = {}
    if follow:
        result.update(files_done=follow[1], step=follow[2], steps_per_s=float(follow[3]),
                      examples_per_s=int(follow[4]), data=follow[5].strip())
        untrained = NOT_TRAINED.search(follow.string)  # records skipped, files quarantined or lost, if any
        if untrained:
            result["not_trained"] = untrained[1].strip()
        kept = KEPT.search(follow.string)
        if kept:
            result["kept"] = kept[1].strip()
    if serving:
        result["serving_version"] = int(serving[1])
    if fresh:
        result["freshness"] = f"{fresh[3]} (landed to served in {fresh[1]} {fresh[2]})"
    return result


def shown_state(record, finished: bool) -> str:
    """The task's state as status and the final report show it."""
    if record.started_at == 0.0:
        return "not started"
    if finished and record.state.value in ("starting", "running", "restarting"):
        return "stopped"  # the run is over: the launcher stopped it, or it ended with the allocation
    if record.state.value == "restarting" and record.restart_at == float("inf"):
        return "held"  # the lead, waiting for every ps (or a lost worker) to answer again
    return record.state.value


def write_status(config: ClusterConfig, supervisor, started: float, finished: bool = False) -> None:
    rows = [{"task": r.task.name, "host": r.task.address.host, "pid": r.pid, "state": shown_state(r, finished),
             "restarts": r.restarts, "uptime_s": r.uptime_s, "last_line": r.last_line}
            for r in supervisor.records.values()]
    nothing_started = all(r.started_at == 0.0 for r in supervisor.records.values())
    run = {} if nothing_started else run_progress(config)
    if supervisor.lead.step is not None:
        run["optimizer_step"] = supervisor.lead.step
    if supervisor.membership.enabled and not nothing_started:
        run["training_with"] = supervisor.membership.describe()
    document = {"updated": time.time(), "wall_s": round(time.monotonic() - started, 1), "finished": finished,
                "nothing_started": nothing_started, "tasks": rows, "run": run}
    path = config.path(config.launcher.logs_dir) / STATUS_NAME
    path.parent.mkdir(parents=True, exist_ok=True)  # a preflight failure ends the run before any log exists
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document, indent=2))
    partial.replace(path)


def render_status(config: ClusterConfig) -> str:
    """A table of tasks and a line of run progress, from the status file the launcher keeps."""
    logs = config.path(config.launcher.logs_dir)
    try:
        document = json.loads((logs / STATUS_NAME).read_text())
    except (OSError, ValueError):
        return f"no run recorded in {logs} (start one with `sh run.sh`)"
    launcher = process.PidRecord.read(logs / "launcher.pid")
    age = time.time() - document["updated"]
    if document["finished"] and document.get("nothing_started"):
        header = f"run stopped {age:.0f} s ago before any task started (see the launcher's errors)"
    elif document["finished"]:
        header = f"run finished {age:.0f} s ago"
    elif launcher and process.is_running(launcher):
        header = f"running for {document['wall_s']:.0f} s (launcher pid {launcher.pid}, updated {age:.0f} s ago)"
    else:
        header = f"launcher not running; last update {age:.0f} s ago (it was stopped, or runs in the foreground)"
    lines = [header, f"{'task':<12} {'host':<15} {'pid':>7} {'state':<10} {'restarts':>8} {'uptime':>8}  last log line"]
    for row in document["tasks"]:
        lines.append(f"{row['task']:<12} {row['host']:<15} {str(row['pid'] or '-'):>7} {row['state']:<10} "
                     f"{row['restarts']:>8} {row['uptime_s']:>7.0f}s  {row['last_line'][-70:]}")
    run = dict(document["run"])
    shards = run.pop("per_ps", [])
    if run:
        lines.append(" | ".join(f"{key.replace('_', ' ')} {value}" for key, value in run.items()))
    lines += [f"per ps: {line}" for line in shards]
    return "\n".join(lines)
