"""`roles.launch jobset`: the manifests of a run (ConfigMap, NetworkPolicy, JobSet jobset.x-k8s.io/v1alpha2).

Layout: one replicatedJob per role; each task is a Job of one pod (parallelism = completions = 1), so a worker's
Job is replicatedJob `worker`, Job index = task index, and its pod's host name `NAME-worker-I-0.NAME` never changes
(JobSet's `network`: enableDNSHostnames under one headless Service). Healing, as launcher/healing.py decides it:

- exit code 2 (a user error): the Job's podFailurePolicy fails the Job at once (reason PodFailurePolicy), and the
  JobSet rule `user_error` fails the JobSet: nothing is retried;
- the chief's exit code 4 (asked to stop, checkpoint written) and a pod disruption (preemption, eviction, node
  drain: condition DisruptionTarget) are Ignored: the Job replaces the pod without counting it; so is a ps's exit
  code 6 with an output volume (it saw a new chief, and leaves so as to hold nothing of the old: common/fresh_ps.py);
- a worker, the chief or the evaluator that fails otherwise is replaced by its own Job (same host name), up to
  `backoffLimit` = launcher.max_restarts times: one worker restarts alone, at Job level, which needs no JobSet
  feature gate (JobSet's `RestartJob` action is alpha and off by default in v0.12: CHANGELOG v0.12.0, #1177);
- a ps holds variables the chief cannot lose: its Job has backoffLimit 0, and the JobSet rule `ps_lost` restarts
  every Job (RestartJobSet, counted against maxRestarts = launcher.max_restarts), BlockingRecreate so old pods are
  gone before new ones take their host names; the chief resumes from its last checkpoint;
- any other Job failure (out of backoff) fails the JobSet (`out_of_restarts`): rules are tried in order and an
  unmatched failure would otherwise restart the whole JobSet (jobset.x-k8s.io docs, "Failure Policy").

Success: the chief's Job (and the evaluator's, so the last checkpoint is scored) completing completes the JobSet,
which then deletes the still running ps and worker Jobs (successPolicy operator All over those replicatedJobs).
"""

from __future__ import annotations

import json
from pathlib import Path

from cluster import jsonfile
from cluster.config import ClusterConfig
from common.errors import CHIEF_REPLACED_EXIT_CODE, PREEMPTED_EXIT_CODE, USER_ERROR_EXIT_CODE
from launcher.backends.kubernetes import pods

API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
ROLES = ("chief", "worker", "ps", "evaluator")
FINISHING = ("chief", "evaluator")  # what the successPolicy waits for (the launcher's trainer and sidecar)


def pod_failure_policy(config: ClusterConfig, job: str) -> dict:
    """Exit 2 fails the Job at once; the chief's exit 4, a ps's exit 6 and disruptions replace the pod without
    counting it."""
    rules = [{"action": "FailJob", "onExitCodes": {"containerName": pods.CONTAINER, "operator": "In",
                                                  "values": [USER_ERROR_EXIT_CODE]}}]
    if job == "chief":
        rules.append({"action": "Ignore", "onExitCodes": {"containerName": pods.CONTAINER, "operator": "In",
                                                          "values": [PREEMPTED_EXIT_CODE]}})
    if job == "ps" and config.kubernetes.output_volume:  # it saw a new chief (common/fresh_ps.py): a new pod
        rules.append({"action": "Ignore", "onExitCodes": {"containerName": pods.CONTAINER, "operator": "In",
                                                          "values": [CHIEF_REPLACED_EXIT_CODE]}})
    if job != "ps":  # a ps lost to a disruption still loses its variables: the JobSet restarts (rule ps_lost)
        rules.append({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
    return {"rules": rules}


def replicated_job(config: ClusterConfig, job: str) -> dict:
    count = len(config.jobs[job])
    spec = {"parallelism": 1, "completions": 1, "completionMode": "Indexed",
            "backoffLimit": 0 if job == "ps" else config.launcher.max_restarts,
            "podFailurePolicy": pod_failure_policy(config, job), "template": pods.pod_template(config, job)}
    return {"name": job, "replicas": count, "template": {"spec": spec}}


def failure_policy(config: ClusterConfig) -> dict:
    rules = [{"name": "user_error", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]
    if "ps" in config.jobs:
        rules.append({"name": "ps_lost", "action": "RestartJobSet", "targetReplicatedJobs": ["ps"]})
    rules.append({"name": "out_of_restarts", "action": "FailJobSet"})
    return {"maxRestarts": config.launcher.max_restarts, "restartStrategy": "BlockingRecreate", "rules": rules}


def metadata(config: ClusterConfig, name: str) -> dict:
    settings = config.kubernetes
    meta = {"name": name, "namespace": settings.namespace}
    for key, value in (("labels", settings.labels), ("annotations", settings.annotations)):
        if value:
            meta[key] = dict(value)
    return meta


def jobset(config: ClusterConfig) -> dict:
    settings = config.kubernetes
    roles = [job for job in ROLES if job in config.jobs and job in config.strategy.launched_jobs]
    return {
        "apiVersion": API_VERSION, "kind": "JobSet", "metadata": metadata(config, settings.name),
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": settings.name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [j for j in FINISHING if j in roles]},
            "failurePolicy": failure_policy(config),
            "replicatedJobs": [replicated_job(config, job) for job in roles],
        },
    }


def network_policy(config: ClusterConfig) -> dict:
    """Only the JobSet's own pods reach its task port (TensorFlow's servers have no authentication)."""
    members = {"matchLabels": {JOBSET_NAME_LABEL: config.kubernetes.name}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata(config, f"{config.kubernetes.name}-tasks"),
            "spec": {"podSelector": members, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": members}],
                                  "ports": [{"protocol": "TCP", "port": config.kubernetes.port}]}]}}


def pod_cluster_document(config: ClusterConfig) -> dict:
    """The cluster.json the pods read: the user's, with output_dir on the volume."""
    document = jsonfile.read_document(config.source)
    document.pop("$schema", None)
    document.setdefault("training", {})["output_dir"] = pods.output_dir_in_pod(config)
    document.setdefault("launcher", {})["logs_dir"] = f"{pods.VOLUME_DIR}/logs"
    return document


def config_map(config: ClusterConfig) -> dict:
    text = json.dumps(pod_cluster_document(config), indent=2) + "\n"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(config, pods.config_map_name(config)),
            "data": {"cluster.json": text}}


def manifests(config: ClusterConfig) -> list[dict]:
    """Everything `kubectl apply` needs, in the order it must be created (the JobSet last)."""
    return [config_map(config), network_policy(config), jobset(config)]


def as_yaml(documents: list[dict]) -> str:
    """A YAML stream of the documents, each written as JSON (which YAML 1.2 includes): no YAML library needed."""
    return "".join(f"---\n{json.dumps(document, indent=2)}\n" for document in documents)


def write(config: ClusterConfig, output: Path) -> Path:
    output.write_text(as_yaml(manifests(config)))
    return output
