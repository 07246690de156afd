"""The ways a follow-mode run publishes (online/follow/publication_mode.py), read from the options (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from cluster.training_options import TrainingOptions
from online.follow.publication_mode import MODES, PublicationMode


@pytest.mark.parametrize("changes, expected", [
    ({}, "beside"),
    ({"serving_checkpoint": "settled"}, "settled"),
    ({"serving_delta_every_s": 5.0}, "deltas"),
])
def test_the_options_pick_one_way(changes, expected):
    options = dataclasses.replace(TrainingOptions(), **changes)
    assert PublicationMode.of(options) is MODES[expected]


def test_a_version_deltas_build_on_is_its_own_checkpoint_with_slots_and_never_a_periodic_one():
    deltas = MODES["deltas"]
    assert deltas.own_checkpoint and deltas.with_slots and not deltas.shares_periodic
    assert not any(mode.deltas for name, mode in MODES.items() if name != "deltas")
