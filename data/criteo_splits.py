"""Criteo logs as published (Kaggle's train.txt, the 1 TB set's day_0 ... day_23, or train-*/validation-* files)
and their validation convention, found in pure Python: each split is a list of byte or line ranges of files.

    Kaggle (dac.tar.gz): train.txt or train.txt.gz, 7 days in time order; test.txt has no labels and is ignored.
        As in the DLRM reference, the first 6/7 trains; the last 1/7 (day 7) is split in half: validation, test.
    1 TB (Criteo Terabyte): day_0 ... day_23, plain or .gz, any subset. As in MLPerf and the DLRM reference,
        the last day present (day_23) is split in half: validation, test; the other days train.
    Named: train-*, validation-* (and test-*; validation stands in without them), as for tfrecord.

`criteo_validation` overrides the held-out part: a fraction (of train.txt, or of the last day) or a list of
days (1 TB layout: one day is split in half; several: the first half of them validate, the rest test).
A plain file is cut at line starts by bytes (no counting); a gzipped one by lines, counted or estimated.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from common.errors import Problem, UserError
from data.criteo_layout import first_line_problem, lines_in_bytes, lines_in_gz
from data.line_ranges import ByteRange, split_at

KAGGLE = ("train.txt", "train.txt.gz")
KAGGLE_HELD_OUT = 1 / 7  # the DLRM reference's day 7 of 7
DAY = re.compile(r"day_(\d+)(\.gz)?")
NAMED = {"train": "train-*", "validation": "validation-*", "test": "test-*"}
WHAT = "train.txt (Kaggle), day_0 ... day_23 (1 TB), or train-* and validation-* files"


@dataclasses.dataclass(frozen=True)
class LineRange:
    """Lines [first, first + count) of a gzipped file (count -1: to its end)."""

    path: str
    first: int
    count: int


Part = ByteRange | LineRange


@dataclasses.dataclass(frozen=True)
class CriteoFiles:
    """Each split's parts, and what was found and held out, for the log."""

    parts: dict[str, tuple[Part, ...]]
    note: str


def whole(path: Path) -> Part:
    size = path.stat().st_size
    return LineRange(str(path), 0, -1) if path.name.endswith(".gz") else ByteRange(str(path), 0, size, size)


def lines_in(part: Part) -> tuple[int, bool]:
    """Lines of a part, and whether they were counted (not estimated)."""
    if isinstance(part, ByteRange):
        return lines_in_bytes(part.path, part.begin, part.end, part.size)
    total, exact = lines_in_gz(part.path)
    return (part.count if part.count >= 0 else max(total - part.first, 0)), exact


def split_part(part: Part, fraction: float) -> tuple[Part, Part]:
    """A part cut after `fraction` of it: at a line start by bytes, or by (counted or estimated) lines."""
    if isinstance(part, ByteRange):
        return split_at(part, fraction)
    taken = round(fraction * lines_in(part)[0])
    rest = -1 if part.count < 0 else part.count - taken
    return LineRange(part.path, part.first, taken), LineRange(part.path, part.first + taken, rest)


def _halves(held: list[Part]) -> dict[str, tuple[Part, ...]]:
    if len(held) == 1:
        return dict(zip(("validation", "test"), ((half,) for half in split_part(held[0], 0.5)), strict=True))
    return {"validation": tuple(held[:len(held) // 2]), "test": tuple(held[len(held) // 2:])}


def _kaggle(path: Path, validation, problems: list[Problem]) -> CriteoFiles:
    if isinstance(validation, tuple):
        problems.append(Problem("training.criteo_validation", list(validation), f"lists days, but {path.name} "
                                "is the Kaggle layout (one file)", "give a fraction of it, e.g. 0.1, or null"))
        validation = None
    fraction = validation or KAGGLE_HELD_OUT
    train, held = split_part(whole(path), 1 - fraction)
    said = "its last 1/7 (the DLRM reference's day 7 of 7)" if validation is None else f"its last {fraction:.4g}"
    return CriteoFiles({"train": (train,), **_halves([held])},
                       f"Kaggle layout: {path.name}; validation and test are the two halves of {said}, training "
                       "the rest; test.txt (no labels) is not read")


def _days(days: dict[int, Path], validation, root: Path, problems: list[Problem]) -> CriteoFiles:
    numbers = sorted(days)
    found = f"1 TB layout: days {', '.join(map(str, numbers))}"
    if isinstance(validation, tuple):
        missing = [d for d in validation if d not in days]
        if missing or len(validation) == len(days):
            problems.append(Problem("training.criteo_validation", list(validation),
                                    f"days {missing} are not in {root}" if missing else "holds out every day",
                                    f"give some of the days found ({', '.join(map(str, numbers))}), not all"))
            return CriteoFiles({}, found)
        held = [whole(days[d]) for d in validation]
        train = tuple(whole(days[d]) for d in numbers if d not in validation)
        said = f"days {list(validation)}"
    elif len(days) == 1 and validation is None:
        problems.append(Problem("data folder", str(root), f"holds one day ({days[numbers[0]].name}): the 1 TB "
                                "convention holds out the last day whole", "add more days, or set "
                                "training.criteo_validation to a fraction of that day, e.g. 0.1"))
        return CriteoFiles({}, found)
    else:
        last = whole(days[numbers[-1]])
        kept, held_part = split_part(last, 1 - validation) if validation else (None, last)
        train = tuple(whole(days[d]) for d in numbers[:-1]) + ((kept,) if kept else ())
        held = [held_part]
        said = f"day_{numbers[-1]}" + (f"'s last {validation:.4g}" if validation else " (as MLPerf does)")
    return CriteoFiles({"train": train, **_halves(held)},
                       f"{found}; validation and test are the {'halves' if len(held) == 1 else 'days'} of {said}, "
                       "training the rest")


def _named(root: Path, validation, problems: list[Problem]) -> CriteoFiles:
    paths = {split: sorted(p for p in root.glob(pattern) if p.is_file()) for split, pattern in NAMED.items()}
    problems += [Problem("data folder", str(root), f"has no {NAMED[split]} files",
                         f"put the {split} lines there in files named like {split}-00 or {split}-00.gz")
                 for split in ("train", "validation") if not paths[split]]
    if validation is not None:
        problems.append(Problem("training.criteo_validation", validation if not isinstance(validation, tuple)
                                else list(validation), "applies to train.txt or day_N files, but the splits are "
                                "named (train-*, validation-*)", "use null"))
    parts = {split: tuple(whole(p) for p in found) for split, found in paths.items()}
    return CriteoFiles({**parts, "test": parts["test"] or parts["validation"]},
                       "named layout: train-*, validation-*" + (", test-*" if paths["test"] else
                                                                 " (validation also serves as test)"))


def criteo_files(root: Path, validation=None) -> CriteoFiles:
    """The layout found in `root`, split as its publishers' convention says (or as `validation` overrides)."""
    kaggle = [root / name for name in KAGGLE if (root / name).is_file()]
    days: dict[int, Path] = {}
    problems: list[Problem] = []
    for path in sorted(root.iterdir()):
        if (found := DAY.fullmatch(path.name)) and path.is_file():
            if int(found[1]) in days:
                problems.append(Problem("data file", str(path), f"is day {found[1]} again (also "
                                        f"{days[int(found[1])].name})", "keep one file per day, plain or .gz"))
            days[int(found[1])] = path
    named = any(root.glob("train-*")) or any(root.glob("validation-*"))
    layouts = [name for name, present in (("train.txt", kaggle), ("day_N", days), ("train-*", named)) if present]
    if len(layouts) > 1 or len(kaggle) > 1:
        raise UserError(Problem("data folder", str(root), f"holds more than one layout ({', '.join(layouts)}"
                                f"{', both train.txt and train.txt.gz' if len(kaggle) > 1 else ''})",
                                "keep one layout per directory"))
    if not layouts and (root / "test.txt").is_file():
        raise UserError(Problem("data file", str(root / "test.txt"), "has no labels, so it cannot train",
                                "put train.txt (Kaggle's labelled file) beside it"))
    if not layouts:
        raise UserError(Problem("data folder", str(root), "holds no Criteo click logs", f"give {WHAT}"))
    if kaggle:
        files = _kaggle(kaggle[0], validation, problems)
    elif days:
        files = _days(days, validation, root, problems)
    else:
        files = _named(root, validation, problems)
    paths = sorted({part.path for parts in files.parts.values() for part in parts})
    problems += [p for p in map(first_line_problem, paths) if p]
    if problems:
        raise UserError(problems)
    return files


def criteo_counts(files: CriteoFiles) -> tuple[dict[str, int], bool]:
    """Lines (examples) per split, and whether every one was counted (large files are estimated)."""
    counted = {split: [lines_in(part) for part in parts] for split, parts in files.parts.items()}
    return ({split: sum(n for n, _ in found) for split, found in counted.items()},
            all(exact for found in counted.values() for _, exact in found))
