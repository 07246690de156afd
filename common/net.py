"""Probes of task ports (TensorFlow hangs on an unreachable or frozen task, so we ask first) and local port checks."""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import Any, Callable, Iterable

GET_STATUS = "/tensorflow.WorkerService/GetStatus"  # every TensorFlow server (ps and worker) answers it


def answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when something accepts a TCP connection at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def serves_rpcs(host: str, port: int, deadline_s: float) -> bool:
    """True when a TensorFlow server at host:port answers an RPC within `deadline_s`. A stopped (SIGSTOP) or frozen
    process still accepts TCP connections (the kernel completes them), so only an answer tells it runs."""
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"  # before grpc loads: its fork handlers crash a child forked
    import grpc  # while a probe runs (the chief starts its exporter so); TensorFlow's own dependency

    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        get_status = channel.unary_unary(GET_STATUS, request_serializer=None, response_deserializer=None)
        get_status(b"", timeout=deadline_s)  # an empty GetStatusRequest
        return True
    except grpc.RpcError as error:
        return error.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
    finally:
        channel.close()


def wait_until_listening(tasks: Iterable[Any], timeout_s: float, *, poll_s: float = 0.25,
                         alive: Callable[[], bool] = lambda: True) -> list[Any]:
    """Polls until every task's `address` answers or `timeout_s` passes; returns the tasks that never answered.

    `alive` lets the caller stop early, e.g. when a process it started has already exited.
    """
    waiting = list(tasks)
    deadline = time.monotonic() + timeout_s
    while waiting and alive():
        waiting = [t for t in waiting if not answers(t.address.host, t.address.port)]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    return waiting


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
