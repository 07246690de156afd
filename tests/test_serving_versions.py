"""Serving versions on disk: increasing integers, written under a hidden name and renamed, the newest kept."""

from __future__ import annotations

import json

from coordinator.publish.versions import EXTRA, TRAINED_THROUGH, ServingVersions


def write_one(versions: ServingVersions) -> int:
    number = versions.next_number()
    extra = versions.writing(number) / EXTRA
    extra.mkdir(parents=True)
    (extra / TRAINED_THROUGH).write_text(json.dumps({"version": number, "optimizer_step": 10 * number}))
    versions.publish(number)
    return number


def test_versions_increase_past_pruned_ones_and_a_half_written_one_is_cleared(tmp_path):
    (tmp_path / ".writing-9").mkdir(parents=True)  # a write that died midway
    versions = ServingVersions(tmp_path, keep=2)
    assert not (tmp_path / ".writing-9").exists()
    assert versions.newest_trained_through() is None
    numbers = [write_one(versions) for _ in range(3)]
    assert (numbers, versions.versions()) == ([1, 2, 3], [2, 3])  # the oldest pruned
    assert versions.newest_trained_through() == {"version": 3, "optimizer_step": 30}
    assert write_one(versions) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]
