"""The nftables allowlist: its exact rules, and a real table applied and removed on this host."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from clusterkit import ROOT, cluster_document, write_cluster
from cluster import config as cluster_config
from common import net
from launcher import firewall


def test_ruleset_allows_loopback_and_members_and_drops_the_rest():
    script = firewall.ruleset("pscluster_x", [2223, 2222, 2223], ["10.0.0.2", "10.0.0.3"], ["fd00::2"])
    assert script == (
        "table inet pscluster_x {\n"
        "    chain input {\n"
        "        type filter hook input priority 0; policy accept;\n"
        '        iifname "lo" tcp dport { 2222, 2223 } accept\n'
        "        ip saddr { 10.0.0.2, 10.0.0.3 } tcp dport { 2222, 2223 } accept\n"
        "        ip6 saddr { fd00::2 } tcp dport { 2222, 2223 } accept\n"
        "        tcp dport { 2222, 2223 } drop\n"
        "    }\n"
        "}\n")


def test_each_cluster_gets_its_own_table(tmp_path):
    first = cluster_config.load(write_cluster(tmp_path, cluster_document(), "a.json"))
    second = cluster_config.load(write_cluster(tmp_path, cluster_document(), "b.json"))
    assert firewall.table_name(first) != firewall.table_name(second)
    assert firewall.table_name(first).startswith("pscluster_")


def nft_usable() -> bool:
    return bool(shutil.which("nft")) and subprocess.run(["nft", "list", "tables"], capture_output=True).returncode == 0


@pytest.mark.cluster
@pytest.mark.skipif(not nft_usable(), reason="needs nft and root")
def test_up_with_firewall_keeps_loopback_working_and_kill_removes_the_table(tmp_path):
    document = {**cluster_document(logs_dir=str(tmp_path / "logs")), "security": {"firewall": True}}
    path = write_cluster(tmp_path, document)
    config = cluster_config.load(path)
    table = firewall.table_name(config)
    launcher = [str(ROOT / ".venv" / "bin" / "python"), "-m", "roles.launch"]
    try:
        up = subprocess.run([*launcher, "up", str(path)], capture_output=True, text=True, timeout=180, cwd=ROOT)
        assert up.returncode == 0, up.stderr
        assert f"firewall on localhost: table {table}" in up.stderr
        listed = subprocess.run(["nft", "list", "table", "inet", table], capture_output=True, text=True)
        assert listed.returncode == 0 and "drop" in listed.stdout
        assert net.wait_until_listening(config.tasks(("ps", "worker")), timeout_s=5) == []
    finally:
        down = subprocess.run([*launcher, "down", str(path)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert "firewall on localhost removed" in down.stderr
    assert subprocess.run(["nft", "list", "table", "inet", table], capture_output=True).returncode != 0


@pytest.mark.cluster
@pytest.mark.skipif(not nft_usable(), reason="needs nft and root")
def test_a_reload_replaces_the_table_with_the_new_tasks_ports(tmp_path):
    from clusterkit import free_ports, wait_for_line
    from test_long_runs import reload_with, wait_for_count

    training = {"epochs": 2, "steps_per_epoch": 3000, "steps_per_execution": 2, "lr_decay_epochs": [],
                "progress_every_s": 2, "output_dir": str(tmp_path / "output")}
    document = {**cluster_document(workers=1, logs_dir=str(tmp_path / "logs"), training=training),
                "security": {"firewall": True}}
    path = write_cluster(tmp_path, document)
    table = firewall.table_name(cluster_config.load(path))
    started = subprocess.run(["sh", str(ROOT / "run.sh"), "--detach", str(path)], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started.stderr
    try:
        assert wait_for_line(tmp_path / "logs" / "chief-0.log", "train | epoch 1/2", 240), started.stderr
        new_worker = f"localhost:{free_ports(1)[0]}"
        grown = reload_with(path, worker=[*document["cluster"]["worker"], new_worker])
        assert grown.returncode == 0, grown.stderr
        assert f"firewall on localhost: table {table} guards ports" in grown.stderr, grown.stderr
        listed = subprocess.run(["nft", "list", "table", "inet", table], capture_output=True, text=True).stdout
        assert new_worker.split(":")[1] in listed and "drop" in listed, listed
        assert "chief:0 starts again with 2 worker(s) and 2 ps" in grown.stderr
        chief_log = tmp_path / "logs" / "chief-0.log"
        assert wait_for_count(chief_log, "train | epoch", 2 + chief_log.read_text().count("train | epoch"), 240)
    finally:
        subprocess.run(["sh", str(ROOT / "kill.sh"), str(path)], capture_output=True, text=True, timeout=180)
    assert "firewall on localhost removed" in (tmp_path / "logs" / "launcher.log").read_text()  # by the launcher
    assert subprocess.run(["nft", "list", "table", "inet", table], capture_output=True).returncode != 0
