"""``task: image-classification`` end to end: the CLI on a generated 3-class image folder."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import entrena
from conftest import EXAMPLES, run_cli, write_config
from entrena.errors import ConfigError

CLASSES = ("left", "right", "top")


def bar_image(path: Path, cls: int, rng: np.random.Generator, size: int = 12,
              mode: str = "L") -> Path:
    """A noisy dark image with a bright bar on the left, the right or the top."""
    pixels = rng.integers(0, 60, (size, size)).astype(np.uint8)
    if cls == 0:
        pixels[:, 1:4] = 220
    elif cls == 1:
        pixels[:, -4:-1] = 220
    else:
        pixels[1:4, :] = 220
    image = Image.fromarray(pixels, mode="L")
    path.parent.mkdir(parents=True, exist_ok=True)
    (image.convert(mode) if mode != "L" else image).save(path)
    return path


def image_folders(root: Path, train_per_class: int = 16, test_per_class: int = 6,
                  seed: int = 0) -> dict[str, Path]:
    """``train/<class>/`` and ``test/<class>/``; every third training image is RGB (mixed
    modes), plus a truncated JPEG and a text file among the training files."""
    rng = np.random.default_rng(seed)
    for role, count in (("train", train_per_class), ("test", test_per_class)):
        for cls, name in enumerate(CLASSES):
            for i in range(count):
                bar_image(root / role / name / f"{i:03d}.png", cls, rng,
                          mode="RGB" if role == "train" and i % 3 == 0 else "L")
    whole = bar_image(root / "full.jpg", 0, rng, size=48, mode="RGB").read_bytes()
    (root / "full.jpg").unlink()
    (root / "train" / "left" / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (root / "train" / "right" / "notes.txt").write_text("not an image\n")
    return {"train": root / "train", "test": root / "test"}


def image_config(data: dict[str, Path], **model: Any) -> dict[str, Any]:
    return {
        "name": "images", "task": "image-classification",
        "data": {"train": str(data["train"]), "test": str(data["test"]),
                 "validation_fraction": 0.25,
                 "augmentation": {"random_resized_crop": True, "crop_scale_min": 0.8,
                                  "horizontal_flip": False}},
        "model": {"name": "small-cnn", **model},
        "train": {"max_epochs": 8, "batch_size": 8, "learning_rate": 3e-3,
                  "early_stopping": {"enabled": False}, "seed": 0, "num_threads": 1},
        "tracking": {"enabled": False},
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One CLI training run on the generated folders (module-scoped: seconds)."""
    root = tmp_path_factory.mktemp("images")
    data = image_folders(root / "data")
    config = write_config(image_config(data), root / "config.yaml")
    result = run_cli("train", config, "--json", cwd=root, ENTRENA_CACHE_DIR=str(root / "cache"))
    return {"root": root, "data": data, "config": config, "result": result,
            "run": root / "runs" / "images"}


def test_train_end_to_end_on_a_generated_folder(trained: dict[str, Any]) -> None:
    result = trained["result"]
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads(result.stdout)
    # three bright-bar classes a small CNN separates; a broken pipeline stays near 1/3
    assert metrics["test"]["accuracy"] >= 0.8
    assert metrics["data"]["test_rows"] == 18
    run = trained["run"]
    assert (run / "model" / "model.safetensors").is_file()
    meta = json.loads((run / "model" / "entrena_model.json").read_text())
    assert meta["task"] == "image-classification" and meta["labels"] == list(CLASSES)
    assert meta["transforms"]["channels"] == 3  # RGB and L files mixed: converted to RGB
    assert meta["transforms"]["size"] == 12


def test_bad_files_are_skipped_and_counted_in_the_report(trained: dict[str, Any]) -> None:
    assert trained["result"].returncode == 0, trained["result"].stderr[-3000:]
    report = json.loads((trained["run"] / "data_report.json").read_text())
    train = report["splits"]["train"]
    assert train["bad_files"] == 2
    reasons = {Path(s["path"]).name: s["reason"] for s in train["skipped_files"]}
    assert reasons["notes.txt"] == "not an image Pillow can read"
    assert reasons["truncated.jpg"].startswith("damaged image")
    assert train["rows_read"] == 50 and train["rows_kept"] + \
        train["rows_removed"]["held_out_for_validation"] == 48
    assert report["images"]["training_modes"].keys() == {"L", "RGB"}
    assert "skipped 2 of 50 entries" in trained["result"].stderr


def test_prepare_twice_reads_the_cache(tmp_path: Path) -> None:
    data = image_folders(tmp_path / "data", train_per_class=4, test_per_class=2)
    config = write_config(image_config(data), tmp_path / "config.yaml")
    first = entrena.prepare(config, quiet=True)
    second = entrena.prepare(config, quiet=True)
    assert first.report["from_cache"] is False
    assert second.report["from_cache"] is True
    assert second.report["splits"]["train"]["bad_files"] == 2
    first_data, second_data = first.data, second.data
    assert first_data.transforms == second_data.transforms
    for role in ("train", "validation", "test"):  # the decoded cache, memory-mapped back
        assert np.array_equal(first_data.decoded[role], second_data.decoded[role])


def test_duplicate_and_leaked_files_are_found(tmp_path: Path) -> None:
    data = image_folders(tmp_path / "data", train_per_class=6, test_per_class=2)
    left = data["train"] / "left"
    (left / "copy.png").write_bytes((left / "001.png").read_bytes())
    (left / "leak.png").write_bytes((data["test"] / "left" / "000.png").read_bytes())
    config = write_config(image_config(data), tmp_path / "config.yaml")
    report = entrena.prepare(config, quiet=True).report
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["exact_duplicates"]["found"] == 1
    assert checks["leakage"]["found"] == 1
    assert report["splits"]["train"]["rows_removed"]["leakage"] == 1
    from entrena.api.preparing import DataCheckFailed

    with pytest.raises(DataCheckFailed) as failed:  # exit 3, the report written first
        entrena.prepare(config, overrides=["data.checks.leakage=error"], quiet=True)
    assert failed.value.exit_code == 3
    assert {c["check"]: c["status"] for c in failed.value.report["checks"]}["leakage"] == \
        "failed"


def test_a_single_class_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(4):
        bar_image(tmp_path / "train" / "only" / f"{i}.png", 0, rng)
    config = image_config({"train": tmp_path / "train", "test": tmp_path / "train"})
    result = run_cli("train", write_config(config, tmp_path / "config.yaml"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'train'}: the training images hold a single class ('only'); a "
        "classifier needs at least 2: add a subfolder (or CSV label) per class")


def test_an_unknown_timm_name_lists_close_names(tmp_path: Path) -> None:
    data = {"train": tmp_path / "missing", "test": tmp_path / "missing"}
    config = write_config(image_config(data, name="resnet81"), tmp_path / "config.yaml")
    result = run_cli("train", config, cwd=tmp_path)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.startswith("error: model.name: 'resnet81' is not a timm model nor 'small-cnn'")
    assert "closest names: resnet18" in line and len(line.splitlines()) == 1


def test_an_image_config_without_a_model_name_says_so(tmp_path: Path) -> None:
    config = image_config({"train": tmp_path, "test": tmp_path})
    del config["model"]
    with pytest.raises(ConfigError, match=r"^model.name: task image-classification needs a "
                                          r"model name: small-cnn for tiny images, or a timm"):
        entrena.prepare(config, quiet=True)


def test_csv_of_paths_trains(tmp_path: Path) -> None:
    data = image_folders(tmp_path / "images", train_per_class=6, test_per_class=2)
    for role in ("train", "test"):
        with (tmp_path / f"{role}.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["file", "kind"])
            for path in sorted(data[role].rglob("*.png")):
                writer.writerow([str(path.relative_to(tmp_path)), path.parent.name])
    config = image_config({"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"})
    config["data"].update({"image_column": "file", "label_column": "kind"})
    config["train"]["max_epochs"] = 1
    result = entrena.train(write_config(config, tmp_path / "config.yaml"))
    assert result.metrics["data"]["labels"] == list(CLASSES)
    assert result.metrics["data"]["test_rows"] == 6


def test_the_digits_example_plans(digits_data: Path) -> None:
    result = entrena.plan(EXAMPLES / "digits" / "config.yaml", local_only=True)
    model = result.document["model"]
    assert model["name"] == "small-cnn" and model["parameters"] > 0
    assert model["flops_per_sample"] > 0
    assert result.document["options"][0]["fits"]


def test_export_parity_and_predict(trained: dict[str, Any], tmp_path: Path) -> None:
    assert trained["result"].returncode == 0, trained["result"].stderr[-3000:]
    run = trained["run"]
    result = entrena.export(run, output=tmp_path / "bundle", latency_calls=3)
    parity = result.report["parity"]
    assert result.passed and parity["max_abs_diff"] <= 1e-4
    assert parity["examples"] == 18 and parity["dataset"].startswith("test")
    meta = json.loads((tmp_path / "bundle" / "entrena_model.json").read_text())
    assert meta["transforms"]["size"] == 12 and (tmp_path / "bundle" / "model.onnx").is_file()
    assert {"entrena", "torch", "onnxruntime"} <= set(result.report["versions"])
    umask = os.umask(0o022)
    os.umask(umask)  # the bundle folder is not mkdtemp's owner-only 0700
    assert (tmp_path / "bundle").stat().st_mode & 0o777 == 0o777 & ~umask

    folder = tmp_path / "new"
    rng = np.random.default_rng(5)
    for i, cls in enumerate((0, 1, 2, 2)):
        bar_image(folder / f"{i}.png", cls, rng, size=20)  # another size: resized
    (folder / "readme.txt").write_text("not an image")
    outputs = {}
    for source in (run, tmp_path / "bundle"):
        out = tmp_path / f"{source.name}.csv"
        summary = entrena.predict(source, folder, output=out).summary
        assert summary["rows"] == {"read": 5, "predicted": 4, "skipped": 1}
        outputs[source.name] = out.read_text().splitlines()
    rows = list(csv.DictReader(outputs["bundle"]))
    assert [r["path"] for r in rows] == ["0.png", "1.png", "2.png", "3.png", "readme.txt"]
    assert rows[-1]["status"] == "skipped: not an image Pillow can read"
    assert rows[-1]["predicted_label"] == ""
    # 20 x 20 images resized to the 12 x 12 of training keep their bar
    assert [r["predicted_label"] for r in rows[:4]] == ["left", "right", "top", "top"]
    torch_rows = list(csv.DictReader(outputs[run.name]))
    assert [r["predicted_label"] for r in rows] == [r["predicted_label"] for r in torch_rows]
    probs = np.array([[float(r[f"prob_{c}"]) for c in CLASSES] for r in rows[:4]])
    torch_probs = np.array([[float(r[f"prob_{c}"]) for c in CLASSES] for r in torch_rows[:4]])
    assert np.allclose(probs.sum(1), 1.0, atol=1e-5) and np.allclose(probs, torch_probs,
                                                                      atol=1e-5)
    # a CSV of paths (relative to the CSV, in the training's image column): its rows kept
    listing = tmp_path / "list.csv"
    listing.write_text("id,image\n7,new/1.png\n8,new/missing.png\n")
    summary = entrena.predict(tmp_path / "bundle", listing, output=tmp_path / "out.csv").summary
    assert summary["rows"] == {"read": 2, "predicted": 1, "skipped": 1}
    rows = list(csv.DictReader((tmp_path / "out.csv").read_text().splitlines()))
    assert [(r["id"], r["predicted_label"]) for r in rows] == [("7", "right"), ("8", "")]
    assert rows[1]["status"] == "skipped: missing file"
    # loaded once, answering a DataFrame of absolute paths in memory (the pyfunc's path)
    from entrena.api.predicting import load_predictor

    predictor = load_predictor(tmp_path / "bundle")
    frame = pd.DataFrame({"image": [str(folder / "1.png"), str(folder / "missing.png")]})
    answer = predictor.predict(frame)
    assert answer["predicted_label"].tolist()[:1] == ["right"]
    assert answer["status"].tolist() == ["ok", "skipped: missing file"]
    # the CLI's closing line names no skip reason when there is none (it said 'empty text')
    good = tmp_path / "good"
    good.mkdir()
    for name in ("0.png", "1.png"):
        (good / name).write_bytes((folder / name).read_bytes())
    cli = run_cli("predict", tmp_path / "bundle", "-i", good, "-o", tmp_path / "good.csv",
                  cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert "2 rows predicted, 0 skipped with onnxruntime" in cli.stderr
    assert "empty text" not in cli.stderr


def test_sigterm_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Augmented batches decoded by a worker process: a resumed run repeats them exactly."""
    import io
    import os
    import signal

    from rich.console import Console

    from entrena.core.callback import Callback
    from entrena.errors import Interrupted

    class At(Callback):
        def __init__(self, step: int):
            self.step, self.done = step, False

        def on_batch_end(self, state: Any) -> None:
            if state.step == self.step and not self.done:
                self.done = True
                os.kill(os.getpid(), signal.SIGTERM)

    data = image_folders(tmp_path / "data", train_per_class=8, test_per_class=2)
    config = image_config(data)
    config["data"].update({"decoded_cache": False, "num_workers": 1})
    config["train"].update({"max_epochs": 2, "deterministic": True,
                            "checkpoint": {"every_steps": 2, "every_minutes": None}})

    def files(run: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((run / "model").iterdir())}

    console = Console(file=io.StringIO())
    reference = entrena.train(config, run_dir=tmp_path / "reference", console=console)
    with pytest.raises(Interrupted) as raised:
        entrena.train(config, run_dir=tmp_path / "run", callbacks=[At(4)], console=console)
    assert raised.value.step == 4  # 3 batches an epoch: the second batch of epoch 2
    resumed = entrena.train(config, run_dir=tmp_path / "run", console=console)
    assert resumed.resumed_from_step == 4
    assert files(tmp_path / "run") == files(tmp_path / "reference")  # bit for bit
    assert resumed.metrics["history"] == reference.metrics["history"]


@pytest.mark.slow
def test_a_timm_model_trains_and_exports_with_parity(tmp_path: Path) -> None:
    """mobilenetv3_small_100 at 32 x 32, one epoch (its dynamo ONNX export takes minutes on
    2 shared cores, hence slow)."""
    data = image_folders(tmp_path / "data", train_per_class=6, test_per_class=2)
    config = image_config(data, name="mobilenetv3_small_100", image_size=32)
    config["train"]["max_epochs"] = 1
    result = entrena.train(write_config(config, tmp_path / "config.yaml"))
    assert result.metrics["fit"]["steps"] >= 1
    meta = json.loads((result.run_dir / "model" / "entrena_model.json").read_text())
    assert meta["model_name"] == "mobilenetv3_small_100"
    exported = entrena.export(result.run_dir, latency_calls=3)
    assert exported.passed and exported.report["parity"]["max_abs_diff"] <= 1e-4
