"""The shaped-link bench's table names the term of a worker's step that a missed prediction got wrong."""

from bench.workload.shaped_links import off


def row(measured_steps_per_s: float, predicted_steps_per_s: float, workers: int = 1, **parts_ms) -> dict:
    parts = {"compute": 6.5, "transfer": 6.4, "fixed": 5.0, "queued": 0.0, **parts_ms}
    return {"error": predicted_steps_per_s / measured_steps_per_s - 1, "bound": "worker links", "workers": workers,
            "measured_steps_per_s": measured_steps_per_s, "parts_ms": parts, "ceilings": {}}


def test_a_prediction_within_the_aim_needs_no_word():
    assert off(row(measured_steps_per_s=60.0, predicted_steps_per_s=55.8)) == ""


def test_a_step_faster_than_its_compute_and_transfer_blames_the_transfer():
    # DLRM alone at 1 Gbit/s: 12.4 ms measured against 6.5 + 6.4 + 5.0
    said = off(row(measured_steps_per_s=80.64, predicted_steps_per_s=55.77))
    assert said.startswith("the transfer: 0.9 of its 6.4 ms showed") and "12.4 ms measured" in said


def test_a_step_faster_only_by_its_queue_blames_the_queue():
    said = off(row(measured_steps_per_s=17.9, predicted_steps_per_s=12.87, workers=2, compute=10.9, transfer=99.6,
                   fixed=0.1, queued=44.9))
    assert said.startswith("the queue at the ps links: 1.1 of its 44.9 ms showed")


def test_a_step_slower_than_its_terms_names_the_wait_left_out():
    said = off(row(measured_steps_per_s=8.96, predicted_steps_per_s=13.87, workers=3, compute=23.4, transfer=185.4,
                   fixed=7.5))
    assert said.startswith("a wait the plan leaves out: the step took 118.5 ms more than its terms")


def test_a_measured_epoch_gives_every_worker_two_calls_at_least():
    from bench.workload.shaped_links import epoch_steps

    assert epoch_steps(1.07, workers=3, steps_per_execution=10) == 60  # not 10: one call, one worker of three
    assert epoch_steps(40.0, workers=3, steps_per_execution=10) == 200  # about RUN_SECONDS of steps
    assert epoch_steps(1000.0, workers=1, steps_per_execution=10) == 600
