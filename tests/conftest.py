"""Shared fixtures: every test's files live under pytest's temporary directory, and nothing may outlive a test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusterkit import processes_mentioning  # noqa: E402


@pytest.fixture(autouse=True)
def no_leftover_processes(tmp_path):
    """Fails the test that leaves a process behind which was started from its temporary directory."""
    yield
    leftovers = processes_mentioning(str(tmp_path))
    assert not leftovers, f"processes left running: {leftovers}"
