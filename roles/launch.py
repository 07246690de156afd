"""`python -m roles.launch run|status|down|print_config CLUSTER`: the commands behind run.sh and kill.sh."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import fire

from coordinator.summary import COMPLETE, read_summary
from roles import config as cluster_config
from roles import process, taskspec
from roles.config import PROJECT_ROOT, ClusterConfig
from roles.errors import USER_ERROR_EXIT_CODE, Problem, UserError, exit_on_user_error
from roles.preflight import PreflightFailed, check_cluster
from roles.status import render_status, write_status
from roles.supervisor import RunFailed, Supervisor

LOG_FETCH_EVERY_S = 3.0


def say(message: str) -> None:
    print(f"[launcher] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def launcher_pid_path(config: ClusterConfig) -> Path:
    return config.path(config.launcher.logs_dir) / "launcher.pid"


class LogFollower:
    """Echoes new lines of the lead trainer's and evaluator's logs (already prefixed with their task)."""

    def __init__(self, config: ClusterConfig):
        logs = config.path(config.launcher.logs_dir)
        shown = [taskspec.lead_task(config), *config.tasks(("evaluator",))]
        self.paths = [logs / f"{t.job}-{t.index}.log" for t in shown]
        self.offsets = {path: path.stat().st_size if path.exists() else 0 for path in self.paths}

    def echo_new_lines(self) -> None:
        for path in self.paths:
            if not path.exists():
                continue
            if path.stat().st_size < self.offsets[path]:
                self.offsets[path] = 0  # a fresh copy fetched from a remote host
            with open(path, "rb") as handle:
                handle.seek(self.offsets[path])
                chunk = handle.read()
            cut = chunk.rfind(b"\n") + 1  # whole lines only
            self.offsets[path] += cut
            sys.stderr.write(chunk[:cut].decode(errors="replace"))
        sys.stderr.flush()


def final_report(config: ClusterConfig, supervisor: Supervisor, wall_s: float) -> list[str]:
    """The end-of-run lines: outcome and restarts per task, metrics, model paths and the TensorBoard command."""
    output = config.path(config.training.output_dir)
    lines = ["tasks: " + ", ".join(f"{r.task.name} {r.state.value}" + (f" (exit {r.exit_code})" if r.exit_code else "")
                                   + (f" after {r.restarts} restarts" if r.restarts else "")
                                   for r in supervisor.records.values())]
    summary = read_summary(output)
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


def _raise_on_sigterm(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_job(config: ClusterConfig) -> int:
    """Preflight, start in order, supervise to the end, stop every task, report; returns the exit code."""
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    supervisor = Supervisor(config, say)
    follower = LogFollower(config)
    code, last_fetch, preflight_failed = 1, 0.0, 0

    def tick():
        nonlocal last_fetch
        if time.monotonic() - last_fetch > LOG_FETCH_EVERY_S:
            supervisor.fetch_logs()
            last_fetch = time.monotonic()
        follower.echo_new_lines()
        write_status(config, supervisor, started)

    try:
        check_cluster(config, supervisor.hosts, say)
        supervisor.start_cluster()
        code = supervisor.run(on_tick=tick)
    except PreflightFailed as failure:  # nothing started: the problems alone, as for a mistake in the file
        for line in failure.lines:
            print(f"[launcher] error: {line}", file=sys.stderr, flush=True)
        code = preflight_failed = USER_ERROR_EXIT_CODE
    except RunFailed as failure:
        say(f"run failed: {failure}")
    except KeyboardInterrupt:
        say("interrupted: stopping every task")
        code = 130
    finally:
        for line in supervisor.stop_everything():
            say(line)
        supervisor.fetch_logs(wait=True)
        follower.echo_new_lines()
        write_status(config, supervisor, started, finished=True)
    for line in [] if preflight_failed else final_report(config, supervisor, time.monotonic() - started):
        say(line)
    return code


def start_in_background(config: ClusterConfig) -> None:
    """Starts `run` in the background in its own session, with its output in logs/launcher.log."""
    logs = config.path(config.launcher.logs_dir)
    command = [sys.executable, "-m", "roles.launch", "run", str(config.source)]
    _, record = process.start(command, cwd=PROJECT_ROOT, env=dict(os.environ),
                              log_path=logs / "launcher.log", pid_path=launcher_pid_path(config))
    say(f"running in the background (pid {record.pid}); log {logs / 'launcher.log'}; "
        f"`sh run.sh status {shlex.quote(str(config.source))}` shows it, `sh kill.sh` stops it")


def stop_all(config: ClusterConfig) -> list[str]:
    """Stops a background launcher first (so it cannot heal what we stop), then every task on every host."""
    lines = []
    record = process.PidRecord.read(launcher_pid_path(config))
    if record and process.is_running(record):
        lines.append(f"launcher (pid {record.pid}): {process.stop(record, grace_s=60)}")
    launcher_pid_path(config).unlink(missing_ok=True)
    return lines + Supervisor(config, say).stop_everything()


class Launcher:
    """Runs, shows and stops the cluster described by cluster.json."""

    @exit_on_user_error("[launcher] ")
    def run(self, cluster: str = "cluster.json", detach: bool = False) -> None:
        """Runs the whole job of CLUSTER: ps and workers, the chief to an exported model, the evaluator to the end.

        Args:
          cluster: path of cluster.json.
          detach: run in the background (`sh run.sh --detach`); `sh run.sh status` shows it.
        """
        config = cluster_config.load(cluster)
        running = process.PidRecord.read(launcher_pid_path(config))
        if running and process.is_running(running) and running.pid != os.getpid():
            raise UserError(Problem("launcher", running.pid, "already runs this cluster",
                                    "see `sh run.sh status`, or stop it with `sh kill.sh`"))
        if detach:
            start_in_background(config)
            return
        pid_path = launcher_pid_path(config)  # so that `sh kill.sh` stops a foreground run too, not just its tasks
        pid_path.parent.mkdir(parents=True, exist_ok=True)
        mine = process.PidRecord(os.getpid(), process.start_ticks(os.getpid()) or 0, tuple(sys.argv))
        mine.write(pid_path)
        try:
            sys.exit(run_job(config))
        finally:
            if process.PidRecord.read(pid_path) == mine:
                pid_path.unlink()

    @exit_on_user_error("[launcher] ")
    def up(self, cluster: str = "cluster.json") -> None:
        """Starts only the ps and workers of CLUSTER, returns once their ports answer (run the chief yourself)."""
        config = cluster_config.load(cluster)
        supervisor = Supervisor(config, say)
        try:
            check_cluster(config, supervisor.hosts, say)
            supervisor.start_servers()
        except (PreflightFailed, RunFailed) as failure:
            for line in getattr(failure, "lines", [str(failure)]):
                say(line)
            supervisor.stop_everything()
            sys.exit(1)

    @exit_on_user_error("[launcher] ")
    def status(self, cluster: str = "cluster.json") -> None:
        """Prints one row per task (host, pid, state, restarts, uptime, last log line) and the run's progress."""
        print(render_status(cluster_config.load(cluster)))

    @exit_on_user_error("[launcher] ")
    def down(self, cluster: str = "cluster.json") -> None:
        """Stops every task of CLUSTER by pid file and process group, here and over ssh; safe to repeat."""
        lines = stop_all(cluster_config.load(cluster))
        for line in lines or ["nothing to stop"]:
            say(line)

    @exit_on_user_error("[launcher] ")
    def print_config(self, cluster: str = "cluster.json") -> None:
        """Shows each task's TF_CONFIG, environment and command line without starting anything."""
        config = cluster_config.load(cluster)
        idle = [t.name for t in config.tasks() if t.job not in taskspec.launched_jobs(config)]
        if idle:
            print(f"# not started under {config.training.strategy}: {', '.join(idle)}\n")
        for task in config.tasks(taskspec.launched_jobs(config)):
            print(f"# {task.name} on {task.address.host}")
            print("unset " + " ".join(taskspec.PROXY_VARIABLES))
            for name, value in taskspec.task_variables(config, task).items():
                print(f"export {name}={shlex.quote(value)}")
            print(shlex.join(taskspec.task_command(config, task)))
            print()


if __name__ == "__main__":
    fire.Fire(Launcher)
