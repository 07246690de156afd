"""The churn switch as logic: a delta over half its version's weights, and over the floor, asks for a version."""

from __future__ import annotations

import logging

from online.follow.churn import ChurnSwitch, Oversized, size_text


def _version(tmp_path, weights: int):
    (tmp_path / "7" / "variables").mkdir(parents=True)
    (tmp_path / "7" / "variables" / "variables.data-00000-of-00001").write_bytes(b"x" * weights)
    (tmp_path / "7" / "saved_model.pb").write_bytes(b"x" * 10 * weights)  # the graph is not weights
    return tmp_path / "7"


def test_half_a_versions_weights_is_the_limit_unless_the_floor_is_higher(tmp_path):
    switch = ChurnSwitch(0, logging.getLogger("churn"))
    assert not switch.too_large(10**12)  # no version yet: every delta is written
    switch.based_on(_version(tmp_path, 1000))
    assert switch.version_bytes == 1000
    assert not switch.too_large(500) and switch.too_large(501)
    floored = ChurnSwitch(0.01, logging.getLogger("churn"))  # 10,000 bytes
    floored.based_on(tmp_path / "7")
    assert not floored.too_large(9_999) and floored.too_large(10_001)


def test_a_replaced_delta_wants_a_version_said_once_and_a_failed_version_lets_every_delta_through(tmp_path, caplog):
    switch = ChurnSwitch(0, logging.getLogger("churn"))
    switch.based_on(_version(tmp_path, 1000))
    with caplog.at_level(logging.INFO, "churn"):
        switch.replace(Oversized(7, 1, 900, 500))
        switch.replace(Oversized(7, 2, 950, 500))
    assert switch.version_wanted
    assert len([r for r in caplog.records if "a version is written instead" in r.getMessage()]) == 1
    switch.release()  # that version failed
    assert not switch.version_wanted and not switch.too_large(10**12)
    switch.based_on(tmp_path / "7")  # the next one is published
    assert not switch.version_wanted and switch.too_large(501)
    switch.based_on(tmp_path / "gone")  # a folder that cannot be read: every delta is written
    assert not switch.too_large(10**12)


def test_sizes_read_as_a_person_reads_them():
    assert (size_text(999_999), size_text(1_000_000), size_text(140_200_000)) == ("1000.0 KB", "1.0 MB", "140.2 MB")
