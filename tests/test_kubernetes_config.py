"""The kubernetes section of cluster.json: what it accepts, one line per mistake (exit 2), and where tasks listen."""

from __future__ import annotations

import dataclasses
import json

import pytest

from clusterkit import ROOT, assert_no_traceback, run_module, write_cluster
from cluster import config as cluster_config
from cluster import taskspec
from cluster.kubernetes_settings import KubernetesSettings
from common.errors import UserError

SIZES = {"chief": 1, "worker": 2, "ps": 2, "evaluator": 1}
IMAGE = "registry.example.com/team/pscluster:0.1.0"


def k8s_document(**kubernetes) -> dict:
    """A valid kubernetes cluster.json: job sizes, the backend, an image and a volume (the evaluator needs it)."""
    section = {"image": IMAGE, "output_volume": "pscluster-output", **kubernetes}
    return {"cluster": dict(SIZES), "launcher": {"backend": "kubernetes"}, "kubernetes": section,
            "training": {"epochs": 1}}


def load(tmp_path, document: dict):
    return cluster_config.load(write_cluster(tmp_path, document))


def test_sizes_are_placed_at_the_pods_host_names_on_one_port(tmp_path):
    config = load(tmp_path, k8s_document(name="mnist", port=2300))
    assert [str(a) for a in config.jobs["worker"]] == ["mnist-worker-0-0.mnist:2300", "mnist-worker-1-0.mnist:2300"]
    assert str(config.lead.address) == "mnist-chief-0-0.mnist:2300"
    spec = taskspec.tf_config(config, config.task("ps", 1))
    assert spec["cluster"]["ps"] == ["mnist-ps-0-0.mnist:2300", "mnist-ps-1-0.mnist:2300"]
    assert "evaluator" not in spec["cluster"] and spec["task"] == {"type": "ps", "index": 1}
    evaluator = taskspec.tf_config(config, config.task("evaluator", 0))
    assert evaluator["cluster"] == {"evaluator": ["mnist-evaluator-0-0.mnist:2300"]}


def test_every_setting_is_taken(tmp_path):
    settings = {"image": IMAGE, "name": "run7", "namespace": "ml", "output_volume": "shared.claim",
                "cpu": {"worker": "2", "ps": "500m"}, "memory": {"chief": "4Gi", "ps": "1.5Gi"},
                "gpus_per_worker": 1, "node_selector": {"cloud.google.com/gke-nodepool": "gpu"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "service_account": "trainer", "image_pull_policy": "Always", "port": 2345,
                "labels": {"team": "recsys"}, "annotations": {"example.com/owner": "alice"},
                "termination_grace_period_s": 300}
    config = load(tmp_path, k8s_document(**settings))
    assert json.loads(json.dumps(dataclasses.asdict(config.kubernetes))) == settings


@pytest.mark.parametrize("section,expected", [
    ({"image": None}, "kubernetes.image = None: is required by the kubernetes backend"),
    ({"image": "has space:1"}, "kubernetes.image = 'has space:1': is not a container image reference"),
    ({"name": "Run_1"}, "kubernetes.name = 'Run_1': must be a DNS-1035 label"),
    ({"name": "a" * 50}, "makes pod names too long for Kubernetes (" + "a" * 50 + "-evaluator-0-0-abcde: 70"),
    ({"namespace": "-ml"}, "kubernetes.namespace = '-ml': must be a DNS-1123 label"),
    ({"output_volume": None}, "kubernetes.output_volume = None: is required with an evaluator"),
    ({"output_volume": "Bad_Claim"}, "kubernetes.output_volume = 'Bad_Claim': must name a PersistentVolumeClaim"),
    ({"cpu": {"worker": "two"}}, "kubernetes.cpu = {'worker': 'two'}: must map chief, worker, ps or evaluator"),
    ({"cpu": {"trainer": "2"}}, "kubernetes.cpu = {'trainer': '2'}: must map chief, worker, ps or evaluator"),
    ({"memory": {"ps": "0"}}, "must map chief, worker, ps or evaluator to a positive memory quantity"),
    ({"gpus_per_worker": -1}, "kubernetes.gpus_per_worker = -1: must be an integer from 0 to 64"),
    ({"node_selector": {"pool": 3}}, "kubernetes.node_selector = {'pool': 3}: must map node label keys"),
    ({"tolerations": [{"key": "a", "operator": "Sometimes"}]}, "kubernetes.tolerations"),
    ({"tolerations": [{"operator": "Exists", "value": "x"}]}, "must be a list of Kubernetes tolerations"),
    ({"service_account": "Trainer!"}, "kubernetes.service_account = 'Trainer!': must name a ServiceAccount"),
    ({"image_pull_policy": "sometimes"}, "must be Always, IfNotPresent or Never"),
    ({"port": 80}, "kubernetes.port = 80: must be a port from 1024 to 65535"),
    ({"labels": {"jobset.sigs.k8s.io/jobset-name": "x"}}, "kubernetes.labels"),
    ({"labels": {"team": "a" * 64}}, "must map label keys to label values"),
    ({"annotations": {"kubernetes.io/x": "y"}}, "kubernetes.annotations"),
    ({"termination_grace_period_s": 0}, "must be a whole number of seconds from 1 to 86400"),
    ({"imagee": IMAGE}, "kubernetes.imagee = 'registry.example.com/team/pscluster:0.1.0': unknown setting"),
])
def test_each_mistake_is_one_line_naming_field_value_and_fix(tmp_path, section, expected):
    with pytest.raises(UserError) as raised:
        load(tmp_path, k8s_document(**section))
    lines = raised.value.lines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert "; use" in lines[0] or "; give" in lines[0] or "; build" in lines[0] or "; create" in lines[0] \
        or "; shorten" in lines[0] or "; fix" in lines[0], lines[0]


def test_output_dir_declared_shared_needs_the_claim_every_pod_mounts(tmp_path):
    document = k8s_document(output_volume=None)
    document["cluster"].pop("evaluator")
    document["training"]["output_dir_shared"] = True
    with pytest.raises(UserError) as raised:
        load(tmp_path, document)
    assert ["training.output_dir_shared = True: needs kubernetes.output_volume" in line
            for line in raised.value.lines()] == [True], raised.value.lines()
    document["kubernetes"]["output_volume"] = "pscluster-output"
    assert load(tmp_path, document).training.output_dir_shared


def test_addresses_are_refused_under_the_kubernetes_backend(tmp_path):
    document = k8s_document()
    document["cluster"] = {"chief": ["localhost:2222"], "worker": ["localhost:2223"], "ps": ["localhost:2224"]}
    with pytest.raises(UserError) as raised:
        load(tmp_path, document)
    assert ["cannot be used by the kubernetes backend" in line for line in raised.value.lines()] == [True]


def test_the_jobset_command_exits_2_with_one_line_per_mistake_and_writes_nothing(tmp_path):
    path = write_cluster(tmp_path, k8s_document(image=None, port=1, namespace="ML"))
    output = tmp_path / "jobset.yaml"
    result = run_module("roles.launch", "jobset", str(path), "--output", str(output))
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 3 and not output.exists(), result.stderr


def test_the_jobset_command_refuses_another_backend(tmp_path):
    document = {"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223"], "ps": ["localhost:2224"]}}
    result = run_module("roles.launch", "jobset", str(write_cluster(tmp_path, document)),
                        "--output", str(tmp_path / "j.yaml"))
    assert result.returncode == 2 and "launcher.backend = 'hosts': is not kubernetes" in result.stderr


def test_schema_names_exactly_the_settings_and_their_defaults():
    schema = json.loads((ROOT / "roles" / "cluster.schema.json").read_text())["properties"]
    properties = schema["kubernetes"]["properties"]
    assert list(properties) == [f.name for f in dataclasses.fields(KubernetesSettings)]
    defaults = {k: v["default"] for k, v in properties.items()}
    assert defaults == json.loads(json.dumps(dataclasses.asdict(KubernetesSettings())))
    assert "kubernetes" in schema["launcher"]["properties"]["backend"]["enum"]
