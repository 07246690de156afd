"""The plan's calibration run: its ports, and a server that cannot start ending it with that server's error."""

from __future__ import annotations

import socket

import pytest

from clusterkit import free_ports, write_cluster
from cluster import config as cluster_config
from launcher import calibration_run
from launcher.calibration_run import CalibrationFailed


def test_its_ports_are_free_distinct_and_below_the_ports_outgoing_connections_take():
    ports = calibration_run._free_ports(8)
    low = calibration_run._ephemeral_low()
    assert len(set(ports)) == 8 and all(1024 <= port < low for port in ports), (ports, low)
    assert all(calibration_run._bindable(port) for port in ports)


def test_a_server_that_cannot_start_ends_the_run_with_its_error_instead_of_a_wait(tmp_path, monkeypatch):
    chief, worker, ps = free_ports(3)
    document = {"cluster": {"chief": [f"localhost:{chief}"], "worker": [f"localhost:{worker}"],
                            "ps": [f"localhost:{ps}"]},
                "launcher": {"logs_dir": str(tmp_path / "logs")},
                "training": {"model": "cnn", "dataset": "digits", "output_dir": str(tmp_path / "output")}}
    config = cluster_config.load(write_cluster(tmp_path, document))
    with socket.create_server(("127.0.0.1", 0)) as taken:  # answers on the ps's port: it looks ready, it is not ours
        real = calibration_run._free_ports
        monkeypatch.setattr(calibration_run, "_free_ports", lambda count: [*real(count - 1), taken.getsockname()[1]])
        with pytest.raises(CalibrationFailed, match=r"calibration run: ps:0 exited \(.*already in use"):
            calibration_run.calibrate(config, lambda line: None)
