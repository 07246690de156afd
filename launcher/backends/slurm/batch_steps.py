"""What the batch script runs before its steps and after its lead trainer, as `sh run.sh` does around a run:
the previous run's task logs moved to logs/previous/ (and, with --fresh, its output_dir set aside), then the
summary, model and best-model paths."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import fire

from cluster import config as cluster_config
from cluster.config import ClusterConfig
from common.errors import USER_ERROR_EXIT_CODE
from launcher import previous_run, run_outputs
from launcher.report import best_line, summary_lines


ALWAYS = 1e12  # seconds: a wall time no file age exceeds


def _marker(config: ClusterConfig) -> Path:
    """Where `before` notes the previous run's files, so `after` can tell whether this job wrote them (their
    modification times, not ages: a resubmission starts seconds after the previous job wrote its summary)."""
    return config.path(config.launcher.logs_dir) / f"slurm-{os.environ.get('SLURM_JOB_ID', 'batch')}.before.json"


def _mtimes(config: ClusterConfig) -> dict[str, float | None]:
    files = run_outputs.files(config)
    return {name: path.stat().st_mtime if path.exists() else None
            for name, path in (("summary", files.summary), ("best", files.best_record))}


def before(cluster: str, fresh: bool = False) -> None:
    """Sets the previous run's task logs aside; with `fresh` moves its output_dir aside, without it refuses an
    output_dir that holds a different run (exit 2), as `sh run.sh` does."""
    config = cluster_config.load(cluster)
    moved = run_outputs.archive_logs(config, config.tasks())
    if moved:
        print(f"[batch] the previous run's task logs moved to {config.launcher.logs_dir}/"
              f"{run_outputs.PREVIOUS_RUN}/ ({len(moved)} files)", flush=True)
    if fresh:
        target = previous_run.set_aside(config)
        print(f"[batch] --fresh: the previous run moved to {target}" if target else
              "[batch] --fresh: no previous run to set aside", flush=True)
    problem = None if fresh else previous_run.different_run(config)
    if problem:
        print(f"[batch] error: {problem.replace('`sh run.sh --fresh`', 'a script written with --fresh')}",
              file=sys.stderr, flush=True)
        sys.exit(USER_ERROR_EXIT_CODE)
    _marker(config).write_text(json.dumps(_mtimes(config)))


def after(cluster: str, lead_code: int = 0) -> None:
    """Prints what the run wrote: the summary (or why there is none), the model and the best model; a file
    unchanged since `before` is the previous run's. `lead_code`: the lead trainer's exit code."""
    config = cluster_config.load(cluster)
    marker = _marker(config)
    try:
        previous = json.loads(marker.read_text())
        marker.unlink()
    except (OSError, ValueError):
        previous = {}
    now = _mtimes(config)
    outputs = run_outputs.read(config)
    # the report judges "this run" by age against the wall time: a wall time that makes the answer the mtimes'
    wall_s = {name: -ALWAYS if now[name] is not None and now[name] == previous.get(name) else ALWAYS for name in now}
    found, _ = summary_lines(outputs, "", wall_s["summary"],
                             lead_failed=f"the lead trainer exited with code {lead_code}" if lead_code else "")
    for line in found + best_line(outputs, "", wall_s["best"]):
        print(f"[batch] {line}", flush=True)
    if found and found[0].startswith("trained nothing"):
        print("[batch] to train again from scratch, write the script with `python -m roles.launch sbatch "
              "CLUSTER --fresh` and submit that", flush=True)


if __name__ == "__main__":
    fire.Fire({"before": before, "after": after})
