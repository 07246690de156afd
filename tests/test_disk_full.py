"""A full disk on a real tmpfs (root: mounted under the test's folder, unmounted after): one line naming the path,
its filesystem and the space left, exit 5; a killed save's leftovers removed when the chief starts again."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from clusterkit import PYTHON, ROOT, assert_no_traceback, derive_cluster
from common.errors import DISK_FULL_EXIT_CODE

pytestmark = pytest.mark.cluster


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 8 MiB at tmp_path/disk (its size changed with `resize`); root only (under CI=true a skip fails)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True, timeout=30)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True, timeout=30)


def resize(disk: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True, timeout=30)


def fill(disk: Path, leave_bytes: int) -> None:
    """Writes a filler file until only about `leave_bytes` are free on `disk`."""
    space = os.statvfs(disk)
    size = space.f_bavail * space.f_frsize - leave_bytes
    with open(disk / "filler", "ab") as handle:
        handle.write(b"\0" * max(size, 0))


class Lines:
    def __init__(self):
        self.lines = []

    def error(self, message, *args):
        self.lines.append(message % args)


def test_a_full_disk_is_one_line_with_path_filesystem_and_free_space_and_exit_5(small_disk, monkeypatch):
    """Even with no byte free: the task's reserve beside its exit file is given back first, so the exit file is
    written and the launcher reads 5."""
    from common.disk_full import exit_on_full_disk
    from common.exit_file import EXIT_FILE_VARIABLE, record_exit

    exit_file = small_disk / "logs" / "chief-0.exit"
    exit_file.parent.mkdir()
    monkeypatch.setenv(EXIT_FILE_VARIABLE, str(exit_file))
    log = Lines()
    with pytest.raises(SystemExit) as ended:
        with exit_on_full_disk(log, small_disk / "output"):
            assert exit_file.with_suffix(".reserve").exists()
            fill(small_disk, 0)
            (small_disk / "summary.json").write_text("x" * 100_000)
    record_exit(ended.value.code)
    assert ended.value.code == DISK_FULL_EXIT_CODE and exit_file.read_text() == "5\n"
    [line] = log.lines
    assert line.startswith(f"disk full: could not write under {small_disk / 'output'}: {small_disk} (tmpfs tmpfs) "
                           "has "), line  # a write names no file: the folder the task writes under
    assert "free of 8.0 MiB; free space there" in line and not exit_file.with_suffix(".reserve").exists()


def test_a_checkpoint_that_fills_the_disk_stops_the_chief_and_its_leftovers_go_at_the_next_start(
        shared_servers, small_disk, tmp_path):
    output = small_disk / "output"
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        "output_dir": str(output), "epochs": 2, "steps_per_epoch": 150, "steps_per_execution": 1,
        "lr_decay_epochs": []})
    log_path = tmp_path / "chief.log"
    command = [PYTHON, "-m", "coordinator.train", "--cluster", str(cluster)]
    with open(log_path, "wb") as log:
        chief = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (output / "checkpoints" / "ckpt-1.index").exists() and chief.poll() is None:
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
        fill(small_disk, 600 << 10)  # the heartbeat still fits, the next checkpoint (~1.8 MB) does not
        code = chief.wait(timeout=300)
    finally:
        if chief.poll() is None:
            chief.kill()
            chief.wait()
    text = log_path.read_text()
    assert code == DISK_FULL_EXIT_CODE, text[-3000:]
    assert_no_traceback(text)
    [line] = [line for line in text.splitlines() if "disk full" in line]
    assert f"error: disk full: could not write {output}/checkpoints/ckpt-2_temp/" in line, line
    assert f": {small_disk} (tmpfs tmpfs) has " in line and "free of 8.0 MiB" in line, line
    assert not list((output / "checkpoints").glob("*_temp"))  # the failed save gave its parts back

    killed = output / "checkpoints" / "ckpt-1-50_temp"  # a save killed midway: parts never merged, under a name
    killed.mkdir()  # no later save writes again (only its own writer would clear it)
    (killed / "part-00000.data-00000-of-00001").write_bytes(b"\0" * 4096)
    unrecorded = output / "checkpoints" / "ckpt-1-60.index"  # and a bundle the state file never listed
    unrecorded.write_bytes(b"\0" * 64)
    (small_disk / "filler").unlink()
    resize(small_disk, "64m")  # room for the export too
    resized = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                             stdin=subprocess.DEVNULL)
    assert resized.returncode == 0, resized.stderr[-3000:]
    assert "resuming after epoch 1" in resized.stderr
    assert not killed.exists() and not unrecorded.exists()  # removed as the chief opened the directory


def test_leftovers_are_unmerged_shards_and_checkpoints_newer_than_the_state_file_lists(tmp_path):
    from models.checkpoints import leftovers

    (tmp_path / "ckpt-0-9_temp").mkdir()
    assert leftovers(tmp_path) == [tmp_path / "ckpt-0-9_temp"]  # no state file: nothing else is judged
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001", "ckpt-1-40.index", "ckpt-2.index",
                 "ckpt-2.data-00000-of-00001", "ckpt-0-9.index"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-1-40"\n'
                                         'all_model_checkpoint_paths: "ckpt-1"\n'
                                         'all_model_checkpoint_paths: "ckpt-1-40"\n')
    assert sorted(p.name for p in leftovers(tmp_path)) == ["ckpt-0-9_temp", "ckpt-2.data-00000-of-00001",
                                                           "ckpt-2.index"]  # an older unlisted one stays


def test_on_a_full_disk_a_log_is_cut_without_its_copy_and_the_launcher_runs_on_without_status(
        small_disk, monkeypatch, capsys):
    from clusterkit import cluster_document, write_cluster
    from cluster import config as cluster_config
    from launcher import run as launcher_run
    from launcher.log_rotation import rotate_if_large

    logs = small_disk / "logs"
    logs.mkdir()
    (logs / "chief-0.log").write_bytes(b"[chief:0] 10:00:00 a line\n" * 40_000)  # about 1 MiB
    fill(small_disk, 0)
    assert rotate_if_large(logs / "chief-0.log", max_mb=0.5, files_kept=3)
    assert (logs / "chief-0.log").stat().st_size == 0 and not (logs / "chief-0.log.1").exists()  # room given back

    fill(small_disk, 0)
    config = cluster_config.load(write_cluster(small_disk.parent, cluster_document(logs_dir=str(logs))))

    def write(*args, **kwargs):
        (logs / "status.json.partial").write_text("x" * 100_000)

    monkeypatch.setattr(launcher_run, "write_status", write)
    assert not launcher_run.status_written(config, None, 0.0) and not launcher_run.status_written(config, None, 0.0)
    said = [line for line in capsys.readouterr().err.splitlines() if "status.json not written" in line]
    assert len(said) == 1 and f"disk full: {small_disk} (tmpfs tmpfs) has " in said[0], said
