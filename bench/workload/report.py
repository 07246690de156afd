"""bench/RESULTS.md and bench/results.png from the figures `python -m bench` measured."""

from __future__ import annotations

from pathlib import Path

TARGETS = {"vs_tutorial": 2.0, "vs_single": 0.6, "cold_start_s": 20.0, "ps_kill_s": 30.0}
PARAMETERS = {"0.1M": 0.087, "2.8M": 2.77, "11M": 11.08, "44M": 44.31}  # millions, from model.count_params()


def _verdict(value: float, target: float, larger_is_better: bool = True) -> str:
    met = value >= target if larger_is_better else value <= target
    return f"target {'≥' if larger_is_better else '≤'} {target:g}: **{'met' if met else 'not met'}**"


def _reference(results: dict) -> list[str]:
    ref = results["reference"]
    a, b, c = (ref[k]["median"] for k in ("single_process", "tutorial_pss", "toolkit_defaults"))
    names = {"single_process": "(a) single process `model.fit`, no strategy (the limit)",
             "tutorial_pss": "(b) tutorial-style PSS: `steps_per_execution=1`, nothing tuned",
             "toolkit_defaults": "(c) toolkit defaults"}
    lines = ["## Reference workload: steps/s", "",
             "The tutorial CNN (2,770,762 parameters), 28×28×1 synthetic data, global batch 64, Adam; 1 worker + "
             "1 ps on loopback. Each run: the median steps/s of its epochs after the first; configurations "
             "interleaved over repeats.", "", "| configuration | runs (steps/s) | median |", "| --- | --- | ---: |"]
    lines += [f"| {names[k]} | {', '.join(f'{v:.1f}' for v in ref[k]['runs'])} | **{ref[k]['median']:.1f}** |"
              for k in names]
    lines += ["", f"- (c)/(a) = **{c / a:.2f}** ({_verdict(c / a, TARGETS['vs_single'])})",
              f"- (c)/(b) = **{c / b:.2f}** ({_verdict(c / b, TARGETS['vs_tutorial'])})", ""]
    return lines


def _bound(results: dict) -> list[str]:
    transfer, ref = results["transfer"], results["reference"]
    compute_ms = 1000 / ref["single_process"]["median"]
    read_ms, write_ms = transfer["ps_to_worker"]["ms_per_call"], transfer["worker_to_ps"]["ms_per_call"]
    bound = 1000 / (compute_ms + read_ms + write_ms)
    return ["## What bounds it: the transfers of every step", "",
            "Measured by `bench/workload/transfer.py`: a variable of the CNN's size (11.1 MB) on the ps, read whole by "
            "a "
            "function on the worker (what the forward pass does) and written whole from the worker (what the "
            "gradient update does).", "",
            "| direction | ms per 11.1 MB | MB/s |", "| --- | ---: | ---: |",
            f"| ps → worker (variables) | {read_ms:.1f} | {transfer['ps_to_worker']['mb_per_s']:.0f} |",
            f"| worker → ps (gradients) | {write_ms:.1f} | {transfer['worker_to_ps']['mb_per_s']:.0f} |", "",
            f"One step in one process takes {compute_ms:.1f} ms (1/(a)). Done one after the other, compute and "
            f"both transfers give at most 1000 / ({compute_ms:.1f} + {read_ms:.1f} + {write_ms:.1f}) = "
            f"**{bound:.1f} steps/s**, against (c) = {ref['toolkit_defaults']['median']:.1f} measured; "
            f"0.6 × (a) would need {0.6 * ref['single_process']['median']:.1f}.", ""]


def _levers(results: dict) -> list[str]:
    lines = ["## Levers tried", "",
             "Thread pools of the ps and worker (the toolkit's defaults otherwise; one run each):", "",
             "| setting | steps/s |", "| --- | ---: |"]
    lines += [f"| {name} | {value:.1f} |" if value is not None else f"| {name} | hung: killed after 150 s |"
              for name, value in results["threads"].items()]
    lines += ["", "Per-worker batch (1 worker + 1 ps; a larger batch moves the same bytes for more examples, and "
              "changes what is trained):", "", "| per-worker batch | steps/s | examples/s |", "| ---: | ---: | ---: |"]
    lines += [f"| {size} | {f['steps_per_s']:.1f} | {f['examples_per_s']:.0f} |"
              for size, f in results["batch"].items()]
    return lines + [""]


def _scaling(results: dict) -> list[str]:
    lines = ["## How cost grows", "", "Model size (1 worker + 1 ps, the CNN's dense layer widened; bytes are all "
             "loopback traffic while the chief ran, per step, so start-up and per-epoch checkpoints are included):",
             "",
             "| parameters | steps/s | MB over loopback per step | peak RSS chief / worker / ps (MiB) |",
             "| --- | ---: | ---: | --- |"]
    for size, f in results["model_size"].items():
        rss = f["rss_mib"]
        lines.append(f"| {size} | {f['steps_per_s']:.1f} | {f['loopback_mb_per_step']:.1f} | "
                     f"{rss['chief']:.0f} / {rss['worker']:.0f} / {rss['ps']:.0f} |")
    lines += ["", "Number of ps (1 worker, the 11 M-parameter CNN: its 10.8 M-parameter layer split over every ps):",
              "", "| ps | steps/s | MB over loopback per step | peak RSS ps (MiB) |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {n} | {f['steps_per_s']:.1f} | {f['loopback_mb_per_step']:.1f} | {f['rss_mib']['ps']:.0f} |"
              for n, f in results["ps_count"].items()]
    lines += ["", "Number of workers (1 ps, the tutorial CNN, 64 examples per worker per step; 2 cores in all):", "",
              "| workers | steps/s | examples/s | MB over loopback per step |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {n} | {f['steps_per_s']:.1f} | {f['steps_per_s'] * 64 * int(n):.0f} | "
              f"{f['loopback_mb_per_step']:.1f} |" for n, f in results["worker_count"].items()]
    return lines + [""]


def _operations(results: dict) -> list[str]:
    cold, worker, ps = results["cold_start"], results["worker_kill"], results["ps_kill"]
    return ["## Operations (the launcher, loopback, the digits job)", "",
            "| what | seconds | target |", "| --- | ---: | --- |",
            f"| `sh run.sh` to the chief's first finished step (environment installed) | {cold['to_first_step_s']} | "
            f"{_verdict(cold['to_first_step_s'], TARGETS['cold_start_s'], False)} |",
            f"| `sh run.sh` to the end of the shipped job (6 epochs, evaluated, exported) | {cold['to_end_s']} | |",
            f"| worker:1 killed in epoch 2: that epoch's extra time | {worker['stall_s']} | |",
            f"| ps:0 killed in epoch 2 → the restarted chief's first step | {ps['to_first_resumed_step_s']} | "
            f"{_verdict(ps['to_first_resumed_step_s'], TARGETS['ps_kill_s'], False)} |", ""]


def render(results: dict) -> str:
    """The Markdown of bench/RESULTS.md above the notes."""
    m = results["machine"]
    lines = ["# Benchmark results", "", "Written by `python -m bench` (do not edit above the notes marker).", "",
             f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, no GPU; Python {m['python']}, "
             f"tensorflow-cpu {m['tensorflow-cpu']}, tf-keras {m['tf-keras']}. Date: {m['date']}; load average "
             f"before the run {m['load_before']:.2f} (it counts this benchmark's own tasks too); the whole run "
             f"took {results.get('seconds', 0)} s. {_alone(results)} Plot: `bench/results.png`.", ""]
    return "\n".join(lines + _reference(results) + _bound(results) + _levers(results) + _scaling(results)
                     + _operations(results))


def _alone(results: dict) -> str:
    """Whether anything outside the benchmark used CPU before each stage (checked with /proc)."""
    found = results.get("others_using_cpu")
    if found is None:
        return "Other processes were not checked for."
    busy = {stage: others for stage, others in found.items() if others}
    if not busy:
        return "Before each stage no process outside the benchmark used CPU (checked with /proc)."
    return "Other processes used CPU before: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in busy.items()) + "."


def plot(results: dict, path: Path) -> None:
    """Four panels: the reference configurations, and steps/s against model size, ps and workers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    ref = results["reference"]
    axes[0][0].bar(["single process", "tutorial PSS", "toolkit PSS"],
                   [ref[k]["median"] for k in ("single_process", "tutorial_pss", "toolkit_defaults")])
    axes[0][0].set(title="Reference workload (1 worker + 1 ps)", ylabel="steps/s")
    sizes = results["model_size"]
    axes[0][1].plot([PARAMETERS[s] for s in sizes], [f["steps_per_s"] for f in sizes.values()], "o-")
    axes[0][1].set(title="Model size", xlabel="parameters (millions)", ylabel="steps/s", xscale="log",
                   yscale="log")
    twin = axes[0][1].twinx()
    twin.plot([PARAMETERS[s] for s in sizes], [f["loopback_mb_per_step"] for f in sizes.values()], "s--", color="C1")
    twin.set(ylabel="MB over loopback per step", yscale="log")
    ps = results["ps_count"]
    axes[1][0].plot([int(n) for n in ps], [f["steps_per_s"] for f in ps.values()], "o-")
    axes[1][0].set(title="Number of ps (11 M parameters)", xlabel="ps", ylabel="steps/s", ylim=(0, None))
    workers = results["worker_count"]
    axes[1][1].plot([int(n) for n in workers], [f["steps_per_s"] * 64 * int(n) for n, f in workers.items()], "o-")
    axes[1][1].set(title="Number of workers (2 cores)", xlabel="workers", ylabel="examples/s", ylim=(0, None))
    figure.tight_layout()
    figure.savefig(path, dpi=90)
