"""kubectl, run with the user's kubeconfig: apply, get (as JSON), logs and delete, and what the answers mean.

Every call names the namespace of the kubernetes section; KUBECONFIG and the current context are the user's.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from cluster.config import ClusterConfig
from launcher.backends.base import AgentFailed, HostUnreachable

KUBECTL_TIMEOUT_S = 60
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
ROLE_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


def command(config: ClusterConfig, *args: str) -> list[str]:
    return ["kubectl", f"--namespace={config.kubernetes.namespace}", *args]


def run(config: ClusterConfig, *args: str, stdin: str | None = None, timeout_s: float = KUBECTL_TIMEOUT_S) -> str:
    """kubectl's output; a failure raises with kubectl's own last line."""
    try:
        result = subprocess.run(command(config, *args), capture_output=True, text=True, timeout=timeout_s,
                                input=stdin if stdin is not None else "")
    except FileNotFoundError:
        raise AgentFailed("kubectl is not installed here: install it (e.g. apt-get install kubernetes-client, or "
                          "your cloud's SDK) and point KUBECONFIG at your cluster") from None
    except subprocess.TimeoutExpired:
        raise HostUnreachable(f"`kubectl {' '.join(args[:2])}` gave no answer within {timeout_s} s: is the API "
                              "server reachable with your kubeconfig?") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise AgentFailed(f"`kubectl {' '.join(args[:2])}` failed: {last}")
    return result.stdout


def apply(config: ClusterConfig, path: Path) -> str:
    return run(config, "apply", "-f", str(path))


def jobset(config: ClusterConfig) -> dict | None:
    """The JobSet as the API server has it, or None when there is none."""
    found = run(config, "get", f"jobsets.jobset.x-k8s.io/{config.kubernetes.name}", "--ignore-not-found", "-o",
                "json")
    return json.loads(found) if found.strip() else None


def pods(config: ClusterConfig) -> list[dict]:
    selector = f"{NAME_LABEL}={config.kubernetes.name}"
    return json.loads(run(config, "get", "pods", "-l", selector, "-o", "json")).get("items", [])


def pod_phase(config: ClusterConfig, name: str) -> str:
    found = run(config, "get", f"pod/{name}", "--ignore-not-found", "-o", "json")
    return json.loads(found).get("status", {}).get("phase", "Pending") if found.strip() else "gone"


def delete(config: ClusterConfig) -> str:
    """Deletes the JobSet (its Jobs and pods go with it), the ConfigMap, the NetworkPolicy and an outputs reader
    pod; not waiting."""
    name = config.kubernetes.name
    return run(config, "delete", "--ignore-not-found", "--wait=false", f"jobsets.jobset.x-k8s.io/{name}",
               f"configmap/{name}-cluster", f"networkpolicies.networking.k8s.io/{name}-tasks", f"pod/{name}-outputs")


def follow_logs(config: ClusterConfig, pod: str, log_path: Path) -> subprocess.Popen:
    """`kubectl logs -f POD` appending to `log_path` until the pod ends."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(command(config, "logs", "-f", pod), stdout=log, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, start_new_session=True)


@dataclasses.dataclass(frozen=True)
class PodState:
    """One pod as `kubectl get pods` shows it."""

    name: str
    task: str  # chief:0, worker:1, ...
    node: str
    phase: str
    exit_code: int | None
    created: str

    @classmethod
    def of(cls, pod: dict) -> "PodState":
        labels, status = pod["metadata"].get("labels", {}), pod.get("status", {})
        terminated = next((s["state"]["terminated"] for s in status.get("containerStatuses", [])
                           if "terminated" in s.get("state", {})), None)
        return cls(name=pod["metadata"]["name"], task=f"{labels.get(ROLE_LABEL, '?')}:{labels.get(INDEX_LABEL, '?')}",
                   node=pod.get("spec", {}).get("nodeName", "-"), phase=status.get("phase", "Pending"),
                   exit_code=terminated["exitCode"] if terminated else None,
                   created=pod["metadata"].get("creationTimestamp", ""))


def condition(resource: dict | None, kind: str) -> dict | None:
    """The resource's condition of type `kind` when it is True (JobSet: Completed, Failed, Suspended, ...)."""
    conditions = (resource or {}).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)
