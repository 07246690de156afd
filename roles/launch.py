"""`python -m roles.launch run|up|down|print_config CLUSTER`: run, start, stop and inspect a cluster's local tasks."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import fire

from roles import config as cluster_config
from roles import probe, process, taskspec
from roles.config import ClusterConfig, Task
from roles.errors import Problem, UserError, exit_on_user_error
from coordinator.summary import COMPLETE, read_summary

SERVER_JOBS = ("ps", "worker")


def say(message: str) -> None:
    print(f"[launcher] {message}", file=sys.stderr, flush=True)


def log_path(config: ClusterConfig, task: Task) -> Path:
    return config.path(config.launcher.logs_dir) / f"{task.job}-{task.index}.log"


def pid_path(config: ClusterConfig, task: Task) -> Path:
    return config.path(config.launcher.logs_dir) / f"{task.job}-{task.index}.pid"


def last_lines(path: Path, count: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-count:])
    except OSError:
        return "(no log)"


def _require_local(tasks: list[Task]) -> None:
    remote = [t for t in tasks if not t.address.is_loopback]
    if remote:
        raise UserError([Problem(f"cluster.{t.job}[{t.index}]", str(t.address), "is not on this machine",
                                 "use localhost addresses; starting tasks over ssh is not available yet")
                         for t in remote])


def start_task(config: ClusterConfig, task: Task) -> tuple[subprocess.Popen | None, process.PidRecord]:
    """Starts one task in its own process group, unless its pid file names a process that still runs."""
    existing = process.PidRecord.read(pid_path(config, task))
    if existing and process.is_running(existing):
        say(f"{task.name} already running (pid {existing.pid})")
        return None, existing
    env = taskspec.task_environment(config, task, os.environ)
    child, record = process.start(taskspec.task_command(config, task), cwd=taskspec.PROJECT_ROOT, env=env,
                                  log_path=log_path(config, task), pid_path=pid_path(config, task))
    say(f"{task.name} started (pid {record.pid}), log {log_path(config, task)}")
    return child, record


def start_servers(config: ClusterConfig) -> dict[Task, process.PidRecord]:
    """Starts every ps and worker and waits until all their ports answer; on failure stops them again."""
    tasks = config.tasks(SERVER_JOBS)
    _require_local(tasks)
    records = {task: start_task(config, task)[1] for task in tasks}
    all_alive = lambda: all(process.is_running(r) for r in records.values())  # noqa: E731
    silent = probe.wait_until_listening(tasks, config.launcher.ready_timeout_s, alive=all_alive)
    dead = [t for t, r in records.items() if not process.is_running(r)]
    if silent or dead:
        for task in dead or silent:
            say(f"{task.name} did not come up; last lines of {log_path(config, task)}:\n"
                f"{last_lines(log_path(config, task))}")
        stop_all(config)
        raise SystemExit(1)
    say(f"ready: {', '.join(t.name for t in tasks)}")
    return records


def stop_all(config: ClusterConfig) -> list[str]:
    """Stops every task that has a pid file, evaluator and chief first; returns one line per task."""
    order = ("evaluator", "chief", "worker", "ps")
    report = []
    for task in sorted(config.tasks(), key=lambda t: order.index(t.job)):
        path = pid_path(config, task)
        record = process.PidRecord.read(path)
        if record is None:
            continue
        outcome = process.stop(record)
        path.unlink(missing_ok=True)
        report.append(f"{task.name} (pid {record.pid}): {outcome}")
    return report


def follow_logs(paths: list[Path], finished) -> None:
    """Echoes new lines of the given log files (already prefixed with their task) until `finished()`."""
    offsets = {path: path.stat().st_size if path.exists() else 0 for path in paths}
    while True:
        done = finished()
        for path in paths:
            if path.exists():
                with open(path, "rb") as handle:
                    handle.seek(offsets[path])
                    chunk = handle.read()
                offsets[path] += len(chunk)
                sys.stderr.write(chunk.decode(errors="replace"))
        sys.stderr.flush()
        if done:
            return
        time.sleep(0.2)


def _start_fresh(config: ClusterConfig, task: Task) -> subprocess.Popen:
    child, _ = start_task(config, task)
    if child is None:
        raise UserError(Problem(task.job, task.name, "is already running from an earlier launch",
                                "wait for it or stop it with `sh kill.sh`"))
    return child


def _final_report(config: ClusterConfig, codes: dict[str, int], wall_s: float) -> list[str]:
    """The end-of-run lines: outcome per task, metrics, model paths and the TensorBoard command."""
    output = config.path(config.training.output_dir)
    summary = read_summary(output)
    lines = [f"{name}: exit {code}" for name, code in codes.items()]
    if summary.get("status") == COMPLETE:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in summary["final_metrics"].items())
        lines.append(f"trained {summary['epochs']} epochs, {summary['optimizer_steps']} steps in "
                     f"{summary['train_seconds']:.0f} s; last epoch: {metrics}")
        lines.append(f"model: {summary['model']['h5']} (also saved_model/ and model.keras)")
    best_path = output / "best_model" / "best.json"
    if best_path.exists():
        best = json.loads(best_path.read_text())
        shown = ", ".join(f"{k} {v:.4f}" for k, v in best["metrics"].items())
        lines.append(f"best: {best['checkpoint']} at step {best['step']} ({shown}) in {best_path.parent}")
    lines.append(f"wall time {wall_s:.0f} s; curves: tensorboard --logdir {output / 'tensorboard'}")
    return lines


def run_job(config: ClusterConfig) -> int:
    """Starts ps and workers, then the chief and the evaluator, follows them to the end, then stops every task."""
    _require_local(config.tasks())
    started = time.monotonic()
    children: dict[str, subprocess.Popen] = {}
    try:
        start_servers(config)
        for task in config.tasks(("chief", "evaluator")):
            children[task.name] = _start_fresh(config, task)
        chief = children["chief:0"]
        follow_logs([log_path(config, t) for t in config.tasks(("chief", "evaluator"))],
                    finished=lambda: chief.poll() not in (None, 0) or all(c.poll() is not None
                                                                          for c in children.values()))
    except KeyboardInterrupt:
        say("interrupted: stopping every task")
    finally:
        for line in stop_all(config):
            say(line)
    codes = {name: child.wait() for name, child in children.items()}
    for line in _final_report(config, codes, time.monotonic() - started):
        say(line)
    return next((code for code in codes.values() if code != 0), 0) if codes else 1


class Launcher:
    """Starts, stops and shows the tasks of a cluster described by cluster.json."""

    @exit_on_user_error("[launcher] ")
    def run(self, cluster: str = "cluster.json") -> None:
        """Runs the whole job of CLUSTER: ps and workers, the chief to an exported model, the evaluator to the end."""
        sys.exit(run_job(cluster_config.load(cluster)))

    @exit_on_user_error("[launcher] ")
    def up(self, cluster: str = "cluster.json") -> None:
        """Starts every ps and worker of CLUSTER in the background and returns once their ports answer."""
        start_servers(cluster_config.load(cluster))

    @exit_on_user_error("[launcher] ")
    def down(self, cluster: str = "cluster.json") -> None:
        """Stops every task of CLUSTER that has a pid file (SIGTERM, then SIGKILL); safe to repeat."""
        report = stop_all(cluster_config.load(cluster))
        for line in report or ["nothing to stop"]:
            say(line)

    @exit_on_user_error("[launcher] ")
    def print_config(self, cluster: str = "cluster.json") -> None:
        """Shows each task's TF_CONFIG, environment and command line without starting anything."""
        config = cluster_config.load(cluster)
        for task in config.tasks():
            print(f"# {task.name} on {task.address.host}")
            print("unset " + " ".join(taskspec.PROXY_VARIABLES))
            for name, value in taskspec.task_variables(config, task).items():
                print(f"export {name}={shlex.quote(value)}")
            print(shlex.join(taskspec.task_command(config, task)))
            print()


if __name__ == "__main__":
    fire.Fire(Launcher)
