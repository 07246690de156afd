"""Image folders as published (train/, val/ or Validate/, test/ in any case; a sub-folder per class), in pure Python."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from cluster.training_names import VALIDATION_FRACTION
from common.errors import Problem, UserError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
SPLIT_NAMES = {"train": ("train", "training"), "validation": ("val", "valid", "validation", "validate"),
               "test": ("test", "testing")}  # folder names in any case, as published sets name them


def _fail_if(problems: list[Problem]) -> None:
    if problems:
        raise UserError(problems)


def _images_below(directory: Path) -> list[str]:
    found = []
    for folder, _, names in os.walk(directory, followlinks=True):
        found += [os.path.join(folder, n) for n in names if os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS]
    return sorted(found)


def _class_folders(directory: Path, problems: list[Problem]) -> dict[str, list[str]]:
    classes = {d.name: _images_below(d) for d in sorted(directory.iterdir()) if d.is_dir()}
    if not classes:
        problems.append(Problem("data folder", str(directory), "has no class sub-folders",
                                f"put the images of each class in a sub-folder, e.g. {directory.name}/cat/1.jpg"))
    for name, images in classes.items():
        if not images:
            problems.append(Problem("data folder", str(directory / name), "holds no jpg, png, bmp or gif image",
                                    "add images of that class, or remove the class folder from every split"))
    return classes


def _class_mismatches(folders: dict[str, Path], found: dict[str, dict[str, list[str]]]) -> list[Problem]:
    problems, train = [], folders["train"]
    for split, folder in folders.items():
        for name in sorted(set(found["train"]) - set(found[split])):
            problems.append(Problem("data folder", str(folder / name),
                                    f"is missing: class '{name}' is in {train.name}/ but not in {folder.name}/",
                                    f"add {folder.name}/{name}/ with its images, or remove {train.name}/{name}/"))
        for name in sorted(set(found[split]) - set(found["train"])):
            problems.append(Problem("data folder", str(folder / name),
                                    f"class '{name}' is in {folder.name}/ but not in {train.name}/",
                                    f"add {train.name}/{name}/ with its images, or remove {folder.name}/{name}/"))
    return problems


@dataclasses.dataclass(frozen=True)
class ImageFolders:
    """Class names (sorted, their index is the label), each split's image paths with labels, and a note for the
    log saying which folder makes which split."""

    classes: tuple[str, ...]
    files: dict[str, tuple[tuple[str, ...], tuple[int, ...]]]
    note: str = ""


def _split_folders(root: Path) -> dict[str, Path]:
    """Each split's folder, named in any case (train/, Train/, val/, Validate/ ...); a split named twice fails."""
    folders: dict[str, list[Path]] = {}
    for child in sorted(root.iterdir()):
        split = next((s for s, names in SPLIT_NAMES.items() if child.name.lower() in names), None)
        if split and child.is_dir():
            folders.setdefault(split, []).append(child)
    problems = [Problem("data folder", str(root), f"holds {len(found)} {split} folders "
                        f"({', '.join(p.name for p in found)})", "keep one, rename or remove the others")
                for split, found in folders.items() if len(found) > 1]
    if "train" not in folders:
        problems.append(Problem("data folder", str(root), "has no training folder (train/ or Train/)",
                                "create train/ with one sub-folder of images per class"))
    _fail_if(problems)
    return {split: found[0] for split, found in folders.items()}


def _carved(per_class: dict[str, list[str]], fraction: float) -> tuple[dict, dict]:
    """The last `fraction` of each class's images (by name; none of a class of one image) as validation."""
    held = {name: images[len(images) - min(round(len(images) * fraction) or 1, len(images) - 1):]
            for name, images in per_class.items()}
    return {name: images[:len(images) - len(held[name])] for name, images in per_class.items()}, held


def image_folders(root: Path, validation_fraction: float = VALIDATION_FRACTION) -> ImageFolders:
    """train/ (and val/, test/) with the same class sub-folders, each holding at least one image; without a
    validation folder `validation_fraction` of each class is carved off, without a test folder validation tests."""
    folders = _split_folders(root)
    problems: list[Problem] = []
    found = {split: _class_folders(folder, problems) for split, folder in folders.items()}
    _fail_if(problems)
    _fail_if(_class_mismatches(folders, found))
    said = [f"training on {folders['train'].name}/"]
    if "validation" not in found:
        found["train"], found["validation"] = _carved(found["train"], validation_fraction)
        if not any(found["validation"].values()):
            _fail_if([Problem("data folder", str(folders["train"]), "holds too few images to carve a validation "
                              "part off them", "give at least 2 images of a class, or a val/ folder")])
        said.append(f"validating on the last {validation_fraction:.0%} of each class's images there (by name; "
                    "validation_fraction)")
    else:
        said.append(f"validating on {folders['validation'].name}/")
    said.append(f"testing on {folders['test'].name}/" if "test" in found else "testing on the validation images "
                "(no test folder)")
    classes = tuple(found["train"])
    files = {split: tuple(zip(*[(path, label) for label, name in enumerate(classes) for path in per_class[name]],
                              strict=True))
             for split, per_class in found.items()}
    return ImageFolders(classes, {**files, "test": files.get("test", files["validation"])}, ", ".join(said))
