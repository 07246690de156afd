"""Each ps writes its own rows of a checkpoint and of a serving delta where output_dir is declared shared
(training.output_dir_shared): against real servers, the ps write the tables' bytes and the chief only the small
values, into a checkpoint and deltas equal key by key to those the chief writes; a ps SIGKILLed mid-write leaves no
checkpoint or delta listed and nothing half merged; a ps that does not see output_dir at the same path (its own
mount namespace) stops the run at start in one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from clusterkit import PYTHON, ROOT, cluster_document, finish, run_module, run_python, write_cluster

pytestmark = pytest.mark.cluster


def test_each_ps_writes_its_own_rows_into_the_same_checkpoint_the_chief_would(shared_servers, tmp_path):
    done = run_python(str(ROOT / "tests" / "rows_on_ps_chief.py"), str(shared_servers), str(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "each ps writes its own tables' rows of every checkpoint" in done.stderr
    assert "checkpoints and deltas are written through the chief" in done.stderr
    result = json.loads((tmp_path / "written.json").read_text())
    tables, chief, on_ps = result["table_bytes"], result["through_chief"], result["rows_on_ps"]
    assert tables > 2 << 20 and not chief["rows_on_ps"] and on_ps["rows_on_ps"], result
    assert chief["chief"] >= tables and max(chief["ps"]) < tables / 100, result  # today's way: the chief writes
    assert on_ps["chief"] < tables / 10, result  # the small values and the merged index
    assert all(written >= tables / 2 * 0.9 for written in on_ps["ps"]), result  # each ps its half, slots included
    restored = result["restored"]  # each ps read its own rows back, the chief only the small values
    assert restored["name"] == "ckpt-1" and restored["same"], restored
    assert restored["chief"] < tables / 10 and all(read >= tables / 2 * 0.9 for read in restored["ps"]), restored
    through, written_by_ps = (tf.train.load_checkpoint(r["prefix"]) for r in (chief, on_ps))
    keys = through.get_variable_to_shape_map()
    assert keys == written_by_ps.get_variable_to_shape_map()
    for key in keys:
        np.testing.assert_array_equal(through.get_tensor(key), written_by_ps.get_tensor(key), err_msg=key)
    _deltas_agree(result["deltas"], tables)


def _deltas_agree(deltas: dict, tables: int) -> None:
    """A delta written by each ps holds, key by key, what one written through the chief does; of a delta of every
    row, each ps writes its half, the chief only the dense weights and the index."""
    chief, on_ps = deltas["through_chief"], deltas["rows_on_ps"]
    assert chief["rows"] == on_ps["rows"] and 0 < sum(on_ps["rows"][1].values()) < sum(on_ps["rows"][0].values())
    assert chief["chief"] >= tables and on_ps["chief"] < tables / 10, deltas
    assert all(written >= tables / 2 * 0.9 for written in on_ps["ps"]), deltas
    for which in ("every", "changed"):
        through, by_ps = (tf.train.load_checkpoint(f"{d[which]}/delta") for d in (chief, on_ps))
        keys = through.get_variable_to_shape_map()
        assert keys == by_ps.get_variable_to_shape_map()
        for key in keys:
            np.testing.assert_array_equal(through.get_tensor(key), by_ps.get_tensor(key), err_msg=key)


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace needs root")
def test_a_ps_that_does_not_see_output_dir_stops_the_run_at_start_in_one_line(tmp_path):
    output = tmp_path / "output"
    output.mkdir()
    document = cluster_document(workers=1, ps=1, evaluator=False, logs_dir=str(tmp_path / "logs"),
                                training={"output_dir": str(output), "output_dir_shared": True, "epochs": 1,
                                          "steps_per_epoch": 2})
    cluster = write_cluster(tmp_path, document)
    servers = start_servers(cluster, tmp_path, document, hidden_ps={0})
    try:
        done = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=240)
    finally:
        stop_servers(servers)
    problems = [line for line in done.stderr.splitlines() if "training.output_dir_shared" in line]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(problems) == 1 and "ps:0" in problems[0] and "cannot read" in problems[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not list(output.glob("checkpoints/ckpt-*")), done.stderr[-3000:]


def start_servers(cluster, tmp_path, document: dict, *, hidden_ps: set[int] = frozenset()) -> list:
    """Every ps and worker of `document` as its own process (ps in `hidden_ps` in a mount namespace where
    training.output_dir is an empty tmpfs: another host's view of it)."""
    output = document["training"]["output_dir"]
    servers = []
    for job in ("ps", "worker"):
        for index in range(len(document["cluster"][job])):
            command = [PYTHON, "-m", "roles.server", "--role", job, "--index", str(index), "--cluster", str(cluster)]
            if job == "ps" and index in hidden_ps:
                command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"mount -t tmpfs tmpfs {output} && exec {' '.join(command)}"]
            with open(tmp_path / f"{job}-{index}.log", "wb") as log:
                servers.append(subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL))
    return servers


def stop_servers(servers: list) -> None:
    for server in servers:
        server.terminate()
    finish(*servers, timeout_s=30)


@pytest.mark.parametrize("what", ["checkpoint", "delta"])
def test_a_ps_killed_mid_write_leaves_nothing_listed_nor_half_merged(what, tmp_path):
    document = cluster_document(workers=1, ps=2, evaluator=False, logs_dir=str(tmp_path / "logs"),
                                training={"output_dir": str(tmp_path)})
    cluster = write_cluster(tmp_path, document)
    servers = start_servers(cluster, tmp_path, document)
    try:
        done = run_python(str(ROOT / "tests" / "rows_on_ps_chief.py"), str(cluster), str(tmp_path),
                          str(servers[1].pid), what)
    finally:
        stop_servers(servers)
    assert done.returncode == 0, done.stderr[-4000:]
    killed = json.loads((tmp_path / "killed.json").read_text())
    assert killed["rows_on_ps"] and killed["ended"] != "saved", killed
    assert killed["listed"] == [], killed
    assert not [name for name in killed["files"] if name.startswith(("ckpt-", ".writing-"))], killed
