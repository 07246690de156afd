"""The docs agree with the code where a contradiction can be caught by reading: `--help` texts against the schema,
links and section references against the headings, Python names and project paths against the sources. Each check
is also shown to fail on a planted mistake. Pure: no TensorFlow, no cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
