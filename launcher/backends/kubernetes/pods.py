"""The pod template of each role: image, command, environment (TF_CONFIG from a fieldRef index), resources, volumes.

Kubernetes expands `$(VAR)` in command, args and env values from env entries defined EARLIER in the list only, and
the Job controller appends JOB_COMPLETION_INDEX LAST (k8s.io/kubernetes pkg/controller/job/indexed_job_utils.go
`addCompletionIndexEnvVariable`), so the task index comes from a fieldRef on the JobSet's job-index label, defined
first, and TF_CONFIG refers to it. Each task's process still builds its own TF_CONFIG from the mounted cluster.json
(cluster/taskspec.py); the one in the environment is the same text, for anyone who reads the pod spec.
"""

from __future__ import annotations

import json
import posixpath

from cluster import taskspec
from cluster.config import ClusterConfig, Task

PROJECT_DIR = "/opt/pscluster"  # the image's WORKDIR (see Dockerfile)
CONFIG_DIR = "/opt/pscluster-config"  # the ConfigMap holding the pods' cluster.json
VOLUME_DIR = "/opt/pscluster-volume"  # output_volume (or an emptyDir): output_dir and the logs
CONFIG_FILE = f"{CONFIG_DIR}/cluster.json"
CONTAINER = "task"
INDEX_VARIABLE = "TASK_INDEX"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
INDEX_PLACEHOLDER = "$(TASK_INDEX)"


def output_dir_in_pod(config: ClusterConfig) -> str:
    """Where the chief and the evaluator keep output_dir inside their pods: on the volume, under its last name."""
    return posixpath.join(VOLUME_DIR, posixpath.basename(config.training.output_dir.rstrip("/")) or "output")


def tf_config_text(config: ClusterConfig, job: str) -> str:
    """TF_CONFIG for every task of `job`, its index left as $(TASK_INDEX) for Kubernetes to fill in."""
    spec = taskspec.tf_config(config, Task(job, 0, config.jobs[job][0]))
    if not spec:
        return "{}"
    spec["task"]["index"] = INDEX_PLACEHOLDER
    text = json.dumps(spec, separators=(",", ":"))
    return text.replace(json.dumps(INDEX_PLACEHOLDER), INDEX_PLACEHOLDER)  # a JSON number once expanded


def environment(config: ClusterConfig, job: str) -> list[dict]:
    """The env list of `job`'s container, in the order Kubernetes needs (the index before what uses it)."""
    variables = taskspec.task_variables(config, Task(job, 0, config.jobs[job][0]))
    variables["TF_CONFIG"] = tf_config_text(config, job)
    if job == "worker" and config.kubernetes.gpus_per_worker:
        variables.pop("CUDA_VISIBLE_DEVICES")  # the device plugin sets it to the pod's GPUs
    index = {"name": INDEX_VARIABLE,
             "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_INDEX_LABEL}']"}}}
    cleared = [{"name": name, "value": ""} for name in taskspec.PROXY_VARIABLES]  # gRPC: empty means no proxy
    return [index, *({"name": k, "value": v} for k, v in variables.items()), *cleared]


def command(config: ClusterConfig, job: str) -> list[str]:
    """The task's command line as the launcher builds it, with the pod's cluster.json and index."""
    argv = taskspec.task_command(config, Task(job, 0, config.jobs[job][0]))
    argv[0] = posixpath.join(PROJECT_DIR, argv[0])  # the image's .venv (an absolute python stays as it is)
    argv[argv.index("--cluster") + 1] = CONFIG_FILE
    if "--index" in argv:
        argv[argv.index("--index") + 1] = INDEX_PLACEHOLDER
    return argv


def resources(config: ClusterConfig, job: str) -> dict:
    """Requests equal to limits (a guaranteed pod is evicted last), GPUs for workers."""
    settings = config.kubernetes
    amounts = {kind: per_role[job] for kind, per_role in (("cpu", settings.cpu), ("memory", settings.memory))
               if job in per_role}
    limits = dict(amounts)
    if job == "worker" and settings.gpus_per_worker:
        limits["nvidia.com/gpu"] = str(settings.gpus_per_worker)
    return {"requests": amounts, "limits": limits} if limits else {}


def pod_template(config: ClusterConfig, job: str) -> dict:
    """The pod template of `job`'s Jobs: never restarted in place (the Job's podFailurePolicy needs Never)."""
    settings = config.kubernetes
    container = {"name": CONTAINER, "image": settings.image, "imagePullPolicy": settings.image_pull_policy,
                 "workingDir": PROJECT_DIR, "command": command(config, job), "env": environment(config, job),
                 "ports": [{"name": "grpc", "containerPort": settings.port, "protocol": "TCP"}],
                 "volumeMounts": [{"name": "cluster", "mountPath": CONFIG_DIR, "readOnly": True},
                                  {"name": "output", "mountPath": VOLUME_DIR}]}
    container_resources = resources(config, job)
    if container_resources:
        container["resources"] = container_resources
    output = ({"persistentVolumeClaim": {"claimName": settings.output_volume}} if settings.output_volume
              else {"emptyDir": {}})
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": settings.termination_grace_period_s,
            "containers": [container],
            "volumes": [{"name": "cluster", "configMap": {"name": config_map_name(config)}},
                        {"name": "output", **output}]}
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    metadata = {key: dict(value) for key, value in (("labels", settings.labels),
                                                    ("annotations", settings.annotations)) if value}
    return {"metadata": metadata, "spec": spec} if metadata else {"spec": spec}


def config_map_name(config: ClusterConfig) -> str:
    return f"{config.kubernetes.name}-cluster"
