"""Runs, shows and stops a cluster under the slurm backend: the allocation around the usual run, status and stop."""

from __future__ import annotations

import signal

from cluster.config import ClusterConfig
from launcher.backends.slurm import allocation as slurm_allocation
from launcher.backends.slurm import commands as slurm
from launcher.backends.base import HostError
from launcher.console import say
from launcher.records import RunFailed
from launcher.run import interrupted_code, run_job, stop_all
from launcher.backends.slurm.allocation import Allocation, allocation_path, live_steps


def _raise_on_sigterm(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_in_allocation(config: ClusterConfig, *, fresh: bool = False) -> int:
    """Gets the allocation (submitted, or the caller's own), places the tasks on its nodes, runs the job as on any
    hosts (start order, healing, summary), and releases the allocation however the run ends."""
    signal.signal(signal.SIGTERM, _raise_on_sigterm)  # `sh kill.sh` while the job is still queued
    try:
        allocation = slurm_allocation.acquire(config, say)
    except (RunFailed, HostError) as failure:
        say(f"run failed: {failure}")
        return 1
    except KeyboardInterrupt as interrupt:
        say("interrupted while waiting for the allocation; the job was cancelled")
        return interrupted_code(interrupt)
    try:
        return run_job(slurm_allocation.placed(config, allocation), fresh=fresh)
    finally:
        for line in slurm_allocation.release(config, allocation):
            say(line)


def start_servers_in_allocation(config: ClusterConfig) -> ClusterConfig:
    """For `up`: the allocation held (until `sh kill.sh`) and the config placed on its nodes."""
    return slurm_allocation.placed(config, slurm_allocation.acquire(config, say))


def stop_in_allocation(config: ClusterConfig) -> list[str]:
    """Stops the launcher and every step, then cancels the job it submitted and checks that nothing of it remains."""
    lines = stop_all(slurm_allocation.current(config))
    allocation = Allocation.read(allocation_path(config))
    if allocation is not None:
        try:
            lines += slurm_allocation.release(config, allocation)
        except HostError as error:
            lines.append(f"job {allocation.job_id} not cancelled: {error}; run `scancel {allocation.job_id}`")
    return lines


def cluster_file_read(config: ClusterConfig):
    """The cluster.json the steps read: the placed one (logs/slurm-cluster.json) for job sizes, else the file."""
    return slurm_allocation.resolved_path(config) if config.job_sizes else config.source


def status_lines(config: ClusterConfig) -> list[str]:
    """The job's state and each task's step as Slurm sees it (squeue), beside the launcher's own view."""
    allocation = Allocation.read(allocation_path(config))
    if allocation is None:
        return ["slurm: no job recorded (none running)"]
    try:
        state = slurm.queue_state(allocation.job_id) or "no longer in the queue"
        steps = {step.name: step for step in live_steps(allocation.job_id)}
    except HostError as error:
        return [f"slurm: job {allocation.job_id}: {error}"]
    whose = "submitted by the launcher" if allocation.owned else "your allocation"
    lines = [f"slurm job {allocation.job_id} ({whose}): {state} on {', '.join(allocation.nodes)}",
             "(pids above: each task's srun on this machine; the task itself runs as the step below on its node)",
             f"{'task':<12} {'node':<15} {'step':<12} slurm state"]
    for task in slurm_allocation.current(config).launched_tasks():
        step = steps.get(slurm.step_name(config, task))
        lines.append(f"{task.name:<12} {task.address.host:<15} {step.step_id if step else '-':<12} "
                     f"{step.state if step else 'no step'}")
    return lines
