"""A JobSet's pods run here as the Job and JobSet controllers would run them, each pod a process in a namespace.

It carries out what the manifest says, and nothing of its own: each child Job (one per replicatedJob replica,
parallelism 1) runs its pod; a failed pod goes through the Job's podFailurePolicy (FailJob, Ignore, else counted
against backoffLimit: kubernetes pkg/controller/job), a failed Job through the JobSet's failurePolicy rules in
order (FailJobSet, RestartJobSet up to maxRestarts with BlockingRecreate; no match: RestartJobSet), and the
successPolicy completes the JobSet and deletes the Jobs still active (kubernetes-sigs/jobset
pkg/controllers/jobset_controller.go, failure_policy.go, success_policy.go, v0.12). Pods get the labels and
annotations JobSet and the Job controller put on them. Not emulated: scheduling, the Job controller's backoff
delay (10 s doubling; here a failed pod is replaced at once), a replacement pod's new IP (here it keeps its
namespace's address under the same name), NetworkPolicy enforcement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from pathlib import Path

import netns
from clusterkit import ROOT
from kubeletkit import COMPLETION_INDEX_ANNOTATION, PodProcess, start_pod

LABEL = "jobset.sigs.k8s.io/"
POLL_S = 0.2


@dataclasses.dataclass
class ChildJob:
    rjob: str
    index: int
    spec: dict  # the Job's spec
    namespace: str
    pod: PodProcess | None = None
    pods_started: int = 0
    failed_pods: int = 0
    state: str = "Active"  # Active, Succeeded, Failed
    reason: str = ""


class JobSetEmulator:
    """Runs a JobSet's pods to the end the JobSet's own policies give: Completed or Failed."""

    def __init__(self, documents: list[dict], work: Path):
        self.jobset = next(d for d in documents if d["kind"] == "JobSet")
        self.config_map = next(d for d in documents if d["kind"] == "ConfigMap")
        self.name, self.spec, self.work = self.jobset["metadata"]["name"], self.jobset["spec"], work
        self.slots = [(r["name"], i) for r in self.spec["replicatedJobs"] for i in range(r["replicas"])]
        self.claims = netns.Claims.new(len(self.slots))
        self.jobs: dict[tuple[str, int], ChildJob] = {}
        self.state, self.restarts, self.events = "Running", 0, []
        self.addresses: dict[tuple[str, int], str] = {}

    def __enter__(self) -> "JobSetEmulator":
        self._teardown = contextlib.ExitStack()
        try:
            subnet = netns._create_bridge(self.claims.bridge, self._teardown)
            for k, slot in enumerate(self.slots):
                self.addresses[slot] = f"{subnet}.{netns.FIRST_HOST_OCTET + k}"
                netns._create_namespace(self.claims.namespaces[k], self.claims.links[k], self.claims.bridge,
                                        self.addresses[slot], self._teardown)
            self._write_files()
        except BaseException:
            self._teardown.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.delete_jobs()
        self._teardown.close()
        left = netns.leftovers(self.claims)
        assert not left, f"the emulated JobSet left {left}"

    def _write_files(self) -> None:
        """The ConfigMap's files, the shared volume, the logs, and each namespace's /etc/hosts."""
        self.config_dir, self.volume, self.logs = self.work / "configmap", self.work / "volume", self.work / "pods"
        for directory in (self.config_dir, self.volume, self.logs):
            directory.mkdir()
        for key, text in self.config_map["data"].items():
            (self.config_dir / key).write_text(text)
        subdomain = self.spec["network"]["subdomain"]
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.addresses[s]} {self.hostname(*s)}.{subdomain} "
                                                  f"{self.hostname(*s)}\n" for s in self.slots)
        for namespace in self.claims.namespaces:
            directory = Path("/etc/netns") / namespace
            directory.mkdir(parents=True)
            self._teardown.callback(lambda d=directory: (d / "hosts").unlink() or d.rmdir())
            (directory / "hosts").write_text(hosts)

    def hostname(self, rjob: str, index: int) -> str:
        return f"{self.name}-{rjob}-{index}-0"

    def log(self, rjob: str, index: int) -> str:
        path = self.logs / f"{rjob}-{index}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        """Creates every child Job and its pod (again after a restart, with the restart-attempt label raised)."""
        for rjob in self.spec["replicatedJobs"]:
            for index in range(rjob["replicas"]):
                namespace = self.claims.namespaces[self.slots.index((rjob["name"], index))]
                job = ChildJob(rjob["name"], index, rjob["template"]["spec"], namespace)
                self.jobs[(rjob["name"], index)] = job
                self._start_pod(job)

    def _start_pod(self, job: ChildJob) -> None:
        template, replicas = job.spec["template"], len([s for s in self.slots if s[0] == job.rjob])
        ours = {"jobset-name": self.name, "replicatedjob-name": job.rjob, "replicatedjob-replicas": str(replicas),
                "job-index": str(job.index), "restart-attempt": str(self.restarts)}
        labels = {**template.get("metadata", {}).get("labels", {}), **{LABEL + k: v for k, v in ours.items()}}
        annotations = {**template.get("metadata", {}).get("annotations", {}), **{LABEL + k: v for k, v in
                       ours.items()}, COMPLETION_INDEX_ANNOTATION: "0"}
        name = f"{self.hostname(job.rjob, job.index)}-{job.pods_started:05d}"
        metadata = {"name": name, "namespace": self.jobset["metadata"]["namespace"], "labels": labels,
                    "annotations": annotations}
        job.pod = start_pod(name=name, hostname=self.hostname(job.rjob, job.index), namespace=job.namespace,
                            template=template, metadata=metadata, log_path=self.logs / f"{job.rjob}-{job.index}.log",
                            mounts=self._mounts(template))
        job.pods_started += 1
        self.events.append(f"started pod {name}")

    def _mounts(self, template: dict) -> dict[str, Path]:
        container = template["spec"]["containers"][0]
        kinds = {v["name"]: "configMap" if "configMap" in v else "volume" for v in template["spec"]["volumes"]}
        mounts = {m["mountPath"]: self.config_dir if kinds[m["name"]] == "configMap" else self.volume
                  for m in container["volumeMounts"]}
        return {container["workingDir"]: ROOT, **mounts}

    def run_pod(self, pod: dict, timeout_s: float = 120) -> tuple[int, str]:
        """Runs a lone pod (not a Job's) to its end in the first namespace: its exit code and log."""
        template = {"metadata": pod["metadata"], "spec": pod["spec"]}
        log_path = self.logs / f"{pod['metadata']['name']}.log"
        process = start_pod(name=pod["metadata"]["name"], hostname=pod["metadata"]["name"],
                            namespace=self.claims.namespaces[0], template=template, metadata=pod["metadata"],
                            log_path=log_path, mounts=self._mounts(template))
        process.process.wait(timeout=timeout_s)
        return process.exit_code(), log_path.read_text(errors="replace")

    def kill(self, rjob: str, index: int) -> None:
        """A pod dies (SIGKILL: a crash, an OOM kill, a lost node)."""
        self.events.append(f"killed pod of {rjob}-{index}")
        self.jobs[(rjob, index)].pod.signal(signal.SIGKILL)

    def run_until(self, condition, timeout_s: float) -> bool:
        """Reconciles until `condition()` holds (True) or the JobSet has finished or time is up (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return True
            if self.state != "Running":
                return False
            self.reconcile()
            time.sleep(POLL_S)
        return condition()

    def reconcile(self) -> None:
        for job in [j for j in self.jobs.values() if j.state == "Active"]:
            code = job.pod.exit_code()
            if code is None:
                continue
            self.events.append(f"pod of {job.rjob}-{job.index} exited with {code}")
            self._on_pod_exit(job, code)
            if job.state == "Failed":
                return self._on_job_failure(job)
        targets = self.spec["successPolicy"].get("targetReplicatedJobs") or [r for r, _ in self.slots]
        if all(j.state == "Succeeded" for j in self.jobs.values() if j.rjob in targets):
            self._finish("Completed")

    def _on_pod_exit(self, job: ChildJob, code: int) -> None:
        if code == 0:
            job.state = "Succeeded"
            return
        action = next((r["action"] for r in job.spec.get("podFailurePolicy", {}).get("rules", [])
                       if "onExitCodes" in r and _matches(r["onExitCodes"], code)), "Count")
        if action == "FailJob":
            job.state, job.reason = "Failed", "PodFailurePolicy"
        elif action == "Count" and job.failed_pods + 1 > job.spec.get("backoffLimit", 6):
            job.failed_pods += 1
            job.state, job.reason = "Failed", "BackoffLimitExceeded"
        else:
            job.failed_pods += action == "Count"
            self._start_pod(job)

    def _on_job_failure(self, job: ChildJob) -> None:
        policy = self.spec.get("failurePolicy", {})
        rule = next((r for r in policy.get("rules", [])
                     if (not r.get("onJobFailureReasons") or job.reason in r["onJobFailureReasons"])
                     and (not r.get("targetReplicatedJobs") or job.rjob in r["targetReplicatedJobs"])), None)
        action = rule["action"] if rule else "RestartJobSet"
        self.events.append(f"job {job.rjob}-{job.index} failed ({job.reason}): rule "
                           f"{rule['name'] if rule else '(none)'}, {action}")
        if action == "FailJobSet":
            return self._finish("Failed")
        if action == "RestartJobSet" and self.restarts >= policy.get("maxRestarts", 0):
            return self._finish("Failed")
        self.delete_jobs()  # BlockingRecreate: every old pod is gone before the new ones start
        self.restarts += 1
        self.start()

    def _finish(self, state: str) -> None:
        self.events.append(f"JobSet {state}")
        self.state = state
        self.delete_jobs()

    def delete_jobs(self) -> None:
        """Deletes every Job's pod that still runs, as the kubelet stops pods: SIGTERM, grace period, SIGKILL."""
        running = [j for j in self.jobs.values() if j.pod and j.pod.exit_code() is None]
        for job in running:
            job.pod.signal(signal.SIGTERM)
        for job in running:
            job.pod.terminate(grace_s=job.spec["template"]["spec"].get("terminationGracePeriodSeconds", 30))
        self.jobs = {key: job for key, job in self.jobs.items() if job.state != "Active"}


def _matches(requirement: dict, code: int) -> bool:
    inside = code in requirement["values"]
    return inside if requirement["operator"] == "In" else not inside

