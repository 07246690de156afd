"""A whole run: preflight, start in order, supervise to the end, stop everything, report; in the foreground or not."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path

from cluster.config import PROJECT_ROOT, ClusterConfig
from cluster.run_files import RUN_VARIABLE
from common import disk_full
from common.errors import USER_ERROR_EXIT_CODE
from launcher import process, process_search, reload, run_outputs
from launcher.console import LogFollower, say
from launcher.log_rotation import rotate_if_large
from launcher.preflight import PreflightFailed, check_cluster
from launcher.report import final_report
from launcher.status import write_status
from launcher.supervisor import RunFailed, Supervisor

LOG_FETCH_EVERY_S = 3.0
INTERRUPTED_EXIT_CODE = 130  # Ctrl-C (SIGINT), as a shell reports it
TERMINATED_EXIT_CODE = 143  # SIGTERM: `sh kill.sh`, a scheduler's stop, a shutdown


def launcher_pid_path(config: ClusterConfig) -> Path:
    return config.path(config.launcher.logs_dir) / "launcher.pid"


def _raise_on_sigterm(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


_UNWRITTEN: set[str] = set()  # why status.json could not be written, said once each


def status_written(config: ClusterConfig, supervisor, started: float, finished: bool = False) -> bool:
    """Writes the status file; a launcher whose logs folder cannot take it (a full disk) says so once and runs on."""
    try:
        write_status(config, supervisor, started, finished=finished)
        return True
    except OSError as error:
        logs = config.path(config.launcher.logs_dir)
        why = (f"disk full: {disk_full.describe(logs)}" if disk_full.full_disk_path(error) is not None
               else f"{logs}: {error.strerror or error}")
        if why.split(" has ")[0] not in _UNWRITTEN:  # the free space changes: the filesystem says it once
            _UNWRITTEN.add(why.split(" has ")[0])
            say(f"status.json not written ({why}); `sh run.sh status` shows the last one written")
        return False


def interrupted_code(interrupt: KeyboardInterrupt) -> int:
    """The launcher's exit code when it was stopped from outside: 143 for SIGTERM, 130 for Ctrl-C."""
    return TERMINATED_EXIT_CODE if str(interrupt) == signal.SIGTERM.name else INTERRUPTED_EXIT_CODE


def _ticker(config: ClusterConfig, supervisor: Supervisor, follower: LogFollower, started: float):
    """What the launcher does at every tick of the run: fetch and echo logs, write the status, apply a reload,
    rotate its own log."""
    last_fetch = 0.0

    def tick():
        nonlocal last_fetch
        if time.monotonic() - last_fetch > LOG_FETCH_EVERY_S:
            supervisor.fetch_logs()
            last_fetch = time.monotonic()
        follower.echo_new_lines()
        status_written(config, supervisor, started)
        reload.apply_request(supervisor, config.path(config.launcher.logs_dir), say)
        rotate_if_large(config.path(config.launcher.logs_dir) / "launcher.log", max_mb=config.launcher.log_max_mb,
                        files_kept=config.launcher.log_files_kept)  # a detached launcher's own output

    return tick


def run_job(config: ClusterConfig, *, fresh: bool = False) -> int:
    """Preflight, start in order, supervise to the end, stop every task, report; returns the exit code (the
    endings and their codes are docs/running.md's table)."""
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    os.environ[RUN_VARIABLE] = f"run-{socket.gethostname()}-{os.getpid()}-{time.time():.0f}"  # every task inherits it
    supervisor = Supervisor(config, say)
    run_outputs.archive_logs(config, config.tasks())  # the last run's logs (and their copies) set aside
    follower = LogFollower(config)
    tick = _ticker(config, supervisor, follower, started)
    code, preflight_failed = 1, False
    try:
        check_cluster(config, supervisor.hosts, say, fresh=fresh)
        supervisor.start_cluster()
        code = supervisor.run(on_tick=tick)
    except PreflightFailed as failure:  # nothing started: the problems alone, as for a mistake in the file
        for line in failure.lines:
            print(f"[launcher] error: {line}", file=sys.stderr, flush=True)
        code, preflight_failed = USER_ERROR_EXIT_CODE, True
    except RunFailed as failure:
        say(f"run failed: {failure}")
        code = failure.code
    except KeyboardInterrupt as interrupt:
        say("interrupted: stopping every task")
        code = interrupted_code(interrupt)
    finally:
        for line in [] if preflight_failed else supervisor.stop_everything():  # nothing started: nothing to stop
            say(line)
        supervisor.fetch_logs(wait=True)
        follower.echo_new_lines()
        status_written(config, supervisor, started, finished=True)
        supervisor.close()
    if preflight_failed:
        return code
    report = final_report(config, supervisor, time.monotonic() - started)
    for line in report.lines:
        say(line)
    if code == 0 and not report.trained:
        say("exit code 1: the lead exited 0 but its host holds no complete summary of this run's planned steps")
        code = 1
    return code


def start_in_background(config: ClusterConfig, *, fresh: bool = False) -> None:
    """Starts `run` in the background in its own session, with its output in logs/launcher.log."""
    logs = config.path(config.launcher.logs_dir)
    command = [sys.executable, "-m", "roles.launch", "run", str(config.source), *(["--fresh"] if fresh else [])]
    _, record = process.start(command, cwd=PROJECT_ROOT, env=dict(os.environ),
                              log_path=logs / "launcher.log", pid_path=launcher_pid_path(config))
    say(f"running in the background (pid {record.pid}); log {logs / 'launcher.log'}; "
        f"`sh run.sh status {shlex.quote(str(config.source))}` shows it, `sh kill.sh` stops it")


def running_launcher(config: ClusterConfig) -> process.PidRecord | None:
    """The launcher that runs this cluster file: by its pid file, or, that file gone with the logs folder, by its
    command line (launcher/process_search.py)."""
    record = process.PidRecord.read(launcher_pid_path(config))
    if record and process.is_running(record):
        return record
    return next(iter(process_search.launchers(config.source)), None)


def stop_all(config: ClusterConfig) -> list[str]:
    """Stops a background launcher first (so it cannot heal what we stop), then every task on every host."""
    lines = []
    record = running_launcher(config)
    if record:
        lines.append(f"launcher (pid {record.pid}): {process.stop(record, grace_s=60).value}")
    launcher_pid_path(config).unlink(missing_ok=True)
    return lines + Supervisor(config, say).stop_everything()


