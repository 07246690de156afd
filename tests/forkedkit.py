"""A chief, evaluator or server a test starts itself, forked from the session's fork server when it can be (as the
launcher's own tasks are, launcher/task_forks.py), behind the part of subprocess.Popen the tests use."""

from __future__ import annotations

import os
from pathlib import Path

from cluster import config as cluster_config, taskspec
from common.forking import ForkedChild
from launcher import task_forks


def fork_module(python: str, root: Path, module: str, args: list[str], log_path: Path) -> ForkedChild | None:
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
    return ForkedChild(record.pid, status_path, command) if record else None


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
