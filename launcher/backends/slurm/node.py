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
from launcher.backends.slurm import commands as slurm
from launcher.backends.slurm import endings
from launcher.backends.base import (AgentFailed, Backend, HostError, HostUnreachable, PreflightReport, StopResult,
                                    TaskStatus)
from launcher.backends.this_disk import ThisDiskOutputs
from launcher.backends.slurm.allocation import Allocation, allocation_path, live_steps
from launcher.console import say

PREFLIGHT_TIMEOUT_S = 180


class SlurmView:
    """The job's state and nodes and the nodes' states, asked of slurmctld at most once per `max_age_s` for all
    nodes' backends; relays Slurm's warning before the time limit to the lead's step."""

    def __init__(self, config: ClusterConfig, allocation: Allocation, max_age_s: float):
        self.config, self.job_id, self.max_age_s = config, allocation.job_id, max_age_s
        self.owned = allocation.owned  # submitted with --signal; the user's own allocation is watched by EndTime
        self.lock = threading.Lock()
        self.asked_at, self.nodes, self.job, self.job_nodes, self.warned = float("-inf"), {}, {}, set(), False
        self.output = config.path(config.launcher.logs_dir) / f"slurm-{self.job_id}.out"  # the holder job's output

    def _ask(self) -> None:
        output = slurm.run_client(["sinfo", "--noheader", "--Node", "--format=%N %t"])
        self.nodes = dict(line.split()[:2] for line in output.splitlines() if len(line.split()) >= 2)
        self.job = slurm.job_fields(self.job_id)
        if self.job.get("JobState") in slurm.LIVE and self.job.get("NodeList"):
            self.job_nodes = set(slurm.hostnames(self.job.get("NodeList", "")))
        self.asked_at = time.monotonic()
        if not self.warned and self.config.slurm.signal_before_end_s and self._limit_near():
            self.warned = True
            self._relay_warning()

    def _limit_near(self) -> bool:
        if self.owned:
            return endings.warned(_read(self.output), endings.WARNING)
        left = endings.seconds_left(self.job, time.time())
        return left is not None and left <= self.config.slurm.signal_before_end_s

    def _relay_warning(self) -> None:
        lead, seconds = self.config.lead, self.config.slurm.signal_before_end_s
        try:
            steps = signal_task_step(self.config, self.job_id, lead, "TERM")
            asked = f"sent SIGTERM to {lead.name} (step {steps[0]}) so it checkpoints and stops" if steps \
                else f"{lead.name} has no step to warn"
        except HostError as error:
            asked = f"could not signal {lead.name}: {error}"
        say(f"job {self.job_id}: Slurm warns its time limit is {seconds} s away (slurm.signal_before_end_s); {asked}")

    def ending(self) -> str | None:
        """Once Slurm has warned of the time limit: that it is near, and which setting said so."""
        if not self.warned:
            return None
        return f"job {self.job_id}'s time limit is near (slurm.signal_before_end_s)"

    def check(self, node: str, now: bool = False) -> None:
        """Raises AgentFailed, naming the cause, once the job no longer runs; HostUnreachable when Slurm marks
        `node` down or has taken it out of the job. `now`: ask slurmctld even if the last answer is fresh."""
        with self.lock:
            if now or time.monotonic() - self.asked_at > self.max_age_s:
                self._ask()
            state, job, job_nodes = self.nodes.get(node, "unknown"), dict(self.job), set(self.job_nodes)
        if job.get("JobState") not in slurm.LIVE:  # SIGNALING while a signal (ours too) reaches a step
            raise AgentFailed(endings.settled_cause(self.job_id, job, lambda: slurm.job_fields(self.job_id),
                                                    lambda: _read(self.output)))
        if node not in job_nodes:
            raise HostUnreachable(f"{node}: Slurm took it out of job {self.job_id} (node state {state}); its "
                                  "tasks are lost, never relaunched there")
        if slurm.node_is_lost(state):
            raise HostUnreachable(f"{node}: Slurm marks it {state}")


def signal_task_step(config: ClusterConfig, job_id: str, task: Task, signal_name: str) -> list[str]:
    """Sends a signal to the task's running step itself (never through its srun); returns the steps signalled."""
    steps = [s.step_id for s in live_steps(job_id) if s.name == slurm.step_name(config, task)]
    for step_id in steps:
        slurm.signal_step(step_id, signal_name)
    return steps


def _read(path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


class SlurmNode(ThisDiskOutputs, Backend):
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
        """Each step's srun as seen here; when one has ended, Slurm is asked at once whether the node is still
        in the job, so a step that ended with its node counts as lost, never as an exit to relaunch."""
        rows = [self._with_lead_step(task, agent.status(self.config, task)) for task in tasks]
        if self.view is not None:
            self.view.check(self.name, now=not all(row.running for row in rows))
        return rows

    def _with_lead_step(self, task: Task, row: TaskStatus) -> TaskStatus:
        """The lead's optimizer step (for stall detection) and whether it waits for data, from its heartbeat. The
        heartbeat names the trainer's pid on its node, never the srun's here, so a heartbeat counts when written
        since this srun started."""
        if task != self.config.lead or not row.running:
            return row
        progress = read_progress(RunFiles(self.config.path(self.config.training.output_dir)))
        try:
            started = agent.task_file(self.config, task, "pid").stat().st_mtime
        except OSError:  # stopped meanwhile
            return row
        if progress and progress.time >= started:
            return dataclasses.replace(row, step=progress.step if progress.phase == Phase.TRAIN else None,
                                       waiting=progress.phase == Phase.WAIT)
        return row

    def stop(self, tasks: list[Task], quick: bool = False) -> list[StopResult]:
        """Stops each step's srun (which cancels its step), then cancels any step of the task still listed; the
        lead first gets its checkpoint, unless `quick`."""
        if self.config.lead in tasks and not quick:
            self._let_lead_checkpoint()
        results = [agent.stop(self.config, task, quick=quick) for task in tasks]
        if self.allocation is not None:
            names = {slurm.step_name(self.config, task) for task in tasks}
            for step in live_steps(self.allocation.job_id, self.config.slurm.job_name):
                if step.name in names:
                    slurm.cancel(step.step_id)
        return results

    def ending(self) -> str | None:
        return self.view.ending() if self.view is not None else None

    def _let_lead_checkpoint(self) -> None:
        """srun answers SIGTERM by killing its step at once, so the lead's step itself is sent SIGTERM (as Slurm's
        time-limit warning is) and given launcher.stop_grace_s to write its checkpoint and exit."""
        record = process.PidRecord.read(agent.task_file(self.config, self.config.lead, "pid"))
        if self.allocation is None or not (record and process.group_alive(record)):
            return
        try:
            signal_task_step(self.config, self.allocation.job_id, self.config.lead, "TERM")
        except HostError as error:
            say(f"{self.config.lead.name}: could not ask its step to checkpoint ({error}); stopping it")
            return
        deadline = time.monotonic() + self.config.launcher.stop_grace_s
        while process.group_alive(record) and time.monotonic() < deadline:
            time.sleep(0.2)

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
    view = SlurmView(config, allocation, config.launcher.poll_s) if allocation else None
    nodes = dict.fromkeys(t.address.host for t in config.tasks())
    return {node: SlurmNode(config, node, allocation, view) for node in nodes}
