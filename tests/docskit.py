"""The docs as data: the cluster.json reference page built from the schema, and what the pages name (options,
commands, links, JSON examples), for tests/test_docs*.py. `.venv/bin/python tests/docskit.py` copies the help texts
of the training and evaluation options into the schema's descriptions (their one source), then rewrites the page."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "roles" / "cluster.schema.json"
REFERENCE_PATH = ROOT / "docs" / "cluster-json.md"
REGENERATE = ".venv/bin/python tests/docskit.py"
FILE_SUFFIXES = ("json", "py", "md", "log", "yaml", "yml", "sh", "txt", "gz", "out", "pid", "exit")  # cluster.json
SECTION_GUIDES = {"cluster": "running.md#what-each-task-gets", "hosts": "running.md#hosts",
                  "launcher": "running.md", "slurm": "slurm.md", "security": "running.md#firewall-and-public-addresses",
                  "training": "training.md", "evaluation": "training.md#the-evaluator-python--m-evaluatorsidecar",
                  "kubernetes": "kubernetes.md"}
DEF_KINDS = {"address": "host:port", "addresses": "list of host:port", "safePath": "path",
             "positiveInt": "integer ≥ 1", "seconds": "seconds > 0", "jobSize": "number of tasks (slurm, kubernetes)"}


@dataclasses.dataclass(frozen=True)
class Option:
    """One setting of cluster.json: `training.epochs`, or `hosts.<name>.gpus` for a per-host one."""

    section: str
    name: str
    node: dict

    @property
    def path(self) -> str:
        return f"{self.section}.<name>.{self.name}" if self.section == "hosts" else f"{self.section}.{self.name}"


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def section_options(schema: dict, section: str) -> dict[str, dict]:
    node = schema["properties"][section]
    return node["additionalProperties"]["properties"] if section == "hosts" else node["properties"]


def sections(schema: dict) -> list[str]:
    return [name for name in schema["properties"] if not name.startswith("$")]


def options(schema: dict) -> list[Option]:
    """Every setting, section by section in the schema's order (a per-role map such as kubernetes.cpu is one)."""
    return [Option(section, name, node) for section in sections(schema)
            for name, node in section_options(schema, section).items()]


# ----- the reference page ---------------------------------------------------------------------------------------
def kind(node: dict) -> str:
    """A short reading of a schema node's type: `integer 1–65535`, `path or null`, `list of host:port`."""
    if "enum" in node:
        return " or ".join(f"`{json.dumps(v)}`" if v is None or v == "" else f"`{v}`" for v in node["enum"])
    if "$ref" in node:
        definition = node["$ref"].rsplit("/", 1)[-1]
        low, high = node.get("minItems", node.get("minimum")), node.get("maxItems", node.get("maximum"))
        if low is None and high is not None:  # a count capped here keeps its definition's floor: chief 0 or 1
            low = load_schema()["$defs"][definition].get("minimum")
        bound = f"exactly {low}" if low is not None and low == high else f"{low} or {high}" if (
            low is not None and high is not None and high - low == 1) else ", ".join(
            text for text in (low is not None and f"at least {low}", high is not None and f"at most {high}") if text)
        named = DEF_KINDS[definition]
        return f"{named} ({bound})" if bound else named
    if "oneOf" in node:
        return " or ".join(kind(sub) for sub in node["oneOf"])
    types = node.get("type", "any")
    if isinstance(types, list):
        return " or ".join(kind({**node, "type": t}) for t in types)
    if types == "array":
        return f"list of {kind(node.get('items', {}))}"
    if types == "object":
        keys, values = node.get("properties"), node.get("additionalProperties")
        return f"map of {', '.join(keys)}" if keys else f"map of {kind(values)}s" if isinstance(values, dict) \
            else "map"
    low = node.get("minimum", node.get("exclusiveMinimum"))
    if types in ("integer", "number") and low is not None:
        if "maximum" in node:
            return f"{types} {low}–{node['maximum']}" if "minimum" in node else f"{types} > {low}, ≤ {node['maximum']}"
        return f"{types} ≥ {low}" if "minimum" in node else f"{types} > {low}"
    return types


def _cell(text: str) -> str:
    """Text for a table cell: pipes escaped, and outside code spans `<` and `>`, which GitHub would take for HTML."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;").replace(">", "&gt;") for i, part in enumerate(parts))


def _default(option: Option, required: list[str]) -> str:
    if "default" in option.node:
        return f"`{json.dumps(option.node['default'], ensure_ascii=False)}`"
    return "required" if option.name in required else "—"


def reference_page(schema: dict) -> str:
    """docs/cluster-json.md: every section and option, its value, default and description, from the schema."""
    lines = ["# cluster.json reference", "",
             f"<!-- Generated from roles/cluster.schema.json by `{REGENERATE}`: edit the schema, not this page. -->",
             "", "Every setting of cluster.json, from its JSON Schema (`roles/cluster.schema.json`, which editors "
             "read through", '`"$schema"`). The descriptions of the `training` and `evaluation` options are the help '
             "texts of", "`python -m coordinator.train --help` (`cluster/training_options.py`, "
             "`cluster/evaluation_options.py`). A mistake in", "the file is one line naming the field, the bad "
             "value and the fix, and exit code 2, before anything starts.", "",
             "| section | holds | guide |", "| --- | --- | --- |"]
    lines += [f"| [`{name}`](#{name}) | {_cell(schema['properties'][name].get('description', ''))} | "
              f"[{SECTION_GUIDES[name].split('#')[0]}]({SECTION_GUIDES[name]}) |" for name in sections(schema)]
    for name in sections(schema):
        node = schema["properties"][name]
        required = node.get("additionalProperties", {}).get("required", []) if name == "hosts" else \
            node.get("required", [])
        lines += ["", f"## {name}", "", node.get("description", ""), "", "| option | value | default | what it does |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| `{option.path}` | {_cell(kind(option.node))} | {_default(option, required)} | "
                  f"{_cell(option.node.get('description', ''))} |"
                  for option in options(schema) if option.section == name]
        lines += ["", f"Guide: [{SECTION_GUIDES[name].split('#')[0]}]({SECTION_GUIDES[name]})."]
    return "\n".join(lines) + "\n"


# ----- reading the pages ----------------------------------------------------------------------------------------
def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def guides() -> list[Path]:
    """The written pages: every page but the generated reference."""
    return [page for page in pages() if page != REFERENCE_PATH]


def split_code(text: str) -> tuple[list[str], list[str]]:
    """(code blocks, prose paragraphs): fenced blocks and lines indented 4+ spaces after a blank line are code."""
    blocks, paragraphs, block, paragraph, fenced, previous_blank = [], [], [], [], False, True
    for line in text.splitlines() + [""]:
        if line.strip().startswith("```"):
            if fenced:
                blocks.append("\n".join(block))
                block = []
            fenced = not fenced
        elif fenced or (line.startswith("    ") and (previous_blank or block)):
            block.append(line[4:] if not fenced else line)
        else:
            if block:
                blocks.append("\n".join(block))
                block = []
            if line.strip():
                paragraph.append(line.strip())
            elif paragraph:
                paragraphs.append(" ".join(paragraph))
                paragraph = []
        previous_blank = not line.strip()
    return blocks, paragraphs


def code_spans(paragraph: str) -> list[str]:
    return re.findall(r"`([^`]+)`", paragraph)


def code_texts(text: str) -> list[str]:
    """Every code block and inline code span of a page."""
    blocks, paragraphs = split_code(text)
    return blocks + [span for paragraph in paragraphs for span in code_spans(paragraph)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, punctuation gone, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, as GitHub numbers repeated ones (`name`, `name-1`, ...)."""
    found, seen, fenced = set(), {}, False
    for line in text.splitlines():
        fenced ^= line.strip().startswith("```")
        match = None if fenced else re.match(r"^#{1,6} (.+)$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def links(text: str) -> list[str]:
    """Relative link targets of the prose (`page.md#anchor`, `#anchor`, `../file`); web addresses left out."""
    _, paragraphs = split_code(text)
    found = []
    for paragraph in paragraphs:
        outside_code = re.sub(r"`[^`]*`", "", paragraph)
        found += [target for target in re.findall(r"\]\(([^)\s]+)\)", outside_code)
                  if not re.match(r"^[a-z]+:", target)]
    return found


def json_examples(text: str) -> list[object]:
    """Code blocks and spans that are JSON, or a JSON object's members (`"training": {...}`); not TensorFlow
    Serving's REST requests (`{"signature_name": ...}`), which are no part of cluster.json."""
    found = []
    for code in code_texts(text):
        candidate = code.strip()
        if not candidate.startswith(("{", '"')) or ":" not in candidate:
            continue
        for attempt in (candidate, "{" + candidate + "}"):
            try:
                parsed = json.loads(attempt)
            except json.JSONDecodeError:
                continue
            if not (isinstance(parsed, dict) and "signature_name" in parsed):
                found.append(parsed)
            break
    return found


def described_by_help(text: str, section: str, helps: dict[str, str]) -> str:
    """The schema's text with each option of `section` described by its help text (other lines untouched)."""
    begin = text.index(f'\n    "{section}": {{')
    end = text.index('\n    },', begin)
    body = text[begin:end]
    for name, help_text in helps.items():
        option = re.search(rf'\n        "{re.escape(name)}": {{.*?\n        }}', body, re.S)
        if option is None:
            continue
        quoted = json.dumps(help_text)
        described = re.sub(r'("description": )"(?:[^"\\]|\\.)*"', lambda m, quoted=quoted: m.group(1) + quoted,
                           option.group(0), count=1)
        body = body.replace(option.group(0), described)
    return text[:begin] + body + text[end:]


def sync_descriptions() -> None:
    """Copies the training and evaluation options' help texts into roles/cluster.schema.json."""
    import sys

    sys.path.insert(0, str(ROOT))
    from cluster.evaluation_options import EvaluationOptions
    from cluster.training_options import TrainingOptions

    text = SCHEMA_PATH.read_text()
    for section, cls in (("training", TrainingOptions), ("evaluation", EvaluationOptions)):
        text = described_by_help(text, section, {f.name: f.metadata["help"] for f in dataclasses.fields(cls)})
    SCHEMA_PATH.write_text(text)


if __name__ == "__main__":
    sync_descriptions()
    REFERENCE_PATH.write_text(reference_page(load_schema()))
    print(f"wrote {REFERENCE_PATH.relative_to(ROOT)}")
