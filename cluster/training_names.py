"""The names training options accept (models, data sets, losses, metrics, ...) and their defaults' constants."""

from __future__ import annotations

import re

from cluster import recommender_options as clicks

FILE_DATASETS = ("image_folder", "cifar10", "mnist", "tfrecord", "criteo")
IMAGE_SIZE = (224, 224)
SYNTHETIC_SHAPE, SYNTHETIC_EXAMPLES = (28, 28, 1), 4096  # the tutorial's MNIST-sized images
TFRECORD_IMAGE_KEY, TFRECORD_LABEL_KEY = "image/encoded", "image/class/label"  # as ImageNet's build scripts write
ONE_HOT_LOSSES = ("categorical_crossentropy", "categorical_focal_crossentropy", "categorical_hinge")
MODEL_NAMES = ("cnn", "mlp", "resnet", "mobilenet_v2", *clicks.RECOMMENDER_MODELS)
CONVOLUTIONAL_MODELS = ("cnn", "resnet", "mobilenet_v2")
RESIZED_DATASETS = ("image_folder", "tfrecord")  # images resized to image_size
DATASET_NAMES = ("digits", "synthetic", *FILE_DATASETS, "synthetic_criteo")
OPTIMIZER_NAMES = ("adam", "sgd", "rmsprop")
COLLECTIVE_NAMES = ("auto", "ring", "nccl")
LOOP_NAMES = ("fit", "custom")
USER_MODEL_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# Names tf_keras.losses.get / tf_keras.metrics.get resolve (tests/test_option_names.py proves it, so the lists
# cannot drift) that work with the labels the data sets give: class indices, or one-hot for ONE_HOT_LOSSES.
LOSS_NAMES = ("sparse_categorical_crossentropy", *ONE_HOT_LOSSES)
SPARSE_LABEL_METRICS = ("accuracy", "acc", "sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy",
                        "sparse_categorical_crossentropy")
ONE_HOT_LABEL_METRICS = ("accuracy", "acc", "categorical_accuracy", "top_k_categorical_accuracy",
                         "categorical_crossentropy")
METRIC_NAMES = tuple(dict.fromkeys(SPARSE_LABEL_METRICS + ONE_HOT_LABEL_METRICS))
MINIMISED_METRICS = ("loss", "sparse_categorical_crossentropy", "categorical_crossentropy",  # smaller is better
                     "log_loss")
MAX_SIDE = 8192  # pixels per image side, or elements per synthetic axis
VALIDATION_FRACTION = 0.1  # image_folder with only a training folder: this part of each class validates
SEED_LIMIT = 2**32  # numpy (tf_keras.utils.set_random_seed) takes seeds in [0, 2**32)
