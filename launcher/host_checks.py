"""What this host checks before its tasks start, one line per problem (ports, disk, the output folder, the
firewall's tools, each host's python, a ps's memory, the user's code), and the versions it runs."""

from __future__ import annotations

import os
import shutil
import socket
import sys

from cluster import ps_memory
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from common import durable
from common.net import port_in_use
from launcher import previous_run, process, user_code_checks
from launcher.backends.base import PreflightReport


def task_file(config: ClusterConfig, task: Task, suffix: str):
    """A task's `<job>-<index>.<suffix>` file in the logs directory (its log, pid or exit file)."""
    return config.path(config.launcher.logs_dir) / f"{task.job}-{task.index}.{suffix}"


def preflight(config: ClusterConfig, tasks: list[Task], min_free_bytes: int = 512 << 20) -> list[str]:
    """Problems that would stop these tasks on this host, one line each: busy ports, disk, unwritable output."""
    problems = []
    for task in tasks:
        running = process.PidRecord.read(task_file(config, task, "pid"))
        if task.job in ("ps", "worker") and port_in_use(task.address.port) and not (
                running and process.group_alive(running)):
            problems.append(f"{task.name}: port {task.address.port} on {task.address.host} is already in use; "
                            "stop what holds it (`sh kill.sh` if it is an old run) or change the port")
    problems += machine_problems(config, tasks) + memory_problems(config, tasks)
    free = shutil.disk_usage(PROJECT_ROOT).free
    if free < min_free_bytes:
        problems.append(f"only {free >> 20} MiB free under {PROJECT_ROOT}; free at least "
                        f"{min_free_bytes >> 20} MiB")
    lead = config.lead
    if lead in tasks:
        output = config.path(config.training.output_dir)
        try:
            output.mkdir(parents=True, exist_ok=True)
            probe = output / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as error:
            problems.append(f"{lead.name}: output_dir {output} is not writable ({error.strerror}); fix its "
                            "permissions or set training.output_dir")
        store = durable.object_store_problem(str(output), "training.output_dir")
        if store is not None:  # the chief refuses it too; here no task starts
            problems.append(f"{lead.name}: {store.text()}")
        problems += [line for line in [previous_run.different_run(config)] if line]
        problems += user_code_checks.problems(config, host_python(config, lead.address.host))
    return problems


def machine_problems(config: ClusterConfig, tasks: list[Task]) -> list[str]:
    """What this host lacks for these tasks: the firewall's root and nft, each task host's python."""
    where = f"{config.source.name}: "
    problems = []
    missing = [what for what, present in (("root", os.geteuid() == 0), ("nft", shutil.which("nft"))) if not present]
    if config.firewall and missing:
        problems.append(f"{where}security.firewall = True: {socket.gethostname()} has no {' and no '.join(missing)}"
                        "; run the launcher as root on hosts with nftables (apt-get install nftables), or set "
                        '"firewall": false')
    for name in sorted({t.address.host for t in tasks}):
        python = config.host(name).python
        if not host_python(config, name):
            problems.append(f"{where}hosts.{name}.python = {python!r}: no such executable on {socket.gethostname()} "
                            f"(from {PROJECT_ROOT}); use .venv/bin/python (sh run.sh creates it) or the absolute "
                            "path of a python that has the project's packages")
    return problems


def memory_problems(config: ClusterConfig, tasks: list[Task]) -> list[str]:
    """The ps of these tasks whose tables (with what a checkpoint adds) would not fit this host's available memory
    at their peak (cluster/ps_memory.py)."""
    here = [task for task in tasks if task.job == "ps" and "ps" in config.strategy.launched_jobs]
    if not here:
        return []
    available, host = available_bytes(), here[0].address.host
    why = ps_memory.shortfall(config.training, len(config.jobs["ps"]), len(here), available, place=f"on {host}",
                              has=f"{host} has {ps_memory.gib(available)} available")
    return [ps_memory.problem(config.training, why).text(config.source.name)] if why else []


def available_bytes() -> float:
    """This host's available memory (MemAvailable): what its processes can take without swapping."""
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))


def host_python(config: ClusterConfig, name: str) -> str | None:
    """The path of host `name`'s python here (relative paths start at the project directory), if it exists."""
    python = config.host(name).python
    return shutil.which(python if os.path.isabs(python) or "/" not in python else str(PROJECT_ROOT / python))


def versions() -> dict:
    """This host's Python, TensorFlow (CPU or CUDA wheel alike) and tf-keras versions, without importing them."""
    from importlib import metadata

    def version(*packages: str) -> str | None:
        for package in packages:
            try:
                return metadata.version(package)
            except metadata.PackageNotFoundError:
                continue
        return None

    return {"python": ".".join(map(str, sys.version_info[:2])),
            "tensorflow": version("tensorflow-cpu", "tensorflow"), "tf-keras": version("tf-keras")}


def preflight_report(config: ClusterConfig, tasks: list[Task]) -> PreflightReport:
    return PreflightReport(problems=preflight(config, tasks), versions=versions())
