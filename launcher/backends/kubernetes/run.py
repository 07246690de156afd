"""`sh run.sh`, `sh run.sh status` and `sh kill.sh` under the kubernetes backend, through kubectl.

run: writes the manifests into logs_dir, applies them (joining the JobSet if it already runs), follows every pod's
log into `logs/<job>-<index>.log` (the console shows the chief's and the evaluator's task-prefixed lines, as for
any run) and reports pods that start, fail and are replaced, until the JobSet completes or fails; the exit code is
the chief's. Healing is the JobSet's and the Jobs' own (see jobset.py): the launcher only watches. kill: deletes
the JobSet, its ConfigMap and NetworkPolicy, and waits until none of its pods is left.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time

from cluster.config import ClusterConfig
from common.errors import Problem, UserError
from launcher.backends.kubernetes import jobset as manifests
from launcher.backends.base import HostError
from launcher.backends.kubernetes import kubectl, outputs
from launcher.console import LogFollower, say

GONE_TIMEOUT_S = 300


def reporting_kubectl_errors(command):
    """kubectl missing, the API server unreachable, a refused object: kubectl's own line and exit code 1."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except HostError as error:
            say(f"error: {error}")
            sys.exit(1)

    return wrapper


@reporting_kubectl_errors
def run(config: ClusterConfig) -> int:
    """Applies the manifests (or joins the JobSet already running) and watches it to its end."""
    _refuse_finished(config, kubectl.jobset(config))
    logs = config.path(config.launcher.logs_dir)
    logs.mkdir(parents=True, exist_ok=True)
    path = manifests.write(config, logs / "jobset.yaml")
    for line in kubectl.apply(config, path).splitlines():
        say(line)
    followers: dict = {}
    try:
        return _watch(config, logs, followers)
    except KeyboardInterrupt:
        say(f"interrupted: JobSet {config.kubernetes.name} goes on running; `sh kill.sh` deletes it")
        return 130
    finally:
        for follower in followers.values():
            if follower.poll() is None:
                follower.kill()
                follower.wait()


def _refuse_finished(config: ClusterConfig, state: dict | None) -> None:
    """A finished JobSet cannot be applied again (its spec is immutable), nor would it run again."""
    finished = next((kind for kind in ("Completed", "Failed") if kubectl.condition(state, kind)), None)
    if finished:
        raise UserError(Problem("kubernetes.name", config.kubernetes.name, f"names a JobSet that has "
                                f"{finished.lower()} in namespace {config.kubernetes.namespace}",
                                "delete it with `sh kill.sh` (the outputs stay on the volume), or use another name"))


def _watch(config: ClusterConfig, logs, followers: dict) -> int:
    seen, echo = {}, LogFollower(config)
    while True:
        for pod in map(kubectl.PodState.of, kubectl.pods(config)):
            _report(pod, seen)
            if pod.name not in followers and pod.phase != "Pending":
                job, index = pod.task.split(":")
                followers[pod.name] = kubectl.follow_logs(config, pod.name, logs / f"{job}-{index}.log")
        echo.echo_new_lines()
        state = kubectl.jobset(config)
        for kind in ("Completed", "Failed"):
            if kubectl.condition(state, kind):
                return _finish(config, kind, state, followers, echo)
        time.sleep(config.launcher.poll_s)


def _report(pod: kubectl.PodState, seen: dict) -> None:
    """One line when a pod appears, starts running or ends (with its exit code)."""
    if seen.get(pod.name) == (pod.phase, pod.exit_code):
        return
    seen[pod.name] = (pod.phase, pod.exit_code)
    ended = f" (exit code {pod.exit_code})" if pod.exit_code is not None else ""
    say(f"{pod.task} pod {pod.name} on {pod.node}: {pod.phase}{ended}")


def _finish(config: ClusterConfig, kind: str, state: dict, followers: dict, echo: LogFollower) -> int:
    for follower in followers.values():
        try:
            follower.wait(timeout=10)  # each ends with its pod; one that does not is cut by run()
        except subprocess.TimeoutExpired:
            break
    echo.echo_new_lines()
    condition = kubectl.condition(state, kind)
    restarts = state.get("status", {}).get("restarts", 0)
    say(f"JobSet {config.kubernetes.name} {kind.lower()} after {restarts} restarts: "
        f"{condition.get('reason', '')} {condition.get('message', '')}".rstrip())
    chief = [p for p in map(kubectl.PodState.of, kubectl.pods(config)) if p.task == f"{config.lead.job}:0"]
    code = max(chief, key=lambda p: p.created).exit_code if chief else None
    if code is None or (kind == "Failed" and code == 0):  # a failed JobSet never exits 0
        code = 0 if kind == "Completed" else 1
    if config.kubernetes.output_volume:
        try:
            lines = outputs.report_lines(outputs.read(config, config.launcher.poll_s), config.kubernetes.output_volume)
        except HostError as error:
            lines = [f"could not read the outputs on volume {config.kubernetes.output_volume}: {error}"]
        for line in lines:
            say(line)
    say(f"exit code {code} (the chief's)")
    return code


@reporting_kubectl_errors
def status_lines(config: ClusterConfig) -> list[str]:
    """The JobSet's conditions and restarts, then one row per pod: task, pod, node, phase, exit code."""
    state = kubectl.jobset(config)
    if state is None:
        return [f"no JobSet {config.kubernetes.name} in namespace {config.kubernetes.namespace}"]
    status = state.get("status", {})
    conditions = [c["type"] for c in status.get("conditions", []) if c.get("status") == "True"]
    lines = [f"JobSet {config.kubernetes.name}: {', '.join(conditions) or 'Running'}; "
             f"restarts {status.get('restarts', 0)}", f"{'task':<12} {'pod':<40} {'node':<20} {'phase':<10} exit"]
    pods = sorted(map(kubectl.PodState.of, kubectl.pods(config)), key=lambda p: (p.task, p.created))
    attempts: dict[str, int] = {}
    for pod in pods:
        attempts[pod.task] = attempts.get(pod.task, 0) + 1
        code = "" if pod.exit_code is None else str(pod.exit_code)
        lines.append(f"{pod.task:<12} {pod.name:<40} {pod.node:<20} {pod.phase:<10} {code}")
    lines += [f"{task}: {count - 1} replaced pod(s)" for task, count in attempts.items() if count > 1]
    return lines


@reporting_kubectl_errors
def down(config: ClusterConfig) -> list[str]:
    """Deletes everything of the run and waits until its pods are gone."""
    lines = kubectl.delete(config).splitlines()
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while (left := kubectl.pods(config)) and time.monotonic() < deadline:
        time.sleep(config.launcher.poll_s)
    if left:
        return lines + [f"{len(left)} pod(s) still terminating after {GONE_TIMEOUT_S} s: "
                        f"{', '.join(p['metadata']['name'] for p in left)}"]
    return lines + [f"no pod of {config.kubernetes.name} is left"]
