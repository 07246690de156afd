"""`python -m roles.server --role ps|worker --index N`: one tf.distribute.Server, stopped cleanly by SIGTERM/SIGINT."""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import threading

import fire

from roles import config as cluster_config
from roles import taskspec
from roles.errors import Problem, UserError, exit_on_user_error
from roles.logs import quiet_tensorflow, task_logger

SERVER_ROLES = ("ps", "worker")


def port_in_use(port: int) -> bool:
    """True when another process listens on `port` on any interface (as TensorFlow's server would)."""
    family = socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            probe.bind(("::" if family == socket.AF_INET6 else "", port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            return True
    return False


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
def serve(role: str, index: int, cluster: str = "cluster.json") -> None:
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
    import tensorflow as tf  # only now: TF_CONFIG, CUDA_VISIBLE_DEVICES and GRPC_FAIL_FAST are set

    _configure_devices(tf, role, log)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    try:
        tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index,
                             protocol="grpc", start=True)
    except (tf.errors.UnknownError, tf.errors.InvalidArgumentError) as error:
        raise UserError(Problem("server", str(task.address), f"could not start ({error.message.splitlines()[0]})",
                                "check that the port is free and the host name is this machine")) from None
    log.info("ready: %s listening on port %d (pid %d)", role, task.address.port, os.getpid())
    signal_name = _wait_for_stop_signal()
    log.info("stopping on %s", signal_name)
    sys.stderr.flush()
    os._exit(0)  # the C++ server has no clean shutdown; leaving the process is the only way to stop it


if __name__ == "__main__":
    fire.Fire(serve)
