"""The Slurm client commands the slurm backend runs (sbatch, srun, squeue, scontrol, sinfo, scancel): built and read."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
from typing import Sequence

from cluster import job_sizes
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from launcher.backends.base import AgentFailed, HostUnreachable

CLIENT_TIMEOUT_S = 30
WARN_SIGNAL = "USR1"  # Slurm's --signal to the batch shell before the time limit (SIGTERM would end the job)
RUNNING, PENDING = "RUNNING", "PENDING"
LIVE = (RUNNING, "SIGNALING", "RESIZING")  # JobState while its steps run (a flag shows in place of RUNNING)


class SlurmError(AgentFailed):
    """A Slurm client command failed although slurmctld answered (bad option, unknown job, no such node)."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr  # Slurm's whole complaint (sbatch explains over several lines)


@dataclasses.dataclass(frozen=True)
class Step:
    """One job step as squeue lists it."""

    step_id: str  # JOB.STEP
    name: str
    state: str
    nodes: str


def run_client(argv: Sequence[str], timeout_s: float = CLIENT_TIMEOUT_S) -> str:
    """Runs one Slurm client command and returns its output; raises with the command and Slurm's own words."""
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                                stdin=subprocess.DEVNULL, cwd=PROJECT_ROOT)
    except FileNotFoundError:
        raise SlurmError(f"`{argv[0]}` is not installed here: run the launcher on a Slurm login node (Debian: "
                         "apt-get install slurm-client), or use the hosts backend") from None
    except subprocess.TimeoutExpired:
        raise HostUnreachable(f"slurmctld did not answer `{shlex.join(argv)}` within {timeout_s:.0f} s") from None
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SlurmError(f"`{shlex.join(argv)}` failed (exit {result.returncode}): {reason}", result.stderr)
    return result.stdout


def step_name(config: ClusterConfig, task: Task) -> str:
    """The name of a task's step (`squeue --steps` shows it), e.g. pscluster-worker-1."""
    return f"{config.slurm.job_name}-{task.job}-{task.index}"


def node_request(config: ClusterConfig) -> tuple[int, list[str]]:
    """How many nodes to ask for, and which by name when cluster.json names them."""
    if config.job_sizes:
        return config.slurm.nodes or job_sizes.default_node_count(config.job_sizes, config.strategy), []
    names = list(dict.fromkeys(t.address.host for t in config.launched_tasks()))
    return len(names), names


def most_per_node(config: ClusterConfig, jobs: tuple[str, ...]) -> int:
    """The most tasks of `jobs` any one node runs (job sizes are placed as they will be)."""
    if config.job_sizes:
        count = node_request(config)[0]
        placed = job_sizes.place(config.job_sizes, [f"node{i}" for i in range(count)], config.slurm.port_base,
                                 config.strategy)
        hosts = [address.rsplit(":", 1)[0] for job in jobs for address in placed.get(job, [])]
    else:
        hosts = [task.address.host for task in config.tasks(jobs)]
    return max((hosts.count(host) for host in hosts), default=1)


def allocation_options(config: ClusterConfig, node_count: int, nodelist: Sequence[str] = ()) -> list[str]:
    """sbatch's resource options: nodes (or the nodes named), tasks per node, CPUs and GPUs, and the user's extras.

    `--no-kill`: a node that fails takes only its own steps; the launcher heals them, the job goes on."""
    slurm = config.slurm
    per_node = most_per_node(config, config.strategy.launched_jobs)
    options = [f"--job-name={slurm.job_name}", f"--nodes={node_count}", f"--ntasks-per-node={per_node}",
               f"--cpus-per-task={slurm.cpus_per_task}", "--no-kill", f"--chdir={PROJECT_ROOT}"]
    options += [f"--nodelist={','.join(nodelist)}"] if nodelist else []
    options += [f"--partition={slurm.partition}"] if slurm.partition else []
    options += [f"--time={slurm.time_limit}"] if slurm.time_limit else []
    options += [f"--account={slurm.account}"] if slurm.account else []
    options += [f"--signal=B:{WARN_SIGNAL}@{slurm.signal_before_end_s}"] if slurm.signal_before_end_s else []
    if slurm.gpus_per_worker:
        options.append(f"--gpus-per-node={slurm.gpus_per_worker * most_per_node(config, ('worker',))}")
    return options + list(slurm.sbatch_options)


def holder_job_argv(config: ClusterConfig, node_count: int, nodelist: Sequence[str], output: str,
                    warning: str) -> list[str]:
    """sbatch for a job that only holds the allocation until it is cancelled (every task is a step of its own);
    its shell prints `warning` into its output when Slurm warns of the time limit. Prints the job id."""
    hold = f"trap 'echo \"{warning}\"' {WARN_SIGNAL}; while :; do sleep 5 & wait $!; done"
    return ["sbatch", "--parsable", f"--output={output}", *allocation_options(config, node_count, nodelist),
            f"--wrap={hold}"]


def step_options(config: ClusterConfig, task: Task) -> list[str]:
    """srun's options for one task: one task on its node, sharing the job's CPUs with the other steps."""
    options = ["--nodes=1", "--ntasks=1", f"--nodelist={task.address.host}", "--overlap",
               f"--job-name={step_name(config, task)}", f"--cpus-per-task={config.slurm.cpus_per_task}"]
    if task.job == "worker" and config.slurm.gpus_per_worker:
        options.append(f"--gpus={config.slurm.gpus_per_worker}")
    return options


def step_argv(config: ClusterConfig, task: Task, job_id: str, command: Sequence[str]) -> list[str]:
    return ["srun", f"--jobid={job_id}", *step_options(config, task), *command]


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job` as fields (JobState, Reason, NodeList, EndTime, ...); empty once Slurm forgot the job."""
    try:
        text = run_client(["scontrol", "show", "job", "--oneliner", job_id])
    except SlurmError:
        return {}
    return dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", text.strip()))


def queue_state(job_id: str) -> str:
    """The job's state as squeue shows it (PENDING, RUNNING, COMPLETING), "" once it has left the queue.

    Without --jobs: with it, squeue also lists jobs that ended a while ago."""
    rows = dict(line.split()[:2] for line in run_client(["squeue", "--noheader", "--format=%i %T"]).splitlines()
                if len(line.split()) >= 2)
    return rows.get(job_id, "")


def hostnames(node_list: str) -> list[str]:
    """Node names of a Slurm node list (n[9-10] -> n9, n10) in Slurm's order, which is never text order."""
    return run_client(["scontrol", "show", "hostnames", node_list]).split()


def steps(job_id: str) -> list[Step]:
    """The job's live steps (the batch step included)."""
    output = run_client(["squeue", "--steps", "--noheader", f"--jobs={job_id}",
                         "--Format=StepId:40,StepName:80,StepState:20,Nodes:200"])
    return parse_steps(output)


def parse_steps(output: str) -> list[Step]:
    return [Step(*line.split()[:4]) for line in output.splitlines() if len(line.split()) >= 4]


def node_state(node: str) -> str:
    """The node's short state as sinfo shows it: idle, mix, alloc, down*, drain, ..."""
    return run_client(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%t"]).strip() or "unknown"


def node_is_lost(state: str) -> bool:
    """Down, failed, or not responding (a trailing `*`): its steps are gone or unreachable."""
    return state.startswith(("down", "fail", "unknown")) or state.endswith("*")


def signal_step(step_id: str, signal_name: str) -> None:
    """Sends a signal to one step's tasks without cancelling it. Slurm 22.05's scancel delivers it but exits 225
    with "Invalid job id specified" for a step of a running job (seen here): that answer is no error."""
    try:
        run_client(["scancel", f"--signal={signal_name}", step_id])
    except SlurmError as error:
        if "Invalid job id specified" not in str(error):
            raise


def cancel(target: str) -> None:
    """scancel of a job or of one step (JOB.STEP); one that has already ended is no error (callers check what
    remains afterwards)."""
    try:
        run_client(["scancel", target])
    except SlurmError as error:
        if "already completing or completed" not in str(error) and "Invalid job id" not in str(error):
            raise
