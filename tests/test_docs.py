"""The docs cannot rot: every option of the schema is described and has a place in the written pages, every option
the pages name exists, the reference page is the schema's, the help texts are the schema's, JSON examples are
valid, and every relative link leads somewhere. Pure: no TensorFlow, no cluster."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import docskit
import docslinks
from cluster import config as cluster_config
from cluster.evaluation_options import EvaluationOptions
from cluster.training_options import TrainingOptions
from common.errors import UserError

MAX_README_LINES = 200
SETUP_COMMANDS = ["sh run.sh", "sh tests/run.sh"]
OPTION_TABLE = re.compile(r"^\|\s*(?:option \()?`(\w+)\.`\)?\s*\|")


@pytest.fixture(scope="module")
def schema():
    return docskit.load_schema()


def texts(paths: list[Path]) -> dict[Path, str]:
    return {path: path.read_text() for path in paths}


def named_in_code(option: docskit.Option, code: str) -> bool:
    """`training.epochs`, or for a host setting `hosts.<name>.gpus`, `hosts.gpu1.gpus`, `hosts.HOST.python`."""
    middle = r"\.[^.\s`]+\." if option.section == "hosts" else r"\."
    return re.search(rf"(?<![\w.]){option.section}{middle}{option.name}\b", code) is not None


def table_rows(text: str) -> list[tuple[str, list[str]]]:
    """(section, backticked names of each row's first cell) for every option table (`| option (`training.`) |`)."""
    rows, section = [], None
    for line in text.splitlines():
        header = OPTION_TABLE.match(line)
        if header:
            section = header.group(1)
        elif section and line.startswith("|") and not line.startswith("| ---"):
            rows.append((section, re.findall(r"`([^`]+)`", line.split("|")[1])))
        elif not line.startswith("|"):
            section = None
    return rows


def json_keys(example, schema: dict) -> list[tuple[str, str]]:
    """(section, key) for every member of a JSON example under a section; a bare member counts as any section's."""
    if not isinstance(example, dict):
        return []
    found = []
    for key, value in example.items():
        if key in docskit.sections(schema) and isinstance(value, dict):
            members = value.values() if key == "hosts" else [value]
            found += [(key, name) for member in members if isinstance(member, dict) for name in member]
        elif not key.startswith("$"):
            found.append(("", key))
    return found


def is_file(section: str, name: str) -> bool:
    """`cluster.json`, `launcher.log`, or a module such as `launcher.agent`: a file's name, not an option."""
    return name in docskit.FILE_SUFFIXES or (docskit.ROOT / section / f"{name}.py").exists() or \
        (docskit.ROOT / section / name).is_dir()


def places(schema: dict) -> dict[str, set[str]]:
    """For each option path, the written pages that name it: in code, in an option table, or in a JSON example."""
    found: dict[str, set[str]] = {option.path: set() for option in docskit.options(schema)}
    for path, text in texts(docskit.guides()).items():
        code = "\n".join(docskit.code_texts(text))
        tabled = {(section, name.split(".")[-1]) for section, names in table_rows(text) for name in names}
        keyed = {pair for example in docskit.json_examples(text) for pair in json_keys(example, schema)}
        for option in docskit.options(schema):
            if named_in_code(option, code) or (option.section, option.name) in tabled | keyed:
                found[option.path].add(path.name)
    return found


def test_every_option_and_section_has_a_description(schema):
    missing = [option.path for option in docskit.options(schema) if not option.node.get("description", "").strip()]
    missing += [name for name in docskit.sections(schema) if not schema["properties"][name].get("description")]
    assert not missing, f"roles/cluster.schema.json: give these a description: {missing}"


@pytest.mark.parametrize("section, cls", [("training", TrainingOptions), ("evaluation", EvaluationOptions)])
def test_the_schema_describes_options_in_the_words_of_their_help(schema, section, cls):
    """The help text (dataclass metadata, shown by --help) is the source; the schema and the reference page copy it."""
    properties = schema["properties"][section]["properties"]
    different = {f.name: (properties[f.name].get("description"), f.metadata["help"]) for f in dataclasses.fields(cls)
                 if properties[f.name].get("description") != f.metadata["help"]}
    assert not different, (f"{section}: the schema's description differs from the help text (schema, help); copy "
                           f"the help text of {cls.__module__} into roles/cluster.schema.json: {different}")


def test_the_reference_page_is_generated_from_the_schema(schema):
    assert docskit.REFERENCE_PATH.read_text() == docskit.reference_page(schema), (
        f"{docskit.REFERENCE_PATH.relative_to(docskit.ROOT)} is not the schema's: run `{docskit.REGENERATE}`")


def test_every_option_has_a_place_in_the_written_pages(schema):
    nowhere = [path for path, pages in places(schema).items() if not pages]
    assert not nowhere, ("these options are named in no written page (README.md, docs/*.md but the reference): "
                         f"{nowhere}; say what they do where they belong, as `section.option`")


def test_every_option_the_pages_name_exists(schema):
    known = {(option.section, option.name) for option in docskit.options(schema)}
    names = {option.name for option in docskit.options(schema)}
    sections = "|".join(docskit.sections(schema))
    unknown = []
    for path, text in texts(docskit.pages()).items():
        code = "\n".join(docskit.code_texts(text))
        for section, middle, name in re.findall(rf"(?<![\w./-])({sections})\.([^.\s`]+\.)?([a-z_]\w*)\b(?![.\w-])",
                                                code):
            if (section == "hosts") == bool(middle) and (section, name) not in known and not is_file(section, name):
                unknown.append(f"{path.name}: {section}.{middle}{name}")
        unknown += [f"{path.name}: table of {section}.: {name}" for section, cells in table_rows(text)
                    for name in cells if "." not in name and (section, name) not in known]
        unknown += [f"{path.name}: JSON {section or '?'}.{key}" for example in docskit.json_examples(text)
                    for section, key in json_keys(example, schema)
                    if (section, key) not in known and not (section == "" and key in names | set(sections.split("|")))]
    assert not unknown, f"the docs name options the schema does not have: {unknown}"


def test_every_complete_example_is_a_valid_cluster_file():
    examples = sorted((docskit.ROOT / "docs" / "examples").glob("*.json"))
    assert examples, "docs/examples/ holds no example"
    for path in examples:
        cluster_config.load(path)  # raises UserError, with every problem, if the file is not valid
    for path, text in texts(docskit.pages()).items():
        for example in docskit.json_examples(text):
            if isinstance(example, dict) and "cluster" in example:
                try:
                    cluster_config.parse(example, path)
                except UserError as error:
                    pytest.fail(f"{path.name}: an example cluster.json is not valid: {error}")


def test_the_three_host_example_in_the_readme_is_the_shipped_file():
    shipped = (docskit.ROOT / "docs" / "examples" / "three-hosts.json").read_text()
    readme = (docskit.ROOT / "README.md").read_text()
    assert shipped.strip() in "\n".join(docskit.split_code(readme)[0]), "README's three-host file is not the shipped"


def test_every_relative_link_resolves():
    broken = docslinks.broken_links(texts(docskit.pages()))
    assert not broken, f"links that lead nowhere: {broken}"


def test_the_readme_is_a_landing_page_that_starts_with_the_two_setup_commands():
    readme = (docskit.ROOT / "README.md").read_text()
    first_block = docskit.split_code(readme)[0][0]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    assert commands == SETUP_COMMANDS
    assert all((docskit.ROOT / command.split()[1]).is_file() for command in commands)
    assert len(readme.splitlines()) <= MAX_README_LINES, "README.md is the landing page: move details into docs/"
