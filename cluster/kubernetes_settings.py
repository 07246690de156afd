"""The `kubernetes` section (image, namespace, volume, resources, scheduling) and where its pods' tasks listen.

Under `"launcher": {"backend": "kubernetes"}` the cluster section gives job sizes, and every task is the one pod of
its own Job in the JobSet `name`: task `worker:3` listens at `NAME-worker-3-0.NAME:PORT`, the host name JobSet
gives that pod under its headless Service (subdomain NAME), so TF_CONFIG's cluster is known before anything runs.
Name rules are Kubernetes' own: DNS-1035 labels for the JobSet, DNS-1123 for namespaces and volumes, label keys
and values as `k8s.io/apimachinery/pkg/util/validation` defines them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from cluster.addresses import Address
from common.errors import Problem
from common.fields import Check, int_in, is_int

ROLES = ("chief", "worker", "ps", "evaluator")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(?=.{0,63}$)([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,511}$")
RESERVED_PREFIXES = ("jobset.sigs.k8s.io/", "batch.kubernetes.io/", "kubernetes.io/", "k8s.io/")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
POD_SUFFIX = "-abcde"  # the 5 random characters Kubernetes appends to a Job's pod names


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubernetesSettings:
    """The JobSet the kubernetes backend writes and applies: its image, place, volume, resources and scheduling."""

    image: str | None = None  # required under the kubernetes backend
    name: str = "pscluster"
    namespace: str = "default"
    output_volume: str | None = None  # a PersistentVolumeClaim holding output_dir and the logs
    cpu: dict = dataclasses.field(default_factory=dict)  # role -> quantity, e.g. {"worker": "2"}
    memory: dict = dataclasses.field(default_factory=dict)  # role -> quantity, e.g. {"ps": "8Gi"}
    gpus_per_worker: int = 0
    node_selector: dict = dataclasses.field(default_factory=dict)
    tolerations: tuple = ()
    service_account: str | None = None
    image_pull_policy: str = "IfNotPresent"
    port: int = 2222
    labels: dict = dataclasses.field(default_factory=dict)
    annotations: dict = dataclasses.field(default_factory=dict)
    termination_grace_period_s: int = 120


def qualified_name(key: Any) -> bool:
    """A label or annotation key: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63."""
    if not isinstance(key, str) or key.count("/") > 1:
        return False
    prefix, _, name = key.rpartition("/")
    return bool(LABEL_NAME.match(name)) and (not prefix or bool(DNS_1123_SUBDOMAIN.match(prefix)))


def _own_key(key: str) -> bool:
    return not key.startswith(RESERVED_PREFIXES)


def _labels(value: Any) -> bool:
    return isinstance(value, dict) and all(qualified_name(k) and _own_key(k) and isinstance(v, str)
                                           and LABEL_VALUE.match(v) for k, v in value.items())


def _per_role_quantities(value: Any) -> bool:
    return isinstance(value, dict) and all(k in ROLES and isinstance(v, str) and QUANTITY.match(v)
                                           and float(re.match(r"[0-9.]*", v).group() or 0) > 0
                                           for k, v in value.items())


def _toleration(value: Any) -> bool:
    if not isinstance(value, dict) or not value or any(k not in TOLERATION_KEYS for k in value):
        return False
    operator = value.get("operator", "Equal")
    return (all(isinstance(value.get(k, ""), str) for k in ("key", "value")) and operator in ("Equal", "Exists")
            and not (operator == "Exists" and value.get("value")) and (value.get("key") or operator == "Exists")
            and (not value.get("key") or qualified_name(value["key"]))
            and value.get("effect", "") in ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
            and (value.get("tolerationSeconds") is None or is_int(value["tolerationSeconds"])))


def _or_null(pattern: re.Pattern, max_length: int) -> Any:
    return lambda v: v is None or (isinstance(v, str) and len(v) <= max_length and bool(pattern.match(v)))


KUBERNETES_CHECKS = {
    "image": Check(lambda v: v is None or (isinstance(v, str) and bool(IMAGE.match(v))),
                   "is not a container image reference", "use e.g. registry.example.com/team/pscluster:0.1.0"),
    "name": Check(lambda v: isinstance(v, str) and len(v) <= 63 and bool(DNS_1035.match(v)),
                  "must be a DNS-1035 label (a-z, 0-9, '-', starting with a letter, at most 63 characters)",
                  "use e.g. pscluster"),
    "namespace": Check(lambda v: isinstance(v, str) and len(v) <= 63 and bool(DNS_1123_LABEL.match(v)),
                       "must be a DNS-1123 label (a-z, 0-9, '-', at most 63 characters)", "use e.g. default"),
    "output_volume": Check(_or_null(DNS_1123_SUBDOMAIN, 253), "must name a PersistentVolumeClaim (a DNS-1123 "
                           "subdomain: a-z, 0-9, '-', '.')", "use the claim's name as `kubectl get pvc` shows it"),
    "cpu": Check(_per_role_quantities, "must map chief, worker, ps or evaluator to a positive CPU quantity",
                 'use e.g. {"worker": "2", "ps": "500m"}'),
    "memory": Check(_per_role_quantities, "must map chief, worker, ps or evaluator to a positive memory quantity",
                    'use e.g. {"worker": "4Gi", "ps": "8Gi"}'),
    "gpus_per_worker": Check(int_in(0, 64), "must be an integer from 0 to 64", "use 0 on CPU nodes, e.g. 1 on GPU "
                             "nodes"),
    "node_selector": Check(lambda v: isinstance(v, dict) and all(qualified_name(k) and isinstance(x, str)
                                                                  and LABEL_VALUE.match(x) for k, x in v.items()),
                           "must map node label keys to label values", 'use e.g. {"cloud.google.com/gke-nodepool": '
                           '"cpu-pool"}'),
    "tolerations": Check(lambda v: isinstance(v, list) and all(_toleration(t) for t in v),
                         "must be a list of Kubernetes tolerations (key, operator Equal|Exists, value, effect "
                         "NoSchedule|PreferNoSchedule|NoExecute, tolerationSeconds)",
                         'use e.g. [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": '
                         '"NoSchedule"}]'),
    "service_account": Check(_or_null(DNS_1123_SUBDOMAIN, 253), "must name a ServiceAccount (a DNS-1123 "
                             "subdomain)", "use the name as `kubectl get serviceaccounts` shows it, or null"),
    "image_pull_policy": Check(lambda v: v in ("Always", "IfNotPresent", "Never"),
                               "must be Always, IfNotPresent or Never", "use IfNotPresent for a tagged image"),
    "port": Check(int_in(1024, 65535), "must be a port from 1024 to 65535",
                  "use e.g. 2222 (every pod has its own address, so all tasks share it)"),
    "labels": Check(_labels, "must map label keys to label values (at most 63 characters of letters, digits, "
                    "'-', '_', '.'), outside the jobset.sigs.k8s.io/, batch.kubernetes.io/ and kubernetes.io/ "
                    "prefixes", 'use e.g. {"team": "recsys"}'),
    "annotations": Check(lambda v: isinstance(v, dict) and all(qualified_name(k) and _own_key(k)
                                                               and isinstance(x, str) for k, x in v.items()),
                         "must map annotation keys to strings, outside the prefixes Kubernetes and JobSet own",
                         'use e.g. {"example.com/owner": "alice"}'),
    "termination_grace_period_s": Check(int_in(1, 86_400), "must be a whole number of seconds from 1 to 86400",
                                        "use e.g. 120 (time for the chief to write a checkpoint on SIGTERM)"),
}


def pod_host(settings: KubernetesSettings, job: str, index: int) -> str:
    """The host name JobSet gives the one pod of Job `index` of replicatedJob `job`, under the JobSet's subdomain."""
    return f"{settings.name}-{job}-{index}-0.{settings.name}"


def place(sizes: Mapping[str, int], settings: KubernetesSettings) -> dict[str, tuple[Address, ...]]:
    """`job: addresses` for every sized job: each task at its pod's host name and the one shared port."""
    return {job: tuple(Address(pod_host(settings, job, i), settings.port) for i in range(size))
            for job, size in sizes.items() if size}


def longest_pod_name(settings: KubernetesSettings, job: str, size: int) -> str:
    """The longest pod name of `job` as JobSet's webhook checks it: `<jobset>-<rjob>-<jobIdx>-<podIdx>` plus the
    five random characters (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go, `longestPodName`)."""
    return f"{settings.name}-{job}-{size - 1}-0{POD_SUFFIX}"


def kubernetes_problems(settings: KubernetesSettings, sizes: Mapping[str, int], sized: bool,
                        reported: set[str]) -> list[Problem]:
    """Checks across the kubernetes and cluster sections, for the kubernetes backend (`reported`: fields already
    found wrong, which hold their defaults now and must not be reported twice)."""
    problems = []
    if not sized:
        problems.append(Problem("cluster", "host:port addresses", "cannot be used by the kubernetes backend, which "
                                "gives every task its own pod", 'give job sizes, e.g. "cluster": {"chief": 1, '
                                '"worker": 2, "ps": 2, "evaluator": 1}'))
    if settings.image is None and "kubernetes.image" not in reported:
        problems.append(Problem("kubernetes.image", None, "is required by the kubernetes backend",
                                "build and push the project's Dockerfile, then give its reference, e.g. "
                                '"registry.example.com/team/pscluster:0.1.0"'))
    if sizes.get("evaluator") and settings.output_volume is None and "kubernetes.output_volume" not in reported:
        problems.append(Problem("kubernetes.output_volume", None, "is required with an evaluator, which reads the "
                                "chief's checkpoints from another pod", "create a ReadWriteMany "
                                "PersistentVolumeClaim and give its name"))
    longest = max((longest_pod_name(settings, job, size) for job, size in sizes.items() if size), key=len, default="")
    if len(longest) > 63 and "kubernetes.name" not in reported:
        problems.append(Problem("kubernetes.name", settings.name, f"makes pod names too long for Kubernetes "
                                f"({longest}: {len(longest)} characters, at most 63)",
                                f"shorten it by {len(longest) - 63} characters"))
    return problems
