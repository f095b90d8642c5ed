"""Export and prediction for image runs: an ONNX network plus the transforms as JSON.

The bundle holds ``model.onnx`` (input ``pixel_values`` (B, C, S, S) float32, output ``logits``
(B, K)), ``entrena_model.json`` (task, labels, model name and ``transforms``: input side S,
channels C, mean and std), ``export.json`` and ``MODEL_CARD.md``. Image files become
``pixel_values`` through the training code itself — decode, convert to the training mode,
resize to S × S, normalise (:mod:`entrena.data.image_batches`) — in the parity check and in
``entrena predict`` (:mod:`entrena.tasks.image_classification.predict`) alike; the ONNX file holds
the network only.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from entrena.core.files import dumps_strict
from entrena.data.image_batches import ImageTransforms, decode_resized
from entrena.data.images import list_images
from entrena.errors import DataError
from entrena.exporting.bundle import META_FILE, ExportRequest, RunModel, parity_source
from entrena.exporting.card import data_lines, metric_rows, num, pct
from entrena.exporting.fixed_bundle import FixedInputExport, write_fixed_input_bundle

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
    source, dataset = parity_source(run, parity_data, "a folder of class folders or a CSV of "
                                                      "image paths")
    listing = list_images(source, path_column=data.get("image_column") or "image",
                          label_column=data.get("label_column", "label"))
    transforms = ImageTransforms.from_dict(run.meta["transforms"])
    index_of = {name: i for i, name in enumerate(run.meta["labels"])}
    paths: list[Path] = []
    labels: list[int] = []
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


def write_image_bundle(run: RunModel, request: ExportRequest,
                       examples: ImageExamples) -> dict[str, Any]:
    """Export an image run's network as ``request`` asks and return ``export.json``'s
    content: ``model.onnx`` (input ``pixel_values`` (B, C, S, S) float32), the transforms in
    ``entrena_model.json``.

    Args:
        run: The finished image run.
        request: Format, quantisation, opset, destination, parity criteria, latency calls.
        examples: Images for the parity check and the latency inputs.
    """
    from entrena.tasks.image_classification.model import load_image_classifier

    model, meta = load_image_classifier(run.paths.model)
    data = run.config.get("data", {})
    meta_out = {**meta, "image_column": data.get("image_column") or "image",
                "label_column": data.get("label_column", "label"),
                "on_bad_rows": data.get("on_bad_rows", "skip")}
    t = meta["transforms"]
    spec = FixedInputExport(
        model=model, input_name="pixel_values", inputs=examples.pixels,
        labels=examples.labels, dataset=examples.dataset,
        files={META_FILE: dumps_strict(meta_out, indent=2) + "\n"},
        manifest={"preprocessing": {"labels": meta["labels"], "transforms": t},
                  "inputs": {"pixel_values": f"float32 (batch, {t['channels']}, {t['size']}, "
                                             f"{t['size']}): decoded, converted to "
                                             f"{'L' if int(t['channels']) == 1 else 'RGB'}, "
                                             "resized, (x / 255 - mean) / std",
                             "logits": "float32 (batch, classes), classes in labels order"}},
        card=lambda m: image_card(run, m),
        latency_inputs="the first parity images, decoded and normalised", not_timed="decoding")
    return write_fixed_input_bundle(run, spec, request)


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
{chr(10).join(data_lines(run))}

## Metrics
| metric | value |
|---|---|
{chr(10).join(metric_rows(metrics))}

Logistic regression on 8 x 8 thumbnails (the baseline) on test: accuracy
{num(logreg.get('accuracy'))}, macro-F1 {num(logreg.get('macro_f1'))} (this model:
{num(test.get('accuracy'))}, {num(test.get('macro_f1'))}).

## This export
- `model.onnx` ({manifest['program']}{', int8' if manifest.get('quantize') else ''}), opset
  {manifest.get('opset')}; made by {manifest['exporter']}
- Parity with the PyTorch model on {parity['examples']} {parity['dataset']}: max |Δlogit|
  {parity['max_abs_diff']:.2e}, label agreement {pct(parity['label_agreement'])}:
  **{'passed' if parity['passed'] else 'FAILED'}**

## Limits
- Every image gets one of the labels above; probabilities are softmax outputs, not
  calibrated. Images unlike the training images (other sizes, content, devices) may be
  labelled confidently and wrongly.
- No check for bias or fairness across groups of people was run.
"""
