"""`python -m roles.launch run|up|status|down|print_config|sbatch CLUSTER`: the commands behind run.sh and kill.sh."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import fire

from cluster import config as cluster_config
from cluster import taskspec
from cluster.config import PROJECT_ROOT
from common.errors import USER_ERROR_EXIT_CODE, Problem, UserError, exit_on_user_error
from launcher import process
from launcher.backends.slurm import allocation as slurm_allocation
from launcher.backends.slurm import commands as slurm_commands
from launcher.backends.slurm import run as slurm_run
from launcher.backends.slurm import sbatch_script
from launcher.backends import backends_for
from launcher.backends.ssh.host import command_as_run
from launcher.console import say
from launcher.preflight import PreflightFailed, check_cluster
from launcher.run import launcher_pid_path, run_job, start_in_background, stop_all
from launcher.status import render_status
from launcher.supervisor import RunFailed, Supervisor


class Launcher:
    """Runs, shows and stops the cluster described by cluster.json."""

    @exit_on_user_error("[launcher] ")
    def run(self, cluster: str = "cluster.json", detach: bool = False, fresh: bool = False) -> None:
        """Runs the whole job of CLUSTER: ps and workers, the chief to an exported model, the evaluator to the end.

        Args:
          cluster: path of cluster.json.
          detach: run in the background (`sh run.sh --detach`); `sh run.sh status` shows it.
          fresh: start over: move a previous run in output_dir aside (to OUTPUT.replaced-<time>) first. Without
            it a run of the same options resumes, and a run of different ones is refused.
        """
        config = cluster_config.load(cluster)
        running = process.PidRecord.read(launcher_pid_path(config))
        if running and process.is_running(running) and running.pid != os.getpid():
            raise UserError(Problem("launcher", running.pid, "already runs this cluster",
                                    "see `sh run.sh status`, or stop it with `sh kill.sh`"))
        if detach:
            start_in_background(config, fresh=fresh)
            return
        pid_path = launcher_pid_path(config)  # so that `sh kill.sh` stops a foreground run too, not just its tasks
        pid_path.parent.mkdir(parents=True, exist_ok=True)
        mine = process.PidRecord(os.getpid(), process.start_ticks(os.getpid()) or 0, tuple(sys.argv))
        mine.write(pid_path)
        try:
            sys.exit(slurm_run.run_in_allocation(config, fresh=fresh) if _under_slurm(config)
                     else run_job(config, fresh=fresh))
        finally:
            if process.PidRecord.read(pid_path) == mine:
                pid_path.unlink()

    @exit_on_user_error("[launcher] ")
    def up(self, cluster: str = "cluster.json") -> None:
        """Starts only the ps and workers of CLUSTER, returns once their ports answer (run the chief yourself)."""
        config = cluster_config.load(cluster)
        if _under_slurm(config):
            config = slurm_run.start_servers_in_allocation(config)
        supervisor = Supervisor(config, say)
        try:
            check_cluster(config, supervisor.hosts, say)
        except PreflightFailed as failure:  # nothing started: the problems alone, exit 2, as for the file
            for line in failure.lines:
                print(f"[launcher] error: {line}", file=sys.stderr, flush=True)
            sys.exit(USER_ERROR_EXIT_CODE)
        try:
            supervisor.start_servers()
        except RunFailed as failure:
            say(f"run failed: {failure}")
            supervisor.stop_everything()
            sys.exit(1)

    @exit_on_user_error("[launcher] ")
    def status(self, cluster: str = "cluster.json") -> None:
        """Prints one row per task (host, pid, state, restarts, uptime, last log line) and the run's progress."""
        config = cluster_config.load(cluster)
        print(render_status(config))
        if _under_slurm(config):
            print("\n".join(slurm_run.status_lines(config)))

    @exit_on_user_error("[launcher] ")
    def down(self, cluster: str = "cluster.json") -> None:
        """Stops every task of CLUSTER by pid file and process group, here and over ssh (under Slurm: every step,
        then the job is cancelled); safe to repeat."""
        config = cluster_config.load(cluster)
        lines = slurm_run.stop_in_allocation(config) if _under_slurm(config) else stop_all(config)
        for line in lines or ["nothing to stop"]:
            say(line)

    @exit_on_user_error("[launcher] ")
    def print_config(self, cluster: str = "cluster.json") -> None:
        """Shows each task's TF_CONFIG, environment and command line without starting anything."""
        config = cluster_config.load(cluster)
        read_from = slurm_run.cluster_file_read(config) if _under_slurm(config) else None
        if config.job_sizes:
            config, nodes = sbatch_script.symbolic_config(config)
            print(f"# job sizes: placed when the job starts; shown on stand-ins for its {nodes} nodes, in "
                  "Slurm's order\n")
        idle = [t.name for t in config.tasks() if t.job not in config.strategy.launched_jobs]
        if idle:
            print(f"# not started under {config.training.strategy}: {', '.join(idle)}\n")
        hosts = backends_for(config)
        for task in config.launched_tasks():
            workdir, command = command_as_run(config, task, hosts[task.address.host].is_remote)
            if read_from:  # steps start here, in the project, and read the placed cluster.json
                workdir, command = str(PROJECT_ROOT), [*command[:-1], str(read_from)]
            print(f"# {task.name} on {task.address.host}, from {workdir}")
            print("unset " + " ".join(taskspec.PROXY_VARIABLES))
            for name, value in taskspec.task_variables(config, task).items():
                print(f"export {name}={shlex.quote(value)}")
            print(shlex.join(command))
            print()

    @exit_on_user_error("[launcher] ")
    def sbatch(self, cluster: str = "cluster.json", output: str = "job.sh", fresh: bool = False) -> None:
        """Writes a batch script that runs CLUSTER's tasks as job steps, for `sbatch job.sh` (it does not heal).

        Refused (exit 2) when the partition can never run it (nodes, CPUs, time limit, GPUs), as Slurm's
        `scontrol show partition` and `sinfo` tell here.

        Args:
          cluster: path of cluster.json.
          output: where to write the script.
          fresh: the script starts over: it moves the previous run's output_dir aside (to OUTPUT.replaced-<time>)
            before training. Without it a second submission resumes (a finished run trains nothing).
        """
        config = cluster_config.load(cluster)
        if not slurm_allocation.check_request(config, slurm_commands.node_request(config)[0]):
            say("could not ask Slurm about the partition here (no sinfo/scontrol answer): the request is unchecked")
        path = sbatch_script.write(config, Path(output), fresh=fresh)
        say(f"wrote {path}: submit it with `sbatch {shlex.quote(str(path))}`; logs go to the logs directory")


def _under_slurm(config) -> bool:
    return config.launcher.backend == "slurm"


if __name__ == "__main__":
    fire.Fire(Launcher)
