"""What each file format must look like on disk, checked in pure Python (no TensorFlow) before anything starts."""

from __future__ import annotations

import dataclasses
import gzip
import os
import struct
import zipfile
from pathlib import Path

from common.errors import Problem, UserError

VALIDATION_FRACTION = 0.1  # CIFAR-10 and MNIST ship no validation split: the last 10% of training records
CIFAR_DIR = "cifar-10-batches-bin"
CIFAR_FILES = {"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "test": ("test_batch.bin",)}
CIFAR_RECORD_BYTES = 1 + 32 * 32 * 3
MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
MNIST_NPZ = "mnist.npz"
MNIST_NPZ_KEYS = ("x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy")
IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC = 2051, 2049
IDX_IMAGES_HEADER, IDX_LABELS_HEADER = 16, 8
TFRECORD_PATTERNS = {"train": "train-*", "validation": "validation-*", "test": "test-*"}
WHAT_TO_GIVE = {
    "image_folder": "train/ (and val/ or validation/, test/; any case), each with one sub-folder of images per class",
    "cifar10": f"{CIFAR_DIR}/ (data_batch_1.bin ... data_batch_5.bin, test_batch.bin)",
    "mnist": "train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-... (or mnist.npz)",
    "tfrecord": "train-*, validation-* (and test-*) TFRecord files",
    "criteo": "train.txt (Kaggle), day_0 ... day_23 (1 TB) or train-*, validation-* Criteo click logs (plain or .gz)",
}


@dataclasses.dataclass(frozen=True)
class Span:
    """Records [first, first + count) of a file, or of files read side by side (MNIST images and labels)."""

    paths: tuple[str, ...]
    first: int
    count: int


def span_columns(spans: tuple[Span, ...]) -> tuple[tuple, ...]:
    """Spans as the columns from_tensor_slices takes: each of the paths, then the firsts, then the counts."""
    paths = zip(*[span.paths for span in spans], strict=True)
    return (*paths, tuple(s.first for s in spans), tuple(s.count for s in spans))


def _fail_if(problems: list[Problem]) -> None:
    if problems:
        raise UserError(problems)


def data_root(dataset: str, data_dir: str | None, base_dir: Path) -> Path:
    """The data directory, resolved against `base_dir` (the folder of cluster.json) like every path there."""
    if data_dir is None:
        raise UserError(Problem("training.data_dir", None, f"{dataset} reads files but no directory is set",
                                f"set training.data_dir to the directory that holds {WHAT_TO_GIVE[dataset]}"))
    root = Path(os.path.abspath(Path(base_dir) / Path(data_dir).expanduser()))  # a link is followed at each look
    if not root.exists():
        raise UserError(Problem("training.data_dir", data_dir, f"{root} does not exist",
                                f"give the directory that holds {WHAT_TO_GIVE[dataset]}, at the same path on the "
                                "chief, every worker and the evaluator host"))
    if not root.is_dir():
        raise UserError(Problem("training.data_dir", data_dir, f"{root} is a file, not a directory",
                                f"give the directory that holds {WHAT_TO_GIVE[dataset]}"))
    return root


def carve_validation(spans: list[Span]) -> tuple[tuple[Span, ...], tuple[Span, ...]]:
    """Splits off the last VALIDATION_FRACTION of the records as validation, always the same ones."""
    remaining = sum(span.count for span in spans) // int(1 / VALIDATION_FRACTION)
    if not remaining:
        raise UserError(Problem("data file", spans[-1].paths[0], "holds too few training records to carve a "
                                f"validation part ({VALIDATION_FRACTION:.0%}) off them",
                                f"give at least {int(1 / VALIDATION_FRACTION)} training records"))
    train, validation = list(spans), []
    while remaining:
        last = train.pop()
        taken = min(remaining, last.count)
        validation.insert(0, Span(last.paths, last.first + last.count - taken, taken))
        if taken < last.count:
            train.append(Span(last.paths, last.first, last.count - taken))
        remaining -= taken
    return tuple(train), tuple(validation)


def cifar10(root: Path) -> dict[str, tuple[Span, ...]]:
    """The binary batches, each a whole number of 3,073-byte records; validation is carved off the training ones."""
    directory = root / CIFAR_DIR if (root / CIFAR_DIR).is_dir() else root
    problems: list[Problem] = []
    spans: dict[str, list[Span]] = {"train": [], "test": []}
    for split, names in CIFAR_FILES.items():
        for path in (directory / name for name in names):
            size = path.stat().st_size if path.is_file() else None
            if size is None:
                problems.append(Problem("data file", str(path), "does not exist", "extract cifar-10-binary.tar.gz "
                                        f"into training.data_dir: it holds {WHAT_TO_GIVE['cifar10']}"))
            elif size == 0 or size % CIFAR_RECORD_BYTES:
                problems.append(Problem("data file", str(path), f"is {size} bytes, not a whole number of "
                                        f"{CIFAR_RECORD_BYTES}-byte records (1 label byte + 3,072 pixel bytes): it "
                                        "is truncated or not CIFAR-10 binary",
                                        "download and extract cifar-10-binary.tar.gz again"))
            else:
                spans[split].append(Span((str(path),), 0, size // CIFAR_RECORD_BYTES))
    _fail_if(problems)
    train, validation = carve_validation(spans["train"])
    return {"train": train, "validation": validation, "test": tuple(spans["test"])}


@dataclasses.dataclass(frozen=True)
class IdxFiles:
    """MNIST's idx files: per split, spans over (images file, labels file); images are rows x cols bytes."""

    spans: dict[str, tuple[Span, ...]]
    image_shape: tuple[int, int]


def _open_idx(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _stored_size(path: Path) -> int:
    """Bytes the file holds once decompressed: a gzip file keeps that (mod 2**32) in its last 4 bytes."""
    if path.suffix != ".gz":
        return path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(-4, os.SEEK_END)
        return struct.unpack("<I", handle.read(4))[0]


def _idx_header(path: Path, magic: int, fields: int, problems: list[Problem]) -> tuple[int, ...] | None:
    """The header's numbers after the magic (count, then rows and cols for images), if the file is whole."""
    try:
        with _open_idx(path) as handle:
            numbers = struct.unpack(f">{1 + fields}I", handle.read(4 * (1 + fields)))
    except (OSError, EOFError, struct.error) as error:
        problems.append(Problem("data file", str(path), f"cannot be read as an idx file ({error})",
                                "download the MNIST files again"))
        return None
    if numbers[0] != magic:
        problems.append(Problem("data file", str(path), f"starts with magic number {numbers[0]}, not {magic} "
                                f"(idx {'images' if magic == IDX_IMAGES_MAGIC else 'labels'})",
                                "give the MNIST file of that name as published (images and labels swapped?)"))
        return None
    expected, stored = 4 * (1 + fields) + numbers[1] * (numbers[2] * numbers[3] if fields == 3 else 1), \
        _stored_size(path)
    if stored != expected % 2 ** 32:
        problems.append(Problem("data file", str(path), f"holds {stored} bytes where its header promises "
                                f"{expected}: it is truncated", "download the MNIST files again"))
        return None
    return numbers[1:]


def _idx_pair(root: Path, split: str, problems: list[Problem]) -> tuple[Span, tuple[int, int]] | None:
    paths = []
    for name in MNIST_FILES[split]:
        found = [root / n for n in (name, name + ".gz") if (root / n).is_file()]
        if not found:
            problems.append(Problem("data file", str(root / name), "does not exist (nor its .gz)",
                                    f"put the four MNIST idx files, or {MNIST_NPZ}, in training.data_dir"))
        paths += found[:1]
    if len(paths) < 2:
        return None
    images = _idx_header(paths[0], IDX_IMAGES_MAGIC, 3, problems)
    labels = _idx_header(paths[1], IDX_LABELS_MAGIC, 1, problems)
    if not (images and labels):
        return None
    if images[0] != labels[0]:
        problems.append(Problem("data file", str(paths[1]), f"holds {labels[0]} labels for {images[0]} images "
                                f"in {paths[0].name}", "give the images and labels files of the same split"))
        return None
    return Span((str(paths[0]), str(paths[1])), 0, images[0]), (images[1], images[2])


def _npz(path: Path) -> Path:
    try:
        names = zipfile.ZipFile(path).namelist()
    except (OSError, zipfile.BadZipFile) as error:
        raise UserError(Problem("data file", str(path), f"is not a readable .npz ({error})",
                                "download mnist.npz again")) from None
    missing = [key.removesuffix(".npy") for key in MNIST_NPZ_KEYS if key not in names]
    if missing:
        raise UserError(Problem("data file", str(path), f"lacks the arrays {', '.join(missing)}",
                                "give the mnist.npz layout Keras uses: x_train, y_train, x_test, y_test"))
    return path


def mnist(root: Path) -> IdxFiles | Path:
    """mnist.npz (data_dir may name it) if present, else the four idx files, gzipped or not."""
    if root.suffix == ".npz" or (root / MNIST_NPZ).is_file():
        return _npz(root if root.suffix == ".npz" else root / MNIST_NPZ)
    problems: list[Problem] = []
    pairs = {split: _idx_pair(root, split, problems) for split in MNIST_FILES}
    _fail_if(problems)
    train, validation = carve_validation([pairs["train"][0]])
    return IdxFiles({"train": train, "validation": validation, "test": (pairs["test"][0],)}, pairs["train"][1])


def tfrecord_files(root: Path) -> dict[str, tuple[str, ...]]:
    """train-* and validation-* files (ImageNet-style names); without test-* files the test split is validation."""
    files = {split: tuple(sorted(str(p) for p in root.glob(pattern) if p.is_file()))
             for split, pattern in TFRECORD_PATTERNS.items()}
    _fail_if([Problem("data folder", str(root), f"has no {TFRECORD_PATTERNS[split]} files",
                      f"put the {split} TFRecord files there, named like {split}-00000-of-00128")
              for split in ("train", "validation") if not files[split]])
    return {**files, "test": files["test"] or files["validation"]}


def tfrecord_counts(files: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Records per split; a split whose files hold none is an error."""
    counts = {split: sum(_tfrecord_count(path) for path in paths) for split, paths in files.items()}
    _fail_if([Problem("data file", files[split][0], f"the {split} split is empty: its {len(files[split])} "
                      "file(s) hold no records", f"write the {split} examples into them")
              for split, count in counts.items() if not count])
    return counts


def _tfrecord_count(path: str) -> int:
    """Records in a TFRecord file, from its length fields alone (8-byte length, 4-byte CRC, data, 4-byte CRC)."""
    count, size = 0, os.path.getsize(path)
    with open(path, "rb") as handle:
        while handle.tell() < size:
            header = handle.read(8)
            end = handle.tell() + 4 + (struct.unpack("<Q", header)[0] if len(header) == 8 else size) + 4
            if end > size:
                raise UserError(Problem("data file", path, f"is truncated: record {count + 1} runs past the end "
                                        "of the file", "write or copy the TFRecord file again"))
            handle.seek(end)
            count += 1
    return count
