"""The slurm backend without Slurm: job sizes validated and placed in Slurm's node order, sbatch and srun options,
the exported batch script, and node states read as lost."""

from __future__ import annotations

import json
import subprocess

import pytest

from cluster import config as cluster_config
from cluster import job_sizes, taskspec
from cluster.strategies import StrategyName, strategy_named
from clusterkit import PYTHON, ROOT, write_cluster
from common.errors import UserError
from launcher.backends.slurm import sbatch_script
from launcher.backends.slurm import commands as slurm

PS = strategy_named(StrategyName.PARAMETER_SERVER)
SIZES = {"chief": 1, "worker": 2, "ps": 2, "evaluator": 1}


def load(tmp_path, cluster, **sections):
    document = {"cluster": cluster, "launcher": {"backend": "slurm", "logs_dir": str(tmp_path / "logs")},
                "training": {"output_dir": str(tmp_path / "output")}, **sections}
    return cluster_config.load(write_cluster(tmp_path, document))


def problems(tmp_path, cluster, **sections) -> list[str]:
    with pytest.raises(UserError) as error:
        load(tmp_path, cluster, **sections)
    return error.value.lines()


def test_nodes_keep_slurms_order_not_text_order():
    placed = job_sizes.place(SIZES, ["n9", "n10", "n11"], 2220, PS)
    assert placed == {"chief": ["n9:2220"], "worker": ["n10:2221", "n11:2222"], "ps": ["n10:2223", "n11:2224"],
                      "evaluator": ["n9:2225"]}


def test_the_evaluator_shares_the_lead_trainers_node_under_every_strategy():
    mirrored = strategy_named(StrategyName.MULTI_WORKER_MIRRORED)
    placed = job_sizes.place({"worker": 3, "evaluator": 1}, ["a", "b"], 3000, mirrored)
    assert placed == {"worker": ["a:3000", "b:3001", "b:3002"], "evaluator": ["a:3003"]}


def test_one_node_holds_everything_on_distinct_ports():
    placed = job_sizes.place(SIZES, ["solo"], 5000, PS)
    addresses = [a for job in placed.values() for a in job]
    assert {a.split(":")[0] for a in addresses} == {"solo"} and len(set(addresses)) == 6


def test_default_node_count_is_one_per_ps_and_worker_plus_one_for_the_chief():
    assert job_sizes.default_node_count(SIZES, PS) == 5


def test_sizes_load_under_slurm_and_tasks_wait_for_placement(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 3, "partition": "gpu", "time_limit": "1-00:00:00"})
    assert dict(config.job_sizes) == SIZES and config.tasks() == []
    assert slurm.node_request(config) == (3, [])


@pytest.mark.parametrize("cluster,sections,expected", [
    ({"chief": 1, "worker": 2, "ps": 1}, {"launcher": {"backend": "hosts"}},
     "gives job sizes, which only the slurm backend can place"),
    ({"chief": 2, "worker": 1, "ps": 1}, {}, "cluster.chief = 2: must be exactly 1 under parameter_server"),
    ({"chief": 1, "worker": 1, "ps": ["n01:2222"]}, {}, "cluster.ps = ['n01:2222']: is a list while other jobs are"),
    ({"chief": 1, "worker": 1, "ps": 1}, {"slurm": {"sbatch_options": ["--qos=a; rm -rf /"]}},
     "slurm.sbatch_options"),
    ({"chief": 1, "worker": 1, "ps": 1}, {"slurm": {"time_limit": "soon"}}, "is not a Slurm time limit"),
    ({"chief": ["localhost:2222"], "worker": ["n01:2223"], "ps": ["n02:2224"]}, {},
     "cluster.chief[0] = 'localhost:2222': is not a Slurm node name"),
    ({"chief": ["10.0.0.5:2222"], "worker": ["n01:2223"], "ps": ["n02:2224"]}, {}, "is not a Slurm node name"),
])
def test_each_mistake_is_one_line_naming_field_value_and_fix(tmp_path, cluster, sections, expected):
    launcher = {"backend": "slurm", "logs_dir": str(tmp_path / "logs"), **sections.pop("launcher", {})}
    lines = problems(tmp_path, cluster, launcher=launcher, **sections)
    assert len(lines) == 1 and expected in lines[0], lines


def test_the_holder_job_asks_for_what_the_placement_needs(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 3, "partition": "batch", "account": "lab", "cpus_per_task": 2,
                                          "gpus_per_worker": 1, "sbatch_options": ["--qos=high"]})
    argv = slurm.holder_job_argv(config, 3, [], "out-%j", "warned")
    assert argv[:3] == ["sbatch", "--parsable", "--output=out-%j"]
    assert {"--nodes=3", "--ntasks-per-node=2", "--cpus-per-task=2", "--no-kill", "--partition=batch",
            "--account=lab", "--gpus-per-node=1", "--qos=high", "--signal=B:USR1@120"} <= set(argv)
    assert argv[-1] == "--wrap=trap 'echo \"warned\"' USR1; while :; do sleep 5 & wait $!; done"


def test_named_nodes_are_asked_for_by_name(tmp_path):
    config = load(tmp_path, {"chief": ["n10:2220"], "worker": ["n9:2221"], "ps": ["n10:2222"]})
    assert slurm.node_request(config) == (2, ["n10", "n9"])


def test_a_step_runs_one_task_on_its_node_beside_the_others(tmp_path):
    config = load(tmp_path, {"chief": ["n1:2220"], "worker": ["n2:2221"], "ps": ["n2:2222"]})
    task = config.task("worker", 0)
    assert slurm.step_argv(config, task, "42", ["python", "-m", "roles.server"]) == [
        "srun", "--jobid=42", "--nodes=1", "--ntasks=1", "--nodelist=n2", "--overlap",
        "--job-name=pscluster-worker-0", "--cpus-per-task=1", "python", "-m", "roles.server"]


@pytest.mark.parametrize("state,lost", [("idle", False), ("mix", False), ("alloc", False), ("drng", False),
                                        ("down", True), ("down*", True), ("mix*", True), ("fail", True),
                                        ("unknown", True)])
def test_down_failed_and_silent_nodes_count_as_lost(state, lost):
    assert slurm.node_is_lost(state) is lost


def test_squeue_step_rows_are_read():
    output = "7.0        pscluster-ps-0       RUNNING   n02\n7.batch    batch    RUNNING    n01\n"
    assert slurm.parse_steps(output) == [slurm.Step("7.0", "pscluster-ps-0", "RUNNING", "n02"),
                                         slurm.Step("7.batch", "batch", "RUNNING", "n01")]


def test_the_batch_script_places_tasks_on_the_jobs_nodes_at_run_time(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 3}, training={"output_dir": str(tmp_path / "out$HOME")})
    text = sbatch_script.script(config)
    assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0
    assert 'set -- $(scontrol show hostnames "$SLURM_JOB_NODELIST")' in text
    assert '"chief": [\n      "${node0}:22220"' in text and '"${node1}:22223"' in text
    assert "out\\$HOME" in text  # the here-document keeps a literal $
    assert "placeholder" not in text
    assert text.count("\nsrun ") == 6 and "#SBATCH --nodes=3" in text and "#SBATCH --ntasks-per-node=2" in text
    evaluator = text[text.index("# evaluator:0"):]
    assert 'TF_CONFIG="{\\"cluster\\":{\\"evaluator\\":[\\"${node0}:22225\\"]}' in evaluator


def test_the_batch_script_writes_the_cluster_file_the_tasks_read(tmp_path):
    config = load(tmp_path, SIZES, slurm={"nodes": 2})
    text = sbatch_script.script(config)
    heredoc = text[text.index("<<EOF\n") + 6:text.index("\nEOF\n")]
    nodes = {"${node0}": "n9", "${node1}": "n10"}
    for variable, node in nodes.items():
        heredoc = heredoc.replace(variable, node)
    placed = json.loads(heredoc)
    assert placed["cluster"]["chief"] == ["n9:22220"] and placed["cluster"]["ps"] == ["n10:22223", "n10:22224"]
    assert "$schema" not in placed
    assert cluster_config.parse(placed, tmp_path / "placed.json").lead.address.host == "n9"


def test_print_config_shows_job_sizes_on_stand_in_nodes(tmp_path):
    config_path = write_cluster(tmp_path, {"cluster": SIZES, "launcher": {"backend": "slurm"}})
    from clusterkit import run_module

    result = run_module("roles.launch", "print_config", str(config_path))
    assert result.returncode == 0, result.stderr
    assert "placed when the job starts" in result.stdout and "# chief:0 on pscluster-node0-placeholder" in result.stdout


def test_print_config_says_slurm_sets_a_gpu_workers_devices_instead_of_printing_the_stand_ins(tmp_path):
    config = load(tmp_path, {"chief": ["n1:2220"], "worker": ["n2:2221"], "ps": ["n2:2222"]},
                  slurm={"gpus_per_worker": 1})
    assert taskspec.scheduler_gives_gpus(config, config.task("worker", 0))
    assert not taskspec.scheduler_gives_gpus(config, config.task("ps", 0))
    shown = subprocess.run([PYTHON, "-m", "roles.launch", "print_config", str(config.source)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert shown.returncode == 0, shown.stderr
    worker = shown.stdout.split("# worker:0")[1].split("\n\n")[0]
    assert "# CUDA_VISIBLE_DEVICES: set by slurm to the GPUs it gives this worker" in worker
    assert "export CUDA_VISIBLE_DEVICES" not in worker and "export CUDA_VISIBLE_DEVICES=-1" in shown.stdout  # the ps
