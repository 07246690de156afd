"""The pods of the generated JobSet, run as Kubernetes runs them (tests/kubeletkit.py, tests/jobsetkit.py): each a
process in its own network namespace under its pod host name, to a trained, evaluated, exported model; a killed
worker pod, a killed chief pod (its ps replaced before the new chief connects) and a killed ps pod handled as the
manifest's failure policies say; a user error failing the JobSet."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from clusterkit import run_module, write_cluster
from cluster import config as cluster_config
from launcher.backends.base import RunOutputs
from launcher.backends.kubernetes import outputs
from jobsetkit import JobSetEmulator
from kubeletkit import command_line, environment, expand
from netns import skip_or_fail
from test_kubernetes_config import k8s_document
from throttling import ThrottledWorkers

pytestmark = [pytest.mark.multihost, pytest.mark.cluster]
# epochs as long as 500 steps were, for 200: the worker pods run 40 % of the time (throttling.ThrottledWorkers)
TRAINING = {"epochs": 4, "steps_per_epoch": 200, "steps_per_execution": 1, "lr_decay_epochs": [],
            "per_worker_batch": 16}
POD_CLUSTER_FILE = "/opt/pscluster-config/"  # on every pod's command line


def test_expansion_follows_kubernetes():
    assert expand("$(A)-$(B)-$$(A)-$(A", {"A": "1"}) == "1-$(B)-$(A)-$(A"
    container = {"command": ["run", "--index", "$(I)"], "env": [
        {"name": "EARLY", "value": "[$(I)]"},  # I is defined later: left as written
        {"name": "I", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}},
        {"name": "LATE", "value": "[$(I)][$(JOB_COMPLETION_INDEX)]"}]}
    metadata = {"labels": {"jobset.sigs.k8s.io/job-index": "3"},
                "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}
    env = environment(container, metadata, {"PATH": "/bin"})
    assert env["EARLY"] == "[$(I)]" and env["LATE"] == "[3][$(JOB_COMPLETION_INDEX)]"
    assert env["JOB_COMPLETION_INDEX"] == "0" and list(env)[-1] == "JOB_COMPLETION_INDEX"
    assert command_line(container, env) == ["run", "--index", "3"]


def manifests(tmp_path, **training) -> list[dict]:
    import yaml

    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        skip_or_fail("pods run in network namespaces: run as root with iproute2 and util-linux")
    document = k8s_document()
    document["training"] = {**TRAINING, **training}
    document["evaluation"] = {"poll_s": 0.5, "idle_timeout_s": 120}
    document["cluster"] = {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}
    path = write_cluster(tmp_path, document)
    result = run_module("roles.launch", "jobset", str(path), "--output", str(tmp_path / "jobset.yaml"))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all((tmp_path / "jobset.yaml").read_text()) if d]


def trace(emulator: JobSetEmulator) -> str:
    pods = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in emulator.logs.iterdir())
    return "\n".join(emulator.events) + "\n" + pods


def test_pods_train_to_an_evaluated_model_through_a_lost_worker_and_a_lost_ps(tmp_path):
    documents = manifests(tmp_path)
    with JobSetEmulator(documents, tmp_path) as jobset, ThrottledWorkers(POD_CLUSTER_FILE, share=0.4) as throttled:
        jobset.start()
        assert jobset.run_until(lambda: "train | epoch 1/4" in jobset.log("chief", 0), 400), trace(jobset)
        jobset.kill("worker", 1)
        assert jobset.run_until(lambda: jobset.jobs[("worker", 1)].pods_started == 2, 30), trace(jobset)
        assert jobset.restarts == 0 and jobset.jobs[("chief", 0)].pods_started == 1  # the worker restarted alone
        assert jobset.run_until(lambda: "train | epoch 2/4" in jobset.log("chief", 0), 300), trace(jobset)
        jobset.kill("chief", 0)  # its Job replaces it alone; the ps that served it is replaced before it connects
        assert jobset.run_until(lambda: jobset.log("chief", 0).count("resuming") == 1, 300), trace(jobset)
        assert jobset.restarts == 0 and jobset.jobs[("ps", 0)].pods_started == 2, trace(jobset)
        assert jobset.run_until(lambda: "train | epoch 3/4" in jobset.log("chief", 0), 300), trace(jobset)
        assert "train | epoch 4/4" not in jobset.log("chief", 0)
        jobset.kill("ps", 0)
        assert jobset.run_until(lambda: jobset.restarts == 1, 120), trace(jobset)
        assert jobset.run_until(lambda: jobset.state != "Running", 600), trace(jobset)
        assert jobset.state == "Completed", trace(jobset)
        code, log = jobset.run_pod(outputs.reader_pod(cluster_config.load(tmp_path / "cluster.json")))
    assert code == 0, log
    assert len(throttled.seen) >= 4, throttled.seen  # 2 workers, worker 1 again, both again with the JobSet
    read = RunOutputs.from_json(json.loads(log.strip().splitlines()[-1]))  # what run.sh reports at the end
    assert read.summary.complete and read.best is not None and read.output == "/opt/pscluster-volume/output"
    events = "\n".join(jobset.events)
    assert "job ps-0 failed (BackoffLimitExceeded): rule ps_lost, RestartJobSet" in events
    assert "pod of ps-0 exited with 6" in events  # it saw the new chief: replaced, not counted
    assert events.index("pod of ps-0 exited with 6") < events.index("job ps-0 failed")
    ps_log = jobset.log("ps", 0)
    assert "a new chief started (generation" in ps_log and ps_log.count("serving chief generation") >= 3
    assert "resuming after epoch" in jobset.log("chief", 0), trace(jobset)
    output = tmp_path / "volume" / "output"
    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["epochs"] == 4
    assert (output / "model" / "model.h5").exists() and (output / "best_model" / "best.json").exists()
    assert "[worker:1]" in jobset.log("worker", 1) and "[evaluator:0]" in jobset.log("evaluator", 0)


def test_a_user_error_fails_the_jobset_at_once(tmp_path):
    documents = manifests(tmp_path, dataset="mnist", data_dir="/opt/pscluster-volume/no-such-data")
    with JobSetEmulator(documents, tmp_path) as jobset:
        jobset.start()
        assert jobset.run_until(lambda: False, 120) is False
        assert jobset.state == "Failed", trace(jobset)
    events = "\n".join(jobset.events)
    assert "failed (PodFailurePolicy): rule user_error, FailJobSet" in events, events
    assert jobset.restarts == 0 and "exited with 2" in events
