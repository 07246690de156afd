"""The run's summary and best model, read where they are: on the volume, by a short-lived pod that mounts it.

Once the JobSet has finished, its chief and evaluator pods have ended and cannot be `kubectl exec`ed; the reader
pod is the chief's template (image, cluster.json, volume) running `python -m launcher.agent outputs`, whose one
line of JSON is the same RunOutputs the launcher reads on any host. It is deleted afterwards.
"""

from __future__ import annotations

import json
import time

from cluster.config import ClusterConfig
from launcher.backends.base import AgentFailed, RunOutputs
from launcher.backends.kubernetes import kubectl, pods

READ_TIMEOUT_S = 300


def reader_name(config: ClusterConfig) -> str:
    return f"{config.kubernetes.name}-outputs"


def reader_pod(config: ClusterConfig) -> dict:
    template = pods.pod_template(config, config.lead.job)
    container = template["spec"]["containers"][0]
    container["command"] = [container["command"][0], "-m", "launcher.agent", "outputs", "--cluster",
                            pods.CONFIG_FILE]
    container.pop("ports", None)
    container.pop("resources", None)
    metadata = {"name": reader_name(config), "namespace": config.kubernetes.namespace,
                **template.get("metadata", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def read(config: ClusterConfig, poll_s: float) -> RunOutputs:
    """Starts the reader pod, waits for it to end, parses its line, and deletes it."""
    name = reader_name(config)
    kubectl.run(config, "delete", "--ignore-not-found", "--wait=true", f"pod/{name}")
    kubectl.run(config, "create", "-f", "-", stdin=json.dumps(reader_pod(config)))
    try:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while (phase := kubectl.pod_phase(config, name)) not in ("Succeeded", "Failed"):
            if time.monotonic() > deadline:
                raise AgentFailed(f"pod {name} did not finish reading the volume within {READ_TIMEOUT_S} s "
                                  f"(it is {phase})")
            time.sleep(poll_s)
        lines = kubectl.run(config, "logs", name).strip().splitlines()
        if phase != "Succeeded" or not lines:
            raise AgentFailed(f"pod {name} could not read the volume: {lines[-1] if lines else '(no output)'}")
        return RunOutputs.from_json(json.loads(lines[-1]))
    finally:
        kubectl.run(config, "delete", "--ignore-not-found", "--wait=false", f"pod/{name}")


def report_lines(outputs: RunOutputs, volume: str) -> list[str]:
    """What the run left on the volume, in the words of the end-of-run report."""
    summary, where = outputs.summary, f"volume {volume}:{outputs.output}"
    if summary is None:
        return [f"no summary in {where}: training did not finish"]
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in summary.final_metrics.items())
    lines = [f"{summary.status}: {summary.epochs} epochs, {summary.optimizer_steps} steps; last epoch: {metrics}",
             f"model: {where}/model (model.h5, saved_model/, model.keras)"]
    if outputs.best is not None:
        best = ", ".join(f"{k} {v:.4f}" for k, v in outputs.best.metrics.items())
        lines.append(f"best: {outputs.best.checkpoint} at step {outputs.best.step} ({best}) in {where}/best_model")
    return lines
