"""`python -m bench.workload.shaped_links`: predicted (by `plan`) against measured steps/s on tc-shaped links of netns
hosts.

Each ps and each worker runs on a namespace host of its own (tests/netns.py: own network, sshd, private
workdir), every host's link limited each way by a tc token bucket (tests/shaping.py); the chief runs here on the
bridge. Per configuration: `python -m roles.launch plan` (links measured, compute measured), then `sh run.sh`,
whose chief logs `capacity: measured ..., predicted ...` and keeps both in summary.json. Before each run the
load average is recorded and every process outside the benchmark that used CPU in the last second is listed:
figures taken beside others are marked so. Needs root. The hosts share this machine's cores, so the links are
chosen slow enough to be the bound; results go to bench/RESULTS-capacity.md (what follows its `<!-- notes -->`
line is kept) and bench/results-capacity.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import fire

from bench.kit.quiet import busy_processes

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parents[1]
PYTHON = str(ROOT / ".venv" / "bin" / "python")  # the venv's own path: the hosts run it too
CNN = {"model": "cnn", "dataset": "digits", "per_worker_batch": 64}
CNN_28 = {"model": "cnn", "dataset": "synthetic", "per_worker_batch": 64}  # 28x28: 11 MB of variables
CNN_14 = {**CNN_28, "synthetic_shape": [14, 14, 1]}  # 2.4 MB of variables: 1.2 MB to each of 2 ps, one way
DLRM = {"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 20_000, "per_worker_batch": 256,
        "embedding_optimizer": "adagrad", "optimizer": "adam"}
# (training, link Mbit/s, ps, workers): the CNN and DLRM at 100, 300 and 1000 Mbit/s, 1-3 ps and workers; ps-bound,
# worker-bound and fixed-cost-bound cases; about 2 minutes each (the plan's calibration, then the run)
CONFIGURATIONS = {
    "default": [(CNN, 100, 1, 1), (CNN, 100, 1, 3), (CNN, 300, 2, 3), (CNN_28, 1000, 1, 3), (CNN, 1000, 3, 2),
                (DLRM, 100, 1, 2), (DLRM, 300, 1, 2), (DLRM, 300, 3, 3), (DLRM, 1000, 2, 1)],
    "smoke": [(CNN, 300, 1, 1)],
    # one ps and one worker at each rate: where the plan errs low (bench/RESULTS-capacity.md, notes)
    "lone": [(DLRM, 100, 1, 1), (DLRM, 300, 1, 1), (DLRM, 1000, 1, 1), (CNN, 300, 1, 1), (CNN, 1000, 1, 1),
             (CNN_28, 1000, 1, 1)],
    # long transfers to several ps (issue 42; cluster/capacity.py `_in_step_s`): the shape, its 1-ps
    # control, the same at 1 Gbit/s, 3 ps (planned to reach the workers' own links), a transfer just over
    # LONG_TRANSFER_BYTES to each ps, and a short one that takes turns
    "several_ps": [(CNN_28, 100, 2, 3), (CNN_28, 100, 1, 3), (CNN_28, 1000, 2, 3), (CNN_28, 100, 3, 3),
                   (CNN_14, 300, 2, 3), (CNN, 100, 2, 3)],
}
WITHIN = 0.25  # the aim: every prediction within this fraction of the measured steps/s
RUN_SECONDS = 5.0  # measured training per epoch (two epochs; the first traces)


def epoch_steps(predicted_steps_per_s: float, workers: int, steps_per_execution: int) -> int:
    """About RUN_SECONDS of steps, and at least two calls for every worker: with fewer, some workers wait out the
    measured epoch (10 steps at 10 a call was one worker of three: the slow links measured a third of the rate)."""
    return max(2 * workers * steps_per_execution, min(600, round(predicted_steps_per_s * RUN_SECONDS)))


def quiet_check() -> dict:
    return {"load_before": os.getloadavg()[0], "others_using_cpu": busy_processes(1.0)}


def cluster_document(hosts, run_dir: str, training: dict, ps: int, workers: int, ports: list[int]) -> dict:
    """ps k on host k, worker k on host 3 + k, the chief here on the bridge; logs and outputs under run_dir."""
    used = [hosts.addresses[k] for k in (*range(ps), *range(3, 3 + workers))]
    return {
        "cluster": {"chief": [f"{hosts.launcher_address}:{ports[0]}"],
                    "ps": [f"{used[k]}:{ports[1 + k]}" for k in range(ps)],
                    "worker": [f"{used[ps + k]}:{ports[4 + k]}" for k in range(workers)]},
        "hosts": {a: {"ssh_user": hosts.ssh_user, "workdir": str(hosts.workdir), "python": PYTHON} for a in used},
        "launcher": {"logs_dir": f"{run_dir}/logs", "ssh_identity": str(hosts.identity_file),
                     "ssh_known_hosts": str(hosts.known_hosts_file), "ssh_host_keys": "strict"},
        "training": {**training, "output_dir": f"{run_dir}/output", "epochs": 2, "progress_every_s": 2,
                     "lr_decay_epochs": []},
    }


def _launch(*arguments: str, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(list(arguments), cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL)


def measure_one(hosts, directory: Path, training: dict, mbit: int, ps: int, workers: int) -> dict:
    """Shapes every host's link, plans, runs; returns predicted and measured steps/s with the load seen."""
    sys.path.insert(0, str(ROOT / "tests"))
    import shaping
    from clusterkit import free_ports

    for index in range(len(hosts.addresses)):
        shaping.shape_host(hosts, index, mbit)
    run_dir = f"{hosts.workdir}/{directory.name}"
    document = cluster_document(hosts, run_dir, training, ps, workers, free_ports(7))
    path = directory / "cluster.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2))
    planned = _launch(PYTHON, "-m", "roles.launch", "plan", str(path), timeout_s=300)
    if planned.returncode != 0:
        return {"failed": f"plan: {planned.stderr.strip()[-500:]}"}
    plan = json.loads((Path(run_dir) / "logs" / "capacity-plan.json").read_text())
    predicted = plan["predictions"][ps - 1]
    document["training"]["steps_per_epoch"] = epoch_steps(predicted["steps_per_s"], workers,
                                                          document["training"].get("steps_per_execution", 10))
    path.write_text(json.dumps(document, indent=2))
    quiet = quiet_check()
    drops_before = sum(shaping.dropped(hosts, index) for index in range(len(hosts.addresses)))
    started = time.monotonic()
    ran = _launch("sh", str(ROOT / "run.sh"), str(path), timeout_s=600)
    quiet["tbf_drops"] = sum(shaping.dropped(hosts, index) for index in range(len(hosts.addresses))) - drops_before
    _launch("sh", str(ROOT / "kill.sh"), str(path), timeout_s=120)
    if ran.returncode != 0:
        return {"failed": f"run.sh exit {ran.returncode}: {ran.stderr.strip()[-500:]}", **quiet}
    summary = json.loads((Path(run_dir) / "output" / "summary.json").read_text())
    measured = summary["capacity"].get("measured_steps_per_s")
    return {"predicted_steps_per_s": round(predicted["steps_per_s"], 3), "bound": predicted["bound"],
            "chief_predicted_steps_per_s": summary["capacity"].get("predicted_steps_per_s"),
            "measured_steps_per_s": measured, "error": round(predicted["steps_per_s"] / measured - 1, 3)
            if measured else None, "links_mbit": [round(link["bytes_per_s"] * 8 / 1e6) for link in plan["links"]],
            "compute_ms": round(plan["compute_s"] * 1e3, 1), "steps": summary["optimizer_steps"],
            "parts_ms": {part: round(predicted[f"{part}_s"] * 1e3, 1)
                         for part in ("compute", "transfer", "fixed", "queued")},
            "ceilings": {name: round(value, 2) for name, value in predicted["ceilings"].items()},
            "run_s": round(time.monotonic() - started, 1), **quiet, "load_after": os.getloadavg()[0]}


def off(row: dict) -> str:
    """For a prediction outside WITHIN: which term of a worker's step was off, from the step measured (or the
    shared ceiling that was predicted to bind)."""
    if row["error"] is None or abs(row["error"]) <= WITHIN or "parts_ms" not in row:
        return ""
    parts = row["parts_ms"]
    if row["bound"] not in ("compute", "worker links", "fixed costs") and not parts.get("queued"):
        return f"the {row['bound']} ceiling ({row['ceilings'].get(row['bound'])} steps/s)"
    measured_ms, predicted_ms = row["workers"] / row["measured_steps_per_s"] * 1e3, sum(parts.values())
    compute, transfer, fixed, queued = (parts.get(name, 0.0) for name in ("compute", "transfer", "fixed", "queued"))
    left_ms = measured_ms - compute - fixed  # what the step spent beyond its compute and fixed costs
    if measured_ms > predicted_ms:
        term = (f"a wait the plan leaves out: the step took {measured_ms - predicted_ms:.1f} ms more than its terms "
                "(workers reading from several ps at once, or the shared cores)")
    elif queued and left_ms >= transfer:
        term = f"the queue at the ps links: {left_ms - transfer:.1f} of its {queued} ms showed"
    else:
        term = (f"the transfer: {max(0.0, left_ms):.1f} of its {transfer} ms showed (the rest overlapped the "
                "compute, the fixed costs or the other direction)")
    return (f"{term}; a worker's step {measured_ms:.1f} ms measured, predicted compute {compute} + transfer "
            f"{transfer} + fixed {fixed} + queued at the ps links {queued} = {predicted_ms:.1f} ms")


def render(results: dict) -> str:
    rows = ["| model | link Mbit/s (measured) | ps | workers | predicted steps/s | bound | measured steps/s | "
            "prediction error | what was off | packets the links' queues dropped | load before | others using CPU |",
            "|" + " --- |" * 12]
    for row in results["runs"]:
        if "failed" in row:
            rows.append(f"| {row['model']} | {row['mbit']} | {row['ps']} | {row['workers']} | failed: "
                        f"{row['failed'][:200]} | | | | | | | |")
            continue
        error = f"{row['error']:+.0%}" if row["error"] is not None else "n/a"
        links = ", ".join(map(str, row["links_mbit"]))
        rows.append(f"| {row['model']} | {row['mbit']} ({links}) | {row['ps']} | "
                    f"{row['workers']} | {row['predicted_steps_per_s']:.2f} | {row['bound']} | "
                    f"{row['measured_steps_per_s']} | {error} | {off(row)} | {row.get('tbf_drops', 'n/a')} | "
                    f"{row['load_before']:.2f} | "
                    f"{'; '.join(row['others_using_cpu']) or 'none'} |")
    machine = results["machine"]
    return "\n".join([
        "# Capacity: predicted against measured steps/s on shaped links", "",
        f"Measured by `python -m bench.workload.shaped_links` on {machine['date']}: {machine['cores']} cores, "
        f"{machine['cpu']}, "
        f"{machine['memory_gib']} GiB; tensorflow-cpu {machine['tensorflow-cpu']}; {results['seconds']} s in all.",
        "Prediction: `python -m roles.launch plan` (links, round trips, compute and a step's fixed costs measured); "
        f"error = predicted / measured - 1; the aim is within ±{WITHIN:.0%}.",
        "", *rows, ""])


def main(configurations: str = "default", results_dir: str = str(HERE)) -> None:
    """Runs CONFIGURATIONS (default: 9 runs, about 10 minutes; lone: 6, about 7; several_ps: 6, about 12; smoke:
    one tiny run) and writes the results.

    Args:
      configurations: default, lone, several_ps or smoke.
      results_dir: where RESULTS-capacity.md and results-capacity.json go (bench/ for real figures).
    """
    if os.geteuid() != 0:
        sys.exit("[bench] shaped links need root (network namespaces, tc)")
    sys.path.insert(0, str(ROOT / "tests"))
    import netns

    from bench.__main__ import machine, write_keeping_notes

    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)  # before the runs: a directory that cannot be made fails at once
    started, runs = time.monotonic(), []
    with netns.create_hosts(6) as hosts:
        for index, (training, mbit, ps, workers) in enumerate(CONFIGURATIONS[configurations]):
            print(f"[bench] {training['model']} {training['dataset']} {mbit} Mbit/s {ps} ps {workers} workers",
                  file=sys.stderr, flush=True)
            directory = Path(f"/tmp/pscluster-shaped-{os.getpid()}/run-{index}")
            result = measure_one(hosts, directory, training, mbit, ps, workers)
            shape = "x".join(map(str, training.get("synthetic_shape", [])[:2]))
            runs.append({"model": f"{training['model']} ({training['dataset']}{' ' + shape if shape else ''})",
                         "mbit": mbit, "ps": ps,
                         "workers": workers, **result})
            print(f"[bench] {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
    results = {"machine": machine(), "runs": runs, "seconds": round(time.monotonic() - started)}
    (out / "results-capacity.json").write_text(json.dumps(results, indent=2))
    write_keeping_notes(out / "RESULTS-capacity.md", render(results))
    print(f"[bench] done in {results['seconds']} s: {out / 'RESULTS-capacity.md'}", file=sys.stderr)


if __name__ == "__main__":
    fire.Fire(main)
