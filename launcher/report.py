"""The end-of-run report: each task's outcome and restarts, then what this run wrote on the lead's host (final
and best metrics, model paths as host:path), hosts that were lost, and a TensorBoard command that works here."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from cluster.config import ClusterConfig
from launcher.backends.base import HostError, RunOutputs
from launcher.records import TaskState
from launcher.status import shown_state

TENSORBOARD = Path(sys.executable).parent / "tensorboard"  # the venv's: no tensorboard is on PATH
CLOCK_SLACK_S = 5.0  # a file counts as this run's when it is at most the run's wall time (plus this) old


@dataclasses.dataclass
class Report:
    lines: list[str]
    trained: bool  # this run's summary on the lead's host says complete (or it found the plan done already)


def _this_run(age_s: float | None, wall_s: float) -> bool:
    return age_s is not None and age_s <= wall_s + CLOCK_SLACK_S


def restarts(count: int) -> str:
    return f"{count} restart{'' if count == 1 else 's'}"


def _task_line(records) -> str:
    return "tasks: " + ", ".join(f"{r.task.name} {shown_state(r, finished=True)}"
                                 + (f" (exit {r.exit_code})" if r.exit_code else "")
                                 + (f" after {restarts(r.restarts)}" if r.restarts else "") for r in records)


def summary_lines(outputs: RunOutputs, where: str, wall_s: float, lead_failed: str = "") -> tuple[list[str], bool]:
    """`lead_failed`: how the lead ended when it did not finish (e.g. `chief:0 failed (exit 1: ...)`), so an
    earlier run's complete summary is never taken for this run having had nothing to train."""
    summary, output = outputs.summary, f"{where}{outputs.output}"
    if summary is None:
        return [f"no summary in {output}: training did not finish"], False
    if not summary.complete:
        return [f"training did not finish: {output}/summary.json says {summary.status}"], False
    if summary.follow:
        return _follow_lines(summary, output), True
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in summary.final_metrics.items())
    before = "" if _this_run(outputs.summary_age_s, wall_s) and not lead_failed else ", before this run"
    earlier = f"the complete run of {summary.epochs} epochs (summary written {outputs.summary_age_s:.0f} s ago{before})"
    if lead_failed:  # a lead that failed wrote no complete summary: the one there is an earlier run's, however new
        return [f"training did not finish: {lead_failed}; {output} holds an earlier run's summary, {earlier}"], False
    if before:
        return [f"trained nothing: {output} already held {earlier}; its last epoch: {metrics}"], True
    planned = summary.epochs * summary.steps_per_epoch if summary.steps_per_epoch else None
    if planned and summary.optimizer_steps is not None and summary.optimizer_steps < planned:
        return [f"training ended early: {summary.optimizer_steps} of {planned} planned steps ran, though "
                f"{output}/summary.json says complete; last epoch: {metrics}",
                f"model (of the shortened run): {where}{summary.model['h5']}"], False
    skipped = f"; {summary.skipped_records} malformed records skipped" if summary.skipped_records else ""
    return [f"trained {summary.epochs} epochs, {summary.optimizer_steps} steps in {summary.train_seconds:.0f} s; "
            f"last epoch: {metrics}{skipped}",
            f"model: {where}{summary.model['h5']} (also saved_model/ and model.keras)"], True


NOT_TRAINED_WORDS = (("skipped_records", "records skipped"), ("quarantined_files", "files quarantined"),
                     ("bad_files", "files bad"), ("lost_files", "files lost"), ("untrained_bytes", "bytes of them"),
                     ("unfinished_files", "taken unfinished"), ("changed_files", "changed after taken"),
                     ("io_errors", "I/O errors"))  # summary.json follow.problems, as online/follow/report says


def _follow_lines(summary, output: str) -> list[str]:
    """A followed run (training.follow_data) that stopped after idling: files, examples and freshness."""
    follow, fresh = summary.follow, summary.follow.get("freshness_s") or {}
    freshness = (f"; freshness (landed to first served): last {fresh['last']:.0f} s, median {fresh['median']:.0f} s, "
                 f"max {fresh['max']:.0f} s" if fresh else "")
    lines = [f"followed the data: {follow['files_done']} of {follow['files']} files, {follow['examples']} examples, "
             f"{summary.optimizer_steps} steps{freshness}", f"serving versions: {output}/serving"]
    said = [f"{count} {words}" for key, words in NOT_TRAINED_WORDS if (count := follow.get("problems", {}).get(key))]
    if said:
        lines.append(f"not trained: {', '.join(said)} (see {output}/quarantine.jsonl)")
    return lines


def best_line(outputs: RunOutputs, where: str, wall_s: float) -> list[str]:
    best = outputs.best
    if best is None:
        return []
    shown = ", ".join(f"{k} {v:.4f}" for k, v in best.metrics.items())
    path = f"{where}{outputs.output}/best_model"
    earlier = f"; recorded {outputs.best_age_s:.0f} s ago, before this run"
    when = "" if _this_run(outputs.best_age_s, wall_s) else earlier
    return [f"best: {best.checkpoint} at step {best.step} ({shown}) in {path}{when}"]


def _lead_failed(lead) -> str:
    """How the lead ended if it did not finish its job (exit 0), else ''."""
    if lead.state == TaskState.EXITED:
        return ""
    ended = f" (exit {lead.exit_code}: {lead.last_line})" if lead.exit_code else ""
    return f"{lead.name} {shown_state(lead, finished=True)}{ended}"


def final_report(config: ClusterConfig, supervisor, wall_s: float) -> Report:
    """The end-of-run lines, read through the lead's own host; `trained` decides a clean exit code."""
    lines = [_task_line(supervisor.records.values())]
    lead_host = supervisor.hosts[config.lead.address.host]
    where = f"{lead_host.name}:" if lead_host.is_remote else ""
    trained = False
    try:
        outputs = lead_host.run_outputs()
        found, trained = summary_lines(outputs, where, wall_s, lead_failed=_lead_failed(supervisor.lead))
        lines += found + best_line(outputs, where, wall_s)
        events = lead_host.fetch_tensorboard(str(config.path(config.launcher.logs_dir) / "tensorboard"))
    except HostError as error:
        lines.append(f"could not read this run's files on {lead_host.name}: {error}")
        events = None
    lines += [f"host {line}" for line in supervisor.outages.lines]
    lines += [f"workers: {line}" for line in supervisor.membership.lines()]
    curves = f"; curves: {TENSORBOARD} --logdir {events}" if events else ""
    lines.append(f"wall time {wall_s:.0f} s{curves}")
    return Report(lines, trained)
