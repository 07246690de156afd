"""The dynamic embedding tables' training fields (kind, capacity, admission, expiry) and the synthetic click data's
drift (ids born and dying): names, defaults and checks, per field and across fields."""

from __future__ import annotations

from typing import Any, Mapping

from cluster.recommender_options import RECOMMENDER_MODELS
from cluster.strategies import StrategyName
from common.errors import Problem
from common.fields import INT32_MAX, MAX_SECONDS, Check, int_in, is_number, positive_int

EMBEDDING_KINDS = ("hashed", "dynamic")
DEFAULT_KIND, DEFAULT_CAPACITY, DEFAULT_ADMIT_AFTER, DEFAULT_EXPIRE_AFTER_STEPS = "hashed", 1_000_000, 1, 0
DEFAULT_EXPIRE_AFTER_S, DEFAULT_ADMIT_WINDOW_STEPS = 0, 100
ADMISSION_HALVINGS = ("by_load", "by_window")  # when the admission sketch halves its counts (tables/dynamic/sketch.py)
DEFAULT_ADMISSION_HALVING = "by_load"
DEFAULT_NEW_IDS, DEFAULT_ID_LIFETIME, DEFAULT_PERIOD_EXAMPLES = 0, 8, 4096
DYNAMIC_STRATEGIES = (StrategyName.PARAMETER_SERVER, StrategyName.ONE_DEVICE)  # one index per table, not mirrored
MAX_NEW_IDS = 1 << 30


CHECKS = {
    "embedding_kind": Check(lambda v: v in EMBEDDING_KINDS, "unknown kind of embedding table",
                            "use hashed (ids share rows modulo table_rows) or dynamic (a row of its own per id)"),
    "embedding_capacity": Check(positive_int, f"must be an integer from 1 to {INT32_MAX}",
                                "use e.g. 1000000 (rows in all, spread evenly over the ps)"),
    "admit_after": Check(positive_int, f"must be an integer from 1 to {INT32_MAX}",
                         "use 1 (an id gets a row at its first sighting) or e.g. 2"),
    "admit_window_steps": Check(positive_int, f"must be an integer from 1 to {INT32_MAX}",
                                "use e.g. 100 (an id is admitted at its admit_after-th sighting within so many steps)"),
    "admission_halving": Check(lambda v: v in ADMISSION_HALVINGS, "unknown way of halving the admission counts",
                               "use by_load (also whenever a quarter of the sketch's width of sightings came in) or "
                               "by_window (only at each window's start)"),
    "expire_after_steps": Check(int_in(0, INT32_MAX), f"must be 0 (never) or a number of steps up to {INT32_MAX}",
                                "use 0, or e.g. 100000"),
    "expire_after_s": Check(lambda v: is_number(v) and 0 <= v <= MAX_SECONDS,
                            f"must be 0 (never) or a number of seconds up to {MAX_SECONDS}",
                            "use 0, or e.g. 86400 (a day)"),
    "synthetic_new_ids": Check(int_in(0, MAX_NEW_IDS), f"must be an integer from 0 to {MAX_NEW_IDS}",
                               "use 0 (a fixed vocabulary of table_rows values) or e.g. 1000"),
    "synthetic_id_lifetime": Check(positive_int, f"must be an integer from 1 to {INT32_MAX}", "use e.g. 8"),
    "synthetic_period_examples": Check(positive_int, f"must be an integer from 1 to {INT32_MAX}", "use e.g. 4096"),
}


def cross_field_problems(options, prefix: str) -> list[Problem]:
    """Dynamic tables need a recommender and one index per table; their options mean nothing to hashed tables;
    drift is the synthetic click data's."""
    if options.embedding_kind == "dynamic":
        problems = _dynamic_problems(options, prefix)
    else:
        problems = [Problem(f"{prefix}{name}", getattr(options, name), "applies only to dynamic tables",
                            f'set "embedding_kind": "dynamic", or leave {name} out')
                    for name, default in (("embedding_capacity", DEFAULT_CAPACITY),
                                          ("admit_after", DEFAULT_ADMIT_AFTER),
                                          ("admit_window_steps", DEFAULT_ADMIT_WINDOW_STEPS),
                                          ("admission_halving", DEFAULT_ADMISSION_HALVING),
                                          ("expire_after_steps", DEFAULT_EXPIRE_AFTER_STEPS),
                                          ("expire_after_s", DEFAULT_EXPIRE_AFTER_S))
                    if getattr(options, name) != default]
    if options.synthetic_new_ids and options.dataset != "synthetic_criteo":
        problems.append(Problem(f"{prefix}synthetic_new_ids", options.synthetic_new_ids, "makes ids born and dying "
                                f"in synthetic_criteo data, not in {options.dataset}",
                                'use "dataset": "synthetic_criteo", or leave synthetic_new_ids out'))
    return problems


def _dynamic_problems(options, prefix: str) -> list[Problem]:
    if options.model not in RECOMMENDER_MODELS:
        return [Problem(f"{prefix}embedding_kind", "dynamic", f"needs a model with embedding tables, not "
                        f"{options.model}", f"use one of {', '.join(RECOMMENDER_MODELS)}, or hashed")]
    if options.strategy not in DYNAMIC_STRATEGIES:
        return [Problem(f"{prefix}embedding_kind", "dynamic", f"keeps one index per table, which {options.strategy} "
                        "would copy to every replica (each would give ids rows of its own)",
                        "use parameter_server (or one_device for a single process), or hashed tables")]
    if options.admit_window_steps != DEFAULT_ADMIT_WINDOW_STEPS and options.admit_after == 1:
        return [Problem(f"{prefix}admit_window_steps", options.admit_window_steps, "counts sightings for admit_after "
                        "above 1, and admit_after is 1 (every id gets a row at its first sighting)",
                        "set admit_after to e.g. 2, or leave admit_window_steps out")]
    if options.expire_after_steps and options.expire_after_s:
        return [Problem(f"{prefix}expire_after_s", options.expire_after_s, "is given with expire_after_steps "
                        f"({options.expire_after_steps}): a row expires by steps or by seconds, not both",
                        "leave one of them out")]
    return []


def ps_count_problems(training, jobs: Mapping[str, Any]) -> list[Problem]:
    """Every ps must get at least one row of a dynamic table."""
    ps = len(jobs.get("ps", ())) if training.strategy == StrategyName.PARAMETER_SERVER else 0
    if training.embedding_kind != "dynamic" or training.embedding_capacity >= ps:
        return []
    return [Problem("training.embedding_capacity", training.embedding_capacity, f"is smaller than the number of ps "
                    f"({ps}): the rows are spread evenly over them", f"use at least {ps}, e.g. 1000000")]
