"""Before anything starts: hosts made ready and checked, one line per problem, so a run fails fast and clearly."""

from __future__ import annotations

import data
from cluster import crosschecks
from cluster.config import PROJECT_ROOT, ClusterConfig
from cluster.topic_address import is_topic
from common.errors import Problem, UserError
from launcher import host_checks
from launcher.backends.ssh import commands as ssh_commands
from launcher.backends.base import AgentFailed, BootstrapFailed, HostError, HostUnreachable


class PreflightFailed(Exception):
    """Everything found wrong before starting, one line each."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def exposure_warning(config: ClusterConfig) -> str | None:
    """What is open to the network when tasks listen on non-loopback addresses (TensorFlow has no auth)."""
    listening = tuple(job for job in config.strategy.launched_jobs if job != "evaluator")
    if config.firewall:
        return None  # each host's table lets only cluster members in
    exposed = [t for t in config.tasks(listening) if not t.address.is_loopback]
    if not exposed:
        return None
    return ("warning: TensorFlow servers listen on every interface with no authentication and run any graph "
            f"they are sent; exposed: {', '.join(f'{t.name} port {t.address.port}' for t in exposed)}. "
            "Keep these hosts on a private network.")


def _launched(config: ClusterConfig) -> list:
    return [(f"cluster.{t.job}[{t.index}]", t) for t in config.launched_tasks()]


def same_port_problems(config: ClusterConfig, hosts: dict) -> list[Problem]:
    """Two tasks on this machine (by any of its names or addresses) on one port: the second could never start."""
    seen, problems = {}, []
    for field, task in _launched(config):
        key = ("this machine", task.address.port) if not hosts[task.address.host].is_remote else task.address.place
        if key in seen:
            problems.append(Problem(field, str(task.address), f"is the same port on the same machine as {seen[key]}",
                                    "give every task its own port"))
        seen.setdefault(key, f"{field} ({task.address})")
    return problems


def loopback_problems(config: ClusterConfig, hosts: dict) -> list[Problem]:
    """A loopback address means each host itself: tasks on other hosts could never reach it."""
    remote = sorted(name for name, host in hosts.items() if host.is_remote)
    if not remote:
        return []
    return [Problem(field, str(task.address), f"is this machine only, but tasks on {', '.join(remote)} connect to it "
                    "too and would reach themselves", "use a name or address of this machine that the other hosts "
                    "can reach") for field, task in _launched(config) if task.address.place[0] == "this machine"]


def evaluator_host_problems(config: ClusterConfig, hosts: dict) -> list[Problem]:
    """The evaluator must share the lead trainer's machine (validation judged every pair but loopback vs name)."""
    lead, evaluators = crosschecks.lead_address(config.jobs, config.training), config.jobs.get("evaluator", ())
    if not (lead and evaluators):
        return []
    lead_host, evaluator_host = hosts[lead.host], hosts[evaluators[0].host]
    if not (lead_host.is_remote or evaluator_host.is_remote) or lead_host is evaluator_host:
        return []
    return [crosschecks.evaluator_problem(evaluators[0], lead, config.training)]


def topic_host_problems(config: ClusterConfig, hosts: dict) -> list[Problem]:
    """A followed Kafka topic is copied by the chief into its output_dir/stream, which the workers read: over ssh,
    where each host has its own disk, every worker must run on the chief's host."""
    lead = crosschecks.lead_address(config.jobs, config.training)
    if not (lead and is_topic(config.training.data_dir)):
        return []
    return [Problem(f"cluster.worker[{index}]", str(worker), f"runs on another host than the chief ({lead}), "
                    f"but the workers read the topic {config.training.data_dir} as the chief copies it into its "
                    "output_dir/stream (docs/kafka.md)", f'put it on {lead.host}, e.g. "{lead.host}:{worker.port}", '
                    "or run under Slurm or Kubernetes with a shared output_dir")
            for index, worker in enumerate(config.jobs.get("worker", ()))
            if hosts[worker.host] is not hosts[lead.host] and (hosts[worker.host].is_remote or
                                                              hosts[lead.host].is_remote)]


def code_folder_problems(config: ClusterConfig, hosts: dict) -> list[Problem]:
    """Run files inside the toolkit's code folders would be replaced by the next sync to a remote host."""
    if not any(host.is_remote for host in hosts.values()):
        return []
    fields = (("training.output_dir", config.training.output_dir), ("launcher.logs_dir", config.launcher.logs_dir),
              ("training.data_dir", config.training.data_dir))
    return [Problem(field, given, f"lies inside the toolkit's code folder {given.split('/')[0]}/, which every run "
                    "replaces on remote hosts", "name a directory outside "
                    f"{', '.join(ssh_commands.CODE_FOLDERS)}, e.g. results/...")
            for field, given in fields if given and not given.startswith(("/", "~"))
            and given.split("/")[0] in ssh_commands.CODE_FOLDERS]


def host_problem(config: ClusterConfig, name: str, error: HostError) -> str:
    """One line for a host that failed before anything started: the error and what to do about it."""
    settings, launcher = config.host(name), config.launcher
    if isinstance(error, BootstrapFailed):
        return str(error)  # it says the cause and the fix
    if isinstance(error, HostUnreachable):
        if "Host key verification failed" in str(error) and launcher.ssh_host_keys == "strict":
            return f"{error}; {ssh_commands.known_hosts_hint(name, settings, launcher)}"
        return (f"{error}; check that it is up, that sshd runs there and that "
                f"`{ssh_commands.login_hint(name, settings, launcher)}` works without a password")
    if settings.python.startswith("/"):
        return (f"{error}; hosts.{name}.python = {settings.python!r} cannot run the toolkit there: give the path of "
                "a Python 3.11 that has the project's packages, or a relative path (.venv/bin/python) to have "
                "the launcher build that .venv there")
    return (f"{error}; the .venv the launcher built on {name} cannot run the toolkit: delete "
            f"{settings.workdir or 'the workdir'}/.venv there to have it built again")


def check_cluster(config: ClusterConfig, hosts: dict, say, *, fresh: bool = False) -> None:
    """Checks placement and the data set (when the lead trainer runs here), syncs remote hosts, then checks ports,
    disk, the lead's output, the firewall's needs and versions on every host that runs a task. With `fresh`, a
    previous run in the lead's output_dir is first moved aside."""
    problems = [*same_port_problems(config, hosts), *loopback_problems(config, hosts),
                *evaluator_host_problems(config, hosts), *topic_host_problems(config, hosts),
                *code_folder_problems(config, hosts)]
    if problems:
        raise UserError(problems, source=str(config.source))
    if not hosts[config.lead.address.host].is_remote:
        data.preflight(config.training, PROJECT_ROOT)  # a data mistake: one line per problem, exit 2
    warning = exposure_warning(config)
    if warning:
        say(warning)
    mine = host_checks.versions()
    problems = []
    for name, host in hosts.items():
        tasks = [t for t in config.launched_tasks() if t.address.host == name]
        if not tasks:
            continue
        try:
            host.prepare(say)
            if fresh and config.lead in tasks:
                _set_aside(config, host, say)
            report = host.preflight(tasks)
        except (HostUnreachable, AgentFailed) as error:
            problems.append(host_problem(config, name, error))
            continue
        problems += report.problems
        if report.versions != mine:
            problems.append(f"{name} has {report.versions} but the launcher has {mine}; install the same "
                            "versions there (sh roles/bootstrap.sh run in its workdir)")
    if problems:
        raise PreflightFailed(problems)


def _set_aside(config: ClusterConfig, host, say) -> None:
    moved_to = host.set_aside_previous_run()
    if moved_to:
        say(f"--fresh: moved the previous run in {config.training.output_dir} aside to {host.name}:{moved_to}")
