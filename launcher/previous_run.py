"""A run already in the lead's output_dir: resumed when it is the same run, else refused or, asked, set aside."""

from __future__ import annotations

import time
from pathlib import Path

from cluster.config import ClusterConfig
from cluster.run_files import RunFiles, read_summary
from cluster.same_run import batch_workers, differences


def different_run(config: ClusterConfig) -> str | None:
    """The problem line when output_dir holds a run that trained something else; None when it may resume."""
    files = RunFiles(config.path(config.training.output_dir))
    summary = read_summary(files)
    if summary is None:
        return None
    found = differences(summary.options, config.training, previous_workers=summary.workers,
                        current_workers=batch_workers(config, summary.workers))
    if not found:
        return None
    return (f"{config.source.name}: training.output_dir = {config.training.output_dir!r}: holds a different run "
            f"({'; '.join(found)}); use a new output_dir, or `sh run.sh --fresh` to move the old run aside "
            f"(to {files.output.name}.replaced-<time>) and start over")


def set_aside(config: ClusterConfig) -> str | None:
    """Moves a previous run's output_dir aside (never deletes it); returns where it went, or None."""
    output = config.path(config.training.output_dir)
    if not output.exists() or not any(output.iterdir()):
        return None
    target = Path(f"{output}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    output.rename(target)
    return str(target)

