"""`python -m bench`: every measurement in one go, into bench/RESULTS.md, bench/results.json and bench/results.png.

Runs the reference workload (interleaved repeats), the ps <-> worker transfer probe, the levers tried, the
scaling sweeps and the operations timings. Whatever follows the `<!-- notes -->` line of an existing
RESULTS.md is kept as it is. Install the plotting package first: `sh roles/bootstrap.sh bench`. `--quick` is a
check after a change (under 3 minutes on an idle 2-core machine): the reference workload, the transfer probe and
the ps and worker sweeps at small sizes, into /tmp/pscluster-bench-quick.json, the real results left alone.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import fire


HERE = Path(__file__).resolve().parent


def machine() -> dict:
    """What the figures were measured on."""
    cpu = next((line.split(": ", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gib": round(memory_kib / 2**20), "python":
            platform.python_version(), "tensorflow-cpu": metadata.version("tensorflow-cpu"),
            "tf-keras": metadata.version("tf-keras"), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_before": os.getloadavg()[0]}


def write_keeping_notes(results_md: Path, text: str) -> None:
    """Writes `text` to a results file, keeping whatever follows the `<!-- notes -->` line of the old one."""
    notes = results_md.read_text().partition("<!-- notes -->")[2] if results_md.exists() else ""
    results_md.write_text(text + "\n<!-- notes -->" + (notes or "\n"))


def write_results(output: Path, record: dict, text: str) -> None:
    """Writes a benchmark's record to `output` (results-x.json) and its text to RESULTS-x.md beside it."""
    output.write_text(json.dumps(record, indent=2))
    write_keeping_notes(output.with_name(output.stem.replace("results", "RESULTS", 1) + ".md"), text)


QUICK_FILE = Path("/tmp/pscluster-bench-quick.json")


def quick_run() -> None:
    """The quick size: a few stages at small sizes, printed and kept in QUICK_FILE."""
    from bench import scaling, throughput, transfer
    from bench.kit.quiet import require_quiet

    require_quiet()
    started, results = time.monotonic(), {"machine": machine()}
    for name, stage in [("reference", lambda: throughput.reference(repeats=1, steps=40, epochs=2)),
                        ("transfer", transfer.measure), ("ps_count", lambda: scaling.ps_count(10, counts=(1, 2))),
                        ("worker_count", lambda: scaling.worker_count(10, counts=(1, 2)))]:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        results[name] = stage()
        print(f"[bench] {name}: {json.dumps(results[name])}", file=sys.stderr, flush=True)
    results["seconds"] = round(time.monotonic() - started)
    QUICK_FILE.write_text(json.dumps(results, indent=2))
    print(f"[bench] quick size done in {results['seconds']} s: {QUICK_FILE}", file=sys.stderr)


def require_plotting() -> None:
    """Exits with one line before measuring when matplotlib is missing (a full run ends with the plot)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("[bench] matplotlib is missing (the run ends by drawing bench/results.png): run `sh "
                 "roles/bootstrap.sh bench` first")


def main(repeats: int = 3, steps: int = 150, scaling_steps: int = 30, resume: bool = False,
         quick: bool = False) -> None:
    """Measures everything and writes the results beside this file; `--resume` keeps the stages that
    bench/results.json already holds (after a failure) and measures the rest; `--quick`: see the module's doc."""
    if quick:
        return quick_run()
    require_plotting()
    from bench import levers, operations, scaling, throughput, transfer  # TensorFlow: not for --help
    from bench.kit.quiet import require_quiet, wait_for_quiet
    from bench.workload.report import plot, render

    started = time.monotonic()
    kept = json.loads((HERE / "results.json").read_text()) if resume and (HERE / "results.json").exists() else {}
    require_quiet()
    results = {"machine": kept.get("machine") or machine(), "others_using_cpu": {}, **kept}
    stages = [("reference", lambda: throughput.reference(repeats=repeats, steps=steps, epochs=3)),
              ("transfer", transfer.measure),
              ("threads", lambda: levers.threads(steps)),
              ("batch", levers.batch),
              ("model_size", lambda: scaling.model_size(scaling_steps)),
              ("ps_count", lambda: scaling.ps_count(scaling_steps)),
              ("worker_count", lambda: scaling.worker_count(scaling_steps)),
              ("cold_start", operations.cold_start),
              ("worker_kill", operations.worker_kill),
              ("ps_kill", operations.ps_kill)]
    for name, stage in stages:
        if name in results:
            continue
        results["others_using_cpu"][name] = wait_for_quiet()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        results[name] = stage()
        (HERE / "results.json").write_text(json.dumps(results, indent=2))  # partial results survive a failure
    results["seconds"] = round(time.monotonic() - started) + kept.get("seconds", 0)
    (HERE / "results.json").write_text(json.dumps(results, indent=2))
    plot(results, HERE / "results.png")
    write_keeping_notes(HERE / "RESULTS.md", render(results))
    print(f"[bench] done in {results['seconds']} s: {HERE / 'RESULTS.md'}", file=sys.stderr)


if __name__ == "__main__":
    fire.Fire(main)
