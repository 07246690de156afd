"""`python -m coordinator.calibration`: the job's real step for a few seconds on one worker and a ps or two, timed,
with each process's CPU counted, so `plan` can price what a step costs beside its compute and its bytes.

Run as the chief of a loopback cluster of one worker and one or more ps (the launcher starts them, see
launcher/calibration_run.py) with the job's own model, optimizers and steps_per_execution, and the job's global
batch as the one worker's batch. A first epoch of one chunk traces and connects, a second of one chunk sizes the
TIMED_EPOCHS after it to about TARGET_S in all (a chunk under PROBE_MIN_S is too short to size them by: then
PROBE_CHUNKS chunks do): wall seconds per step of the fastest of them (a neighbour's burst lengthens an epoch,
never shortens one), and CPU seconds per step over all of them of the chief (this process), the worker and the ps
together (read from /proc by pid). Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import time

import fire

from cluster import config as cluster_config
from cluster import taskspec
from cluster.config import PROJECT_ROOT
from common.errors import exit_on_user_error
from common.graph_style import trace_toolkit_code_as_written
from common.logs import quiet_tensorflow, task_logger
from common.proc import proc_stat

TARGET_S = 3.0  # the timed epochs' length in all
TIMED_EPOCHS = 3
PROBE_MIN_S = 0.1  # a timed chunk at least this long sizes the timed epochs alone (a slow step: no longer probe)
PROBE_CHUNKS = 5  # of steps_per_execution steps, for a chunk under PROBE_MIN_S
MAX_STEPS = 5_000


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used so far (its threads included)."""
    fields = proc_stat(pid)
    if fields is None:
        raise ProcessLookupError(f"process {pid} is gone")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fit(model, dataset_fn, steps: int, epochs: int = 1) -> list[float]:
    """Wall seconds of each of `epochs` epochs of `steps` steps (at an epoch's end every step scheduled has run)."""
    import tf_keras

    from coordinator.traced_once import MetricsBeforeTheFirstStep

    ends, metrics_first = [time.perf_counter()], MetricsBeforeTheFirstStep()
    marker = tf_keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: ends.append(time.perf_counter()))
    model.fit(tf_keras.utils.experimental.DatasetCreator(metrics_first.recording(dataset_fn)), epochs=epochs,
              steps_per_epoch=steps, verbose=0, callbacks=[metrics_first, marker])
    return [end - start for start, end in zip(ends[:-1], ends[1:], strict=True)]


def _step_s_over_probe(model, dataset_fn, chunk: int) -> float:
    """Wall seconds per step over PROBE_CHUNKS chunks: a chunk too short to size the timed epochs by alone."""
    (probe_s,) = _fit(model, dataset_fn, PROBE_CHUNKS * chunk)
    return probe_s / (PROBE_CHUNKS * chunk)


def cpu_of(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds used so far by each role's processes together."""
    return {role: sum(cpu_seconds(pid) for pid in group) for role, group in pids.items()}


def measure(config, pids: dict[str, list[int]], log) -> dict:
    """Warms up, then times TIMED_EPOCHS epochs of about TARGET_S in all; CPU per step of each role in `pids`."""
    from coordinator import strategy
    from models.compiled import build_compiled
    from models.sources import source_for_model

    options = config.training
    source = source_for_model(options, PROJECT_ROOT)
    global_batch = options.per_worker_batch  # one worker: the launcher set it to the job's global batch
    config = strategy.wait_for_cluster(config, options.probe_timeout_s, log)
    with strategy.build(config, options).scope():
        model = build_compiled(options, source, steps_per_execution=options.steps_per_execution)
    dataset_fn = source.train_dataset_fn(global_batch, options.seed, workers=1)
    chunk = options.steps_per_execution
    warm_s, chunk_s = _fit(model, dataset_fn, chunk, epochs=2)  # tracing, connecting, the first reads; one chunk
    per_step_s = max(chunk_s / chunk if chunk_s >= PROBE_MIN_S else _step_s_over_probe(model, dataset_fn, chunk), 1e-4)
    steps = max(chunk, min(MAX_STEPS, round(TARGET_S / TIMED_EPOCHS / per_step_s / chunk) * chunk))
    pids = {"chief": [os.getpid()], **pids}
    before = cpu_of(pids)
    epochs_s = _fit(model, dataset_fn, steps, TIMED_EPOCHS)
    used = {role: seconds - before[role] for role, seconds in cpu_of(pids).items()}
    log.info("calibration: %d epochs of %d steps of batch %d in %s s (the fastest %.2f ms per step)", TIMED_EPOCHS,
             steps, global_batch, ", ".join(f"{s:.2f}" for s in epochs_s), min(epochs_s) / steps * 1e3)
    return {"steps": steps * TIMED_EPOCHS, "global_batch": global_batch, "wall_s": sum(epochs_s),
            "step_s": min(epochs_s) / steps, "epochs_s": epochs_s,
            "cpu_s_per_step": {role: seconds / (steps * TIMED_EPOCHS) for role, seconds in used.items()},
            "steps_per_execution": options.steps_per_execution, "warm_up_s": warm_s}


@exit_on_user_error()
def main(cluster: str, pids="{}") -> None:
    """Times the job's step on CLUSTER (one worker and its ps on loopback) and prints the figures as one JSON line.

    Args:
      cluster: the calibration cluster's file (the launcher writes it).
      pids: JSON {"worker": [pid], "ps": [pid, ...]} of the servers, whose CPU is counted by role.
    """
    config = cluster_config.load(cluster)
    taskspec.apply_to_this_process(config, config.task("chief", 0))
    log = task_logger("calibration")
    quiet_tensorflow()
    trace_toolkit_code_as_written()
    pids = pids if isinstance(pids, dict) else json.loads(pids)  # Fire decodes a JSON object itself
    figures = measure(config, {role: [int(pid) for pid in group] for role, group in pids.items()}, log)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    fire.Fire(main)
