"""`python -m roles.launch run|status|reload|down|...`: the commands behind run.sh and kill.sh (`--help` lists all)."""

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
from common.fields import is_int, is_number
from common.logs import import_tensorflow_quietly, quiet_tensorflow
from common.version import titled
from launcher import memory_requests, process, reload
from launcher.backends.slurm import allocation as slurm_allocation
from launcher.backends.slurm import commands as slurm_commands
from launcher.backends.slurm import run as slurm_run
from launcher.backends.slurm import sbatch_script
from launcher.backends import backends_for
from launcher.backends.ssh.host import command_as_run
from launcher.console import say
from launcher.preflight import PreflightFailed, check_cluster
from launcher.run import launcher_pid_path, run_job, running_launcher, start_in_background, stop_all
from launcher.status import render_status
from launcher.supervisor import RunFailed, Supervisor


class Launcher:
    """Runs, shows and stops the cluster described by cluster.json.

    `python -m roles.launch COMMAND [cluster.json] [--flags]`; `python -m roles.launch COMMAND --help` shows a
    command's flags. `sh run.sh` is `run`, `sh run.sh status` and `sh run.sh reload` are `status` and `reload`,
    `sh kill.sh` is `down`.
    """

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
        warning = memory_requests.checked(config)  # a scheduler's request: refused before the job is sent
        if warning:
            say(warning)
        running = running_launcher(config)
        if running and running.pid != os.getpid():
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
            sys.exit(_run_by_backend(config, fresh))
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
        if _on_kubernetes(config):
            print("\n".join(_kubernetes().status_lines(config)))
            return
        print(render_status(config))
        if _under_slurm(config):
            print("\n".join(slurm_run.status_lines(config)))

    @exit_on_user_error("[launcher] ")
    def reload(self, cluster: str = "cluster.json") -> None:
        """Hands an edited CLUSTER (workers or ps added or removed) to the launcher that runs it.

        The chief stops with a checkpoint, servers that left stop, new ones start, and the chief resumes on the
        new spec; under Slurm, new job sizes are placed on the nodes the job holds."""
        config = cluster_config.load(cluster)
        unsupported = reload.refusals(config, config)  # what no reload can change: the backend
        if unsupported:
            raise UserError(unsupported, source=str(config.source))
        running = running_launcher(config)
        if not running:
            raise UserError(Problem("launcher", str(launcher_pid_path(config)), "no launcher runs this cluster",
                                    "start it with `sh run.sh`; reload changes a running job"))
        for line in reload.request(config, running_pid=running.pid):
            say(f"reload: {line}")

    @exit_on_user_error("[launcher] ")
    def down(self, cluster: str = "cluster.json") -> None:
        """Stops every task of CLUSTER, here and over ssh; safe to repeat.

        By pid file and process group; under Slurm every step, then the job it submitted is cancelled; on
        Kubernetes the JobSet is deleted."""
        config = cluster_config.load(cluster)
        lines = (_kubernetes().down(config) if _on_kubernetes(config) else
                 slurm_run.stop_in_allocation(config) if _under_slurm(config) else stop_all(config))
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
                if name == "CUDA_VISIBLE_DEVICES" and taskspec.scheduler_gives_gpus(config, task):
                    print(f"# {name}: set by {config.launcher.backend} to the GPUs it gives this worker")
                else:
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

    @exit_on_user_error("[launcher] ")
    def plan(self, cluster: str = "cluster.json") -> None:
        """Predicts steps/s for 1 to 2x CLUSTER's ps, names what bounds each and how many ps are enough.

        Builds the model here on the CPU and reads the bytes each ps moves per step; measures each worker host
        <-> ps host link with a one-second transfer over ssh (or takes hosts.<name>.link_gbps and link_rtt_ms) and
        a step's compute (or takes hosts.<name>.step_compute_ms); asks each host for its cores and memory (or takes
        hosts.<name>.cores and memory_gib: with every figure given it reaches no host). Then it starts servers
        here, on loopback, for two or three calibration runs (one worker with one ps, then two ps; a lone worker
        also through a throttled link), each at most 300 s, usually 10-40 s. The chief later logs its measured
        steps/s beside the prediction.
        """
        config = cluster_config.load(cluster)
        if config.job_sizes:
            raise UserError(Problem("cluster", dict(config.job_sizes), "plan needs the hosts of the ps and workers, "
                                    "and job sizes are placed only when the Slurm job starts",
                                    "list the nodes' host:port in cluster, or use `plan_on_paper` with your figures"))
        if config.training.strategy != "parameter_server" or not config.jobs.get("ps"):
            raise UserError(Problem("training.strategy", config.training.strategy, "plan predicts ps clusters",
                                    "use parameter_server with at least one ps"))
        os.environ.update({"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": "-1"})
        import_tensorflow_quietly()
        quiet_tensorflow()
        from launcher import capacity_plan
        from launcher.calibration_run import CalibrationFailed
        from launcher.link_probe import ProbeFailed

        try:
            lines = capacity_plan.plan(config, say)
        except ProbeFailed as failure:  # it names the hosts.<name> keys that would spare the probe
            print(f"[launcher] error: {failure}", file=sys.stderr)
            sys.exit(1)
        except CalibrationFailed as failure:
            print(f"[launcher] error: {failure}", file=sys.stderr)
            sys.exit(1)
        print("\n".join(lines), flush=True)
        say(f"plan written to {capacity_plan.plan_path(config)} (the chief compares its steps/s with it)")

    @exit_on_user_error("[launcher] ")
    def plan_on_paper(self, workers: int = 1, ps: int = 1, variable_mb: float = 102.0, link_gbps: float = 10.0,
                      step_compute_ms: float = 245.0) -> None:
        """The plan's table from given figures alone (dense variables, one host per task), e.g. ResNet-50's.

        Args:
          workers: worker count.
          ps: ps count.
          variable_mb: MB (10^6 bytes) of trainable variables.
          link_gbps: every host's link, in Gbit/s.
          step_compute_ms: one step's compute on a worker, in ms.
        """
        figures = {"--workers": workers, "--ps": ps, "--variable_mb": variable_mb, "--link_gbps": link_gbps,
                   "--step_compute_ms": step_compute_ms}
        bad = [Problem(name, value, "must be a number above 0", f"give {name} a positive number")
               for name, value in figures.items() if not is_number(value) or value <= 0]
        bad += [Problem(name, value, "must be a whole number", f"give {name} e.g. 2")
                for name, value in figures.items() if name in ("--workers", "--ps") and not is_int(value)]
        if bad:
            raise UserError(bad)
        from launcher.capacity_plan import on_paper

        print("\n".join(on_paper(workers=workers, ps=ps, variable_mb=variable_mb, link_gbps=link_gbps,
                                 step_compute_ms=step_compute_ms)))

    @exit_on_user_error("[launcher] ")
    def jobset(self, cluster: str = "cluster.json", output: str = "jobset.yaml") -> None:
        """Writes the JobSet that runs CLUSTER on Kubernetes, for `kubectl apply -f jobset.yaml`.

        With its ConfigMap and NetworkPolicy; needs "launcher": {"backend": "kubernetes"} and job sizes.

        Args:
          cluster: path of cluster.json.
          output: where to write the manifests.
        """
        from launcher.backends.kubernetes import jobset

        config = cluster_config.load(cluster)
        if config.launcher.backend != "kubernetes":
            raise UserError(Problem("launcher.backend", config.launcher.backend, "is not kubernetes, so there are "
                                    "no pods to describe", 'set "launcher": {"backend": "kubernetes"} and give '
                                    "job sizes and a kubernetes section"))
        path = jobset.write(config, Path(output))
        say(f"wrote {path}: apply it with `kubectl apply -f {shlex.quote(str(path))}` (JobSet controller v0.12)")


def _run_by_backend(config, fresh: bool) -> int:
    if _on_kubernetes(config):
        return _kubernetes().run(config)
    return slurm_run.run_in_allocation(config, fresh=fresh) if _under_slurm(config) else run_job(config, fresh=fresh)


def _on_kubernetes(config) -> bool:
    return config.launcher.backend == "kubernetes"


def _kubernetes():
    """The kubernetes backend's run, status and down (through kubectl)."""
    from launcher.backends.kubernetes import run

    return run


def _under_slurm(config) -> bool:
    return config.launcher.backend == "slurm"


if __name__ == "__main__":
    Launcher.__doc__ = titled(Launcher.__doc__)
    fire.Fire(Launcher(), name="roles.launch")  # an instance: Fire's --help then lists the commands
