"""The names 0.5's docs gave still work in 0.6 (docs/upgrading.md): the moved modules' imports, the follower's
command and a copy of its old file, and the benchmarks' flat names."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import subprocess

from clusterkit import PYTHON, ROOT, run_python


def test_the_old_imports_give_the_moved_objects():
    from coordinator.compiled import CUSTOM_OBJECTS
    from models import compiled, recommenders

    assert CUSTOM_OBJECTS is compiled.CUSTOM_OBJECTS
    assert importlib.import_module("coordinator.recommenders").CUSTOM_OBJECTS is recommenders.CUSTOM_OBJECTS


def test_the_followers_old_command_runs_and_a_copy_of_its_old_file_runs_alone(tmp_path):
    shutil.copy(ROOT / "coordinator" / "publish" / "follower.py", tmp_path / "follower.py")  # as 0.5 said to
    module = run_python("-m", "coordinator.publish.follower", "--help", timeout_s=120)  # forked: it imports TensorFlow
    alone = subprocess.run([PYTHON, "follower.py", "--help"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)  # a process of its own: nothing else imported
    for shown in (module, alone):
        assert shown.returncode == 0 and "--serving" in shown.stdout, shown.stderr[-2000:]


def test_each_benchmark_is_found_by_its_flat_name_too():
    for group in ("kit", "workload", "tables", "data", "online", "faults"):
        for path in (ROOT / "bench" / group).glob("[!_]*.py"):
            spec = importlib.util.find_spec(f"bench.{path.stem}")
            assert spec is not None and spec.origin == str(path), path
