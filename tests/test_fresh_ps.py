"""A chief under Kubernetes connects only to ps that never served an earlier chief (common/fresh_ps.py): the
generation handshake through files on the shared volume, as pure logic (pods run it: test_kubernetes_pods.py)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from clusterkit import write_cluster
from cluster import config as cluster_config
from common import fresh_ps
from common.errors import CHIEF_REPLACED_EXIT_CODE, CLUSTER_UNAVAILABLE_EXIT_CODE
from test_kubernetes_config import k8s_document

LOG = logging.getLogger("fresh-ps")


def config_in(tmp_path, **kubernetes):
    document = k8s_document(**kubernetes)
    document["training"]["output_dir"] = str(tmp_path / "output")
    if not document["kubernetes"]["output_volume"]:
        document["cluster"].pop("evaluator")  # it needs the volume
    return cluster_config.load(write_cluster(tmp_path, document))


def test_a_ps_takes_the_first_generation_and_leaves_on_a_newer_one(tmp_path):
    config = config_in(tmp_path)
    exits = []
    ps = fresh_ps.PsGeneration(config, 1, LOG, exit=exits.append)
    assert ps.check() and ps.taken is None  # no chief yet
    (fresh_ps.folder_of(config)).mkdir(parents=True)
    (fresh_ps.folder_of(config) / "chief").write_text("g1")
    assert ps.check() and ps.taken == "g1" and (fresh_ps.folder_of(config) / "ps-1").read_text() == "g1"
    assert ps.check() and exits == []
    (fresh_ps.folder_of(config) / "chief").write_text("g2")  # a new chief
    assert not ps.check() and exits == [CHIEF_REPLACED_EXIT_CODE]


def test_a_chief_waits_until_every_ps_took_its_generation(tmp_path):
    config = config_in(tmp_path)
    assert fresh_ps.applies(config) and not fresh_ps.applies(config_in(tmp_path, output_volume=None))
    count = len(config.jobs["ps"])
    stale = [fresh_ps.PsGeneration(config, i, LOG, exit=lambda code: None) for i in range(count)]
    fresh_ps._write(fresh_ps.folder_of(config) / "chief", "old")
    assert all(ps.check() for ps in stale)  # they served the old chief

    def new_pods():  # each old ps sees the new generation and leaves; its replacement takes it
        deadline = time.monotonic() + 30
        while any(ps.check() for ps in stale) and time.monotonic() < deadline:
            time.sleep(0.05)
        for i in range(count):
            fresh_ps.PsGeneration(config, i, LOG).check()

    replacing = threading.Thread(target=new_pods)
    replacing.start()
    fresh_ps.start_generation(config, 30, LOG)
    replacing.join()
    newest = (fresh_ps.folder_of(config) / "chief").read_text()
    assert newest != "old" and all((fresh_ps.folder_of(config) / f"ps-{i}").read_text() == newest
                                   for i in range(count))


def test_a_ps_that_never_takes_it_is_named_and_the_chief_exits_3(tmp_path, capsys):
    config = config_in(tmp_path)
    with pytest.raises(SystemExit) as ended:
        fresh_ps.start_generation(config, 0.2, LOG)
    assert ended.value.code == CLUSTER_UNAVAILABLE_EXIT_CODE
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(config.jobs["ps"]) and lines[0].startswith("error: ps:0 did not take chief generation")
