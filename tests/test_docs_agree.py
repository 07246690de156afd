"""The docs agree with the code where a contradiction can be caught by reading: `--help` texts against the schema,
links and section references against the headings, Python names and project paths against the sources. Each check
is also shown to fail on a planted mistake. Pure: no TensorFlow, no cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import docsfigures
import docshelp
import docskit
import docslinks
import docsnames

README = docskit.ROOT / "README.md"
RUNNING = docskit.ROOT / "docs" / "running.md"


@pytest.fixture(scope="module")
def schema():
    return docskit.load_schema()


@pytest.fixture(scope="module")
def options(schema):
    return {(option.section, option.name) for option in docskit.options(schema)}


def pages() -> dict[Path, str]:
    """Every page's text as a reader uses it today: upgrading.md's tables of moves keep only what a name is now."""
    return {path: (_now_column(path.read_text()) if path.name == "upgrading.md" else path.read_text())
            for path in docskit.pages()}


def _now_column(text: str) -> str:
    """A table of what moved (`| 0.5 | 0.6 |`) without its first column: the names there are gone by design."""
    kept, in_moves = [], False
    for line in text.splitlines():
        if re.match(r"^\| \d+\.\d+ \| \d+\.\d+ \|$", line):
            in_moves = True
        elif not line.startswith("|"):
            in_moves = False
        kept.append("| " + line.split("|", 2)[2] if in_moves and line.count("|") >= 3 else line)
    return "\n".join(kept)


# ----- (a) --help against the schema ----------------------------------------------------------------------------
def test_every_help_text_names_options_that_exist_in_the_schemas_words(schema):
    helps = docshelp.help_texts()
    assert {"coordinator.train", "evaluator.sidecar", "roles.server", "roles.launch plan"} <= {h.where for h in helps}
    assert not docshelp.problems(helps, schema), "fix the help text (or the schema), so both say the same"


def test_the_help_check_fails_on_a_planted_contradiction(schema):
    planted = [
        docshelp.HelpText("sidecar", "Gives up when none arrives within evaluation.idle_timeout_s (exit 1)."),
        docshelp.HelpText("plan", "Takes the links from hosts.<name>.link_speed (no such key)."),
        docshelp.HelpText("train", "Trains.\n\nArgs:\n  epochs: epochs to train, at most 6.\n", "training"),
    ]
    found = docshelp.problems(planted, schema)
    assert len(found) == 3, found
    assert "evaluation.idle_timeout_s in other words" in found[0] and "hosts.link_speed" in found[1]
    assert "train --epochs: 'epochs to train, at most 6.'" in found[2]
    idle = next(o for o in docskit.options(schema) if o.path == "evaluation.idle_timeout_s").node["description"]
    fixed = [docshelp.HelpText("sidecar", f"Follows the run. When it gives up is evaluation.idle_timeout_s: {idle}."),
             docshelp.HelpText("plan", "Measures each link (or takes hosts.<name>.link_gbps)."),
             docshelp.HelpText("train", "Trains.\n\nArgs:\n  cluster: path of cluster.json.\n", "training")]
    assert docshelp.problems(fixed, schema) == []


def test_args_entries_are_read_with_their_continuation_lines():
    docstring = "Runs.\n\nArgs:\n  cluster: path of\n    cluster.json.\n  fresh: start over.\n\nMore text.\n"
    assert docshelp.args_lines(docstring) == {"cluster": "path of cluster.json.", "fresh": "start over."}


# ----- (b) links and references to headings ---------------------------------------------------------------------
def test_every_link_and_section_reference_leads_to_a_heading():
    texts = pages()
    assert not docslinks.broken_links(texts), "links that lead nowhere"
    assert not docslinks.broken_references(texts), "sections named in words that are no heading"
    assert not docslinks.broken_anchors_in(docslinks.code_sources()), "page.md#anchor in code or schema"


def test_the_link_checks_fail_on_planted_mistakes():
    texts = pages()
    texts[RUNNING] += ("\n\nSee [healing](#healing), [gone](#no-such-heading), [resume](training.md#resume) and "
                       "[gone too](training.md#no-such-heading), the README's Data section and \"Hosts\" below.\n")
    texts[README] += "\n\nSee [the hosts](docs/running.md#hosts) and [what is not](docs/running.md#no-such-part).\n"
    assert sorted(docslinks.broken_links(texts)) == [
        "README.md: docs/running.md#no-such-part (no heading #no-such-part in running.md)",
        "running.md: #no-such-heading (no heading #no-such-heading in running.md)",
        "running.md: training.md#no-such-heading (no heading #no-such-heading in training.md)"]
    assert docslinks.broken_references(texts) == ["running.md: README's Data section (no such heading in README.md)"]
    assert docslinks.broken_anchors_in({"x.py": '"see docs/running.md#healing and running.md#no-such-part"'}) == [
        "x.py: running.md#no-such-part"]


# ----- (c) Python names and paths -------------------------------------------------------------------------------
def test_every_python_name_and_project_path_the_docs_give_exists(options):
    problems = [f"{path.name}: {problem}" for path, text in pages().items()
                for problem in docsnames.page_problems(text, options)]
    assert not problems, "the docs name Python modules, attributes or files that do not exist"


def test_the_name_check_fails_on_planted_mistakes(options):
    planted = """Load with `custom_objects=models.recommenders.RawFeatures`, or:

```python
from models.compiled import CUSTOM_OBJECTS, build_compiled
from coordinator.nowhere import thing
import tensorflow_nowhere
from follower import Follower, Nobody
```

`models.export.export(model, directory, source)` and `tables/dynamic/serving.py` are gone;
`online/publish/follower.py` is there, and `launcher.logs_dir` and `cluster.json` are no modules.
"""
    assert sorted(docsnames.page_problems(planted, options)) == sorted([
        "models.recommenders.RawFeatures: models.recommenders.RawFeatures does not exist",
        "from coordinator.nowhere import thing: coordinator.nowhere.thing does not exist",
        "import tensorflow_nowhere: tensorflow_nowhere does not exist",
        "from follower import Follower, Nobody: follower.Nobody does not exist",
        "models.export.export: models.export.export does not exist",
        "tables/dynamic/serving.py: no such file or folder"])


def test_exports_are_loaded_with_the_custom_objects_the_evaluator_uses():
    assert docsnames.loading_objects() == "models.compiled.CUSTOM_OBJECTS"
    others = {path.name: docsnames.other_loading_objects(text) for path, text in pages().items()}
    assert not {name: found for name, found in others.items() if found}, "a model loaded with these may lack a layer"
    planted = "load with `custom_objects=models.recommenders.CUSTOM_OBJECTS`; from x.y import a, CUSTOM_OBJECTS"
    assert docsnames.other_loading_objects(planted) == ["models.recommenders.CUSTOM_OBJECTS",
                                                        "x.y.CUSTOM_OBJECTS"]


def test_names_are_followed_through_classes_and_re_exports():
    assert docsnames.resolves("models.compiled.CUSTOM_OBJECTS")
    assert docsnames.resolves("models.compiled.RawFeatures")  # imported there from models.raw_export
    assert docsnames.resolves("online.publish.follower.Follower.catch_up")
    assert not docsnames.resolves("online.publish.follower.Follower.catch_down")
    assert docsnames.resolves("online.publish")  # a package


# ----- (d) docs that cannot go stale: figures on one page, one value per quantity, files that exist ----------------
def test_no_user_page_carries_a_measured_figure():
    found = {path.name: docsfigures.measured_figures(path.read_text()) for path in docsfigures.user_pages()}
    found = {name: figures for name, figures in found.items() if figures}
    assert not found, ("a run's measured figures belong in docs/performance.md or bench/RESULTS*.md, with machine "
                       f"and date; say what is bounded here and link there: {found}")


def test_the_figure_check_fails_on_planted_figures_and_passes_bounds():
    planted = {
        "At 16 MB the chief peaked at 703 MB.": "'703 MB'",
        "Files trained at 0.85x a run without versions.": "'0.85x'",
        "A settled checkpoint takes 12.5 s at 26 M rows.": "'12.5 s'",
        "Freshness was p95 45 s.": "'p95 45 s'",
        "The model reached AUC 0.6544 on the validation split.": "'AUC 0.6544'",
        "Measured on a 2-core machine on 2026-11-29, alone.": "'2026-11-29'",
        "On tc-shaped links 9 of 9 predictions came within ±25 % of the measured steps/s.": "a tally",
        "A dense optimizer was 80× slower at 32 M rows.": "'80× slower'",
        "The host shows as lost 6-13 s after its link goes down.": "'6-13 s'",
        "Training resumed at 21.4 steps/s.": "'21.4 steps/s'",
    }
    for line, figure in planted.items():
        found = docsfigures.measured_figures(line)
        assert len(found) == 1 and figure in found[0], (line, found)
    bounds = ("The chunk is `training.stream_chunk_mb` [16]; each calibration run takes at most 300 s.\n\n"
              "A file lands every 20 s; a ps keeps a reserve of 256 MiB, and TensorFlow's keep-alive is 600 s.\n\n"
              "Checkpoints stay within 10 % of the aim, up to 1.5 GiB; the 1 TB set's tables hold 15.5 GiB.\n\n"
              "Plan 1 to 2x the ps count on 28x28 images:\n\n    [chief:0] measured 703 MB on 2026-11-29, 0.85x\n")
    assert docsfigures.measured_figures(bounds) == []


def test_the_performance_page_gives_each_figure_its_machine_and_date():
    text = (docskit.ROOT / "docs" / "performance.md").read_text()
    assert "2 cores (AMD EPYC)" in text.split("\n## ")[0], "the performance page names its machine first"
    undated = [section.splitlines()[0] for section in text.split("\n## ")[1:]
               if not section.startswith("Measuring again") and not docsfigures.DATE.search(section)]
    assert not undated, f"performance.md: give these sections the date of their runs: {undated}"


def test_a_quantity_is_given_once_or_everywhere_alike(schema):
    texts = pages()
    assert not docsfigures.wrong_defaults(texts, schema), "a default stated in prose is not the schema's"
    assert not docsfigures.quantities_given_twice(texts)
    assert len(sum((docsfigures.stated_defaults(text, schema) for text in texts.values()), [])) > 30


def test_the_quantity_checks_fail_on_planted_contradictions(schema):
    texts = pages()
    texts[RUNNING] += ("\n\n`launcher.max_restarts` [5] restarts; `keep_checkpoints` (default 4); "
                       "`training.stream_chunk_mb` defaults to 64.\n\n| option (`training.`) | default | for |\n"
                       "| --- | --- | --- |\n| `piece_mb` | `32` | pieces |\n")
    texts[README] += "\n\nThe whole suite takes about 31 minutes of wall time.\n"
    assert sorted(docsfigures.wrong_defaults(texts, schema)) == [
        "running.md: launcher.max_restarts [5], but its default is 3",
        "running.md: training.keep_checkpoints [4], but its default is 3",
        "running.md: training.piece_mb [32], but its default is 16.0",
        "running.md: training.stream_chunk_mb [64], but its default is 16.0"]
    twice = docsfigures.quantities_given_twice(texts)
    assert len(twice) == 1 and "README.md: about 31 minutes" in twice[0] and "tests.md" in twice[0]


def test_every_file_a_page_names_is_one_the_project_ships():
    shipped = docsfigures.shipped_files()
    problems = [problem for path, text in pages().items() if path.name not in docsfigures.OLD_NAMES_PAGES
                for problem in docsfigures.unshipped_files(text, path, shipped)]
    assert not problems, "the docs name files the project does not have (or add a file it writes to WRITTEN)"


def test_the_file_check_fails_on_planted_names():
    shipped = docsfigures.shipped_files()
    planted = ("TensorFlow copies a shard read whole (DESIGN.md fact 36); see `bench/nowhere.py`, "
               "[the notes](../bench/RESULTS-nowhere.md) and `nowhere.sh`.\n\n"
               "Fine: `tables/streaming/checkpoint_io.py`, `run.sh`, `summary.json`, `mydata/clicks.py`, "
               "[results](../bench/RESULTS-memory.md) and `RESULTS-capacity.md`.\n")
    assert docsfigures.unshipped_files(planted, RUNNING, shipped) == [
        "running.md: ../bench/RESULTS-nowhere.md: no such file in the project",
        "running.md: DESIGN.md: no such file in the project",
        "running.md: bench/nowhere.py: no such file in the project",
        "running.md: nowhere.sh: no such file in the project"]


def test_the_resume_section_names_every_option_that_refuses_a_resume():
    from cluster.same_run import WHAT_IS_TRAINED

    text = (docskit.ROOT / "docs" / "training.md").read_text()
    section = text.split("\n## Resume\n", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in WHAT_IS_TRAINED if f"`{name}`" not in section]
    assert not missing, f"training.md#resume: name what refuses a resume (cluster/same_run.py): {missing}"


def test_the_tests_page_names_every_system_package_the_suite_installs():
    script = (docskit.ROOT / "tests" / "system_packages.sh").read_text()
    needs = script.split('needs="', 1)[1].split('"', 1)[0]
    packages = {line.split()[1] for line in needs.splitlines() if len(line.split()) == 2}
    page = (docskit.ROOT / "docs" / "tests.md").read_text()
    missing = sorted(package for package in packages if package not in page)
    assert len(packages) > 5 and not missing, f"docs/tests.md: name these Debian packages: {missing}"


def test_the_readers_table_names_every_step_a_kill_test_stops_at():
    from online.follow.kill_points import STEPS

    text = (docskit.ROOT / "docs" / "online-training.md").read_text()
    section = text.split("\n## What a reader may rely on\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    missing = [step for step in STEPS if not any(f"(`{step}`)" in row for row in rows)]
    assert not missing, f"online-training.md#what-a-reader-may-rely-on: a row for each named step: {missing}"
