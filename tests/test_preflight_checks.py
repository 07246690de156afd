"""Checks that need the machine (firewall needs, the task python, this machine's names, reachability) run before any
task starts and end the run with `[launcher] error:` lines only and exit 2."""

from __future__ import annotations

import socket
import subprocess
import types

import pytest

from clusterkit import ROOT, assert_no_traceback, cluster_document, processes_mentioning, run_module, write_cluster
from cluster import config as cluster_config
from launcher import host_checks, preflight, user_code_checks
from common.errors import UserError
from launcher.backends import backends_for
from launcher.backends.local import is_this_machine


def parsed(tmp_path, document: dict) -> cluster_config.ClusterConfig:
    return cluster_config.parse(document, write_cluster(tmp_path, document))


def lines(config) -> list[str]:
    return host_checks.machine_problems(config, config.tasks())


def test_firewall_without_nft(tmp_path, monkeypatch):
    config = parsed(tmp_path, {**cluster_document(), "security": {"firewall": True}})
    monkeypatch.setattr(host_checks.shutil, "which", lambda name: None if name == "nft" else "/bin/true")
    monkeypatch.setattr(host_checks.os, "geteuid", lambda: 0)
    assert lines(config) == [f"cluster.json: security.firewall = True: {socket.gethostname()} has no nft; run the "
                             "launcher as root on hosts with nftables (apt-get install nftables), or set "
                             '"firewall": false']


def test_firewall_without_root(tmp_path, monkeypatch):
    config = parsed(tmp_path, {**cluster_document(), "security": {"firewall": True}})
    monkeypatch.setattr(host_checks.os, "geteuid", lambda: 1000)
    assert [line for line in lines(config) if "has no root" in line]


def test_no_firewall_needs_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(host_checks.os, "geteuid", lambda: 1000)
    assert lines(parsed(tmp_path, cluster_document())) == []


@pytest.mark.parametrize("python", ["no/such/python", "/no/such/python", "no-such-python3", "~/.venv/bin/python"])
def test_missing_task_python(tmp_path, python):
    document = {**cluster_document(), "hosts": {"localhost": {"python": python}}}
    assert lines(parsed(tmp_path, document)) == [
        f"cluster.json: hosts.localhost.python = {python!r}: no such executable on {socket.gethostname()} (from "
        f"{ROOT}); use .venv/bin/python (sh run.sh creates it) or the absolute path of a python that has the "
        "project's packages"]


def test_this_machines_name_and_localhost_are_one_port(tmp_path):
    name = socket.gethostname()
    if not is_this_machine(name):
        pytest.skip(f"{name} does not resolve to this machine here")
    document = cluster_document(evaluator=False)
    port = int(document["cluster"]["worker"][0].split(":")[1])
    document["cluster"]["ps"][0] = f"{name}:{port}"
    config = parsed(tmp_path, document)
    hosts = backends_for(config)
    [problem] = preflight.same_port_problems(config, hosts)
    assert problem.text() == (f"cluster.worker[0] = 'localhost:{port}': is the same port on the same machine as "
                              f"cluster.ps[0] ({name}:{port}); give every task its own port")


def test_loopback_with_a_remote_host(tmp_path):
    document = cluster_document(evaluator=False)
    document["cluster"]["ps"] = ["10.213.9.9:2222"]
    config = parsed(tmp_path, document)
    hosts = {"localhost": types.SimpleNamespace(is_remote=False), "10.213.9.9": types.SimpleNamespace(is_remote=True)}
    problems = [p.text() for p in preflight.loopback_problems(config, hosts)]
    assert len(problems) == 3 and problems[0].startswith(
        f"cluster.worker[0] = '{document['cluster']['worker'][0]}': is this machine only, but tasks on 10.213.9.9 "
        "connect to it too")
    with pytest.raises(UserError):
        preflight.check_cluster(config, hosts, print)


def test_evaluator_by_loopback_with_a_remote_chief(tmp_path):
    document = cluster_document()
    document["cluster"]["chief"] = ["10.213.9.9:2222"]
    config = parsed(tmp_path, document)
    local, remote = types.SimpleNamespace(is_remote=False), types.SimpleNamespace(is_remote=True)
    [problem] = preflight.evaluator_host_problems(config, {"localhost": local, "10.213.9.9": remote})
    assert "runs on another host than the chief (10.213.9.9:2222)" in problem.text()


def test_run_stops_at_preflight_with_error_lines_only(tmp_path):
    """Through the launcher: a missing task python ends the run before any task starts, one line, exit 2."""
    document = {**cluster_document(evaluator=False, logs_dir=str(tmp_path / "logs")),
                "hosts": {"localhost": {"python": "no/such/python"}}}
    document["training"] = {"output_dir": str(tmp_path / "output")}
    path = write_cluster(tmp_path, document)
    result = run_module("roles.launch", "run", str(path), timeout_s=120)
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"[launcher] error: {path.name}: hosts.localhost.python = 'no/such/python': no such executable on "
        f"{socket.gethostname()} (from {ROOT}); use .venv/bin/python (sh run.sh creates it) or the absolute path of "
        "a python that has the project's packages"]
    assert not processes_mentioning(str(tmp_path))


def test_run_sh_with_a_malformed_file(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_bytes(b'{"training": {"seed": -1}, "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], '
                     b'"ps": ["localhost:3"]}}')
    result = subprocess.run(["sh", str(ROOT / "run.sh"), str(path)], capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    assert [line for line in result.stderr.splitlines() if not line.startswith("[bootstrap]")] == [
        f"[launcher] error: {path}: training.seed = -1: must be an integer from 0 to 4294967295; use e.g. 0 (numpy "
        "takes seeds in [0, 2**32))"]


TASK_JOBS = ("chief", "worker", "ps", "evaluator")
USER_MODELS = '''
def build(input_shape, num_classes):
    raise AssertionError("the check must not build the model")


def needs_depth(input_shape, depth):
    raise AssertionError("the check must not build the model")
'''


@pytest.mark.parametrize("spec, problem", [
    ("some_pkg.models:build", "module some_pkg.models is not importable from the project directory "
                              "(ModuleNotFoundError: No module named 'some_pkg'); put it"),
    ("my_models:biuld", "has no function biuld; name a function of that module")])
def test_a_user_model_the_chief_could_not_build_stops_the_run_before_any_task_starts(tmp_path, spec, problem):
    (tmp_path / "my_models.py").write_text(USER_MODELS)
    document = cluster_document(logs_dir=str(tmp_path / "logs"),
                                training={"model": spec, "output_dir": str(tmp_path / "output")})
    path = write_cluster(tmp_path, document)
    result = run_module("roles.launch", "run", str(path), timeout_s=300, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(f"[launcher] error: {path.name}: training.model = {spec!r}: ") and problem in line, line
    task_files = [p.name for p in (tmp_path / "logs").glob("*-*.*") if p.name.split("-")[0] in TASK_JOBS]
    assert task_files == []
    assert not processes_mentioning(str(tmp_path))


def test_user_model_parameters_are_checked_with_the_chiefs_python(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(USER_MODELS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    for spec, expected in (("my_models:build", []), ("cnn", []), ("my_models:needs_depth", [
            "cluster.json: training.model = 'my_models:needs_depth': requires depth, but the chief passes only "
            "input_shape, num_classes, feature_spec (each if the function takes it); give the other parameters "
            "defaults, or take some of input_shape, num_classes, feature_spec"])):
        config = parsed(tmp_path, {**cluster_document(), "training": {"model": spec}})
        assert user_code_checks.model_problems(config, host_checks.host_python(config, "localhost")) == expected


ENDLESS = '''
import tensorflow as tf

def clicks(split, input_context):
    return tf.data.Dataset.from_tensors(({"x": [1.0]}, 1.0)).repeat() if split == "train" else None
'''


def test_a_dataset_function_is_checked_with_the_chiefs_python_before_anything_starts(tmp_path, monkeypatch):
    (tmp_path / "my_pipeline.py").write_text(ENDLESS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    config = parsed(tmp_path, {**cluster_document(), "training": {"model": "my_models:ctr",
                                                                  "dataset": "my_pipeline:clicks"}})
    assert user_code_checks.dataset_problems(config, host_checks.host_python(config, "localhost")) == [
        "cluster.json: training.steps_per_epoch = None: my_pipeline:clicks's training split has no known size "
        "(tf.data cannot count it); give training.steps_per_epoch (steps of one epoch)",
        "cluster.json: training.dataset = 'my_pipeline:clicks': returns None for 'validation', which the evaluator "
        "reads; return the validation split's dataset, or run without an evaluator"]


def test_a_followed_topic_wants_its_workers_on_the_chiefs_host(tmp_path):
    """The workers read the chief's copy of the topic (output_dir/stream): over ssh, on its host only."""
    training = {"model": "dlrm", "dataset": "criteo", "follow_data": True, "data_dir": "kafka://127.0.0.1:9092/c"}
    local, remote = types.SimpleNamespace(is_remote=False), types.SimpleNamespace(is_remote=True)
    on_one_host = parsed(tmp_path, cluster_document(evaluator=False, training=training))
    assert preflight.topic_host_problems(on_one_host, {"localhost": local}) == []
    document = cluster_document(evaluator=False, training=training)
    document["cluster"]["worker"][1] = "10.213.9.9:2222"
    [problem] = preflight.topic_host_problems(parsed(tmp_path, document), {"localhost": local, "10.213.9.9": remote})
    assert problem.text().startswith("cluster.worker[1] = '10.213.9.9:2222': runs on another host than the chief")
