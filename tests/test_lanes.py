"""tests/lanes.py, which runs the multi-host tests and the online-training ones beside the others: who goes where,
and what the run returns."""

from __future__ import annotations

import os
import subprocess
import time

import lanes
from clusterkit import PYTHON, ROOT


def test_the_multihost_tests_have_a_lane_of_their_own_and_every_test_has_exactly_one():
    assert lanes.LANES == ("main", "online", "multihost", "healing")
    assert [lanes.in_lane(lane, True, "test_slurm.py") for lane in lanes.LANES] == [False, False, True, False]
    assert [lanes.in_lane(lane, False, "test_config.py") for lane in lanes.LANES] == [True, False, False, False]
    assert [lanes.in_lane(lane, False, "test_chaos.py") for lane in lanes.LANES] == [False, False, False, True]
    assert [lanes.in_lane(lane, False, "test_follow.py") for lane in lanes.LANES] == [False, True, False, False]
    assert [lanes.in_lane(lane, False, "test_healing.py") for lane in lanes.LANES] == [False, False, False, True]
    assert [lanes.in_lane(lane, True, "test_capacity_plan.py") for lane in lanes.LANES] == [False, False, True, False]
    assert not lanes.ONLINE_LANE & lanes.HEALING_LANE  # no module named twice


def test_a_lane_collects_every_module_its_tests_can_be_in_and_the_online_and_healing_lanes_only_those():
    modules = [path.name for path in (ROOT / "tests").glob("test_*.py")]
    for lane in lanes.LANES:
        for module in modules:
            if lanes.in_lane(lane, False, module) or lanes.in_lane(lane, True, module):
                assert lanes.may_hold_tests_of(lane, module), (lane, module)
    assert not lanes.may_hold_tests_of("online", "test_config.py") and not lanes.may_hold_tests_of("healing",
                                                                                                  "test_follow.py")
    assert not lanes.may_hold_tests_of("main", "test_healing.py") and lanes.may_hold_tests_of("multihost",
                                                                                             "test_config.py")


def test_the_multihost_lane_and_what_it_starts_run_at_its_niceness_and_the_others_as_they_are(tmp_path):
    shown = {}
    for lane in ("multihost", "main"):
        with open(tmp_path / lane, "wb") as out:
            started = lanes.start_lane(lane, [PYTHON, "-c", "import os; print(os.nice(0))"], out)
            assert started.wait(timeout=60) == 0
        shown[lane] = int((tmp_path / lane).read_text().split()[-1])
    base = os.nice(0)
    wanted = base + lanes.LANE_NICENESS["multihost"] if os.geteuid() == 0 else base  # raising it takes root
    assert shown == {"multihost": wanted, "main": base}, shown


def test_modules_that_mostly_wait_run_first_and_those_on_the_shared_servers_last():
    modules = [("test_slurm.py", False), ("test_capacity_plan.py", True), ("test_slurm_endings.py", False),
               ("test_kubernetes_pods.py", False)]
    ordered = sorted(modules, key=lambda module: lanes.run_order(*module))
    assert [name for name, _ in ordered] == ["test_slurm_endings.py", "test_slurm.py", "test_kubernetes_pods.py",
                                             "test_capacity_plan.py"]


def test_a_lane_with_nothing_to_run_does_not_fail_the_run_but_any_failure_does():
    assert lanes.combined_exit_code([0, lanes.NO_TESTS_RAN]) == 0  # e.g. `-m multihost`: main has nothing
    assert lanes.combined_exit_code([lanes.NO_TESTS_RAN, 0]) == 0
    assert lanes.combined_exit_code([lanes.NO_TESTS_RAN, lanes.NO_TESTS_RAN]) == lanes.NO_TESTS_RAN
    assert lanes.combined_exit_code([0, 1]) == 1 and lanes.combined_exit_code([2, 0]) == 2


def test_a_lane_over_its_budget_is_named_and_one_within_it_is_not():
    late = lanes.over_budget({"main": lanes.LANE_BUDGET_S + 1, "multihost": lanes.LANE_BUDGET_S - 1})
    assert len(late) == 1 and "the main lane took" in late[0] and "LANE_BUDGET_S" in late[0]
    assert lanes.over_budget({"main": 10.0, "multihost": 20.0}) == []


def test_the_budget_grows_with_the_machines_slowdown_by_the_probes_median_within_its_bounds():
    reference = lanes.REFERENCE_PROBE_S
    assert lanes.slowdown(reference * 1.5) == 1.5
    assert lanes.slowdown(reference / 2) == 1.0  # a faster machine keeps the budget as written
    assert lanes.slowdown(reference * 9) == lanes.MAX_SLOWDOWN
    assert lanes.slowdown(0.0) == 1.0  # a run too short to probe
    late = lanes.over_budget({"main": lanes.LANE_BUDGET_S + 1}, lanes.LANE_BUDGET_S * 1.5)
    assert late == []


def test_the_speed_gauge_times_its_probe_while_it_runs():
    gauge = lanes.SpeedGauge(every_s=0.05)
    deadline = time.monotonic() + 30
    while len(gauge.probes) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    median = gauge.stop()
    assert len(gauge.probes) >= 3 and all(0 < probe < 1 for probe in gauge.probes), gauge.probes
    assert min(gauge.probes) <= median <= max(gauge.probes) and not gauge.thread.is_alive()
    spiked = lanes.SpeedGauge(every_s=3600)
    spiked.probes.extend([0.015, 0.014, 0.09])
    assert spiked.stop() == 0.015  # the median, not a spike
    assert lanes.SpeedGauge(every_s=3600).stop() == 0.0  # a run too short to probe


def test_each_lane_is_timed_to_its_own_end():
    """A lane that ends first is charged its own seconds, not those of the lane still running (CI printed the
    main lane's time for both)."""
    started = time.monotonic()
    short = subprocess.Popen([PYTHON, "-c", "pass"])
    long = subprocess.Popen([PYTHON, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)  # until closed
    clock = lanes.LaneClock({"multihost": short, "main": long}, started)
    deadline = time.monotonic() + 60
    while "multihost" not in clock.ended:  # the long lane ends 1 s after the short one was noted, however slow
        assert time.monotonic() < deadline and long.poll() is None
        time.sleep(0.05)
    time.sleep(1.0)
    long.stdin.close()
    seconds = clock.seconds()
    assert seconds["main"] - seconds["multihost"] >= 1.0, seconds


def test_a_path_runs_one_plain_pytest_and_options_alone_run_the_lanes():
    assert lanes.names_a_path(["tests/test_config.py"]) and lanes.names_a_path(["-q", "tests"])
    assert lanes.names_a_path(["tests/test_lanes.py::test_each_lane_collects_its_own_tests_from_the_same_options"])
    assert not lanes.names_a_path(["-k", "reload", "-m", "multihost", "-x"])


def test_each_lane_collects_its_own_tests_from_the_same_options():
    """Every lane collects with the options given (here: three modules' tests, and no path); each keeps its own."""
    result = subprocess.run([PYTHON, str(ROOT / "tests" / "lanes.py"), "--collect-only", "-q", "-p",
                             "no:cacheprovider", "-o",
                             "python_files=test_capacity_plan.py test_lanes.py test_publishing.py"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    main, rest = result.stdout.split("[lanes] main lane done")
    online, rest = rest.split("[lanes] the multihost lane's output")
    multihost, healing = rest.split("[lanes] the healing lane's output")
    assert "test_capacity_plan.py::test_plan_measures_a_shaped_link_between_hosts" in multihost, result.stdout
    assert "test_capacity_plan.py::test_plan_on_paper_resnet50_on_10gbe" in healing, result.stdout  # not marked
    assert "test_publishing.py::" in online and "test_publishing.py" not in main + multihost, result.stdout
    assert "test_capacity_plan.py" not in online + main and "tests/test_lanes.py::" in main, result.stdout
    assert "test_plan_on_paper" not in multihost and "test_plan_measures" not in healing, result.stdout
    assert "test_lanes.py" not in online + multihost + healing and "[lanes] total " in healing, result.stdout
