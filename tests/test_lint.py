"""The code passes ruff's pyflakes, pycodestyle and bugbear checks (unused names, long lines, likely bugs)."""

from __future__ import annotations

import subprocess

from clusterkit import ROOT


def test_ruff_finds_nothing():
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "ruff"), "check", "--output-format", "concise", str(ROOT)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
