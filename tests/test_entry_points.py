"""Every entry point answers `--help` (exit 0) headed by the release, listing what it can do: each command or option,
with its line."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess

from clusterkit import PYTHON, ROOT
from cluster.training_options import TrainingOptions
from common.version import VERSION

HELP_TIMEOUT_S = 120


def launcher_commands() -> list[str]:
    from roles.launch import Launcher

    return [name for name, _ in inspect.getmembers(Launcher, inspect.isfunction) if not name.startswith("_")]


def sidecar_flags() -> list[str]:
    from evaluator.sidecar import evaluate

    return list(inspect.signature(evaluate).parameters)


def expected() -> dict[str, list[str]]:
    """What each entry point's --help must list: the launcher's commands, the others' --flags."""
    return {"roles.launch": launcher_commands(),
            "coordinator.train": [f"--{name}" for name in ("cluster", "worker", "workers",
                                                           *(f.name for f in dataclasses.fields(TrainingOptions)))],
            "evaluator.sidecar": [f"--{name}" for name in sidecar_flags()],
            "roles.server": ["--role", "--index", "--cluster"]}


def helps() -> dict[str, subprocess.CompletedProcess]:
    """`python -m MODULE --help` for every entry point, run side by side (each imports the project)."""
    running = {module: subprocess.Popen([PYTHON, "-m", module, "--help"], cwd=ROOT, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for module in expected()}
    answers = {}
    for module, process in running.items():
        stdout, stderr = process.communicate(timeout=HELP_TIMEOUT_S)
        answers[module] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return answers


def described(text: str, item: str) -> bool:
    """Whether `item` (a command, or a --flag) stands at the start of a help line with a non-empty line after it."""
    match = re.search(rf"^\s+(?:-\w, )?{re.escape(item)}\b.*\n(.*)$", text, re.MULTILINE)
    return bool(match and match.group(1).strip())


def test_every_entry_point_answers_help_with_each_command_or_option_and_its_line():
    answers = helps()
    for module, items in expected().items():
        answer = answers[module]
        assert answer.returncode == 0, f"{module}: {answer.stderr[-2000:]}"
        text = answer.stdout + answer.stderr  # Fire writes its help to stderr
        missing = [item for item in items if not described(text, item)]
        assert not missing, f"{module} --help does not list {missing}:\n{text}"
        assert f"pscluster {VERSION}:" in text, f"{module} --help does not say which release it is:\n{text}"
    assert len(expected()["roles.launch"]) >= 10  # run, up, status, reload, down, print_config, sbatch, plan, ...
    train = answers["coordinator.train"].stderr
    assert "mid-epoch" in train and "per-epoch" not in train  # it resumes within an epoch
