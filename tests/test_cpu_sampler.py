"""tests/cpu_sampler.py, which says where the suite's CPU goes: kinds told apart, and a child's CPU counted."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import cpu_sampler
from clusterkit import PYTHON, ROOT

BURN = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"


def test_each_task_kind_is_told_from_its_command_line():
    assert cpu_sampler.kind_of("python -m roles.server --role ps --index 0 --cluster c.json") == "ps"
    assert cpu_sampler.kind_of("python -m roles.server --role worker --index 1") == "worker"
    assert cpu_sampler.kind_of(".venv/bin/python -m coordinator.train --cluster c.json") == "chief"
    assert cpu_sampler.kind_of("python -m online.publish.exporter req.json") == "exporter"
    assert cpu_sampler.kind_of("python -m pytest --durations=0") == "pytest"
    assert cpu_sampler.kind_of("/usr/sbin/slurmd -D") == "daemons" and cpu_sampler.kind_of("sleep 1") == "other"
    assert cpu_sampler.kind_of("/usr/sbin/sshd -D -f /tmp/pytest-of-root/pytest-3/hosts0/sshd_config") == "daemons"
    assert cpu_sampler.kind_of("slurmstepd: [3.0]") == "daemons"
    assert cpu_sampler.kind_of("sshd: root@notty") == "daemons"
    assert cpu_sampler.kind_of("python -m roles.server --role ps --cluster /tmp/pytest-of-root/test_slurm0/c") == "ps"
    assert cpu_sampler.kind_of("python -m roles.launch run /tmp/pytest-of-root/pytest-3/t0/cluster.json") == "launcher"
    assert cpu_sampler.kind_of("python -m online.publish.follower --output /tmp/pytest-of-root/o") == "follower"


def test_other_processes_are_named_by_their_program():
    assert cpu_sampler.program_of(["/usr/bin/ssh", "-o", "BatchMode=yes", "root@10.213.0.10", "true"]) == "ssh"
    client = [".venv/bin/python3", "tests/serving_client.py", "model", "examples"]
    assert cpu_sampler.program_of(client) == "python serving_client.py"
    assert cpu_sampler.program_of(["python", "-m", "roles.launch", "run", "c.json"]) == "python roles.launch"
    assert cpu_sampler.program_of(["sleep"]) == "sleep" and cpu_sampler.program_of([]) == "?"


def test_a_commands_childrens_cpu_is_counted_and_given_to_their_test(tmp_path):
    out = tmp_path / "cpu.json"
    result = subprocess.run([PYTHON, str(ROOT / "tests" / "cpu_sampler.py"), "--every_s", "0.2", "--out", str(out),
                             "--", PYTHON, "-c", BURN], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PYTEST_CURRENT_TEST": "tests/test_x.py::test_y (call)", "PATH": "/usr/bin:/bin"},
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    measured = json.loads(out.read_text())
    assert 0.7 <= measured["by_module"]["test_x.py"] <= 3.0, measured  # the child's 1 CPU-s, and the sampler's own
    assert measured["by_test"]["test_x.py::test_y"] >= 0.7, measured  # and to the test, whatever its phase
    assert measured["other_by_program"]["python -c"] >= 0.7, measured
    assert measured["processes_by_kind"]["other"] >= 1, measured  # the child, started after the first look
    assert measured["machine_busy_cpu_s"] >= 1 and all(0 <= s <= 1 for s in measured["machine_busy_share"]), measured
    assert "[cpu]" in result.stdout


def test_the_machines_busy_share_is_read_per_minute_from_its_clock_ticks():
    ticks = [(0, 0), (100, 100), (250, 150), (250, 350)]
    busy = cpu_sampler.machine_busy(ticks, every=2)
    assert busy["machine_busy_share"] == [0.62, 0.0]  # 250 of 400 ticks busy, then none of 200
    assert busy["machine_busy_cpu_s"] == round(250 / os.sysconf("SC_CLK_TCK"))


def test_each_pytests_own_cpu_by_module_is_summed_over_lanes(tmp_path):
    out = tmp_path / "cpu.json"
    write = ("import json, os, pathlib\nfolder = pathlib.Path(os.environ['PSCLUSTER_TEST_OWN_CPU'])\n"
             "(folder / 'main.json').write_text(json.dumps({'test_a.py': 2.5, 'test_b.py': 1.0}))\n"
             "(folder / 'multihost.json').write_text(json.dumps({'test_a.py': 0.5}))\nprint(folder)")
    result = subprocess.run([PYTHON, str(ROOT / "tests" / "cpu_sampler.py"), "--every_s", "0.2", "--out", str(out),
                             "--", PYTHON, "-c", write], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["pytest_own_by_module"] == {"test_a.py": 3.0, "test_b.py": 1.0}
    assert not Path(result.stdout.splitlines()[0]).exists()  # the folder is the sampler's, removed
