"""The recommender fields of cluster.json's training: defaults, one line per mistake, and the model-data fit."""

from __future__ import annotations

import pytest

from cluster.crosschecks import best_metric_problems
from cluster.evaluation_options import EvaluationOptions
from cluster.training_parse import parse_training_options
from common.errors import UserError


def test_a_recommender_gets_click_loss_and_metrics_and_val_auc_is_a_best_metric():
    options = parse_training_options({"model": "dlrm", "dataset": "synthetic_criteo", "table_rows": 64})
    assert (options.loss, options.metrics, options.table_rows) == ("binary_crossentropy", ("auc", "log_loss"), 64)
    assert best_metric_problems(options, EvaluationOptions(best_metric="val_auc", best_mode="max")) == []
    assert best_metric_problems(options, EvaluationOptions(best_metric="val_log_loss", best_mode="min")) == []


@pytest.mark.parametrize("raw, expected", [
    ({"model": "dlrm"}, "is not click data"),
    ({"dataset": "synthetic_criteo"}, "cannot read synthetic_criteo"),
    ({"model": "mlp", "loss": "binary_crossentropy", "metrics": ["auc"]}, "needs click labels"),
    ({"model": "wide_deep", "dataset": "criteo", "metrics": ["accuracy"]}, "use some of auc, log_loss"),
    ({"model": "dlrm", "dataset": "criteo", "embedding_optimizer": "adam"}, "is not a sparse table optimizer"),
    ({"model": "dlrm", "dataset": "criteo", "table_rows": [1, 2]}, "gives 2 sizes for 26 categorical features"),
    ({"model": "dlrm", "dataset": "criteo", "top_mlp": []}, "non-empty list of layer widths"),
])
def test_each_recommender_mistake_is_one_line(raw, expected):
    with pytest.raises(UserError) as raised:
        parse_training_options(raw)
    assert len(str(raised.value).splitlines()) == 1 and expected in str(raised.value)
