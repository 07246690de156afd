"""The slurm backend: each task a job step of one allocation (`srun -w NODE --overlap`), watched through its srun.

The srun of each step runs here, in a session of its own, with the task's `.log` (srun forwards the step's output),
`.pid` and `.exit` files in the logs directory, so status and healing work as for local tasks. The task writes
its `.exit` file itself on its node: the logs directory must be on a filesystem the nodes share (as a Slurm
job's working directory usually is).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

from cluster import taskspec
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from cluster.run_files import Phase, RunFiles, read_progress
from common.exit_file import EXIT_FILE_VARIABLE
from launcher import agent, previous_run, process
from launcher import slurm_commands as slurm
from launcher.backends.base import AgentFailed, Backend, HostUnreachable, PreflightReport, StopResult, TaskStatus
from launcher.slurm_allocation import Allocation, allocation_path, live_steps

PREFLIGHT_TIMEOUT_S = 180


class SlurmView:
    """Node states and the job's state, asked of slurmctld at most once per `max_age_s` for all nodes' backends."""

    def __init__(self, job_id: str, max_age_s: float):
        self.job_id, self.max_age_s = job_id, max_age_s
        self.lock = threading.Lock()
        self.asked_at, self.nodes, self.job_state = float("-inf"), {}, ""

    def check(self, node: str) -> None:
        """Raises HostUnreachable when Slurm marks `node` down, AgentFailed once the job no longer runs."""
        with self.lock:
            if time.monotonic() - self.asked_at > self.max_age_s:
                output = slurm.run_client(["sinfo", "--noheader", "--Node", "--format=%N %t"])
                self.nodes = dict(line.split()[:2] for line in output.splitlines() if len(line.split()) >= 2)
                self.job_state = slurm.queue_state(self.job_id)
                self.asked_at = time.monotonic()
            state, job_state = self.nodes.get(node, "unknown"), self.job_state
        if job_state != slurm.RUNNING:
            raise AgentFailed(f"job {self.job_id} is {job_state or 'no longer in the queue'}: the allocation ended "
                              "(time limit, scancel, preemption?); `scontrol show job` tells why")
        if slurm.node_is_lost(state):
            raise HostUnreachable(f"{node}: Slurm marks it {state}")


class SlurmNode(Backend):
    """The tasks placed on one node of the allocation, each run as its own job step."""

    is_remote = True  # slurmctld answers may be slow: the supervisor asks in the background

    def __init__(self, config: ClusterConfig, node: str, allocation: Allocation | None, view: SlurmView | None):
        self.config, self.name, self.allocation, self.view = config, node, allocation, view

    def _job_id(self) -> str:
        if self.allocation is None:
            raise AgentFailed(f"no Slurm job recorded in {allocation_path(self.config)}: start the run with "
                              "`sh run.sh`, which submits one (or joins yours inside salloc)")
        return self.allocation.job_id

    def start(self, tasks: list[Task]) -> list[TaskStatus]:
        return [self._start_step(task) for task in tasks]

    def _start_step(self, task: Task) -> TaskStatus:
        """Starts the task's step unless its srun still runs; the same node and port every time."""
        record = process.PidRecord.read(agent.task_file(self.config, task, "pid"))
        if record and process.group_alive(record):
            return agent.status(self.config, task)
        exit_file = agent.task_file(self.config, task, "exit")
        exit_file.unlink(missing_ok=True)
        env = {**taskspec.task_environment(self.config, task, os.environ), EXIT_FILE_VARIABLE: str(exit_file)}
        if task.job == "worker" and self.config.slurm.gpus_per_worker:
            env.pop("CUDA_VISIBLE_DEVICES")  # Slurm sets it to the GPUs of the step
        argv = slurm.step_argv(self.config, task, self._job_id(), taskspec.task_command(self.config, task))
        process.start(argv, cwd=PROJECT_ROOT, env=env, log_path=agent.task_file(self.config, task, "log"),
                      pid_path=agent.task_file(self.config, task, "pid"))
        return agent.status(self.config, task)

    def status(self, tasks: list[Task]) -> list[TaskStatus]:
        if self.view is not None:
            self.view.check(self.name)
        return [self._with_lead_step(task, agent.status(self.config, task)) for task in tasks]

    def _with_lead_step(self, task: Task, row: TaskStatus) -> TaskStatus:
        """The lead's optimizer step from its heartbeat, for stall detection. The heartbeat names the trainer's
        pid on its node, never the srun's here, so a heartbeat counts when written since this srun started."""
        if task != self.config.lead or not row.running:
            return row
        progress = read_progress(RunFiles(self.config.path(self.config.training.output_dir)))
        try:
            started = agent.task_file(self.config, task, "pid").stat().st_mtime
        except OSError:  # stopped meanwhile
            return row
        if progress and progress.phase == Phase.TRAIN and progress.time >= started:
            return dataclasses.replace(row, step=progress.step)
        return row

    def stop(self, tasks: list[Task], quick: bool = False) -> list[StopResult]:
        """Stops each step's srun (which cancels its step), then cancels any step of the task still listed."""
        results = [agent.stop(self.config, task, quick=quick) for task in tasks]
        if self.allocation is not None:
            names = {slurm.step_name(self.config, task) for task in tasks}
            for step in live_steps(self.allocation.job_id, self.config.slurm.job_name):
                if step.name in names:
                    slurm.cancel(step.step_id)
        return results

    def set_aside_previous_run(self) -> str | None:
        """Done here: output_dir is on the filesystem the nodes share, the same here as on the lead's node."""
        return previous_run.set_aside(self.config)

    def preflight(self, tasks: list[Task]) -> PreflightReport:
        """The agent's checks (ports, disk, output_dir, python, versions), run on the node as a step of the job."""
        python = self.config.host(self.name).python
        argv = ["srun", f"--jobid={self._job_id()}", "--nodes=1", "--ntasks=1", f"--nodelist={self.name}",
                "--overlap", f"--job-name={self.config.slurm.job_name}-preflight", python, "-m", "launcher.agent",
                "preflight", "--cluster", str(self.config.source), "--tasks", ",".join(t.name for t in tasks)]
        output = slurm.run_client(argv, timeout_s=PREFLIGHT_TIMEOUT_S)
        return PreflightReport.from_json(json.loads(output.strip().splitlines()[-1]))


def slurm_backends(config: ClusterConfig) -> dict[str, Backend]:
    """One backend per node that runs a task, all sharing the recorded allocation and one view of Slurm."""
    allocation = Allocation.read(allocation_path(config))
    view = SlurmView(allocation.job_id, config.launcher.poll_s) if allocation else None
    nodes = dict.fromkeys(t.address.host for t in config.tasks())
    return {node: SlurmNode(config, node, allocation, view) for node in nodes}
