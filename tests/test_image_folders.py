"""Image folders as published: split folders named in any case, no test folder, or only a training folder (a
fixed part of each class validates); and an ImageNet-style train/ val/ folder trains on real servers."""

from __future__ import annotations

import json

import pytest

import datakit
from clusterkit import derive_cluster, run_module
from common.errors import UserError
from data.image_layout import image_folders

COUNTS = {"cat": 5, "dog": 4, "owl": 3}


def _names(paths) -> list[str]:
    return sorted("/".join(p.split("/")[-3:]) for p in paths)


def test_imagenet_names_and_no_test_folder(tmp_path):
    datakit.write_image_folders(tmp_path, {"train": COUNTS, "validation": {"cat": 1, "dog": 1, "owl": 1}},
                                size=(4, 4), folders={"train": "train", "validation": "val"})
    found = image_folders(tmp_path)
    assert found.classes == ("cat", "dog", "owl")
    assert len(found.files["train"][0]) == 12 and found.files["test"] == found.files["validation"]
    assert found.note == "training on train/, validating on val/, testing on the validation images (no test folder)"


def test_names_in_any_case(tmp_path):
    datakit.write_image_folders(tmp_path, {split: {"cat": 1} for split in ("train", "validation", "test")},
                                size=(4, 4), folders={"train": "TRAIN", "validation": "Validation", "test": "test"})
    assert image_folders(tmp_path).note == "training on TRAIN/, validating on Validation/, testing on test/"


def test_only_a_training_folder_carves_the_last_of_each_class(tmp_path):
    datakit.write_image_folders(tmp_path, {"train": {"cat": 20, "dog": 10, "owl": 1}}, size=(4, 4),
                                folders={"train": "train"})
    found = image_folders(tmp_path, 0.1)
    validation = _names(found.files["validation"][0])
    assert validation == ["train/cat/8.png", "train/cat/9.png", "train/dog/9.png"]  # last by name; owl keeps its one
    assert not set(validation) & set(_names(found.files["train"][0])) and len(found.files["train"][0]) == 28
    assert image_folders(tmp_path, 0.1) == found  # the same every time
    assert "validating on the last 10% of each class's images there" in found.note


def test_too_few_images_to_carve_is_one_line(tmp_path):
    datakit.write_image_folders(tmp_path, {"train": {"cat": 1}}, size=(4, 4), folders={"train": "train"})
    with pytest.raises(UserError, match="holds too few images to carve a validation part") as raised:
        image_folders(tmp_path)
    assert len(str(raised.value).splitlines()) == 1


@pytest.mark.cluster
def test_an_imagenet_style_folder_trains(shared_servers, tmp_path):
    data = tmp_path / "imagenet"
    datakit.write_image_folders(data, {"train": COUNTS, "validation": {"cat": 2, "dog": 2, "owl": 1}}, size=(8, 8),
                                folders={"train": "train", "validation": "val"})
    output = tmp_path / "output"
    cluster = derive_cluster(shared_servers, tmp_path, evaluator=False, training={
        "dataset": "image_folder", "data_dir": str(data), "image_size": [8, 8], "model": "mlp", "epochs": 2,
        "per_worker_batch": 4, "steps_per_execution": 1, "lr_decay_epochs": [], "output_dir": str(output)})
    result = run_module("coordinator.train", "--cluster", str(cluster), timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "image_folder: training on train/, validating on val/, testing on the validation images" in result.stderr
    summary = json.loads((output / "summary.json").read_text())
    assert summary["status"] == "complete" and "accuracy" in summary["final_metrics"]
    assert (output / "model" / "model.keras").exists()
