"""tests/fixtures/run-0.5.tar.xz, a follow-mode run of 0.5 (commit 1a2459e) killed mid-file that
test_upgrade_resume.py resumes: its settings and data files, and how 0.5's own code makes it again (`main`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import criteokit

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "run-0.5.tar.xz"
OLD_COMMIT = "1a2459e"
PLACEHOLDER = "@RUN@"
MTIME_0 = 1_790_000_000  # each day's modification time (set, so the files made again are the same files)
DAYS = {"day_0": (300, 0), "day_1": (300, 300), "day_2": (300, 600), "day_3": (300, 900), "day_4": (1500, 1200)}
TRAINING = {"model": "dlrm", "table_rows": 64, "embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8],
            "per_worker_batch": 16, "min_shard_bytes": 256, "dataset": "criteo", "follow_data": True,
            "data_poll_s": 0.5, "settle_s": 1, "piece_mb": 0.03, "checkpoint_every_s": 60,
            "serving_export_every_s": 600, "serving_delta_every_s": 1, "progress_every_s": 2,
            "keep_serving_versions": 2, "keep_checkpoints": 2, "embedding_kind": "dynamic",
            "embedding_capacity": 4096, "expire_after_steps": 200}
SETTLED = re.compile(r"checkpoint (ckpt-0-\d+) \(optimizer step (\d+)\): (\d+) files done")


def write_days(data: Path, names) -> None:
    """Days `names` of DAYS written into `data` as the 0.5 run saw them: same bytes, same modification time."""
    data.mkdir(parents=True, exist_ok=True)
    for name in names:
        count, first = DAYS[name]
        hidden = criteokit.write(data / f".{name}.tmp", criteokit.rows(count, first=first))
        stamp = MTIME_0 + 60 * list(DAYS).index(name)
        os.utime(hidden, (stamp, stamp))
        hidden.rename(data / name)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unpack(fixture: Path, run: Path) -> Path:
    """The fixture unpacked into `run` (output/, follower/follower.py, old-chief.log), its folder put in place of
    @RUN@; returns `run`."""
    run.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fixture) as packed:
        packed.extractall(run, filter="data")
    for path in (run / "output").rglob("*.json"):
        path.write_text(path.read_text().replace(PLACEHOLDER, str(run)))
    return run


def _cluster(run: Path) -> Path:
    from clusterkit import cluster_document, write_cluster

    document = cluster_document(evaluator=False, logs_dir=str(run / "logs"), training={
        **TRAINING, "data_dir": str(run / "data"), "output_dir": str(run / "output")})
    document["launcher"]["max_restarts"] = 0
    return write_cluster(run, document)


def _wait(log: Path, pattern: str, after: int = 0, timeout_s: float = 300) -> re.Match:
    """The first match of `pattern` in `log` past its first `after` characters, waited for up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.compile(pattern).search(log.read_text() if log.exists() else "", after)
        if found:
            return found
        time.sleep(0.2)
    raise SystemExit(f"not seen in {timeout_s} s in {log}: {pattern}")


def _kill_everything(logs: Path) -> None:
    """SIGKILL to the launcher first (it restarts no one then), then to every task; waits until all are gone."""
    paths = sorted(logs.glob("*.pid"), key=lambda path: path.name != "launcher.pid")
    records = [json.loads(path.read_text()) for path in paths]
    for record in records:
        try:
            os.kill(record["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    for _ in range(100):
        if not any(Path(f"/proc/{record['pid']}").exists() for record in records):
            return
        time.sleep(0.1)
    raise SystemExit(f"still running after SIGKILL: {[r['pid'] for r in records]}")


def drive(old: Path, run: Path) -> dict:
    """Runs 0.5 from worktree `old` on `run` until its kill; returns what it saw (the settled checkpoint, the step
    served)."""
    write_days(run / "data", ["day_0", "day_1", "day_2"])
    cluster, log = _cluster(run), run / "logs" / "chief-0.log"
    subprocess.run([str(old / ".venv" / "bin" / "python"), "-m", "roles.launch", "run", str(cluster), "--detach"],
                   cwd=old, check=True, timeout=120, stdin=subprocess.DEVNULL)
    try:
        settled = _wait(log, r"checkpoint (ckpt-0-\d+) \(optimizer step \d+\): 3 files done")
        _wait(log, r"serving \| delta 1\.")  # versions come slowly on a busy machine: deltas flow from here
        write_days(run / "data", ["day_3"])
        done = _wait(log, r"day_3: done", settled.end())
        served = _wait(log, r"serving \| delta \S+ \| steps \d+ to \d+ \| \d+ rows changed \| 1 files? newly served",
                       done.end())
        write_days(run / "data", ["day_4"])
        started = _wait(log, r"day_4: started", served.end())
        last = _wait(log, r"serving \| delta \S+ \| steps \d+ to (\d+) ", started.end())
    finally:
        _kill_everything(run / "logs")
    text = log.read_text()
    newest = SETTLED.findall(text)[-1]
    if "day_4: done" in text or newest[0] != settled.group(1) or int(last.group(1)) <= int(newest[1]):
        raise SystemExit(f"the kill did not come mid-day_4 with deltas past {newest}: run again ({log})")
    return {"checkpoint": newest[0], "checkpoint_step": int(newest[1]), "served_step": int(last.group(1))}


def pack(old: Path, run: Path, saw: dict, fixture: Path = FIXTURE) -> None:
    """The killed run's output (its folder written @RUN@), its chief's log and 0.5's follower.py, as `fixture`."""
    for path in (run / "output").rglob("*.json"):
        path.write_text(path.read_text().replace(str(run), PLACEHOLDER))
    days = {name: digest(run / "data" / name) for name in DAYS}
    (run / "saw.json").write_text(json.dumps({**saw, "commit": OLD_COMMIT, "days": days}, indent=1))
    fixture.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fixture, "w:xz") as packed:
        packed.add(run / "output", "output")
        packed.add(run / "saw.json", "saw.json")
        packed.add(run / "logs" / "chief-0.log", "old-chief.log")
        packed.add(old / "coordinator" / "publish" / "follower.py", "follower/follower.py")


def main(old: str) -> None:
    """Makes the fixture again with the 0.5 code in worktree `old`, a few minutes:

        git worktree add /tmp/old-0.5 1a2459e && ln -s "$PWD/.venv" /tmp/old-0.5/.venv
        .venv/bin/python tests/upgrade_fixture.py /tmp/old-0.5

    0.5's own launcher runs the cluster (2 ps, 2 workers, no evaluator) from `old`: days 0-2 train and a settled
    checkpoint lists them, day_3 trains and a delta serves it, day_4 starts and a delta serves some of it, then every
    process is SIGKILLed (a host lost). The output folder, the chief's log and 0.5's follower.py (as users copied it)
    are packed with xz; the run's folder in JSON files is written @RUN@."""
    old_path = Path(old).resolve()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=old_path, capture_output=True, text=True, check=True)
    if not head.stdout.startswith(OLD_COMMIT):
        raise SystemExit(f"{old_path} is at {head.stdout.strip()}, not 0.5 ({OLD_COMMIT})")
    folder = Path(tempfile.mkdtemp(prefix="run-0.5-"))  # left for a look when the run went otherwise
    saw = drive(old_path, folder)
    pack(old_path, folder, saw)
    shutil.rmtree(folder)
    print(f"{FIXTURE}: {FIXTURE.stat().st_size} bytes; {saw}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # clusterkit imports the launcher
    main(*sys.argv[1:])
