"""What a soak run cost, from the run's files: the lead's heartbeat followed during the run (steps redone, time to
get back past each kill's step), the launcher's log (restarts, how it ended) and the summary."""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

STARTED = re.compile(r"\[launcher\] \S+ (\S+:\d+) started on ")
ENDING = re.compile(r"\[launcher\] \S+ (run failed: .*|tasks: .*|trained .*|training .*)$")


class ProgressTrail:
    """The lead's `progress.json`, sampled: the optimizer step over time, per lead process."""

    def __init__(self, output: Path):
        self.path = output / "progress.json"
        self.samples: list[tuple[float, int]] = []  # (monotonic time, step) of training beats
        self.first_step_at: float | None = None
        self.max_step = 0
        self.lives: dict[int, list[int]] = {}  # lead pid -> [first step, last step] it reported while training
        self.order: list[int] = []
        self.phase = ""  # train, or export once training is done

    def poll(self) -> None:
        try:
            beat = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        self.phase = beat.get("phase", "")
        if self.phase != "train":
            return
        now, step, pid = time.monotonic(), int(beat["step"]), int(beat["pid"])
        if self.first_step_at is None:
            self.first_step_at = now
        if pid not in self.lives:
            self.lives[pid] = [step, step]
            self.order.append(pid)
        self.lives[pid][1] = max(self.lives[pid][1], step)
        self.samples.append((now, step))
        self.max_step = max(self.max_step, step)

    def steps_redone(self) -> int:
        """Steps trained by one lead that the next one trained again (it resumed from an earlier checkpoint)."""
        redone, reached = 0, None
        for pid in self.order:
            first, last = self.lives[pid]
            if reached is not None and first < reached:
                redone += reached - first
            reached = max(last, reached or 0)
        return redone

    def back_past(self, step: int, since: float) -> float | None:
        """Seconds from `since` until training was past `step` again, or None if it never was."""
        return next((t - since for t, s in self.samples if t > since and s > step), None)


def _starts(log: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in STARTED.findall(log):
        counts[name] = counts.get(name, 0) + 1
    return counts


def summarise(work: Path, trail: ProgressTrail, kills: list[dict], *, finished: bool, wall_s: float) -> dict:
    log_path = work / "logs" / "launcher.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    try:
        summary = json.loads((work / "output" / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    planned = summary.get("epochs", 0) * (summary.get("steps_per_epoch") or 0)
    lost: dict[str, list[float | None]] = {}
    for kill in kills:
        if kill["task"]:
            lost.setdefault(kill["task"].split("-")[0], []).append(trail.back_past(kill["step"], kill["at"]))
    ending = [m[1] for m in map(ENDING.match, log.splitlines()) if m]
    return {"complete": summary.get("status") == "complete", "launcher_finished": finished,
            "wall_s": round(wall_s), "optimizer_steps": summary.get("optimizer_steps"), "planned_steps": planned,
            "train_seconds": summary.get("train_seconds"), "final_metrics": summary.get("final_metrics", {}),
            "kills": [{**k, "at": round(k["at"] - (trail.first_step_at or k["at"]), 1)} for k in kills],
            "restarts": {name: count - 1 for name, count in _starts(log).items() if count > 1},
            "lead_lives": len(trail.order), "steps_redone": trail.steps_redone(), "time_lost_s": lost,
            "ending": ending[-3:]}


def _seconds(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "never back"
    never = len(values) - len(known)
    return (f"median {statistics.median(known):.0f} s, max {max(known):.0f} s"
            + (f"; {never} never back past their step before the run ended" if never else ""))


def _auc(run: dict) -> float | None:
    return run.get("validation", {}).get("validation_auc")


def render(results: dict) -> str:
    m, size, killed = results["machine"], results["size"], results["killed"]
    clean = results.get("clean", {})
    lines = ["# Soak: DLRM with a task killed at random every "
             f"{results['kill_every_s']:.0f} s", "",
             f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}); load average {m['load_before']:.2f} before. "
             f"Loopback, 2 ps + 3 workers + chief + evaluator; DLRM on synthetic_criteo ({size['epochs']} epochs x "
             f"{size['steps_per_epoch']} steps); kills for {size['minutes']:.0f} min from the first step, seed "
             f"{results['seed']}; `python -m bench.faults.soak`.", "",
             "| | killed run | clean run |", "| --- | --- | --- |",
             f"| finished its plan | {killed['complete']} | {clean.get('complete', '-')} |",
             f"| wall time | {killed['wall_s']} s | {clean.get('wall_s', '-')} s |",
             f"| optimizer steps (planned) | {killed['optimizer_steps']} ({killed['planned_steps']}) | "
             f"{clean.get('optimizer_steps', '-')} |",
             f"| validation AUC of the exported model | {_auc(killed)} | {_auc(clean)} |", "",
             f"Kills: {len([k for k in killed['kills'] if k['task']])}; lead processes: {killed['lead_lives']}; "
             f"steps trained again after a resume: {killed['steps_redone']}; restarts per task: "
             + ", ".join(f"{name} {count}" for name, count in sorted(killed["restarts"].items())), "",
             "| kill of a | kills | training back past the step it was at |", "| --- | ---: | --- |"]
    for kind, values in sorted(killed["time_lost_s"].items()):
        lines.append(f"| {kind} | {len(values)} | {_seconds(values)} |")
    lines += ["", "How it ended: " + " / ".join(killed["ending"]), ""]
    return "\n".join(lines)
