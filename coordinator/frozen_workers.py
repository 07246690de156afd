"""Workers that accept connections but answer nothing (stopped or frozen): the chief starts without them, since
TensorFlow waits at start-up, with no deadline, for every task it connects to, and comes back for them once they
answer again (under the launcher it stops, with a checkpoint, to be started again with every worker)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import signal
import sys
import threading
import time

from cluster import taskspec
from cluster.config import ClusterConfig, Task
from cluster.run_files import this_run
from common import net
from common.errors import CLUSTER_UNAVAILABLE_EXIT_CODE

ANSWER_S = 5.0  # a task that has not answered an RPC within this counts as frozen (a live one answers in ms)
RETURN_POLL_S = 5.0  # how often the workers left out are asked again


def silent(tasks: list[Task], deadline_s: float = ANSWER_S) -> list[Task]:
    """The tasks that do not answer an RPC within `deadline_s`, asked all at once."""
    if not tasks:
        return []
    with concurrent.futures.ThreadPoolExecutor(len(tasks)) as pool:
        answered = list(pool.map(lambda t: net.serves_rpcs(t.address.host, t.address.port, deadline_s), tasks))
    return [task for task, yes in zip(tasks, answered, strict=True) if not yes]


def start_without_frozen(config: ClusterConfig, timeout_s: float, log) -> ClusterConfig:
    """The config to build the strategy from: every task listening answers, or the frozen workers are left out
    (TF_CONFIG rewritten). A frozen ps, or every worker frozen, is waited for up to `timeout_s`, then exit 3."""
    deadline = time.monotonic() + timeout_s
    while True:
        frozen = silent(config.training_tasks(("ps", "worker")))
        workers = [t for t in frozen if t.job == "worker"]
        held = [t for t in frozen if t.job == "ps"] + (workers if len(workers) == config.input_pipelines else [])
        if not held:
            break
        if time.monotonic() >= deadline:
            for task in held:
                print(f"error: {task.name} at {task.address} accepts connections but has not answered for "
                      f"{timeout_s:.0f} s (stopped or frozen); let it go on (kill -CONT) or restart it",
                      file=sys.stderr)
            sys.exit(CLUSTER_UNAVAILABLE_EXIT_CODE)
        log.info("%s accept connections but do not answer (stopped or frozen?): waiting for them",
                 ", ".join(f"{t.name}@{t.address}" for t in held))
    if not workers:
        return config
    return _leave_out(config, workers, log)


def _leave_out(config: ClusterConfig, frozen: list[Task], log) -> ClusterConfig:
    listed = config.trainer_workers or tuple(range(len(config.jobs["worker"])))
    left_out = [listed[t.index] for t in frozen]  # the training cluster numbers its workers from 0
    narrowed = dataclasses.replace(config, trainer_workers=tuple(i for i in listed if i not in left_out))
    os.environ["TF_CONFIG"] = json.dumps(taskspec.tf_config(narrowed, narrowed.lead), separators=(",", ":"))
    names = ", ".join(f"worker:{i}@{config.jobs['worker'][i]}" for i in left_out)
    log.warning("%s accept%s connections but answered nothing for %.0f s (stopped or frozen): training without "
                "%s; %s", names, "s" if len(left_out) == 1 else "", ANSWER_S, "it" if len(left_out) == 1 else "them",
                "the chief stops (with a checkpoint) to be started again with every worker once it answers"
                if this_run() else "it trains from this chief's next start")
    ReturnWatch([config.task("worker", i) for i in left_out], log).start()
    return narrowed


class ReturnWatch(threading.Thread):
    """Asks the workers left out every RETURN_POLL_S; when one answers, says so and, under the launcher, stops
    this chief the way SIGTERM does (a checkpoint, exit 4), so that the launcher starts it again with them."""

    def __init__(self, left_out: list[Task], log):
        super().__init__(name="frozen-workers", daemon=True)
        self.left_out, self.log = left_out, log

    def run(self) -> None:
        while True:
            time.sleep(RETURN_POLL_S)
            back = [t for t in self.left_out if t not in silent(self.left_out)]
            if back:
                break
        names = ", ".join(t.name for t in back)
        if not this_run():
            self.log.info("%s answers again; it trains from this chief's next start", names)
            return
        self.log.info("%s answers again: stopping (a checkpoint first) to be started again with it", names)
        os.kill(os.getpid(), signal.SIGTERM)
