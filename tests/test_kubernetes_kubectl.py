"""`sh run.sh`, `sh run.sh status` and `sh kill.sh` under the kubernetes backend: the real kubectl against the API
stand-in of tests/kubeapi.py, the test playing the Job and JobSet controllers (pods appear, one worker pod fails and
is replaced, the chief and evaluator finish, the JobSet completes; on delete the pods go after a moment)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from clusterkit import ROOT, write_cluster
from kubeapi import ApiStandIn
from netns import skip_or_fail
from test_kubernetes_config import k8s_document

JOBSETS, PODS = ("jobset.x-k8s.io/v1alpha2", "jobsets"), ("v1", "pods")


@pytest.fixture
def api(tmp_path):
    if shutil.which("kubectl") is None:
        skip_or_fail("kubectl is needed: run `sh tests/system_packages.sh` as root (Debian's kubernetes-client)")
    with ApiStandIn() as server:
        server.env = {**os.environ, "KUBECONFIG": server.kubeconfig(tmp_path / "kubeconfig"),
                      "HOME": str(tmp_path)}  # kubectl's discovery cache stays in the test's directory
        yield server


def sh(api, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", *args], cwd=ROOT, env=api.env, capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL)


def add_pod(api, jobset: dict, rjob: dict, index: int, attempt: int) -> str:
    """A pod as the Job controller makes it from the replicatedJob's template, running on a node."""
    name = f"{jobset['metadata']['name']}-{rjob['name']}-{index}-0-{attempt:05d}"
    labels = {"jobset.sigs.k8s.io/jobset-name": jobset["metadata"]["name"], "jobset.sigs.k8s.io/job-index": str(index),
              "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"]}
    spec = {**rjob["template"]["spec"]["template"]["spec"], "nodeName": f"node-{index % 2}"}
    api.put(*PODS, {"metadata": {"name": name, "labels": labels}, "spec": spec,
                    "status": {"phase": "Running", "containerStatuses": [{"name": "task", "state": {"running": {}}}]}})
    api.logs[name] = f"I0000 a TensorFlow line\n[{rjob['name']}:{index}] ready: {rjob['name']} on {name}\n"
    return name


def end_pod(api, name: str, code: int, line: str = "") -> None:
    api.logs[name] += line
    pod = api.get(*PODS, name)
    pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
        {"name": "task", "state": {"terminated": {"exitCode": code}}}]}


def play_controllers(api, stop: threading.Event) -> None:
    """What JobSet, the Job controller and the kubelet would do with this JobSet, in a fixed order."""
    while api.get(*JOBSETS, "pscluster") is None and not stop.wait(0.1):
        pass
    jobset = api.get(*JOBSETS, "pscluster")
    pods = {(r["name"], i): add_pod(api, jobset, r, i, 0) for r in jobset["spec"]["replicatedJobs"]
            for i in range(r["replicas"])}
    stop.wait(3)
    end_pod(api, pods[("worker", 1)], 137)  # killed: its Job replaces it
    stop.wait(2)
    pods[("worker", 1)] = add_pod(api, jobset, jobset["spec"]["replicatedJobs"][1], 1, 1)
    stop.wait(3)
    end_pod(api, pods[("chief", 0)], 0, "[chief:0] train | epoch 1/1 | loss 0.1\n[chief:0] exported the model\n")
    end_pod(api, pods[("evaluator", 0)], 0, "[evaluator:0] training complete and all 1 checkpoints done\n")
    jobset["status"] = {"restarts": 0, "conditions": [{"type": "Completed", "status": "True",
                                                       "reason": "AllJobsCompleted", "message": "jobset completed"}]}
    for key in (("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)):  # a finished JobSet deletes active Jobs
        api.delete(*PODS, pods[key])
    while api.get(*PODS, "pscluster-outputs") is None and not stop.wait(0.1):
        pass
    if not stop.is_set():  # the reader pod prints what `python -m launcher.agent outputs` prints
        api.logs["pscluster-outputs"] = json.dumps(OUTPUTS) + "\n"
        end_pod(api, "pscluster-outputs", 0)


OUTPUTS = {"output": "/opt/pscluster-volume/output",
           "summary": {"status": "complete", "epochs": 1, "optimizer_steps": 50, "final_metrics": {"loss": 0.1}},
           "summary_age_s": 1.0, "best_age_s": 1.0,
           "best": {"checkpoint": "ckpt-1", "epoch": 1, "step": 50, "metrics": {"val_loss": 0.2},
                    "best_metric": "val_loss", "best_mode": "min", "model": {}}}


def remove_pods_once_deleted(api, stop: threading.Event) -> None:
    """Garbage collection: the JobSet's pods go 2 s after it is deleted (their grace period, briefly)."""
    while api.get(*JOBSETS, "pscluster") is not None and not stop.wait(0.1):
        pass
    stop.wait(2)
    for name in api.names(*PODS):
        api.delete(*PODS, name)


def run_while(api, controllers, path: str) -> subprocess.CompletedProcess:
    """`sh run.sh` while `controllers(api, stop)` plays the cluster's side in a thread."""
    stop = threading.Event()
    thread = threading.Thread(target=controllers, args=(api, stop), daemon=True)
    thread.start()
    try:
        return sh(api, "run.sh", path)
    finally:
        stop.set()
        thread.join(timeout=10)


def cluster_file(tmp_path, document: dict) -> str:
    document["launcher"].update(logs_dir=str(tmp_path / "logs"), poll_s=0.5)
    return str(write_cluster(tmp_path, document))


def test_run_status_and_kill_through_kubectl(api, tmp_path):
    path = cluster_file(tmp_path, k8s_document())
    run = run_while(api, play_controllers, path)
    assert run.returncode == 0, run.stderr[-4000:]
    err = run.stderr
    assert "jobset.jobset.x-k8s.io/pscluster created" in err and "configmap/pscluster-cluster created" in err
    assert "worker:1 pod pscluster-worker-1-0-00000 on node-1: Failed (exit code 137)" in err, err
    assert "worker:1 pod pscluster-worker-1-0-00001 on node-1: Running" in err, err
    assert "[chief:0] train | epoch 1/1 | loss 0.1" in err and "I0000" not in err  # task lines only
    assert "JobSet pscluster completed after 0 restarts: AllJobsCompleted jobset completed" in err, err
    assert "complete: 1 epochs, 50 steps; last epoch: loss 0.1000" in err, err
    assert "best: ckpt-1 at step 50 (val_loss 0.2000) in volume pscluster-output:/opt/pscluster-volume/output/" \
        "best_model" in err
    assert "exit code 0 (the chief's)" in err
    reader = next(r for r in api.requests if r.startswith("POST /api/v1/namespaces/default/pods"))
    assert reader and api.get(*PODS, "pscluster-outputs") is None  # created, then deleted
    worker_log = (tmp_path / "logs" / "worker-1.log").read_text()
    assert "on pscluster-worker-1-0-00000" in worker_log and "on pscluster-worker-1-0-00001" in worker_log
    applied = json.loads(api.get(*JOBSETS, "pscluster")["metadata"]["annotations"][
        "kubectl.kubernetes.io/last-applied-configuration"])
    assert applied["spec"]["successPolicy"]["targetReplicatedJobs"] == ["chief", "evaluator"]

    status = sh(api, "run.sh", "status", path)
    assert status.returncode == 0, status.stderr
    assert "JobSet pscluster: Completed; restarts 0" in status.stdout, status.stdout
    assert "chief:0      pscluster-chief-0-0-00000" in status.stdout and "Succeeded  0" in status.stdout

    rerun = sh(api, "run.sh", path)
    assert rerun.returncode == 2, rerun.stderr
    assert "kubernetes.name = 'pscluster': names a JobSet that has completed in namespace default" in rerun.stderr

    stop = threading.Event()
    collector = threading.Thread(target=remove_pods_once_deleted, args=(api, stop), daemon=True)
    collector.start()
    started = time.monotonic()
    kill = sh(api, "kill.sh", path)
    stop.set()
    collector.join(timeout=10)
    assert kill.returncode == 0, kill.stderr
    assert "no pod of pscluster is left" in kill.stderr and time.monotonic() - started >= 2  # it waited for them
    assert api.objects == {}
    again = sh(api, "run.sh", "status", path)
    assert "no JobSet pscluster in namespace default" in again.stdout


def test_an_unreachable_api_server_is_one_line_and_exit_1(api, tmp_path):
    path = str(write_cluster(tmp_path, k8s_document()))
    api.env["KUBECONFIG"] = str(tmp_path / "none")
    (tmp_path / "none").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    result = sh(api, "kill.sh", path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "error: `kubectl delete --ignore-not-found` failed: " in result.stderr, result.stderr


def fail_on_user_error(api, stop: threading.Event) -> None:
    """The chief exits 2: its Job fails (PodFailurePolicy), the JobSet fails (rule user_error), the rest deleted."""
    while api.get(*JOBSETS, "pscluster") is None and not stop.wait(0.1):
        pass
    jobset = api.get(*JOBSETS, "pscluster")
    pods = [add_pod(api, jobset, r, i, 0) for r in jobset["spec"]["replicatedJobs"] for i in range(r["replicas"])]
    stop.wait(2)
    end_pod(api, pods[0], 2, "[chief:0] error: training.data_dir = 'x': does not exist; give a directory\n")
    jobset["status"] = {"restarts": 0, "conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs",
                                                       "message": "rule user_error: FailJobSet"}]}
    for name in pods[1:]:
        api.delete(*PODS, name)


def test_a_failed_jobset_gives_the_chiefs_exit_code(api, tmp_path):
    document = k8s_document(output_volume=None)
    document["cluster"].pop("evaluator")
    run = run_while(api, fail_on_user_error, cluster_file(tmp_path, document))
    assert run.returncode == 2, run.stderr[-3000:]
    assert "[chief:0] error: training.data_dir = 'x'" in run.stderr
    assert "JobSet pscluster failed after 0 restarts: FailedJobs rule user_error: FailJobSet" in run.stderr
    assert not any("outputs" in r for r in api.requests)  # no volume: nothing to read back
