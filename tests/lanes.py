"""Runs the suite in two pytest processes side by side: the multi-host tests (network-namespace hosts and Slurm,
which mostly wait on hosts, cuts and time limits) with a few long loopback modules, beside the rest; then both
durations tables and the total.

`sh tests/run.sh` runs it. Options (`-k x`, `-m multihost`, `-x`, ...) go to both lanes; a lane left with no test
is simply empty. A path argument (a file, a directory, a test id) runs one plain pytest, as before. The multi-host
tests stay in one lane, one after another: two of them never build hosts or a Slurm cluster at once, and their
hosts never meet the loopback clusters of the other lane (each namespace has its own network, addresses and names).
The main lane's output streams here; the multi-host lane's goes to a file, shown (and then followed) once the main
lane is done. A whole suite (no options) whose lane ran over LANE_BUDGET_S fails, so a change that makes the suite
slower is seen in that change.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANE_VARIABLE = "PSCLUSTER_TEST_LANE"  # read by conftest.py, which deselects the other lane's tests
LANES = ("main", "multihost")
NO_TESTS_RAN = 5  # pytest's exit code when a lane selected nothing
OVER_BUDGET = 1
# The most one lane of the whole suite may take, in wall seconds: the slowest lane of the last fresh-clone run
# (2026-12-05: main 2,148 s, every local task forked from one import of TensorFlow) plus 40 % for CI's spread on 2
# cores (CI's runs have differed by that much within a week: 2,233 and 3,346 s); it was 3,900 s before
# the forks. Lower it as the suite comes down (the aim is 20 minutes); raise it only with the change that has to
# make the suite slower, saying why.
LANE_BUDGET_S = 3000


# Whole modules of loopback clusters that run in the multihost lane too: that lane mostly waits, and without them
# it ended some 15 minutes before the main lane (CI, 2026-11-27: 1,207 s against 2,143 s; with the first five of
# these moved, 1,507 s against 1,856 s; CI, 2026-12-03: main about 3,130 s against 2,880 s, so test_kafka_follow,
# some 160 s, moved too; here, 2026-12-03 15:11: main 3,012 s against 3,482 s, so test_publishing, some 230 s,
# moved back).
MOVED_TO_MULTIHOST_LANE = frozenset({"test_capacity_plan.py", "test_chaos.py",
                                     "test_recommender_cluster.py", "test_recommenders.py", "test_follow_deltas.py",
                                     "test_follow_retention.py",
                                     "test_upgrade_resume.py", "test_kafka_source.py", "test_kafka_follow.py"})


def in_lane(lane: str, has_multihost_marker: bool, module: str) -> bool:
    """Whether a test of `module` (a file name) belongs to `lane`: the multihost-marked tests and the moved modules
    to the multihost lane, every other to main."""
    side = has_multihost_marker or module in MOVED_TO_MULTIHOST_LANE
    return side == (lane == "multihost")


def over_budget(seconds: dict[str, float], budget_s: float = LANE_BUDGET_S) -> list[str]:
    """One line per lane of a whole suite that took longer than `budget_s`."""
    return [f"[lanes] the {lane} lane took {taken:.0f} s, over its budget of {budget_s:.0f} s (tests/lanes.py "
            "LANE_BUDGET_S): its --durations table above shows what grew" for lane, taken in seconds.items()
            if taken > budget_s]


def names_a_path(arguments: list[str]) -> bool:
    return any(not a.startswith("-") and Path(a.split("::")[0]).exists() for a in arguments)


def combined_exit_code(codes: list[int]) -> int:
    """0 when every lane passed or had nothing to run (and one ran); else the first failure's code."""
    failures = [code for code in codes if code not in (0, NO_TESTS_RAN)]
    if failures:
        return failures[0]
    return 0 if 0 in codes else NO_TESTS_RAN


def start_lane(lane: str, command: list[str], output=None) -> subprocess.Popen:
    """One pytest keeping only `lane`'s tests, in a session of its own (a Ctrl-C reaches it once, from here)."""
    cache = [] if "no:cacheprovider" in command else ["-o", f"cache_dir=.pytest_cache/{lane}-lane"]  # --lf per lane
    return subprocess.Popen([*command, *cache], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=output,
                            stderr=subprocess.STDOUT if output else None, env={**os.environ, LANE_VARIABLE: lane},
                            start_new_session=True)


class LaneClock:
    """Each lane's own time, from `started` to the moment it ends, noted by a thread per lane (a lane that ends
    while the other is still followed is not charged the other's time)."""

    def __init__(self, lanes: dict[str, subprocess.Popen], started: float):
        self.started, self.ended = started, {}
        self.threads = [threading.Thread(target=self._note, args=(lane, process), daemon=True)
                        for lane, process in lanes.items()]
        for thread in self.threads:
            thread.start()

    def _note(self, lane: str, process: subprocess.Popen) -> None:
        process.wait()
        self.ended[lane] = time.monotonic() - self.started

    def seconds(self) -> dict[str, float]:
        """Each lane's seconds, once every lane has ended."""
        for thread in self.threads:
            thread.join()
        return dict(self.ended)


def follow(path: Path, process: subprocess.Popen, poll_s: float = 1.0) -> None:
    """Copies the file to stdout as it grows, until `process` has ended and all it wrote is out."""
    with open(path, "rb") as source:
        while True:
            ended = process.poll() is not None
            sys.stdout.buffer.write(source.read())
            sys.stdout.flush()
            if ended:
                return
            time.sleep(poll_s)


def run_lanes(arguments: list[str]) -> int:
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "--durations=0", *arguments]
    side_log = Path(tempfile.mkstemp(prefix="pscluster-multihost-lane-", suffix=".log")[1])
    print(f"[lanes] the multihost tests run beside the others; their output ({side_log}) follows", flush=True)
    with open(side_log, "wb") as log:
        lanes = {"multihost": start_lane("multihost", command, log)}
    lanes["main"] = start_lane("main", command)

    def stop(signum, _frame):  # Ctrl-C or a CI cancel, passed on once: each pytest tears its clusters and hosts down
        for process in lanes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    clock = LaneClock(lanes, started)
    lanes["main"].wait()
    print(f"[lanes] main lane done in {time.monotonic() - started:.0f} s (exit {lanes['main'].returncode}); the "
          "multihost lane's output:", flush=True)
    follow(side_log, lanes["multihost"])
    seconds = clock.seconds()
    side_log.unlink()
    codes = [lanes[lane].returncode for lane in LANES]
    print(f"[lanes] total {time.monotonic() - started:.0f} s: main lane {seconds['main']:.0f} s (exit {codes[0]}), "
          f"multihost lane {seconds['multihost']:.0f} s (exit {codes[1]}); budget {LANE_BUDGET_S} s a lane",
          flush=True)
    slow = over_budget(seconds) if not arguments else []  # only the whole suite is held to the budget
    for line in slow:
        print(line, flush=True)
    code = combined_exit_code(codes)
    return OVER_BUDGET if slow and code == 0 else code


def main(arguments: list[str]) -> int:
    if names_a_path(arguments):
        os.execv(sys.executable, [sys.executable, "-m", "pytest", *arguments])
    return run_lanes(arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
