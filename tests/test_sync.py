"""What a sync to a host may replace: the toolkit's code only; run outputs and a user's files stay (local rsync)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from launcher.backends.ssh.commands import sync_filters, user_code

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync (tests/system_packages.sh)")


def tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def make(root, files) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)


def test_a_sync_prunes_code_folders_only_and_adds_the_user_model_package(tmp_path):
    source, workdir = tmp_path / "project", tmp_path / "workdir"
    make(source, ["launcher/agent.py", "common/net.py", "pyproject.toml", "mymodels/small.py", "output/summary.json",
                  "results-x/old.txt", "notes.txt", "launcher/__pycache__/agent.cpython-311.pyc"])
    make(workdir, ["launcher/removed_since.py", "common/gone/__pycache__/x.pyc", "results-a/model/model.h5",
                   "output/summary.json", "logs-b/chief-0.log", "datasets/part-0", "notes.txt", "mymodels/remote.py",
                   ".venv/bin/python", ".pscluster/cluster.json"])
    (workdir / "notes.txt").write_text("the host's own notes")
    (workdir / "output/summary.json").write_text("the chief's summary")
    user = user_code(source, "mymodels.small:build")
    assert user == ["/mymodels/"] and user_code(source, "cnn") == []
    result = subprocess.run(["rsync", "-a", "--delete", *sync_filters(user), f"{source}/", f"{workdir}/"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert tree(workdir) == sorted([
        ".pscluster/cluster.json", ".venv/bin/python", "common/net.py", "datasets/part-0", "launcher/agent.py",
        "logs-b/chief-0.log", "mymodels/remote.py", "mymodels/small.py", "notes.txt", "output/summary.json",
        "pyproject.toml", "results-a/model/model.h5"])
    assert (workdir / "notes.txt").read_text() == "the host's own notes"  # not replaced by the launcher's file
    assert (workdir / "output/summary.json").read_text() == "the chief's summary"  # not the launcher's stale one
