"""A caller of exporters as the follow-mode chief is one, for tests/test_export_forks.py: it makes its ExportForks
first (or, with --late, once TensorFlow's runtime runs), trains a tiny DLRM, then writes --versions serving
versions one after another through ExportProcess and prints a JSON line for each: how its exporter ran (as /proc
showed it while it ran) and what it wrote. --kill-forks kills the forking process after the first version,
--term-forks sends it SIGTERM;
--hold starts one more version, stops its exporter with SIGSTOP, prints its pid and waits to be killed; --room
makes this process's command line long enough for an exporter's (a chief the launcher forks has that room)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster.config import PROJECT_ROOT  # noqa: E402
from common.forking import ForkedChild  # noqa: E402
from common.proc import proc_stat  # noqa: E402
from online.publish.export_forks import ExportForks  # noqa: E402
from online.publish.process import ExportProcess  # noqa: E402
from online.publish.request import VERSION, ExportRequest  # noqa: E402

TINY_DLRM = {"model": "dlrm", "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8],
             "per_worker_batch": 16, "dataset": "synthetic_criteo"}


def proc_view(pid: int) -> dict:
    """The exporter's command line once it shows its own (within 5 s), its parent, process group and niceness."""
    deadline, cmdline = time.monotonic() + 5, []
    while time.monotonic() < deadline and "online.publish.exporter" not in cmdline:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
        time.sleep(0.001)
    stat = proc_stat(pid)
    return {"cmdline": cmdline, "parent": int(stat[1]), "group": int(stat[2]),
            "nice": os.getpriority(os.PRIO_PROCESS, pid)}


def checkpoint_and_reference(folder: Path) -> tuple[dict, str, str]:
    """A tiny DLRM trained here: its options, checkpoint prefix and reference .npz (the runtime starts here)."""
    import numpy as np
    import tensorflow as tf

    import exportkit
    from models import export
    from tables.streaming import checkpoint_io

    options, source, model = exportkit.trained(TINY_DLRM, steps=3)
    prefix = checkpoint_io.save(tf.train.Checkpoint(model=model, optimizer=model.optimizer), str(folder / "ckpt-1"),
                                chunk_bytes=1 << 20)
    raw = export.reference_inputs(source.split("test", raw=True), count=16)
    np.savez(folder / "reference.npz", predictions=model(export.model_inputs(source, raw), training=False).numpy(),
             **export.saved_inputs(raw))
    return dataclasses.asdict(options), prefix, str(folder / "reference.npz")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--versions", type=int, default=2)
    parser.add_argument("--late", action="store_true")
    parser.add_argument("--kill-forks", action="store_true")
    parser.add_argument("--term-forks", action="store_true")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--room", default="")  # a command line as long as a forked chief's has
    args = parser.parse_args()
    scratch = args.folder / ".exports"
    print("buffered before the fork")  # stdout is a pipe: still in this process's buffer, never to be written twice
    forks = None if args.late else ExportForks.start(scratch, PROJECT_ROOT)
    options, prefix, reference = checkpoint_and_reference(args.folder)
    forks = forks or ExportForks.start(scratch, PROJECT_ROOT)
    deadline = time.monotonic() + 120
    while not forks.is_ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"forking": forks.process.pid, "caller": os.getpid(), "ready": forks.is_ready(),
                      "forking_parent": int(proc_stat(forks.process.pid)[1]),
                      "forking_cmdline": Path(f"/proc/{forks.process.pid}/cmdline").read_bytes().rstrip(b"\0")
                      .decode().split("\0")}), flush=True)
    for version in range(1, args.versions + 1 + args.hold):
        request = ExportRequest(kind=VERSION, checkpoint=prefix, destination=str(args.folder / "serving"),
                                options=options, reference=reference, version=version, keep=10)
        export = ExportProcess(request, scratch, forks)
        seen = {"version": version, "forked": isinstance(export.process, ForkedChild), **proc_view(export.process.pid)}
        if version > args.versions:  # --hold
            os.kill(export.process.pid, signal.SIGSTOP)
            print(json.dumps({**seen, "held": export.process.pid}), flush=True)
            time.sleep(300)
        result = export.wait(300)
        print(json.dumps({**seen, "error": result.error, "path": result.path,
                          "left": sorted(path.name for path in scratch.iterdir())}), flush=True)
        if args.kill_forks and version == 1:
            forks.process.kill()
            forks.process.wait()
        if args.term_forks and version == 1:  # as a stop's SIGTERM to the process group reaches it
            os.kill(forks.process.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
