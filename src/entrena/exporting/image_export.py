"""Export and prediction for image runs: an ONNX network plus the transforms as JSON.

The bundle holds ``model.onnx`` (input ``pixel_values`` (B, C, S, S) float32, output ``logits``
(B, K)), ``entrena_model.json`` (task, labels, model name and ``transforms``: input side S,
channels C, mean and std), ``export.json`` and ``MODEL_CARD.md``. Image files become
``pixel_values`` through the training code itself — decode, convert to the training mode,
resize to S × S, normalise (:mod:`entrena.data.image_batches`) — in the parity check and in
``entrena predict`` (:mod:`entrena.exporting.image_prediction`) alike; the ONNX file holds
the network only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from entrena.core.files import dumps_strict, plain_mode
from entrena.data.image_batches import ImageTransforms, decode_resized
from entrena.data.images import list_images
from entrena.errors import ConfigError, DataError
from entrena.exporting import onnx_format
from entrena.exporting.bundle import META_FILE, RunModel, finish_bundle
from entrena.exporting.card import _data_lines, _metric_rows, _num, _pct
from entrena.exporting.checks import Thresholds, parity_report, row_latency
from entrena.exporting.exporter import _versions
from entrena.exporting.inference import Runner, TorchRunner, require_finite

__all__ = ["ImageExamples", "image_examples", "write_image_bundle", "image_card",
           "is_image_model"]

log = logging.getLogger("entrena")

BATCH = 32
MAX_PARITY_IMAGES = 2000
"""Images the parity check runs (the first ones of the split, in listing order)."""


def is_image_model(folder: Path) -> bool:
    """Whether a model folder or bundle holds an image model (its ``entrena_model.json``)."""
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return meta.get("task") == "image-classification"


class ImageExamples:
    """Images (and labels) for the parity check.

    Attributes:
        pixels: Model inputs, float32 (N, C, S, S).
        labels: Label indices (N,), or ``None`` without labels.
        dataset: Where they come from (``test``, ``validation``, ``train`` or a path).
    """

    def __init__(self, pixels: np.ndarray, labels: np.ndarray | None, dataset: str):
        self.pixels, self.labels, self.dataset = pixels, labels, dataset


def _inputs(paths: list[Path], transforms: ImageTransforms) -> np.ndarray:
    """float32 (N, C, S, S) model inputs of image files (steps 1, 2 and 4 of training)."""
    import torch

    if not paths:
        return np.zeros((0, transforms.channels, transforms.size, transforms.size), np.float32)
    images = torch.stack([decode_resized(p, transforms.channels, transforms.size)
                          for p in paths])
    return transforms.normalise(images).numpy()


def image_examples(run: RunModel, parity_data: str | Path | None,
                   limit: int = MAX_PARITY_IMAGES) -> ImageExamples:
    """The images to check parity on: ``parity_data`` (a folder or CSV), else the run's test
    split (validation, train when it had none); the first ``limit`` readable images.

    Raises:
        DataError: No source, or no readable image in it.
    """
    data = run.config.get("data", {})
    if parity_data is not None:
        source, dataset = str(parity_data), str(parity_data)
    else:
        splits = run.data_report.get("splits", {})
        role = next((r for r in ("test", "validation", "train")
                     if splits.get(r, {}).get("file")), None)
        if role is None:
            raise DataError(f"{run.paths.data_report}: names no image folder to check parity "
                            "on; pass --parity-data FOLDER")
        source, dataset = str(splits[role]["file"]), role
    listing = list_images(source, path_column=data.get("image_column") or "image",
                          label_column=data.get("label_column", "label"))
    transforms = ImageTransforms.from_dict(run.meta["transforms"])
    index_of = {name: i for i, name in enumerate(run.meta["labels"])}
    paths, labels = [], []
    for path, label in zip(listing.paths, listing.labels, strict=True):
        if len(paths) >= limit:
            break
        try:
            decode_resized(path, transforms.channels, transforms.size)
        except (OSError, ValueError, SyntaxError):
            continue  # training skipped such files too
        paths.append(path)
        labels.append(index_of.get(str(label), -1))
    if not paths:
        raise DataError(f"{source}: no readable image to check parity on; pass --parity-data")
    codes = np.array(labels, dtype=np.int64)
    known = codes >= 0
    return ImageExamples(_inputs(paths, transforms), codes if known.all() else None,
                         f"{dataset} (first {len(paths)} images)")


def _logits(runner: Runner, pixels: np.ndarray, batch_size: int = BATCH) -> np.ndarray:
    """Logits (N, K) of inputs (N, C, S, S), ``batch_size`` images a call."""
    parts = [runner(pixels[i:i + batch_size]) for i in range(0, len(pixels), batch_size)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def write_image_bundle(run: RunModel, fmt: Any, *, quantize: str | None, opset: int | None,
                       destination: Path, examples: ImageExamples, thresholds: Thresholds,
                       latency_calls: int = 50, threads: int | None = None) -> dict[str, Any]:
    """Export an image run's network into ``destination`` and return ``export.json``'s content.

    Args:
        run: The finished image run.
        fmt: The export format (only ``onnx``).
        quantize: ``"int8"`` or ``None``.
        opset: ONNX opset (default :data:`onnx_format.DEFAULT_OPSET`).
        destination: The bundle folder; replaced if it exists.
        examples: Images for the parity check and the latency inputs.
        thresholds: Parity criteria.
        latency_calls: Timed calls per engine and batch size.
        threads: CPU threads for PyTorch and ONNX Runtime.

    Raises:
        ConfigError: A format other than ``onnx``.
    """
    import torch

    from entrena.tasks.image_model import load_image_classifier

    if fmt.name != "onnx":
        raise ConfigError(f"--format {fmt.name}: an image model exports to onnx only (its "
                          "transforms travel in entrena_model.json); use --format onnx")
    if threads:
        torch.set_num_threads(threads)
    threads = threads or torch.get_num_threads()
    model, meta = load_image_classifier(run.paths.model)
    pixels = examples.pixels
    torch_runner = TorchRunner(model)
    reference = require_finite(_logits(torch_runner, pixels), model=run.paths.model,
                               inputs="parity images")
    singles = list(range(min(8, len(pixels))))
    reference_one = np.concatenate([torch_runner(pixels[i:i + 1]) for i in singles])
    two = pixels[:2] if len(pixels) >= 2 else np.repeat(pixels, 2, axis=0)
    example = {"pixel_values": torch.from_numpy(np.ascontiguousarray(two))}
    destination.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.tmp-"))
    plain_mode(work, folder=True)
    try:
        target = work / "model.onnx"
        opset = opset if opset is not None else onnx_format.DEFAULT_OPSET
        if quantize:
            full = work / "full-precision-model.onnx"
            info = onnx_format.export_onnx_batched(model, example, full, opset=opset)
            info.update(onnx_format.quantize_int8(full, target))
            full.unlink()
            info["file"] = target.name
        else:
            info = onnx_format.export_onnx_batched(model, example, target, opset=opset)
        runner = onnx_format.OnnxRunner(target, threads)
        exported = _logits(runner, pixels)
        exported_one = np.concatenate([runner(pixels[i:i + 1]) for i in singles])
        parity = parity_report(reference, exported, examples.labels,
                               quantized=quantize is not None, thresholds=thresholds,
                               also_compare=(reference_one, exported_one))
        parity["dataset"] = examples.dataset
        parity["batch_sizes"] = sorted({min(BATCH, len(pixels)), 1})
        log.info("parity: max |Δlogit| %.2e, label agreement %.4f: %s", parity["max_abs_diff"],
                 parity["label_agreement"], "passed" if parity["passed"] else "FAILED")
        latency = row_latency([runner, torch_runner], pixels, latency_calls)
        latency["threads"] = threads
        latency["inputs"] = (f"the first parity images, decoded and normalised; "
                             f"{latency_calls} timed calls per engine after 3 warm-up calls, "
                             "the engines taking turns (decoding not timed)")
        data = run.config.get("data", {})
        meta_out = {**meta, "image_column": data.get("image_column") or "image",
                    "label_column": data.get("label_column", "label"),
                    "on_bad_rows": data.get("on_bad_rows", "skip")}
        (work / META_FILE).write_text(dumps_strict(meta_out, indent=2) + "\n", encoding="utf-8")
        t = meta["transforms"]
        manifest: dict[str, Any] = {
            "format": "onnx", "quantize": quantize, **info,
            "export_time_s": time.perf_counter() - started,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "run": str(run.paths.root.resolve()), "task": "image-classification",
            "versions": _versions(),
            "preprocessing": {"labels": meta["labels"], "transforms": t},
            "inputs": {"pixel_values": f"float32 (batch, {t['channels']}, {t['size']}, "
                                       f"{t['size']}): decoded, converted to "
                                       f"{'L' if int(t['channels']) == 1 else 'RGB'}, resized, "
                                       "(x / 255 - mean) / std",
                       "logits": "float32 (batch, classes), classes in labels order"},
            "parity": parity, "latency": latency,
            "size_bytes": {"model_file": target.stat().st_size, "bundle": 0,
                           "pytorch_weights": (run.paths.model / "model.safetensors")
                           .stat().st_size},
        }
        finish_bundle(work, destination, manifest, lambda m: image_card(run, m))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest




def image_card(run: RunModel, manifest: dict[str, Any]) -> str:
    """``MODEL_CARD.md`` of an image bundle."""
    meta, metrics = run.meta, run.metrics
    labels, t = meta["labels"], meta["transforms"]
    parity = manifest["parity"]
    logreg = metrics.get("baseline", {}).get("thumbnail_logreg", {}).get("test", {})
    test = metrics.get("test", {})
    return f"""# Model card: {run.config.get('name', run.paths.root.name)}

## Task
Image classification into {len(labels)} classes: {', '.join(f'`{x}`' for x in labels)}.
Model: `{meta.get('model_name')}`. Inputs: an image file, decoded, converted to
{'grayscale (L)' if int(t['channels']) == 1 else 'RGB'}, resized to {t['size']} x {t['size']}
pixels (aspect ratio not kept), scaled to [0, 1] and normalised with mean {t['mean']} and std
{t['std']}.

## Data
{chr(10).join(_data_lines(run))}

## Metrics
| metric | value |
|---|---|
{chr(10).join(_metric_rows(metrics))}

Logistic regression on 8 x 8 thumbnails (the baseline) on test: accuracy
{_num(logreg.get('accuracy'))}, macro-F1 {_num(logreg.get('macro_f1'))} (this model:
{_num(test.get('accuracy'))}, {_num(test.get('macro_f1'))}).

## This export
- `model.onnx` ({manifest['program']}{', int8' if manifest.get('quantize') else ''}), opset
  {manifest.get('opset')}; made by {manifest['exporter']}
- Parity with the PyTorch model on {parity['examples']} {parity['dataset']}: max |Δlogit|
  {parity['max_abs_diff']:.2e}, label agreement {_pct(parity['label_agreement'])}:
  **{'passed' if parity['passed'] else 'FAILED'}**

## Limits
- Every image gets one of the labels above; probabilities are softmax outputs, not
  calibrated. Images unlike the training images (other sizes, content, devices) may be
  labelled confidently and wrongly.
- No check for bias or fairness across groups of people was run.
"""
