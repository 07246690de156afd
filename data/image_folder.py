"""Image folders (train/, val/, test/ in any case, one sub-folder per class of jpg, png, bmp or gif files), resized."""

from __future__ import annotations

import tensorflow as tf

from data.image_layout import ImageFolders
from data.source import DataSource

CHANNELS = 3  # grey and RGBA files become RGB, as Keras' flow_from_directory does by default


def decode_image(encoded: tf.Tensor, image_size: tuple[int, int]) -> tf.Tensor:
    """jpg, png, bmp or gif bytes (a gif's first frame) as float32 RGB in [0, 1], resized to `image_size`."""
    image = tf.io.decode_image(encoded, channels=CHANNELS, expand_animations=False)
    return tf.image.resize(tf.cast(image, tf.float32) / 255.0, image_size)


def load(folders: ImageFolders, image_size: tuple[int, int]) -> DataSource:
    """Each image file is one read unit, so workers shard by file; labels are the sorted class names' positions."""
    image_size = tuple(image_size)

    def decode(path, label):
        return decode_image(tf.io.read_file(path), image_size), tf.cast(label, tf.int32)

    return DataSource(name="image_folder", input_shape=(*image_size, CHANNELS), num_classes=len(folders.classes),
                      sizes={split: len(paths) for split, (paths, _) in folders.files.items()},
                      units=folders.files, units_are_files=True, decode=decode,
                      record_name=lambda path, label: path, note=folders.note)
