"""The agent's side of a run's files: what the lead wrote on its own host, and each run's task logs kept apart.

The launcher reads these through the agent (in-process here, over ssh elsewhere), never from its own disk,
so a summary printed at the end is the one on the lead's host.
"""

from __future__ import annotations

import time
from pathlib import Path

from cluster.config import ClusterConfig, Task
from cluster.run_files import RunFiles, read_best, read_summary
from launcher import process
from launcher.log_rotation import older_files
from launcher.backends.base import RunOutputs

PREVIOUS_RUN = "previous"  # the logs folder that keeps the previous run's task logs


def files(config: ClusterConfig) -> RunFiles:
    return RunFiles(config.path(config.training.output_dir))


def _age_s(path: Path, now: float) -> float | None:
    try:
        return round(now - path.stat().st_mtime, 1)
    except OSError:
        return None


def read(config: ClusterConfig) -> RunOutputs:
    """The lead's summary and best record as this host has them, with each file's age by this host's clock."""
    run, now = files(config), time.time()
    return RunOutputs(output=str(run.output), summary=read_summary(run), summary_age_s=_age_s(run.summary, now),
                      best=read_best(run), best_age_s=_age_s(run.best_record, now))


def archive_logs(config: ClusterConfig, tasks: list[Task]) -> list[str]:
    """Moves the last run's log (with its older files) and exit files of `tasks` into `logs/previous/`, so this
    run's logs (and what `status` reads from them) start empty; a task still running keeps its files. Returns the
    files moved."""
    logs = config.path(config.launcher.logs_dir)
    moved = []
    for task in tasks:
        record = process.PidRecord.read(logs / f"{task.job}-{task.index}.pid")
        if record and process.group_alive(record):
            continue
        log = logs / f"{task.job}-{task.index}.log"
        if log.exists():
            for stale in older_files(logs / PREVIOUS_RUN / log.name):  # an earlier run's, not the last one's
                stale.unlink()
        for path in (log, *older_files(log), logs / f"{task.job}-{task.index}.exit"):
            if path.exists():
                (logs / PREVIOUS_RUN).mkdir(exist_ok=True)
                path.replace(logs / PREVIOUS_RUN / path.name)
                moved.append(path.name)
    return moved
