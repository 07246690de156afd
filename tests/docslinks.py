"""Links and references to headings, for tests/test_docs*.py: every relative link of the pages leads to a file and
its `#anchor` to a heading there; every `page.md#anchor` the code or the schema names, and every section a page
names in words ("the README's Data section", "see "Exports" below"), is a heading that exists. Pure."""

from __future__ import annotations

import re
from pathlib import Path

import docskit
from common.layers import LAYERS

SECTION_IN_WORDS = re.compile(r"(?:the )?(README|[\w-]+\.md)'s ([A-Z][\w ,&-]*?) (?:section|table)")
SECTION_IN_PAGE = re.compile(r"the ([\w-]+(?: [\w-]+){0,3}) (?:section|table) (?:in|of) the (README|[\w-]+\.md)\b")
QUOTED_HEADING = re.compile(r'"([A-Z][^"]{2,60})" (?:below|above)')
ANCHOR_IN_CODE = re.compile(r"(?<![\w/-])((?:docs/)?[\w-]+\.md)#([\w-]+)")


def _text_of(path: Path, texts: dict[Path, str]) -> str:
    return texts[path] if path in texts else path.read_text()


def _headings(text: str) -> list[str]:
    found, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.strip().startswith("```")
        match = None if fenced else re.match(r"^#{1,6} (.+)$", line)
        if match:
            found.append(match[1].strip())
    return found


def broken_links(texts: dict[Path, str]) -> list[str]:
    """Relative links of `texts` (pages by path) that lead to no file, or to no heading of the page they name."""
    broken = []
    for path, text in texts.items():
        for target in docskit.links(text):
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not (linked in texts or linked.exists()):
                broken.append(f"{path.name}: {target} (no such file)")
            elif anchor and (linked.suffix != ".md" or anchor not in docskit.anchors(_text_of(linked, texts))):
                broken.append(f"{path.name}: {target} (no heading #{anchor} in {linked.name})")
    return broken


def broken_references(texts: dict[Path, str]) -> list[str]:
    """Sections named in words that are no heading: "the README's X section", "the X table in the README" (a
    heading of README.md starting with X) and '"X" below' (a heading of the same page starting with X)."""
    broken = []
    for path, text in texts.items():
        prose = " ".join(docskit.split_code(text)[1])
        named = SECTION_IN_WORDS.findall(prose) + [(page, section) for section, page in SECTION_IN_PAGE.findall(prose)]
        for page, section in named:
            target = docskit.ROOT / "README.md" if page == "README" else path.parent / page
            headings = _headings(_text_of(target, texts)) if (target in texts or target.exists()) else []
            if not any(heading.lower().startswith(section.lower()) for heading in headings):
                broken.append(f"{path.name}: {page}'s {section} section (no such heading in {target.name})")
        for section in QUOTED_HEADING.findall(prose):
            if not any(heading.lower().startswith(section.lower()) for heading in _headings(text)):
                broken.append(f'{path.name}: "{section}" (no such heading on the page)')
    return broken


def broken_anchors_in(sources: dict[str, str]) -> list[str]:
    """`page.md#anchor` (or `docs/page.md#anchor`) in code or schema text that names no heading of that page."""
    broken = []
    for name, text in sources.items():
        for page, anchor in ANCHOR_IN_CODE.findall(text):
            target = docskit.ROOT / page if "/" in page else _page_named(page)
            if target is None or anchor not in docskit.anchors(target.read_text()):
                broken.append(f"{name}: {page}#{anchor}")
    return broken


def _page_named(name: str) -> Path | None:
    return next((page for page in docskit.pages() if page.name == name), None)


def code_sources() -> dict[str, str]:
    """The project's Python modules and the schema, by their path from the project root."""
    paths = [docskit.SCHEMA_PATH, *sorted(path for folder in LAYERS for path in (docskit.ROOT / folder).rglob("*.py"))]
    return {str(path.relative_to(docskit.ROOT)): path.read_text() for path in paths}
