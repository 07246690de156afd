"""One release number: pyproject.toml's, at the head of CHANGELOG.md and of docs/upgrading.md, and in each summary."""

from __future__ import annotations

import re

from clusterkit import ROOT
from cluster.run_files import RunFiles, RunSummary, read_summary, write_summary
from common.version import VERSION


def test_the_version_is_pyprojects_and_a_pep440_release():
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", VERSION), VERSION


def test_changelog_heads_with_this_release_and_upgrading_says_how_to_reach_it():
    release = VERSION.split(".dev")[0]
    first = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert first == release, f"CHANGELOG.md's newest entry is {first}; pyproject.toml says {VERSION}"
    major_minor = ".".join(release.split(".")[:2])
    assert re.search(rf"^## From \S+ to {re.escape(major_minor)}$", (ROOT / "docs" / "upgrading.md").read_text(),
                     re.M), f"docs/upgrading.md has no section 'From ... to {major_minor}'"


def test_a_summary_says_which_release_wrote_it(tmp_path):
    files = RunFiles(tmp_path)
    files.output.mkdir(parents=True, exist_ok=True)
    write_summary(files, RunSummary(status="complete", epochs=1))
    assert read_summary(files).version == VERSION
