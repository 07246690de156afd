"""Small data sets written in each format the data sources read, byte by byte or with TensorFlow's encoders."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

SPLIT_FOLDERS = {"train": "Train", "validation": "Validate", "test": "Test"}


def random_images(count: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """`count` uint8 images, all different (each distinct from the others with overwhelming odds)."""
    return np.random.default_rng(seed).integers(0, 256, size=(count, *shape), dtype=np.uint8)


def fingerprint(image: np.ndarray) -> bytes:
    """An example's identity from a float image in [0, 1] that went through a lossless path."""
    return np.round(np.asarray(image) * 255).astype(np.uint8).tobytes()


def bmp_bytes(image: np.ndarray) -> bytes:
    """A 24-bit BMP: BGR rows, bottom row first, each padded to 4 bytes."""
    height, width, _ = image.shape
    padding = (4 - 3 * width % 4) % 4
    rows = b"".join(image[row, :, ::-1].tobytes() + b"\0" * padding for row in range(height - 1, -1, -1))
    header = struct.pack("<2sIHHI", b"BM", 54 + len(rows), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return header + info + rows


def gif_bytes(image: np.ndarray) -> bytes:
    """A grey GIF (256-grey palette) of channel 0, LZW-coded with a clear code before the table would grow."""
    height, width = image.shape[:2]
    palette = bytes(v for grey in range(256) for v in (grey, grey, grey))
    clear, end = 256, 257
    codes = [clear]
    for count, pixel in enumerate(image[:, :, 0].flatten(), start=1):
        codes.append(int(pixel))
        if count % 250 == 0:  # codes stay 9 bits wide while the decoder's table stays below 512 entries
            codes.append(clear)
    codes.append(end)
    stream = 0
    for position, code in enumerate(codes):
        stream |= code << (9 * position)
    data = stream.to_bytes((9 * len(codes) + 7) // 8, "little")
    blocks = b"".join(bytes([len(data[i:i + 255])]) + data[i:i + 255] for i in range(0, len(data), 255))
    screen = struct.pack("<6sHHBBB", b"GIF89a", width, height, 0xF7, 0, 0)
    descriptor = struct.pack("<BHHHHB", 0x2C, 0, 0, width, height, 0)
    return screen + palette + descriptor + bytes([8]) + blocks + b"\0;"


def encoded_image(image: np.ndarray, image_format: str) -> bytes:
    import tensorflow as tf

    if image_format == "png":
        return tf.io.encode_png(image).numpy()
    if image_format == "jpg":
        return tf.io.encode_jpeg(image, quality=95).numpy()
    return {"bmp": bmp_bytes, "gif": gif_bytes}[image_format](image)


def write_image_folders(root: Path, counts: dict[str, dict[str, int]], size=(8, 8), image_format: str = "png",
                        seed: int = 0, folders: dict[str, str] | None = None) -> dict[str, dict[str, list[np.ndarray]]]:
    """Train/, Validate/, Test/ (or `folders` per split) with counts[split][class] images each; returns the images
    written."""
    written: dict[str, dict[str, list[np.ndarray]]] = {}
    for offset, (split, classes) in enumerate(counts.items()):
        written[split] = {}
        for number, (name, count) in enumerate(classes.items()):
            folder = root / (folders or SPLIT_FOLDERS)[split] / name
            folder.mkdir(parents=True, exist_ok=True)
            images = random_images(count, (*size, 3), seed=seed + 100 * offset + number)
            for index, image in enumerate(images):
                (folder / f"{index}.{image_format}").write_bytes(encoded_image(image, image_format))
            written[split][name] = list(images)
    return written


def cifar_record(label: int, image: np.ndarray) -> bytes:
    """1 label byte, then the red, green and blue planes of a 32×32×3 image."""
    return bytes([label]) + np.transpose(image, (2, 0, 1)).tobytes()


def write_cifar(root: Path, train_per_file: int = 8, test: int = 6, seed: int = 0) -> dict[str, list[tuple]]:
    """cifar-10-batches-bin/ with 5 training batches and a test batch; returns (label, image) per file in order."""
    directory = root / "cifar-10-batches-bin"
    directory.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    written = {}
    for number, name in enumerate(names):
        count = test if name == "test_batch.bin" else train_per_file
        images = random_images(count, (32, 32, 3), seed=seed + number)
        labels = [(number + i) % 10 for i in range(count)]
        (directory / name).write_bytes(b"".join(cifar_record(l, im) for l, im in zip(labels, images)))
        written[name] = list(zip(labels, images))
    return written


def idx_bytes(array: np.ndarray) -> bytes:
    """An idx file: magic 2051 (images, count x rows x cols) or 2049 (labels, count), big-endian, then bytes."""
    magic = 2051 if array.ndim == 3 else 2049
    return struct.pack(f">{1 + array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()


def write_idx(root: Path, train: int = 20, test: int = 10, gz: bool = True, seed: int = 0) -> dict[str, tuple]:
    """The four MNIST idx files (28×28 by default); returns (images, labels) per split as written."""
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    for prefix, count, number in (("train", train, 0), ("t10k", test, 1)):
        images = random_images(count, (28, 28), seed=seed + number)
        labels = np.arange(count, dtype=np.uint8) % 10
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            data = idx_bytes(array)
            name = f"{prefix}-{kind}-ubyte"
            (root / (name + ".gz" if gz else name)).write_bytes(gzip.compress(data) if gz else data)
        written[prefix] = (images, labels)
    return written


def write_npz(path: Path, train: int = 20, test: int = 10, seed: int = 0,
              keys=("x_train", "y_train", "x_test", "y_test")) -> dict[str, np.ndarray]:
    """Keras' mnist.npz layout (compressed, as Keras ships it); `keys` renames the four arrays."""
    arrays = [random_images(train, (28, 28), seed), np.arange(train, dtype=np.uint8) % 10,
              random_images(test, (28, 28), seed + 1), np.arange(test, dtype=np.uint8) % 10]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **dict(zip(keys, arrays)))
    return dict(zip(keys, arrays))


def write_tfrecords(root: Path, files: dict[str, list[int]], size=(8, 8), image_key: str = "image/encoded",
                    label_key: str = "image/class/label", seed: int = 0) -> dict[str, list[np.ndarray]]:
    """ImageNet-style shards (train-00000-of-00003 ...) of PNG examples; files[split] is records per shard."""
    import tensorflow as tf

    root.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[np.ndarray]] = {}
    for offset, (split, counts) in enumerate(files.items()):
        written[split] = []
        for shard, count in enumerate(counts):
            images = random_images(count, (*size, 3), seed=seed + 100 * offset + shard)
            with tf.io.TFRecordWriter(str(root / f"{split}-{shard:05d}-of-{len(counts):05d}")) as writer:
                for index, image in enumerate(images):
                    feature = {image_key: tf.train.Feature(bytes_list=tf.train.BytesList(
                                   value=[encoded_image(image, "png")])),
                               label_key: tf.train.Feature(int64_list=tf.train.Int64List(value=[index % 3]))}
                    writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
            written[split] += list(images)
    return written


CLICK_SCHEMA = {"clicked": {"dtype": "int64", "label": True}, "price": {"dtype": "float32"},
                "visits": {"dtype": "int64"}, "position": {"dtype": "float32", "shape": [2]},
                "country": {"dtype": "string"}, "item": {"dtype": "int64"},
                "tags": {"dtype": "string", "shape": "variable"}}
CLICK_NUMERIC, CLICK_CATEGORICAL = ["price", "visits", "position"], ["country", "item", "tags"]
COUNTRIES, TAGS = ("fr", "de", "it", "es", "nl"), ("sale", "new", "red", "blue", "kids", "home")


def click_example(number: int, rng: np.random.Generator):
    """One click record: numeric, string, int64 and variable-length string features; clicks follow country and
    tags (a learnable signal)."""
    import tensorflow as tf

    country, tags = COUNTRIES[number % len(COUNTRIES)], list(rng.choice(TAGS, size=number % 4, replace=False))
    clicked = int((country in ("fr", "de")) != ("sale" in tags))
    values = {"clicked": [clicked], "price": [float(rng.uniform(0, 50))], "visits": [int(rng.integers(0, 300))],
              "position": [float(rng.uniform()), float(rng.uniform())], "country": [country.encode()],
              "item": [int(rng.integers(0, 1000))], "tags": [tag.encode() for tag in tags]}
    kinds = {"int64": lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v)),
             "float32": lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v)),
             "string": lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=v))}
    feature = {name: kinds[CLICK_SCHEMA[name]["dtype"]](value) for name, value in values.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature))


def write_click_records(root: Path, files: dict[str, list[int]], seed: int = 0) -> None:
    """train-00000-of-0000N ... shards of click records; files[split] is records per shard."""
    import tensorflow as tf

    root.mkdir(parents=True, exist_ok=True)
    number = 0
    for split, counts in files.items():
        for shard, count in enumerate(counts):
            rng = np.random.default_rng(seed + number)
            with tf.io.TFRecordWriter(str(root / f"{split}-{shard:05d}-of-{len(counts):05d}")) as writer:
                for _ in range(count):
                    writer.write(click_example(number, rng).SerializeToString())
                    number += 1
