"""A chief, evaluator or server a test starts itself, forked from the session's fork server when it can be (as the
launcher's own tasks are, launcher/task_forks.py), behind the part of subprocess.Popen the tests use; and a test's
own TensorFlow helper (a script of tests/ or `-c` code) run to its end the same way."""

from __future__ import annotations

import os
import subprocess
import tempfile
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


def run_python(python: str, args: list[str], *, cwd: Path, env_changes: dict[str, str],
               timeout_s: float) -> subprocess.CompletedProcess | None:
    """`python ARGS` (a script, or `-c` code) run to its end, forked from the session's shared fork server with
    that server's environment and `env_changes` (variables the helper reads after TensorFlow's import, such as
    TF_CONFIG): its output, stdout and stderr together as a task's log, is then both. None when it cannot be
    forked (start it instead); a helper that times out is killed and raises as subprocess.run does."""
    if task_forks.SHARED_VARIABLE not in os.environ:
        return None
    server = task_forks.SharedForkServer(os.environ[task_forks.SHARED_VARIABLE])
    try:
        if not server.alive():
            return None
        own = {key: value for key, value in os.environ.items()
               if key in task_forks.PER_TASK_VARIABLES or key.startswith(task_forks.PER_TASK_PREFIX)}
        env = {**dict(server.key[2]), **own, **env_changes}
        with tempfile.TemporaryDirectory(prefix="pscluster-helper-") as folder:
            log, status = Path(folder) / "output.log", Path(folder) / "status"
            command = [python, *args]
            reply = server.fork({"argv": command, "cwd": str(cwd), "env": env, "log": str(log),
                                 "status": str(status)})
            if "pid" not in reply:
                return None
            return completed(ForkedChild(reply["pid"], status, command), log, timeout_s)
    finally:
        server.stop()


def completed(child: ForkedChild, log: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """A forked child waited for to its end, as subprocess.run gives it, its log as both stdout and stderr; one
    still running after `timeout_s` is killed and raises as subprocess.run does."""
    try:
        code = child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    output = log.read_text(errors="replace")
    return subprocess.CompletedProcess(child.args, code, output, output)
