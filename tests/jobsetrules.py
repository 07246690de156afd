"""JobSet's admission rules that no published schema holds, re-stated from its webhook for tests to check.

Source: kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go (`ValidateCreate`, `validateFailurePolicy`), v0.12;
enums from its CRD (config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml) and the Job API (batch/v1).
"""

from __future__ import annotations

import re

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # ruleNameFmt
FAILURE_ACTIONS = ("FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts")  # RestartJob*: gated, off
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                       "PodFailurePolicy")  # validOnJobFailureReasons
RESTART_STRATEGIES = ("Recreate", "BlockingRecreate")  # InPlaceRestart: gated, off by default
SUCCESS_OPERATORS = ("All", "Any")
POD_FAILURE_ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")


def dns_1035(name: str) -> bool:
    return len(name) <= 63 and bool(DNS_1035.match(name))


def webhook_problems(jobset: dict) -> list[str]:
    """What JobSet's webhook would refuse in `jobset`, one string each (empty: it would be admitted)."""
    spec, name = jobset["spec"], jobset["metadata"]["name"]
    problems = []
    subdomain = spec.get("network", {}).get("subdomain")
    if subdomain is not None and not (dns_1035(subdomain) and DNS_1123_SUBDOMAIN.match(subdomain)):
        problems.append(f"network.subdomain {subdomain!r} is not a DNS-1035 label")
    names = []
    for rjob in spec["replicatedJobs"]:
        names.append(rjob["name"])
        job = rjob["template"]["spec"]
        longest_job = f"{name}-{rjob['name']}-{rjob.get('replicas', 1) - 1}"  # placement.GenJobName
        if not dns_1035(longest_job):
            problems.append(f"job name {longest_job!r} is not a DNS-1035 label of at most 63 characters")
        if job.get("completionMode") == "Indexed" and "completions" in job:
            longest_pod = f"{longest_job}-{job['completions'] - 1}-abcde"  # GenPodName + the random suffix
            if not dns_1035(longest_pod):
                problems.append(f"pod name {longest_pod!r} is not a DNS-1035 label of at most 63 characters")
        for rule in job.get("podFailurePolicy", {}).get("rules", []):
            if rule["action"] not in POD_FAILURE_ACTIONS:
                problems.append(f"podFailurePolicy action {rule['action']!r}")
        if job.get("podFailurePolicy") and job["template"]["spec"].get("restartPolicy") != "Never":
            problems.append(f"{rjob['name']}: a podFailurePolicy needs restartPolicy Never (batch/v1 validation)")
    if len(set(names)) != len(names):
        problems.append(f"replicatedJob names repeat: {names}")
    success = spec.get("successPolicy", {})
    if success and success.get("operator") not in SUCCESS_OPERATORS:
        problems.append(f"successPolicy.operator {success.get('operator')!r}")
    problems += [f"successPolicy target {t!r} is no replicatedJob" for t in success.get("targetReplicatedJobs", [])
                 if t not in names]
    return problems + _failure_policy_problems(spec.get("failurePolicy", {}), names)


def _failure_policy_problems(policy: dict, names: list[str]) -> list[str]:
    problems = []
    if policy.get("restartStrategy", "Recreate") not in RESTART_STRATEGIES:
        problems.append(f"failurePolicy.restartStrategy {policy['restartStrategy']!r}")
    rule_names = [rule.get("name", "") for rule in policy.get("rules", [])]
    if len(set(rule_names)) != len(rule_names):
        problems.append(f"failure policy rule names repeat: {rule_names}")
    for rule in policy.get("rules", []):
        if not (1 <= len(rule.get("name", "")) <= 128 and RULE_NAME.match(rule.get("name", ""))):
            problems.append(f"failure policy rule name {rule.get('name')!r}")
        if rule["action"] not in FAILURE_ACTIONS:
            problems.append(f"failure policy action {rule['action']!r} (RestartJob needs a feature gate)")
        problems += [f"failure policy reason {r!r}" for r in rule.get("onJobFailureReasons", [])
                     if r not in JOB_FAILURE_REASONS]
        problems += [f"failure policy target {t!r}" for t in rule.get("targetReplicatedJobs", []) if t not in names]
    return problems
