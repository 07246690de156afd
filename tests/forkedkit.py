"""A chief, evaluator or server a test starts itself, forked from the session's fork server when it can be (as the
launcher's own tasks are, launcher/task_forks.py), behind the part of subprocess.Popen the tests use."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from cluster import config as cluster_config, taskspec
from common.proc import has_live_thread
from launcher import task_forks

STATUS_LATE_S = 5.0  # the fork server reaps an ended task within 0.2 s and then writes its exit status


class ForkedModule:
    """A forked `python -m` module: its exit status is the file its fork server writes when it reaps it."""

    def __init__(self, pid: int, status_path: Path, args: list[str]):
        self.pid, self.status_path, self.args, self.returncode = pid, status_path, args, None
        self._gone_since: float | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.status_path.exists():
            self.returncode = int(self.status_path.read_text())
        elif self.returncode is None and not has_live_thread(self.pid):
            self._gone_since = self._gone_since or time.monotonic()
            if time.monotonic() - self._gone_since > STATUS_LATE_S:
                self.returncode = -1  # ended, but its server never said how: no test may take that for a success
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_module(python: str, root: Path, module: str, args: list[str], log_path: Path) -> ForkedModule | None:
    """`python -m module args` forked with the environment a launcher would give its task (the one the module sets
    itself before importing TensorFlow) and `log_path` as its output; None when it cannot be (start it instead)."""
    task = _task(module, args) if task_forks.SHARED_VARIABLE in os.environ else None
    if task is None:
        return None
    config, task = task
    env = {key: value for key, value in taskspec.task_environment(config, task, os.environ).items()
           if key != "TF_CONFIG"}  # the module works out its own, as started
    log_path.write_bytes(b"")  # a fresh log, as a started module's
    status_path = log_path.with_name(log_path.name + ".status")
    status_path.unlink(missing_ok=True)
    command = [python, "-m", module, *args]
    record = task_forks.start(command, cwd=root, env=env, log_path=log_path, status_path=status_path,
                              pid_path=log_path.with_name(log_path.name + ".pid"))
    return ForkedModule(record.pid, status_path, command) if record else None


def _task(module: str, args: list[str]):
    """The cluster file's config and the task `module` would run as, given `--flag value` arguments; None when the
    arguments or the file are not a plain task's (a test of a bad file must see the module's own answer)."""
    if len(args) % 2 or not task_forks.forkable(["python", "-m", module]):
        return None
    options = dict(zip(args[::2], args[1::2]))
    if "--cluster" not in options or "--worker" in options or "--workers" in options:
        return None
    try:
        config = cluster_config.load(options["--cluster"])
        if module == "coordinator.train":
            return config, config.task(config.strategy.trainer_job, 0)
        if module == "evaluator.sidecar":
            return config, config.task("evaluator", 0)
        return config, config.task(options["--role"], int(options["--index"]))
    except Exception:  # noqa: BLE001  whatever the module would say of it, it says as a started process
        return None
