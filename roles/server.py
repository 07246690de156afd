"""`python -m roles.server --role ps|worker --index N`: one tf.distribute.Server, stopped cleanly by SIGTERM/SIGINT."""

from __future__ import annotations

import os
import signal
import sys
import threading

import fire

from cluster import config as cluster_config
from cluster import taskspec
from common import stack_dump
from common import fresh_ps
from common.errors import Problem, UserError, exit_on_user_error
from common.exit_file import record_exit, remove_generated_sources, run_recording_exit
from common.logs import quiet_tensorflow, task_logger
from common.net import port_in_use
from common.version import titled

SERVER_ROLES = ("ps", "worker")


def check_port_free(port: int) -> None:
    """Fails with one line when the port is taken (TensorFlow would dump gRPC errors instead)."""
    if port_in_use(port):
        raise UserError(Problem("port", port, "is already in use by another process",
                                f"stop it (e.g. `sh kill.sh`; `ss -ltnp 'sport = :{port}'` shows who) "
                                "or give this task another port in cluster.json"))


def _configure_devices(tf, role: str, log) -> None:
    """A ps sees no GPU; a worker's one visible GPU grows its memory on demand instead of taking it all."""
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
        log.info("%s uses %s with memory growth", role, gpu.name)


def _wait_for_stop_signal() -> str:
    stopped = threading.Event()
    received = []

    def on_signal(signum, _frame):
        received.append(signal.Signals(signum).name)
        stopped.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    while not stopped.wait(timeout=1.0):
        pass
    return received[0]


@exit_on_user_error()
def serve(*, role: str, index: int, cluster: str = "cluster.json") -> None:
    """Starts the ps or worker server `role`:`index` of the cluster file and serves until SIGTERM or SIGINT.

    Args:
      role: ps or worker (the chief runs coordinator.train, the evaluator evaluator.sidecar).
      index: the task's position in that job's list in cluster.json.
      cluster: path of cluster.json.
    """
    if role not in SERVER_ROLES:
        raise UserError(Problem("--role", role, "is not a server role", "use ps or worker"))
    config = cluster_config.load(cluster)
    task = config.task(role, index)
    taskspec.apply_to_this_process(config, task)
    log = task_logger(task.name)
    check_port_free(task.address.port)
    quiet_tensorflow()
    stack_dump.on_sigusr1()
    import tensorflow as tf  # only now: TF_CONFIG, CUDA_VISIBLE_DEVICES and GRPC_FAIL_FAST are set

    _configure_devices(tf, role, log)
    from data import skipped
    from data.line_ranges import register_reader
    register_reader()  # pipelines the chief traces read byte ranges through it here (see data/line_ranges.py)
    skipped.register()  # and count the records they skip (see data/skipped.py)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    try:
        tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index,
                             protocol="grpc", start=True)
    except (tf.errors.UnknownError, tf.errors.InvalidArgumentError) as error:
        raise UserError(Problem("server", str(task.address), f"could not start ({error.message.splitlines()[0]})",
                                "check that the port is free and the host name is this machine")) from None
    log.info("ready: %s listening on port %d (pid %d)", role, task.address.port, os.getpid())
    if role == "ps" and fresh_ps.applies(config):  # Kubernetes replaces a chief's pod alone: see common/fresh_ps.py
        fresh_ps.PsGeneration(config, index, log, exit=_leave).start()
    signal_name = _wait_for_stop_signal()
    log.info("stopping on %s", signal_name)
    _leave(0)


def _leave(code: int) -> None:
    sys.stderr.flush()
    record_exit(code)
    remove_generated_sources()
    os._exit(code)  # the C++ server has no clean shutdown; leaving the process is the only way to stop it


serve.__doc__ = titled(serve.__doc__)


if __name__ == "__main__":
    run_recording_exit(lambda: fire.Fire(serve, name="roles.server"))
