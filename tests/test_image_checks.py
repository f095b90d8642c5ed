"""The data checks images share with every task (``check_and_split``): label spelling, one
class left, ``data.group_column`` (a CSV of paths: groups on one side; a folder: refused),
labels of a CSV in the cache key."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import entrena
from conftest import run_cli, write_config
from entrena.errors import ConfigError, DataError
from test_image_task import bar_image


def folders(root: Path, layout: dict[str, dict[str, int]], seed: int = 0) -> dict[str, Path]:
    """``root/<role>/<class>/<i>.png``: ``layout[role][class]`` distinct bar images each (the
    bar of class i mod 3)."""
    rng = np.random.default_rng(seed)
    for role, classes in layout.items():
        for cls, (name, count) in enumerate(classes.items()):
            for i in range(count):
                bar_image(root / role / name / f"{i:03d}.png", cls % 3, rng)
    return {role: root / role for role in layout}


def config(data: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return {"name": "checks", "task": "image-classification",
            "data": {**{role: str(path) for role, path in data.items()},
                     "validation_fraction": 0.25, "decoded_cache": False, **extra},
            "model": {"name": "small-cnn"},
            "train": {"max_epochs": 1, "batch_size": 8, "seed": 0, "num_threads": 1},
            "tracking": {"enabled": False}}


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["check"] == name)


def test_class_folders_spelled_two_ways_are_warned_about(tmp_path: Path) -> None:
    data = folders(tmp_path, {"train": {"Cat": 4, "cat": 4, "dog": 4},
                              "test": {"Cat": 2, "cat": 2, "dog": 2}})
    report = entrena.prepare(write_config(config(data), tmp_path / "c.yaml"), quiet=True).report
    spelling = check(report, "label_spelling")
    assert spelling["found"] == 1 and spelling["status"] == "warning"
    assert "'Cat' / 'cat'" in spelling["message"]
    assert report["labels"] == ["Cat", "cat", "dog"]  # still separate classes, as the folders say


def test_a_single_class_left_after_the_checks_is_refused(tmp_path: Path) -> None:
    data = folders(tmp_path, {"train": {"a": 4}, "validation": {"a": 2, "b": 2},
                              "test": {"a": 2, "b": 2}})
    (data["train"] / "b").mkdir()
    for i in range(2):  # every training "b" is a test file: leakage drops them all
        (data["train"] / "b" / f"{i}.png").write_bytes(
            (data["test"] / "b" / f"{i:03d}.png").read_bytes())
    path = write_config(config(data), tmp_path / "c.yaml")
    result = run_cli("prepare", path, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {data['train']}: only the class 'a' is left in training once the data checks "
        "have run (images removed: 2 leakage); a classifier needs at least 2 classes: keep more "
        "images (data.checks.*) or add images of other classes")


def test_unseen_labels_name_the_files(tmp_path: Path) -> None:
    data = folders(tmp_path, {"train": {"a": 4, "b": 4}, "test": {"a": 2, "c": 1}})
    with pytest.raises(DataError, match=r"label\(s\) 'c' in test image c/000.png never occur"):
        entrena.prepare(write_config(config(data), tmp_path / "c.yaml"), quiet=True)


def test_group_column_on_an_image_folder_is_a_config_error(tmp_path: Path) -> None:
    data = folders(tmp_path, {"train": {"a": 4, "b": 4}})
    path = write_config(config(data, group_column="subject"), tmp_path / "c.yaml")
    with pytest.raises(ConfigError) as error:
        entrena.prepare(path, quiet=True)
    assert str(error.value) == (
        f"data.group_column: 'subject' names a column, but data.train ({data['train']}) is an "
        "image folder, which has none; list the training images in a CSV with that column "
        "(data.image_column, data.label_column) to keep each group on one side of the "
        "validation split, or remove the key")
    result = run_cli("prepare", path, cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def write_paths_csv(path: Path, rows: list[tuple[str, ...]],
                    header: tuple[str, ...] = ("image", "label", "subject")) -> Path:
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    return path


def test_group_column_keeps_a_csv_groups_images_on_one_side(tmp_path: Path) -> None:
    folders(tmp_path, {"images": {"a": 24, "b": 24}})
    rows = [(f"images/{name}/{i:03d}.png", name, f"{name}{i // 3}")  # 8 subjects of 3 per class
            for name in ("a", "b") for i in range(24)]
    train = write_paths_csv(tmp_path / "train.csv", rows)
    prepared = entrena.prepare(write_config(config({"train": train}, group_column="subject"),
                                            tmp_path / "c.yaml"), quiet=True)
    subject = {str(tmp_path / r[0]): r[2] for r in rows}
    splits = prepared.data.splits
    sides = {role: {subject[str(p)] for p in getattr(splits, role).paths}
             for role in ("train", "validation")}
    assert sides["train"] and sides["validation"] and not sides["train"] & sides["validation"]
    assert len(splits.train) + len(splits.validation) == 48
    assert prepared.report["validation_split"]["grouped_by"] == "subject"
    missing = write_config(config({"train": train}, group_column="patient"), tmp_path / "m.yaml")
    with pytest.raises(DataError, match=r"train.csv: data.group_column 'patient' not found "
                                        r"\(columns: image, label, subject\)"):
        entrena.prepare(missing, quiet=True)


def test_a_relabelled_csv_is_checked_again(tmp_path: Path) -> None:
    folders(tmp_path, {"images": {"a": 6, "b": 6}})
    rows = [(f"images/{name}/{i:03d}.png", name, "") for name in ("a", "b") for i in range(6)]
    train = write_paths_csv(tmp_path / "train.csv", rows)
    path = write_config(config({"train": train}), tmp_path / "c.yaml")
    assert entrena.prepare(path, quiet=True).report["labels"] == ["a", "b"]
    write_paths_csv(train, [(p, "c" if label == "b" else label, s) for p, label, s in rows])
    again = entrena.prepare(path, quiet=True)
    assert again.report["from_cache"] is False and again.report["labels"] == ["a", "c"]
