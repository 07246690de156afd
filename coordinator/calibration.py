"""`python -m coordinator.calibration`: the job's real step for a few seconds on one worker and one ps, timed, with
each process's CPU counted, so `plan` can price what a step costs beside its compute and its bytes.

Run as the chief of a loopback cluster of one ps and one worker (the launcher starts them, see
launcher/calibration_run.py) with the job's own model, optimizers and steps_per_execution, and the job's global
batch as the one worker's batch. A first short epoch traces and connects, a second of PROBE_CHUNKS chunks sizes
the third to about TARGET_S, which is timed: wall seconds per step, and CPU seconds per step of the chief (this
process), the worker and the ps (read from /proc by pid). Prints one JSON line.
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
from common.logs import quiet_tensorflow, task_logger
from common.proc import proc_stat

TARGET_S = 3.0  # the timed epoch's length
WARM_UP_CHUNKS = 2  # of steps_per_execution steps: tracing, connecting, the first reads of every variable
PROBE_CHUNKS = 5
MAX_STEPS = 5_000


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used so far (its threads included)."""
    fields = proc_stat(pid)
    if fields is None:
        raise ProcessLookupError(f"process {pid} is gone")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fit(model, dataset_fn, steps: int) -> float:
    """Wall seconds of one epoch of `steps` steps, every one finished."""
    import tf_keras

    started = time.perf_counter()
    model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=1, steps_per_epoch=steps, verbose=0)
    return time.perf_counter() - started


def measure(config, pids: dict[str, int], log) -> dict:
    """Warms up, then times one epoch of about TARGET_S; CPU per step of every process named in `pids`."""
    from coordinator import strategy
    from coordinator.compiled import build_compiled
    from data import source_for

    options = config.training
    source = source_for(options, PROJECT_ROOT)
    global_batch = options.per_worker_batch  # one worker: the launcher set it to the job's global batch
    strategy.wait_for_cluster(config, options.probe_timeout_s, log)
    with strategy.build(config, options).scope():
        model = build_compiled(options, source, steps_per_execution=options.steps_per_execution)
    dataset_fn = source.train_dataset_fn(global_batch, options.seed, workers=1)
    chunk = options.steps_per_execution
    warm_s = _fit(model, dataset_fn, WARM_UP_CHUNKS * chunk)
    probe_s = _fit(model, dataset_fn, PROBE_CHUNKS * chunk)
    steps = max(chunk, min(MAX_STEPS, round(TARGET_S / max(probe_s / (PROBE_CHUNKS * chunk), 1e-4) / chunk) * chunk))
    before = {name: cpu_seconds(pid) for name, pid in {"chief": os.getpid(), **pids}.items()}
    wall_s = _fit(model, dataset_fn, steps)
    used = {name: cpu_seconds(pid) - before[name] for name, pid in {"chief": os.getpid(), **pids}.items()}
    log.info("calibration: %d steps of batch %d in %.2f s (%.2f ms per step)", steps, global_batch, wall_s,
             wall_s / steps * 1e3)
    return {"steps": steps, "global_batch": global_batch, "wall_s": wall_s, "step_s": wall_s / steps,
            "cpu_s_per_step": {name: seconds / steps for name, seconds in used.items()},
            "steps_per_execution": options.steps_per_execution, "warm_up_s": warm_s}


@exit_on_user_error()
def main(cluster: str, pids="{}") -> None:
    """Times the job's step on CLUSTER (one ps, one worker on loopback) and prints the figures as one JSON line.

    Args:
      cluster: the calibration cluster's file (the launcher writes it).
      pids: JSON {"worker": pid, "ps": pid} of the servers, whose CPU is counted.
    """
    config = cluster_config.load(cluster)
    taskspec.apply_to_this_process(config, config.task("chief", 0))
    log = task_logger("calibration")
    quiet_tensorflow()
    pids = pids if isinstance(pids, dict) else json.loads(pids)  # Fire decodes a JSON object itself
    figures = measure(config, {name: int(pid) for name, pid in pids.items()}, log)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    fire.Fire(main)
