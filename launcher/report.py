"""The end-of-run report: each task's outcome and restarts, final and best metrics, model paths, TensorBoard."""

from __future__ import annotations

from cluster.config import ClusterConfig
from cluster.run_files import RunFiles, read_best, read_summary


def final_report(config: ClusterConfig, records, wall_s: float) -> list[str]:
    """The end-of-run lines: outcome and restarts per task, metrics, model paths and the TensorBoard command."""
    files = RunFiles(config.path(config.training.output_dir))
    lines = ["tasks: " + ", ".join(f"{r.task.name} {r.state.value}" + (f" (exit {r.exit_code})" if r.exit_code else "")
                                   + (f" after {r.restarts} restarts" if r.restarts else "")
                                   for r in records)]
    summary = read_summary(files)
    if summary and summary.complete:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in summary.final_metrics.items())
        lines.append(f"trained {summary.epochs} epochs, {summary.optimizer_steps} steps in "
                     f"{summary.train_seconds:.0f} s; last epoch: {metrics}")
        lines.append(f"model: {summary.model['h5']} (also saved_model/ and model.keras)")
    best = read_best(files)
    if best:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in best.metrics.items())
        lines.append(f"best: {best.checkpoint} at step {best.step} ({shown}) in {files.best_dir}")
    lines.append(f"wall time {wall_s:.0f} s; curves: tensorboard --logdir {files.tensorboard}")
    return lines
