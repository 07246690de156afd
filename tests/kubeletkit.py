"""A pod of the JobSet started as the kubelet would start it, as a local process in a network namespace of its own.

What is exact: the container's environment and command line, expanded as Kubernetes expands them (the image's ENV
first, then `env` in order, each `$(VAR)` from entries defined before it only, `$$` for `$`, an unknown reference
left as written; fieldRefs filled from the pod's labels and annotations; JOB_COMPLETION_INDEX appended last by the
Job controller; command and args expanded against the whole environment), sources: k8s.io/kubernetes
third_party/forked/golang/expansion/expand.go, pkg/kubelet/kubelet_pods.go `makeEnvironmentVariables`,
pkg/controller/job/indexed_job_utils.go `addCompletionIndexEnvVariable`. The pod's host name is its own (UTS
namespace), the others' names resolve to their namespaces' addresses (/etc/netns/NS/hosts, which `ip netns exec`
mounts over /etc/hosts), and its volumes are bind mounts at the paths the manifest names, in a mount namespace of
its own: the project at the image's WORKDIR, the ConfigMap's files, and one directory as the shared volume.
Not emulated: the image itself (the project directory and its .venv stand in for it), resource limits.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
from pathlib import Path

from clusterkit import ROOT

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def expand(text: str, variables: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion (expansion.Expand with MappingFuncFor): `$$` is `$`, `$(NAME)` is the value
    when NAME is defined, else kept as written; an unterminated `$(` and any other `$x` stay as they are."""
    out, cursor = [], 0
    while cursor < len(text):
        char = text[cursor]
        if char != "$" or cursor + 1 == len(text):
            out.append(char)
            cursor += 1
            continue
        following = text[cursor + 1]
        if following == "$":
            out.append("$")
            cursor += 2
        elif following == "(" and ")" in text[cursor + 2:]:
            close = text.index(")", cursor + 2)
            name = text[cursor + 2:close]
            out.append(variables.get(name, f"$({name})"))
            cursor = close + 1
        else:
            out.append("$" + following)
            cursor += 2
    return "".join(out)


def field_value(path: str, metadata: dict) -> str:
    """A fieldRef's value: metadata.name, metadata.namespace, metadata.labels['k'] or metadata.annotations['k']."""
    for kind in ("labels", "annotations"):
        prefix = f"metadata.{kind}['"
        if path.startswith(prefix) and path.endswith("']"):
            return metadata.get(kind, {}).get(path[len(prefix):-2], "")
    if path in ("metadata.name", "metadata.namespace"):
        return metadata[path.split(".")[1]]
    raise ValueError(f"fieldRef {path} is not emulated")


def environment(container: dict, metadata: dict, image_env: dict[str, str]) -> dict[str, str]:
    """The container's environment, built in Kubernetes' order."""
    entries = [*container.get("env", []), {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}}]
    defined: dict[str, str] = {}
    for entry in entries:
        if "valueFrom" in entry:
            defined[entry["name"]] = field_value(entry["valueFrom"]["fieldRef"]["fieldPath"], metadata)
        else:
            defined[entry["name"]] = expand(entry.get("value", ""), defined)
    return {**image_env, **defined}


def command_line(container: dict, env: dict[str, str]) -> list[str]:
    return [expand(part, env) for part in (*container.get("command", []), *container.get("args", []))]


def image_environment(dockerfile: Path = ROOT / "Dockerfile") -> dict[str, str]:
    """The ENV the project's Dockerfile sets (KEY=VALUE forms), over what the base image and the kubelet set."""
    env = {"PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    for line in dockerfile.read_text().splitlines():
        if line.startswith("ENV "):
            env.update(pair.split("=", 1) for pair in shlex.split(line[4:]))
    return env


@dataclasses.dataclass
class PodProcess:
    """One running pod: its name, log and process (the task's own, in its namespaces)."""

    name: str
    log_path: Path
    process: subprocess.Popen

    def exit_code(self) -> int | None:
        """None while it runs; a signal's death reads as Kubernetes reports it (128 + signal)."""
        code = self.process.poll()
        return None if code is None else (128 - code if code < 0 else code)

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self, grace_s: float) -> None:
        """As the kubelet stops a pod: SIGTERM, then SIGKILL once the grace period is over."""
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.process.wait(timeout=30)


def start_pod(*, name: str, hostname: str, namespace: str, template: dict, metadata: dict,
              mounts: dict[str, Path], log_path: Path) -> PodProcess:
    """Starts the pod's one container in network namespace `namespace`, with `mounts` (path in pod -> directory
    here) under a tmpfs at /opt in a mount namespace of its own."""
    container = template["spec"]["containers"][0]
    env = environment(container, metadata, image_environment())
    argv = command_line(container, env)
    setup = ["mount -t tmpfs -o size=1m pscluster-pod /opt", f"hostname {shlex.quote(hostname)}"]
    for inside, here in mounts.items():
        assert inside.startswith("/opt/"), inside
        setup += [f"mkdir -p {shlex.quote(inside)}", f"mount --bind {shlex.quote(str(here))} {shlex.quote(inside)}"]
    setup += [f"cd {shlex.quote(container['workingDir'])}", 'exec "$@"']
    wrapper = ["ip", "netns", "exec", namespace, "unshare", "--mount", "--uts", "--propagation", "private", "--",
               "sh", "-c", " && ".join(setup), "pod"]
    log = open(log_path, "ab")
    try:
        process = subprocess.Popen([*wrapper, *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()
    return PodProcess(name=name, log_path=log_path, process=process)
