"""What the batch script runs before its steps and after its lead trainer, as `sh run.sh` does around a run:
the previous run's task logs moved to logs/previous/ (and, with --fresh, its output_dir set aside), then the
summary, model and best-model paths."""

from __future__ import annotations

import sys
import time

import fire

from cluster import config as cluster_config
from common.errors import USER_ERROR_EXIT_CODE
from launcher import previous_run, run_outputs
from launcher.report import best_line, summary_lines


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
        return
    problem = previous_run.different_run(config)
    if problem:
        print(f"[batch] error: {problem.replace('`sh run.sh --fresh`', 'a script written with --fresh')}",
              file=sys.stderr, flush=True)
        sys.exit(USER_ERROR_EXIT_CODE)


def after(cluster: str, started: float) -> None:
    """Prints what the run wrote: the summary (or why there is none), the model and the best model."""
    config = cluster_config.load(cluster)
    outputs = run_outputs.read(config)
    wall_s = time.time() - started
    found, _ = summary_lines(outputs, "", wall_s)
    for line in found + best_line(outputs, "", wall_s):
        print(f"[batch] {line}", flush=True)
    if found and found[0].startswith("trained nothing"):
        print("[batch] to train again from scratch, write the script with `python -m roles.launch sbatch "
              "CLUSTER --fresh` and submit that", flush=True)


if __name__ == "__main__":
    fire.Fire({"before": before, "after": after})
