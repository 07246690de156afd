"""Tables the ps cannot hold are refused before anything starts: the account of a ps at its peak (rows, slots, a
dynamic table's index and sketch, a checkpoint's chunks, its buffers), held against each host's available memory
by `sh run.sh`, and against a Slurm or Kubernetes job's memory request (a warning when there is none)."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from clusterkit import ROOT, assert_no_traceback, cluster_document, processes_mentioning, write_cluster
from cluster import config as cluster_config
from cluster import ps_memory
from cluster.training_parse import parse_training_options
from common.errors import UserError
from launcher import host_checks, memory_requests

GIB = 1 << 30
ISSUE = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 2_000_000_000}  # per table, 26 tables


def test_a_ps_at_its_peak_holds_its_share_of_rows_and_slots_and_what_a_checkpoint_adds():
    hashed = ps_memory.peak(parse_training_options({**ISSUE, "table_rows": 1_000_000}), 2)
    assert hashed.rows == 13_000_000 * 16 * 4 and hashed.slots == hashed.rows  # adagrad: one slot value per value
    assert hashed.dynamic == 0 and hashed.transient == 256 << 20  # a shard's creation beats two 64 MB chunks
    sgd = ps_memory.peak(parse_training_options({**ISSUE, "table_rows": 1000, "embedding_optimizer": "sgd",
                                                 "stream_chunk_mb": 8}), 1)
    assert sgd.slots == 0 and sgd.transient == 16 << 20  # two chunks beat a 1.6 MB shard
    dynamic = ps_memory.peak(parse_training_options({**ISSUE, "model": "wide_deep", "embedding_kind": "dynamic",
                                                     "embedding_capacity": 1_000_000, "admit_after": 2,
                                                     "embedding_optimizer": "ftrl", "table_rows": 100_000}), 4)
    assert dynamic.rows == 250_000 * 17 * 4 and dynamic.slots == 2 * dynamic.rows  # wide_deep: dim + 1; ftrl: 2
    assert dynamic.dynamic == 250_000 * (48 + 24 + 16) + 256  # index, bookkeeping and sketch (memory.py's)
    assert ps_memory.peak(parse_training_options({"model": "cnn"}), 2) is None  # no tables known before it is built
    own = parse_training_options({**ISSUE, "dataset": "mine.clicks:read"})  # how many features: known once called
    assert ps_memory.peak(own, 2) is None
    assert ps_memory.peak(dataclasses.replace(own, table_rows=(10, 20)), 1).rows == 30 * 16 * 4


def test_the_account_uses_the_partitioners_shard_bound():
    from tables.placement import MAX_SHARD_BYTES

    assert ps_memory.MAX_SHARD_BYTES == MAX_SHARD_BYTES


def test_the_issues_table_on_a_23_gb_host_is_one_line_naming_the_figure_and_the_fix(tmp_path, monkeypatch):
    document = cluster_document(evaluator=False, training=ISSUE)
    config = cluster_config.parse(document, write_cluster(tmp_path, document))
    monkeypatch.setattr(host_checks, "available_bytes", lambda: 23e9)
    assert host_checks.memory_problems(config, config.tasks()) == [
        "cluster.json: training.table_rows = 2000000000: the 2 ps on localhost need 6,201.1 GiB at their peak "
        "(each: rows 1,549.7 GiB + optimizer slots 1,549.7 GiB + a checkpoint's chunks or a shard's creation "
        "0.2 GiB + its buffers 0.2 GiB + the server 0.6 GiB) and localhost has 21.4 GiB available; use more ps on "
        "other hosts (each holds 1/N of the tables), hosts with more memory, or fewer training.table_rows (ids "
        "share rows modulo them); embedding_optimizer sgd keeps no slots"]
    monkeypatch.setattr(host_checks, "available_bytes", lambda: 6202 * GIB)
    assert host_checks.memory_problems(config, config.tasks()) == []
    assert host_checks.memory_problems(config, config.tasks(("worker", "chief"))) == []


def test_sh_run_refuses_it_before_anything_starts(tmp_path):
    document = cluster_document(evaluator=False, logs_dir=str(tmp_path / "logs"),
                                training={**ISSUE, "output_dir": str(tmp_path / "output")})
    path = write_cluster(tmp_path, document)
    result = subprocess.run(["sh", str(ROOT / "run.sh"), str(path)], capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result.stderr)
    said = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("[bootstrap]")]
    assert len(said) == 1 and said[0].startswith(f"[launcher] error: {path.name}: training.table_rows = 2000000000: "
                                                 "the 2 ps on localhost need 6,201.1 GiB at their peak"), said
    assert not processes_mentioning(str(tmp_path)) and not list((tmp_path / "logs").glob("*.log"))


SLURM = {"cluster": {"chief": 1, "worker": 2, "ps": 2}, "launcher": {"backend": "slurm"}}
KUBERNETES = {"cluster": {"chief": 1, "worker": 2, "ps": 2}, "launcher": {"backend": "kubernetes"},
              "kubernetes": {"image": "registry.example.com/team/pscluster:0.1.0"}}
TABLES = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 20_000_000}  # 32 GiB per ps at its peak


def _config(tmp_path, document: dict, **sections):
    merged = {**document, "training": TABLES}
    for name, values in sections.items():
        merged[name] = {**merged.get(name, {}), **values}
    return cluster_config.load(write_cluster(tmp_path, merged))


@pytest.mark.parametrize("document, sections, refused", [
    (SLURM, {"slurm": {"sbatch_options": ["--mem=16G"]}}, "a ps on a node needs 32.1 GiB at its peak (rows "
     "15.5 GiB + optimizer slots 15.5 GiB + a checkpoint's chunks or a shard's creation 0.2 GiB + its buffers 0.2 "
     "GiB + the server 0.6 GiB) and the job asks for 16.0 GiB (slurm.sbatch_options --mem=16G)"),
    (SLURM, {"slurm": {"sbatch_options": ["--mem-per-cpu=4000", "--exclusive"], "cpus_per_task": 2}},
     "and the job asks for 7.8 GiB (slurm.sbatch_options --mem-per-cpu=4000)"),
    (SLURM, {"slurm": {"sbatch_options": ["--mem=64G"]}}, None),
    (KUBERNETES, {"kubernetes": {"memory": {"ps": "30Gi"}}}, "a ps in each pod needs 32.1 GiB at its peak"),
    (KUBERNETES, {"kubernetes": {"memory": {"ps": "40G", "worker": "1Gi"}}}, None),
])
def test_a_schedulers_memory_request_below_the_peak_is_refused(tmp_path, document, sections, refused):
    config = _config(tmp_path, document, **sections)
    if refused is None:
        assert memory_requests.checked(config) is None
        return
    with pytest.raises(UserError) as raised:
        memory_requests.checked(config)
    [line] = raised.value.lines()
    assert line.startswith("error: cluster.json: training.table_rows = 20000000: ") and refused in line, line


@pytest.mark.parametrize("document, ask", [(SLURM, '--mem in slurm.sbatch_options (e.g. "--mem=33G")'),
                                           (KUBERNETES, 'kubernetes.memory.ps (e.g. "33Gi")')])
def test_without_a_request_the_launcher_warns(tmp_path, document, ask):
    warning = memory_requests.checked(_config(tmp_path, document))
    assert warning.startswith("warning: the job asks for no memory, and each ps needs 32.1 GiB at its peak")
    assert warning.endswith(f"ask for it with {ask}"), warning


@pytest.mark.parametrize("size, expected", [("8G", 8 * GIB), ("8000", 8000 << 20), ("512M", 512 << 20),
                                            ("1T", 1 << 40), ("0", None), ("lots", None)])
def test_slurm_sizes(size, expected):
    assert memory_requests.slurm_bytes(size) == expected


@pytest.mark.parametrize("quantity, expected", [("8Gi", 8 * GIB), ("500M", 5e8), ("1e9", 1e9),
                                                ("128974848", 128974848)])
def test_kubernetes_quantities(quantity, expected):
    assert memory_requests.kubernetes_bytes(quantity) == expected
