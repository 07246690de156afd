"""The agent's command line as the launcher, Slurm's preflight step and the outputs pod give it (launcher/agent_cli.py),
and as a person mistypes it: one line and exit 2."""

from __future__ import annotations

import subprocess

import pytest

from clusterkit import PYTHON, ROOT
from launcher import agent_cli
from launcher.agent import HostControl


class Recorder:
    """What a command was called with."""

    def __init__(self):
        self.called = None

    def start(self, cluster: str, tasks: str, workers: str = "", run: str = ""):
        self.called = ("start", cluster, tasks, workers, run)

    def stop(self, cluster: str, tasks: str, quick: bool = False):
        self.called = ("stop", cluster, tasks, quick)

    def _hidden(self, cluster: str):
        self.called = ("hidden", cluster)


@pytest.mark.parametrize("argv,called", [
    (["start", "--cluster", "c.json", "--tasks", "ps:0,worker:1", "--workers", "0,2", "--run", "17"],
     ("start", "c.json", "ps:0,worker:1", "0,2", "17")),
    (["start", "--cluster=c.json", "--tasks=chief:0"], ("start", "c.json", "chief:0", "", "")),
    (["start", "--tasks", "chief:0", "--cluster", "c.json", "--workers", ""], ("start", "c.json", "chief:0", "", "")),
    (["stop", "--cluster", "c.json", "--tasks", "ps:0", "--quick"], ("stop", "c.json", "ps:0", True)),
    (["stop", "--cluster", "c.json", "--tasks", "ps:0"], ("stop", "c.json", "ps:0", False)),
])
def test_each_way_the_callers_give_options_reaches_the_command(argv, called):
    recorder = Recorder()
    agent_cli.call(recorder, argv)
    assert recorder.called == called


@pytest.mark.parametrize("argv,said", [
    (["begin", "--cluster", "c.json"], "unknown command 'begin'"),
    (["_hidden", "--cluster", "c.json"], "unknown command '_hidden'"),
    (["stop", "--cluster", "c.json", "--tasks", "ps:0", "--fast"], "stop takes no option 'fast'"),
    (["stop", "--cluster", "c.json", "--tasks"], "--tasks needs a value"),
    (["stop", "--cluster", "c.json"], "stop needs --tasks"),
])
def test_a_mistake_is_one_line_and_exit_2(argv, said, capsys):
    recorder = Recorder()
    with pytest.raises(SystemExit) as exited:
        agent_cli.call(recorder, argv)
    assert exited.value.code == 2 and recorder.called is None
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and said in lines[0] and "--help" in lines[0], lines


def test_help_lists_every_command_of_the_agent_with_its_options():
    shown = agent_cli.usage(HostControl())
    for line in ("  status --cluster CLUSTER --tasks TASKS", "  stop --cluster CLUSTER --tasks TASKS [--quick]",
                 "  start --cluster CLUSTER --tasks TASKS [--workers WORKERS] [--run RUN]"):
        assert line in shown.splitlines(), shown
    run = subprocess.run([PYTHON, "-m", "launcher.agent", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 0 and run.stdout.strip() == shown, run.stderr
