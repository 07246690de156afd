"""The manifests `roles.launch jobset` writes, checked against published schemas (PyPI, never vendored) and JobSet's
webhook rules, and read for what each pod is told: TF_CONFIG, index, exit codes, restarts and success."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest
from kubeflow_trainer_api.models import JobsetV1alpha2JobSet

from clusterkit import run_module, write_cluster
from cluster import config as cluster_config
from common.errors import CHIEF_REPLACED_EXIT_CODE, PREEMPTED_EXIT_CODE, USER_ERROR_EXIT_CODE
from jobsetrules import webhook_problems
from launcher.backends.kubernetes import jobset, outputs, pods
from test_kubernetes_config import k8s_document

KUBERNETES_VERSION = "1.34"  # podFailurePolicy is GA since 1.31


def manifests(tmp_path, **kubernetes) -> list[dict]:
    """The documents of jobset.yaml, written by the command a user runs, read back as YAML."""
    import yaml  # kubernetes-validate's dependency

    path = write_cluster(tmp_path, k8s_document(**kubernetes))
    result = run_module("roles.launch", "jobset", str(path), "--output", str(tmp_path / "jobset.yaml"))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all((tmp_path / "jobset.yaml").read_text()) if d]


def assert_jobset_schema(document: dict) -> None:
    """kubeflow-trainer-api's JobSet v1alpha2 models: wrong types and missing fields raise; unknown keys are dropped
    by the models, so the round trip must give the document back unchanged."""
    assert JobsetV1alpha2JobSet.from_dict(document).to_dict() == document


def core_objects(documents: list[dict]) -> list[dict]:
    """The core objects: the ConfigMap, the NetworkPolicy, and each replicatedJob's Job and pod as Kubernetes makes
    them (a pod's metadata and spec are its template's)."""
    found = [d for d in documents if d["kind"] != "JobSet"]
    for rjob in next(d for d in documents if d["kind"] == "JobSet")["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]
        found.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"js-{rjob['name']}-0"},
                      "spec": spec})
        found.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"js-{rjob['name']}-0-0-abcde",
                      **spec["template"].get("metadata", {})}, "spec": spec["template"]["spec"]})
    return found


FULL = {"name": "run7", "namespace": "ml", "cpu": {"worker": "2", "ps": "500m"}, "memory": {"ps": "1.5Gi"},
        "gpus_per_worker": 1, "node_selector": {"pool": "gpu"}, "service_account": "trainer",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "labels": {"team": "recsys"}, "annotations": {"example.com/owner": "alice"}, "image_pull_policy": "Always"}


@pytest.mark.parametrize("settings", [{}, FULL], ids=["defaults", "every setting"])
def test_every_manifest_passes_the_published_schemas_and_the_webhook_rules(tmp_path, settings):
    documents = manifests(tmp_path, **settings)
    assert [d["kind"] for d in documents] == ["ConfigMap", "NetworkPolicy", "JobSet"]
    assert_jobset_schema(documents[2])
    assert webhook_problems(documents[2]) == []
    reader = outputs.reader_pod(cluster_config.load(tmp_path / "cluster.json"))
    for document in [*core_objects(documents), reader]:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_checks_can_fail(tmp_path):
    documents = manifests(tmp_path)
    unknown = copy.deepcopy(documents[2])
    unknown["spec"]["failurePolicy"]["maxRestart"] = 3
    with pytest.raises(AssertionError):
        assert_jobset_schema(unknown)
    pod = core_objects(documents)[-1]
    pod["spec"]["containers"][0]["envv"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    gated = copy.deepcopy(documents[2])
    gated["spec"]["failurePolicy"]["rules"][0].update(name="user-error", action="RestartJob")
    assert len(webhook_problems(gated)) == 2
    long = copy.deepcopy(documents[2])
    long["metadata"]["name"] = "a" * 47
    assert "pod name" in " ".join(webhook_problems(long))


def env_of(documents: list[dict], job: str) -> list[dict]:
    rjob = next(r for r in documents[2]["spec"]["replicatedJobs"] if r["name"] == job)
    return rjob["template"]["spec"]["template"]["spec"]["containers"][0]["env"]


def test_the_task_index_comes_from_a_field_defined_before_tf_config_uses_it(tmp_path):
    documents = manifests(tmp_path)
    for job in ("chief", "worker", "ps", "evaluator"):
        names = [e["name"] for e in env_of(documents, job)]
        assert names[0] == pods.INDEX_VARIABLE and names.index("TF_CONFIG") > 0
        assert env_of(documents, job)[0]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.labels['jobset.sigs.k8s.io/job-index']"
    tf_config = next(e["value"] for e in env_of(documents, "worker") if e["name"] == "TF_CONFIG")
    spec = json.loads(tf_config.replace("$(TASK_INDEX)", "1"))
    assert spec["task"] == {"type": "worker", "index": 1} and "evaluator" not in spec["cluster"]
    assert spec["cluster"]["ps"] == ["pscluster-ps-0-0.pscluster:2222", "pscluster-ps-1-0.pscluster:2222"]
    evaluator = next(e["value"] for e in env_of(documents, "evaluator") if e["name"] == "TF_CONFIG")
    assert list(json.loads(evaluator.replace("$(TASK_INDEX)", "0"))["cluster"]) == ["evaluator"]
    variables = {e["name"]: e.get("value") for e in env_of(documents, "ps")}
    assert variables["GRPC_FAIL_FAST"] == "use_caller" and variables["TF_USE_LEGACY_KERAS"] == "1"
    assert variables["https_proxy"] == "" and variables["GRPC_PROXY"] == ""


def test_healing_and_success_follow_the_launchers_policy(tmp_path):
    spec = manifests(tmp_path)[2]["spec"]
    jobs = {r["name"]: r for r in spec["replicatedJobs"]}
    assert {name: r["replicas"] for name, r in jobs.items()} == {"chief": 1, "worker": 2, "ps": 2, "evaluator": 1}
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief", "evaluator"]}
    assert spec["network"]["enableDNSHostnames"] and spec["network"]["subdomain"] == "pscluster"
    max_restarts = cluster_config.LauncherSettings().max_restarts
    assert jobs["worker"]["template"]["spec"]["backoffLimit"] == max_restarts  # a worker restarts alone
    assert jobs["ps"]["template"]["spec"]["backoffLimit"] == 0  # a lost ps fails its Job: the JobSet restarts
    assert spec["failurePolicy"]["maxRestarts"] == max_restarts
    actions = [(r["name"], r["action"]) for r in spec["failurePolicy"]["rules"]]
    assert actions == [("user_error", "FailJobSet"), ("ps_lost", "RestartJobSet"), ("out_of_restarts", "FailJobSet")]
    chief = jobs["chief"]["template"]["spec"]
    exit_rules = {r["action"]: r["onExitCodes"]["values"] for r in chief["podFailurePolicy"]["rules"]
                  if "onExitCodes" in r}
    assert exit_rules == {"FailJob": [USER_ERROR_EXIT_CODE], "Ignore": [PREEMPTED_EXIT_CODE]}
    ps_rules = {r["action"]: r["onExitCodes"]["values"] for r in jobs["ps"]["template"]["spec"]["podFailurePolicy"][
        "rules"]}  # a ps that saw a new chief is replaced, not counted (common/fresh_ps.py); no disruption rule
    assert ps_rules == {"FailJob": [USER_ERROR_EXIT_CODE], "Ignore": [CHIEF_REPLACED_EXIT_CODE]}
    assert chief["template"]["spec"]["terminationGracePeriodSeconds"] == 120
    assert all(r["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never" for r in jobs.values())


def test_the_pods_cluster_json_loads_to_the_same_tasks_with_output_on_the_volume(tmp_path):
    documents = manifests(tmp_path)
    pod_file = write_cluster(tmp_path, json.loads(documents[0]["data"]["cluster.json"]), name="pod.json")
    inside = cluster_config.load(pod_file)
    outside = cluster_config.load(tmp_path / "cluster.json")
    assert inside.jobs == outside.jobs
    assert inside.training.output_dir == f"{pods.VOLUME_DIR}/output"
    volumes = documents[2]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "output", "persistentVolumeClaim": {"claimName": "pscluster-output"}} in volumes


def test_only_the_jobsets_own_pods_reach_the_task_port(tmp_path):
    policy = manifests(tmp_path, port=2400)[1]["spec"]
    members = {"matchLabels": {jobset.JOBSET_NAME_LABEL: "pscluster"}}
    assert policy["podSelector"] == members and policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [{"from": [{"podSelector": members}], "ports": [{"protocol": "TCP", "port": 2400}]}]
