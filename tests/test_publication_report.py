"""The publication bench tells progress lines inside a version, outside one and at a checkpoint apart, and times
each file from its first piece to its last."""

from bench.online.publication import during_versions, file_rates


def progress(clock: str, examples_per_s: int, caught_up: bool = False) -> str:
    said = "caught up" if caught_up else ""
    return f"[chief:0] {clock} follow | day 3 | 5.0 steps/s | {examples_per_s} ex/s | {said}"


def test_lines_are_split_by_version_and_checkpoint_and_a_line_after_a_wait_is_left_out():
    log = "\n".join([
        progress("01:00:02", 100),  # the first: its interval holds the start
        progress("01:00:04", 200),  # without
        progress("01:00:06", 300),  # its interval (4-6 s) holds the checkpoint written from 5 to 7 s
        "[chief:0] 01:00:07 checkpoint ckpt-0-100 (optimizer step 100): 3 files done, 0 not yet; written in 2.0 s",
        progress("01:00:10", 400),  # inside the version written from 8 to 13 s
        progress("01:00:12", 500, caught_up=True),  # inside; the next one counts a wait
        "[chief:0] 01:00:13 serving | version 3 | ckpt-0-100 | 167.0 MB in 5.0 s, 2 pieces trained meanwhile, "
        "exporter peak 1200 MB",
        progress("01:00:16", 600),  # after a caught-up line: left out
        progress("01:00:18", 700),  # without
        progress("01:00:20", 800),  # inside the checkpoint of the next version, written beside training
        "[chief:0] 01:00:21 checkpoint for-serving/ckpt-0-130 (optimizer step 129) for a serving version: 4 files "
        "done, 0 not yet; written in 2.0 s beside training",
    ])
    assert during_versions(log) == {"examples_per_s_during": 500, "examples_per_s_without": 450,
                                    "examples_per_s_at_checkpoint": 300, "lines": [3, 2, 1]}


def test_a_files_rate_counts_every_pause_from_its_first_piece_to_its_last():
    files = [{"examples": 4000, "started": 100.0, "done": 102.0},  # 2,000 ex/s
             {"examples": 4000, "started": 110.0, "done": 118.0},  # 500: a pause in the middle counts
             {"examples": 4000, "started": 120.0, "done": 121.0},  # 4,000
             {"examples": 0, "started": None, "done": None}]  # nothing trained: not timed
    assert file_rates({"follow": {"per_file": files}}) == {"file_examples_per_s": 2000, "files_timed": 3}
