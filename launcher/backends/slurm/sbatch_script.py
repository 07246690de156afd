"""The batch script `roles.launch sbatch` writes: the launcher's steps and TF_CONFIG, for users who run `sbatch job.sh`.

The script places the tasks on the job's nodes as the launcher would (node names in Slurm's order, read with
`scontrol show hostnames` when it starts), writes that cluster.json into the logs directory, starts every ps,
worker, chief and evaluator as its own step with the environment cluster/taskspec.py builds, waits for the chief
and the evaluator, then stops the ps and workers, prints the summary and model paths and exits with the chief's
exit code. As `sh run.sh` does, it first moves the previous run's task logs to logs/previous/ (and, written with
--fresh, the previous output_dir aside). When Slurm warns that the time limit is near (--signal), the chief's
step gets SIGTERM (scancel --signal), so it can checkpoint. It does not heal: a step that dies stays dead (the
launcher's `sh run.sh` heals).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from cluster import config as cluster_config
from cluster import job_sizes, jsonfile, taskspec
from cluster.config import PROJECT_ROOT, ClusterConfig, Task
from common.exit_file import EXIT_FILE_VARIABLE
from launcher.backends.slurm import commands as slurm
from launcher.backends.slurm.endings import WARNING

COMMON_VARIABLES = ("GRPC_FAIL_FAST", "TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL", "GRPC_VERBOSITY",
                    "PYTHONUNBUFFERED")  # the same for every task: exported once
CLUSTER_FILE = "$logs/slurm-cluster-$SLURM_JOB_ID.json"


def node_token(index: int) -> str:
    """A stand-in host name for the job's node `index` (a valid host name, no prefix of another stand-in)."""
    return f"pscluster-node{index}-placeholder"


def symbolic_config(config: ClusterConfig) -> tuple[ClusterConfig, int]:
    """The config placed on stand-in nodes (job sizes) or as written (node names), and the number of nodes."""
    count, names = slurm.node_request(config)
    if not config.job_sizes:
        return config, count
    document = jsonfile.read_document(config.source)
    document.pop("$schema", None)
    nodes = [node_token(i) for i in range(count)]
    document["cluster"] = job_sizes.place(config.job_sizes, nodes, config.slurm.port_base, config.strategy)
    return cluster_config.parse(document, config.source), count


def in_double_quotes(text: str, node_count: int) -> str:
    """`text` for inside "..." in sh, with each stand-in node replaced by its variable ($node0, ...)."""
    return _with_node_variables(text, '\\"$`', node_count)


def in_here_document(text: str, node_count: int) -> str:
    """`text` for an unquoted here-document (where only \\ $ ` are special), stand-in nodes as variables."""
    return _with_node_variables(text, "\\$`", node_count)


def _with_node_variables(text: str, specials: str, node_count: int) -> str:
    escaped = "".join("\\" + c if c in specials else c for c in text)
    for index in reversed(range(node_count)):  # node1 after node10 is replaced
        escaped = escaped.replace(node_token(index), f"${{node{index}}}")
    return escaped


def header(config: ClusterConfig, node_count: int, names: list[str]) -> list[str]:
    logs = config.path(config.launcher.logs_dir)
    options = slurm.allocation_options(config, node_count, names) + [f"--output={logs}/slurm-%j.out"]
    return ["#!/bin/sh",
            f"# Written by `python -m roles.launch sbatch` from {config.source}; submit it with `sbatch FILE`.",
            "# Every task runs as its own job step; ps and workers are stopped once the chief has finished.",
            *(f"#SBATCH {option}" for option in options),
            "set -u", f"cd {shlex.quote(str(PROJECT_ROOT))}", f"logs={shlex.quote(str(logs))}", 'mkdir -p "$logs"']


def node_lines(node_count: int) -> list[str]:
    """The job's nodes in Slurm's order (scontrol expands n[9-10] to n9 n10; it never sorts as text)."""
    return ['set -- $(scontrol show hostnames "$SLURM_JOB_NODELIST")',
            f'if [ $# -lt {node_count} ]; then echo "this job needs {node_count} nodes, it has $#" >&2; exit 2; fi',
            *(f"node{i}=${{{i + 1}}}" for i in range(node_count))]


def cluster_file_lines(symbolic: ClusterConfig, node_count: int) -> list[str]:
    """A here-document writing the placed cluster.json, which every task reads with --cluster."""
    document = jsonfile.read_document(symbolic.source)
    document.pop("$schema", None)
    document["cluster"] = {job: [str(a) for a in addresses] for job, addresses in symbolic.jobs.items()}
    text = json.dumps(document, indent=2)
    return [f'cluster="{CLUSTER_FILE}"', 'cat > "$cluster" <<EOF', in_here_document(text, node_count), "EOF"]


def step_lines(config: ClusterConfig, task: Task, node_count: int) -> list[str]:
    """One task as a background step: srun on its node, its TF_CONFIG and GPUs, its log and exit files."""
    variables = taskspec.task_variables(config, task)
    node = in_double_quotes(task.address.host, node_count)
    options = [o for o in slurm.step_options(config, task) if not o.startswith("--nodelist=")]
    command = taskspec.task_command(config, task)[:-2] + ["--cluster", '"$cluster"']
    environment = [f'TF_CONFIG="{in_double_quotes(variables["TF_CONFIG"], node_count)}"',
                   f'{EXIT_FILE_VARIABLE}="$logs/{task.job}-{task.index}.exit"']
    if not (task.job == "worker" and config.slurm.gpus_per_worker):
        environment.append(f"CUDA_VISIBLE_DEVICES={shlex.quote(variables['CUDA_VISIBLE_DEVICES'])}")
    return [f"# {task.name}",
            f'srun --nodelist="{node}" {shlex.join(options)} \\',
            f"    env {' '.join(environment)} \\",
            f"    {shlex.join(command[:-1])} {command[-1]} > \"$logs/{task.job}-{task.index}.log\" 2>&1 &"]


def script(config: ClusterConfig, fresh: bool = False) -> str:
    """The whole batch script for `config`; `fresh` sets the previous run's output_dir aside first."""
    symbolic, node_count = symbolic_config(config)
    names = [] if config.job_sizes else slurm.node_request(config)[1]
    strategy = config.strategy
    variables = taskspec.task_variables(symbolic, symbolic.launched_tasks()[0])
    lines = header(config, node_count, names) + warning_lines(symbolic) + node_lines(node_count)
    lines += cluster_file_lines(symbolic, node_count)
    lines += ["unset " + " ".join(taskspec.PROXY_VARIABLES) + "  # proxies break gRPC",
              "export " + " ".join(f"{name}={shlex.quote(variables[name])}" for name in COMMON_VARIABLES),
              "servers=''"]
    python = shlex.quote(taskspec.task_command(symbolic, symbolic.lead)[0])
    lines += [f'{python} -m launcher.backends.slurm.batch_steps before "$cluster"{" --fresh" if fresh else ""} '
              "|| exit $?"]
    for job in strategy.launched_jobs:
        for task in symbolic.tasks((job,)):
            lines += step_lines(symbolic, task, node_count)
            role = "servers" if job in strategy.server_jobs else ("lead" if task == symbolic.lead else job)
            lines.append('servers="$servers $!"' if role == "servers" else f"{role}=$!")
    return "\n".join(lines + ending(symbolic, python)) + "\n"


def warning_lines(config: ClusterConfig) -> list[str]:
    """Set first: when Slurm warns of the time limit (--signal=B:USR1@...), SIGTERM goes to the lead's step alone
    (srun itself, sent SIGTERM, would kill its step), so the lead can checkpoint; the script goes on waiting."""
    return ["warn_lead() {",
            f'    echo "{WARNING}: SIGTERM to the lead trainer, so it checkpoints"',
            '    for step in $(squeue --steps --noheader --jobs="$SLURM_JOB_ID" --format="%i %j" | '
            f"awk '$2 == \"{slurm.step_name(config, config.lead)}\" {{print $1}}'); do",
            '        scancel --signal=TERM "$step" 2>/dev/null  # Slurm 22.05 delivers it, yet may exit 225',
            "    done",
            "}",
            f"trap warn_lead {slurm.WARN_SIGNAL}"]


def ending(config: ClusterConfig, python: str) -> list[str]:
    """Wait for the lead trainer (also after the warning's trap) and the evaluator, then stop the servers and
    print what the run wrote; exit with the lead's code."""
    lines = ['wait "$lead"; code=$?',
             'while kill -0 "$lead" 2>/dev/null; do wait "$lead"; code=$?; done  # a trap ends a wait early',
             'echo "lead trainer exited with code $code"']
    if config.tasks(("evaluator",)):
        lines.append('wait "$evaluator"')
    if config.strategy.server_jobs:
        lines.append("kill $servers 2>/dev/null  # srun cancels its step")
    return lines + ["wait", f'{python} -m launcher.backends.slurm.batch_steps after "$cluster" --lead_code "$code"',
                    'exit "$code"']


def write(config: ClusterConfig, output: Path, fresh: bool = False) -> Path:
    """Writes the script, and creates the logs directory: Slurm opens the job's output file there before the
    script's first line runs."""
    config.path(config.launcher.logs_dir).mkdir(parents=True, exist_ok=True)
    output.write_text(script(config, fresh))
    output.chmod(0o755)
    return output
