"""Docs that cannot go stale, for tests/test_docs_agree.py: a user page says what to do and what is bounded, and
links to docs/performance.md for what a run measured; one quantity has one value wherever it is given; a file a
page names is one the project ships (or one it writes, or one the page has you write). Pure: text and the schema.

What counts as a run's measured figure, in a page's prose and tables (code blocks show what a command prints,
and are left alone):

- a date (`2026-11-29`): the date of a run;
- a reading of a metric: `AUC 0.6544`, `p95 45 s`, `median 12 s`, `accuracy 0.97`;
- a ratio to another run: `0.85x`, `5.1×`, `3.5 times`, `80× slower` (`2x` alone is an option's factor,
  `28x28` a size);
- a tally of predictions against runs: `9 of 9 ... within ±25 %`;
- a time, size or rate with a fraction (`12.5 s`, `15.6 GiB`), with three or more significant digits
  (`703 MB`, `737 s`) or as a range (`6-13 s`), or any throughput (`steps/s`, `examples/s`), unless it is said
  as a bound or a default: after `at most`, `at least`, `up to`, `under`, `within`, `every`, `default` and
  their kin. A power of two (`256 MiB`, `8,192`) is a size someone chose, not one a run found.

A figure a page states as a limit in other words is let through by ALLOWED, each entry with its reason."""

from __future__ import annotations

import json
import re
from pathlib import Path

import docskit

# Pages whose file names are not checked: upgrading.md names the files a change replaced.
OLD_NAMES_PAGES = ("upgrading.md",)
# Pages that may carry measured figures: the one performance page (machine and date beside each), the suite's own
# page (its timings are how the suite is split into lanes: tests/lanes.py) and the changes since the last version.
FIGURE_PAGES = ("performance.md", "tests.md", "upgrading.md")

UNIT = (r"(?:ms|s|seconds?|min|minutes?|hours?|MB|MiB|GB|GiB|KB|KiB|kB|TB|TiB|bytes|steps/s|examples/s|ex/s|"
        r"rows/s|ids/s|Mbit/s|Gbit/s|%)")
NUMBER = r"\d[\d,]*(?:\.\d+)?"
QUANTITY = re.compile(rf"(?<![\w.,/-])(?P<low>{NUMBER})(?:\s?(?:-|–|to)\s?(?P<high>{NUMBER}))?\s?(?P<unit>{UNIT})"
                      r"(?![\w/])")
DATE = re.compile(r"(?<![\w-])20\d\d-[01]\d-[0-3]\d(?![\w-])")
METRIC = re.compile(rf"\b(?:(?:AUC|p50|p90|p95|p99|accuracy|loss)\s*(?:of\s+|was\s+|=\s*|:\s*)?{NUMBER}(?:\s?{UNIT})?"
                    rf"|(?:median|mean)\s*(?:of\s+|was\s+|=\s*|:\s*)?{NUMBER}\s?{UNIT})(?![\w/])")
RATIO = re.compile(r"(?<![\w.])(?:\d+\.\d+(?:\s?[-–]\s?\d+\.\d+)?\s?[x×](?![\w\d])|\d+\s?[x×]\s(?:slower|faster|"
                   r"more|less|larger|smaller|as (?:fast|slow|much))\b|\d+\.\d+ times\b)")
TALLY = re.compile(r"\b\d+ of (?:the )?\d+\b[^.;]{0,80}\bwithin\b")
THROUGHPUT = ("steps/s", "examples/s", "ex/s", "rows/s", "ids/s")
BOUND = re.compile(r"(?:at most|at least|up to|under|below|above|within|every|default|defaults to|by default|"
                   r"limit|more than|less than|no more than|beyond|past|≤|≥|<|>|e\.g\.|such as|cap(?:ped)? at|"
                   r"larger than|smaller than|over|is|of)\s+(?:about\s+|the\s+|a\s+)?$", re.I)

# Figures that read like measurements but are bounds or fixed facts, each with why it may stay on a user page.
ALLOWED = {
    "1 TB": "the name of Criteo's larger data set (the 1 TB Click Logs), not a size a run found",
    "168 bytes": "the dynamic table's account per row of capacity (cluster/dynamic_table_memory.py): arithmetic",
    "216 bytes": "the same account per held id when full: arithmetic, not a run's",
    "15.5 GiB": "data.md's arithmetic for the 1 TB set's tables (rows x 16 floats x 4 bytes)",
    "31 GiB": "data.md's arithmetic: a checkpoint of those tables and their Adagrad slots",
    "21.6 GB": "dynamic-embeddings.md's arithmetic: 100 M ids at 216 bytes",
}


def user_pages() -> list[Path]:
    """The pages that say what to do: README.md and docs/*.md but the figure pages and the generated reference."""
    return [page for page in docskit.guides() if page.name not in FIGURE_PAGES]


def prose(text: str) -> list[str]:
    """A page's paragraphs and table rows, code spans and link targets blanked (an option's value is code)."""
    _, paragraphs = docskit.split_code(text)
    return [re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "``", paragraph)) for paragraph in paragraphs]


def _round(number: str) -> bool:
    """A value someone picked: at most two significant digits, or a power of two."""
    value = number.replace(",", "")
    if "." in value.rstrip("0").rstrip("."):
        return False
    digits = value.split(".")[0].lstrip("0").rstrip("0")
    whole = int(value.split(".")[0] or 0)
    return len(digits) <= 2 or (whole > 0 and whole & (whole - 1) == 0)


def measured_figures(text: str) -> list[str]:
    """The run's measured figures a page carries, each with a little of its context."""
    found = []
    for paragraph in prose(text):
        def note(match: re.Match, kind: str, paragraph: str = paragraph) -> None:
            found.append(f"{kind} {match[0].strip()!r} in "
                         f"'...{paragraph[max(0, match.start() - 50):match.end() + 20].strip()}...'")
        for pattern, kind in ((DATE, "a run's date"), (METRIC, "a metric's reading"), (RATIO, "a ratio to a run"),
                              (TALLY, "a tally of predictions")):
            for match in pattern.finditer(paragraph):
                note(match, kind)
        for match in QUANTITY.finditer(paragraph):
            figure = match[0].strip()
            if any(figure.startswith(allowed) or figure == allowed for allowed in ALLOWED):
                continue
            if BOUND.search(paragraph[max(0, match.start() - 40):match.start()]):
                continue
            numbers = [match["low"], *([match["high"]] if match["high"] else [])]
            if match["unit"] in THROUGHPUT or match["high"] or not all(_round(number) for number in numbers):
                note(match, "a measured quantity")
    return found


# ----- one quantity, one value ----------------------------------------------------------------------------------
STATED_DEFAULT = re.compile(r"`(?P<name>(?:[a-z]+\.)?(?:<name>\.)?[a-z_]\w*)` (?:\[(?P<bracket>[^\]]+)\]|"
                            r"\(default:? (?P<paren>[^);,]+)\)|defaults to (?P<to>`[^`]+`|[^\s,;)`]+))")
SUITE_MINUTES = re.compile(r"suite[^.]{0,60}?\babout (\d+) minutes")


def _value(said: str) -> str:
    return said.split(";")[0].strip().rstrip(".").strip("`")


def stated_defaults(text: str, schema: dict) -> list[tuple[str, str, object]]:
    """(option path, the default the page states, the schema's default) for each `option` [X], `option` (default
    X) and `option` defaults to X the page gives, where the option has a default in the schema."""
    defaults = {}
    for option in docskit.options(schema):
        if "default" in option.node:
            defaults.setdefault(option.name, []).append(option)
    found = []
    for paragraph in docskit.split_code(text)[1]:
        for match in STATED_DEFAULT.finditer(paragraph):
            name = match["name"].split(".")[-1]
            section = match["name"].split(".")[0] if "." in match["name"] else None
            candidates = [option for option in defaults.get(name, [])
                          if section is None or option.section == section]
            said = _value(match["bracket"] or match["paren"] or match["to"])
            if len(candidates) == 1 and re.match(r"^-?[\d.]+$|^[a-z_]+$|^true$|^false$|^null$", said):
                found.append((candidates[0].path, said, candidates[0].node["default"]))
    found += table_defaults(text, defaults)
    return found


TABLE_SECTION = re.compile(r"`(?:option \(`)?(\w+)\.`\)?")


def table_defaults(text: str, defaults: dict[str, list]) -> list[tuple[str, str, object]]:
    """The same from option tables with a `default` column (`| option (`training.`) | default | ... |`): each
    row's backticked names (a section named in the header, or any section) and its backticked default."""
    found, column, section = [], None, None
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            column = None
        elif "default" in cells and cells.index("default") > 0:
            column = cells.index("default")
            header = TABLE_SECTION.search(cells[0])
            section = header[1] if header else None
        elif column is not None and not cells[0].startswith("---") and len(cells) > column:
            said = re.fullmatch(r"`([^`]+)`", cells[column])
            for name in re.findall(r"`([^`]+)`", cells[0]) if said else []:
                candidates = [option for option in defaults.get(name.split(".")[-1], [])
                              if section is None or option.section == section]
                if len(candidates) == 1:
                    found.append((candidates[0].path, said[1].strip('"'), candidates[0].node["default"]))
    return found


def wrong_defaults(texts: dict[Path, str], schema: dict) -> list[str]:
    """Defaults stated in prose that are not the schema's."""
    wrong = []
    for path, text in texts.items():
        for option, said, default in stated_defaults(text, schema):
            expected = default if isinstance(default, str) else json.dumps(default)
            if said != expected and not (isinstance(default, (int, float)) and _same_number(said, default)):
                wrong.append(f"{path.name}: {option} [{said}], but its default is {expected}")
    return wrong


def _same_number(said: str, default: float) -> bool:
    try:
        return float(said) == float(default)
    except ValueError:
        return False


def suite_minutes(texts: dict[Path, str]) -> dict[str, set[str]]:
    """The suite's wall time in minutes, by page, where a page gives it."""
    found = {path.name: set(SUITE_MINUTES.findall(" ".join(docskit.split_code(text)[1])))
             for path, text in texts.items()}
    return {name: minutes for name, minutes in found.items() if minutes}


def quantities_given_twice(texts: dict[Path, str]) -> list[str]:
    """A quantity one page states and another page states again: it must be said once, and linked to."""
    minutes = suite_minutes(texts)
    given = [f"{name}: about {' / '.join(sorted(values))} minutes" for name, values in sorted(minutes.items())]
    return [f"the suite's wall time is given on {len(given)} pages ({'; '.join(given)}): say it in tests.md, "
            "link there"] if len(given) > 1 or any(len(values) > 1 for values in minutes.values()) else []


# ----- files a page names ---------------------------------------------------------------------------------------
FILE_NAME = re.compile(r"(?<![\w./<>-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|sh|json|toml|txt|yaml|yml|cfg|png|ini))"
                       r"(?![\w/-])")
# Files the toolkit writes or a page has you write: named, never shipped.
WRITTEN = {
    "summary.json": "the chief writes it", "progress.json": "the chief writes it",
    "status.json": "the launcher writes it", "capacity-plan.json": "plan writes it",
    "evaluated.json": "the evaluator writes it", "best.json": "the evaluator writes it",
    "manifest.json": "a version's or a delta's, written by the follow loop",
    "trained_through.json": "the follow loop writes it", "safe_to_delete.json": "the follow loop writes it",
    "test.json": "the evaluator writes it when told to",
    "job.sh": "`sbatch --output job.sh` writes it", "jobset.yaml": "`jobset --output jobset.yaml` writes it",
    "launcher.log": "the launcher writes it",
    "train.txt": "Criteo's file, downloaded", "test.txt": "Criteo's file, downloaded",
    "build_imagenet_data.py": "TensorFlow's script, not the project's", "page.md": "any page, in a pattern",
    "my_models.py": "your model's module, in the examples",
}
SKIPPED_DIRS = {".git", ".venv", "output", "logs", "__pycache__", "node_modules", ".mypy_cache", ".ruff_cache"}


def shipped_files(root: Path = docskit.ROOT) -> set[str]:
    """Every file of the project, by its path from the root and by its bare name."""
    found = set()
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if path.is_file() and not SKIPPED_DIRS & set(relative.parts):
            found |= {str(relative), path.name}
    return found


def unshipped_files(text: str, page: Path, shipped: set[str], written: dict[str, str] | None = None) -> list[str]:
    """File names a page gives, in prose or code, that the project does not have: a bare `NAME.md` must be the
    name of some shipped file, `folder/NAME.py` a path from the root or from the page's folder."""
    written = WRITTEN if written is None else written
    problems = []
    blocks, paragraphs = docskit.split_code(text)
    folders = {name.split("/")[0] for name in shipped if "/" in name}
    for chunk in [*paragraphs, *blocks]:
        for name in FILE_NAME.findall(re.sub(r"https?://\S+", "", chunk)):
            bare, top = name.rsplit("/", 1)[-1], name.split("/")[0]
            if bare in written:
                continue
            if "/" not in name:
                ok = bare in shipped
            elif top in folders or top in ("..", "."):
                ok = (docskit.ROOT / name).exists() or (page.parent / name).exists()
            else:
                ok = True  # a path of the user's (`mydata/clicks.py`, `/srv/data/x.json`): not the project's
            if not ok:
                problems.append(f"{page.name}: {name}: no such file in the project")
    return sorted(set(problems))
