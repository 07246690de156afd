"""Follow mode's options in cluster.json: defaults, one line per mistake, and what follow mode refuses."""

from __future__ import annotations

import pytest

from cluster.evaluation_options import parse_evaluation_options
from cluster.same_run import differences
from cluster.training_options import TrainingOptions
from cluster.training_parse import parse_training_options
from common.errors import UserError

CLICKS = {"model": "dlrm", "dataset": "criteo", "data_dir": "clicks", "follow_data": True}


def test_follow_mode_takes_its_defaults_and_a_fixed_run_is_untouched():
    options = parse_training_options(CLICKS)
    assert (options.follow_pattern, options.data_poll_s, options.stop_when_idle_s, options.piece_mb,
            options.serving_export_every_s, options.keep_serving_versions, options.straggler_after_s) == (
        "*", 10.0, 0.0, 16.0, 600.0, 5, 20.0)
    assert (options.settle_s, options.unfinished_after_s, options.backlog_order, options.max_bad_fraction,
            options.serving_checkpoint) == (30.0, 600.0, "oldest", 0.5, "beside")
    assert not parse_training_options({}).follow_data
    assert parse_evaluation_options({}).progressive_examples == 10_000


@pytest.mark.parametrize("raw, expected", [
    ({**CLICKS, "dataset": "synthetic_criteo"}, "synthetic_criteo is a fixed data set"),
    ({"dataset": "digits", "follow_data": True}, "use dataset criteo or tfrecord"),
    ({**CLICKS, "strategy": "multi_worker_mirrored"}, "multi_worker_mirrored cannot do"),
    ({**CLICKS, "criteo_validation": 0.1}, "holds data back"),
    ({**CLICKS, "steps_per_epoch": 100}, "follow mode has no epochs"),
    ({"dataset": "tfrecord", "data_dir": "d", "follow_data": True}, "tfrecord_num_classes = None: cannot be counted"),
    ({**CLICKS, "follow_pattern": "../elsewhere/*"}, "must be a glob relative to data_dir"),
    ({**CLICKS, "follow_pattern": "/abs/*"}, "must be a glob relative to data_dir"),
    ({**CLICKS, "data_poll_s": 0}, "data_poll_s = 0: must be a positive number of seconds"),
    ({**CLICKS, "stop_when_idle_s": -1}, "must be 0 or a positive number of seconds"),
    ({**CLICKS, "piece_mb": 0.001}, "piece_mb = 0.001: must be a number of MB from 0.01"),
    ({**CLICKS, "keep_serving_versions": 0}, "must be an integer from 1"),
    ({**CLICKS, "straggler_after_s": 0}, "straggler_after_s = 0: must be a positive number of seconds"),
    ({**CLICKS, "follow_data": "yes"}, "must be true or false"),
    ({**CLICKS, "settle_s": -1}, "settle_s = -1: must be 0 or a positive number of seconds"),
    ({**CLICKS, "unfinished_after_s": "1h"}, "unfinished_after_s = '1h': must be 0 or a positive number"),
    ({**CLICKS, "backlog_order": "fifo"}, "backlog_order = 'fifo': must be one of oldest, newest"),
    ({**CLICKS, "max_bad_fraction": 1.5}, "max_bad_fraction = 1.5: must be a fraction from 0 to 1"),
    ({**CLICKS, "serving_checkpoint": "drained"}, "serving_checkpoint = 'drained': must be one of beside, settled"),
    ({**CLICKS, "serving_checkpoint": "settled", "serving_delta_every_s": 10}, "cannot be a delta's base"),
])
def test_each_follow_mistake_is_one_line(raw, expected):
    with pytest.raises(UserError) as raised:
        parse_training_options(raw)
    assert len(str(raised.value).splitlines()) == 1 and expected in str(raised.value)


def test_a_fixed_run_does_not_resume_as_a_followed_one():
    assert differences({"follow_data": False}, TrainingOptions(follow_data=True)) == ["follow_data: False → True"]
