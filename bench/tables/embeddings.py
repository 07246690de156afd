"""DLRM on synthetic Criteo-like data, batch 512: levers, scaling of rows 1 M -> 64 M, and the memory-capped scale case.

    .venv/bin/python -m bench.tables.embeddings [--sections levers,scaling,scale] [--repeats 2] [--steps 300]
                                         [--output bench/results-embeddings.json]

(section `mwms`: scaling's multi_worker_mirrored runs alone; `packing`: the second round of levers.)

Every process runs inside a cgroup of ours (memory capped at GROUP_CAP in all, so an overrun kills only the
benchmark). Bytes per step are counted per connection on the ps and worker ports (`ss`), so other processes'
loopback traffic is not counted. Configurations are interleaved over repeats; the 1-minute load average is
recorded before and after each run, and each run waits (bounded) until no other process uses CPU.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import fire

from bench.tables.embedding_cluster import load_average, run_measured
from bench.kit.memory_cgroup import MemoryCap
from bench.kit.quiet import require_quiet

GROUP_CAP = 10 * 2 ** 30
PROCESS_CAP = int(1.5 * 2 ** 30)
LEVERS = {  # name -> run config changes from the straightforward build (26 tables, no dedup, spe 1)
    "separate, spe 1": {"fused": False, "dedup": False, "spe": 1},
    "separate+dedup, spe 1": {"fused": False, "dedup": True, "spe": 1},
    "fused, spe 1": {"fused": True, "dedup": False, "spe": 1},
    "fused+dedup, spe 1": {"fused": True, "dedup": True, "spe": 1},
    "fused+dedup, spe 10": {"fused": True, "dedup": True, "spe": 10},
    "fused+dedup, spe 50": {"fused": True, "dedup": True, "spe": 50},
    "fused+dedup, spe 100": {"fused": True, "dedup": True, "spe": 100},
}
PACKING = {  # the second round, from the best of the first: each MLP in one variable, and steps_per_execution
    "fused+dedup, spe 100": {"fused": True, "dedup": True, "spe": 100, "packed": False},
    "fused+dedup+packed, spe 100": {"fused": True, "dedup": True, "spe": 100, "packed": True},
    "fused+dedup+packed, spe 200": {"fused": True, "dedup": True, "spe": 200, "packed": True},
}
BEST = {"fused": True, "dedup": True, "spe": 100}
ROWS = (1_040_000, 4_160_000, 16_640_000, 66_560_000)  # 26 tables of 40 K, 160 K, 640 K, 2.56 M rows
SCALING = {"embedding_optimizer": "sgd"}  # no slot: 64 M rows (4 GiB, and a 4 GiB initial value while it is
# assigned) fit GROUP_CAP; Adagrad's accumulator would double that. Bytes per step are the same for both.
MWMS_MAX_ROWS = 16_640_000  # at 64 M rows two replicas (4 GiB each, 8 GiB while assigned) exceed GROUP_CAP
SCALE_ROWS = 16_640_000  # 1.07 GB of table (+ as much Adagrad slot): with TensorFlow's own ~0.6 GB, more than a
# 1.5 GiB process holds even without the slot; a third of both per ps fits
SCALE_SHARD_MIB = 64  # shards of at most this: creating one needs a second buffer of its size on its ps (with one
# 355 MB shard per ps, the first ps was OOM-killed while its accumulator was being created)


def _log(message: str) -> None:
    print(f"[bench.tables.embeddings] {message}", file=sys.stderr, flush=True)


def _measure(label, mode, config, scratch: Path, group: MemoryCap, **kwargs) -> dict:
    caps = kwargs.pop("caps", None) or {role: group for role in ("chief", "ps", "worker", "worker:0", "worker:1")}
    result = run_measured(mode, config, scratch / label.replace(" ", "_").replace(",", ""), caps=caps, **kwargs)
    _log(f"{label}: " + json.dumps(result))
    return {"label": label, "mode": mode, "config": config, **result}


QUICK_ROWS = 1_000_000  # --quick: the levers on a table of this many rows


def levers(scratch: Path, group: MemoryCap, repeats: int, steps: int, rows: int = 16_640_000,
           choices: dict = LEVERS) -> list[dict]:
    """Each lever on 1 worker + 1 ps at `rows`, with the single process as reference, interleaved."""
    runs = []
    for repeat in range(repeats):
        base = {"total_rows": rows, "steps": steps, "epochs": 3}
        runs.append(_measure(f"single r{repeat}", "single", {**base, **BEST}, scratch, group))
        if choices is PACKING:
            runs.append(_measure(f"single packed r{repeat}", "single", {**base, **BEST, "packed": True}, scratch,
                                 group))
        for name, changes in choices.items():
            runs.append(_measure(f"{name} r{repeat}", "ps", {**base, **changes}, scratch, group))
    return runs


def scaling(scratch: Path, group: MemoryCap, repeats: int, steps: int, with_mwms: bool = True) -> list[dict]:
    """Single process, 1 worker + 1 ps and multi_worker_mirrored (2 workers) as total rows grow."""
    runs = []
    for repeat in range(repeats):
        for rows in ROWS:
            config = {"total_rows": rows, "steps": steps, "epochs": 3, **BEST, **SCALING}
            runs.append(_measure(f"ps {rows} r{repeat}", "ps", config, scratch, group))
            runs.append(_measure(f"single {rows} r{repeat}", "single", config, scratch, group))
            if rows <= MWMS_MAX_ROWS and with_mwms:
                runs.append(_mwms(rows, repeat, config, scratch, group))
    return runs


def _mwms(rows: int, repeat: int, config: dict, scratch: Path, group: MemoryCap) -> dict:
    """multi_worker_mirrored, 2 workers of batch 512, without de-duplication: with it each replica's table
    gradient has its own length and the collective fails ("Shape mismatch in the collective instance")."""
    return _measure(f"mwms {rows} r{repeat}", "mwms", {**config, "dedup": False}, scratch, group, workers=2)


def mwms_only(scratch: Path, group: MemoryCap, repeats: int, steps: int) -> list[dict]:
    """The multi_worker_mirrored part of `scaling` alone, and one attempt at the largest table."""
    runs = [_mwms(rows, repeat, {"total_rows": rows, "steps": steps, "epochs": 3, **BEST, **SCALING}, scratch, group)
            for repeat in range(repeats) for rows in ROWS if rows <= MWMS_MAX_ROWS]
    largest = {"total_rows": ROWS[-1], "steps": steps, "epochs": 3, **BEST, **SCALING}
    return runs + [_mwms(ROWS[-1], 0, largest, scratch, group)]  # once: can it run at all under GROUP_CAP?


def scale_case(scratch: Path, steps: int) -> list[dict]:
    """Every process capped at PROCESS_CAP: the SCALE_ROWS table over 3 ps, then in one process."""
    config = {"total_rows": SCALE_ROWS, "steps": steps, "epochs": 2, **BEST, "max_shard_mib": SCALE_SHARD_MIB}
    caps = {name: MemoryCap(f"emb-cap-{name.replace(':', '')}", PROCESS_CAP)
            for name in ("chief", "worker", "ps:0", "ps:1", "ps:2")}
    try:
        runs = [_measure("capped 3 ps", "ps", config, scratch, None, ps=3, caps=caps)]
        runs[-1]["cgroup_peak_mib"] = {n: round(c.peak_bytes() / 2 ** 20) for n, c in caps.items()}
        runs[-1]["oom_kills"] = {n: c.oom_kills() for n, c in caps.items()}
        single_cap = MemoryCap("emb-cap-single", PROCESS_CAP)
        runs.append(_measure("capped single", "single", config, scratch, None, caps={"chief": single_cap}))
        runs[-1]["oom_kills"] = {"single": single_cap.oom_kills()}
        runs[-1]["cgroup_peak_mib"] = {"single": round(single_cap.peak_bytes() / 2 ** 20)}
        caps["single"] = single_cap
        return runs
    finally:
        for cap in caps.values():
            cap.remove()


def main(sections: str = "levers,scaling,scale", repeats: int = 2, steps: int = 300,
         output: str = "bench/results-embeddings.json", quick: bool = False) -> None:
    """Runs the chosen sections and writes every run's figures to `output` (JSON); `--quick`: the levers once at
    a small size into /tmp/pscluster-embeddings-quick.json (a check after a change, under 3 minutes)."""
    rows = QUICK_ROWS if quick else 16_640_000
    if quick:
        sections, repeats, steps, output = "levers", 1, 60, "/tmp/pscluster-embeddings-quick.json"
    wanted = sections.split(",") if isinstance(sections, str) else list(sections)
    require_quiet()
    record = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load_average()}
    group = MemoryCap("emb-bench", GROUP_CAP)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            if "levers" in wanted:
                record["levers"] = levers(Path(scratch), group, repeats, steps, rows)
            if "packing" in wanted:
                record["levers"] = levers(Path(scratch), group, repeats, steps, choices=PACKING)
            if "scaling" in wanted:
                record["scaling"] = scaling(Path(scratch), group, repeats, steps)
            if "mwms" in wanted:
                record["mwms"] = mwms_only(Path(scratch), group, repeats, steps)
            if "scale" in wanted:
                record["scale"] = scale_case(Path(scratch), steps)
    finally:
        record["group_peak_gib"] = round(group.peak_bytes() / 2 ** 30, 2)
        record["load_after"] = load_average()
        group.remove()
        Path(output).write_text(json.dumps(record, indent=2))
    _log(f"written to {output}")


if __name__ == "__main__":
    fire.Fire(main)
