"""An ONNX bundle for a model whose inputs vary only in batch size (table rows, images).

What a task gives (:class:`FixedInputExport`): the model, its parity inputs as one array
(already preprocessed as in training), the files inference needs besides the model, and its
own manifest entries and model card. What is the same for every such task is here: the ONNX
export with a dynamic batch axis (int8 on request), parity at two batch shapes, latency of
both engines taking turns, sizes, ``export.json`` and the card, all written in a temporary
folder and moved into place.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from entrena.errors import DataError
from entrena.exporting import onnx_format
from entrena.exporting.bundle import (
    ExportRequest,
    RunModel,
    finish_bundle,
    staged_bundle,
    versions,
)
from entrena.exporting.checks import parity_report, row_latency, value_parity_report
from entrena.exporting.inference import TorchRunner, batched_logits, require_finite

__all__ = ["FixedInputExport", "write_fixed_input_bundle", "BATCH", "SINGLE_CHECKS"]

log = logging.getLogger("entrena")

BATCH = 32
"""Examples per call in the batched parity pass."""
SINGLE_CHECKS = 8
"""Examples also run one at a time in the parity check (a second batch shape)."""


@dataclass
class FixedInputExport:
    """What a task hands :func:`write_fixed_input_bundle`.

    Attributes:
        model: The trained model in eval mode; ``model(**{input_name: x})`` returns logits
            (B, C).
        input_name: The model's one input (``features``, ``pixel_values``).
        inputs: Parity inputs (N, ...) float32, preprocessed as in training.
        labels: Their true class indices (N,), or ``None``.
        dataset: Where the parity inputs come from (``test``, a path …).
        files: Files the bundle holds besides the model: name → text (``entrena_model.json``,
            ``preprocessing.json`` …).
        manifest: The task's own ``export.json`` entries (``preprocessing``, ``inputs``).
        card: Renders ``MODEL_CARD.md`` from the finished manifest.
        latency_inputs: What the latency inputs are, in words (``the first parity rows …``).
        not_timed: What latency leaves out (``preprocessing``, ``decoding``).
    """

    model: Any
    input_name: str
    inputs: np.ndarray
    labels: np.ndarray | None
    dataset: str
    files: dict[str, str]
    manifest: dict[str, Any]
    card: Callable[[dict[str, Any]], str]
    latency_inputs: str
    not_timed: str = "preprocessing"
    values: bool = False
    """A regressor: the model answers (B, 1) values in the target's units, ``labels`` are
    the true values (N,) float (NaN where unknown), and parity compares values
    (:func:`~entrena.exporting.checks.value_parity_report`) instead of labels."""


def write_fixed_input_bundle(run: RunModel, spec: FixedInputExport,
                             request: ExportRequest) -> dict[str, Any]:
    """Export ``spec.model`` to ONNX in ``request.destination`` and check it.

    Returns:
        ``export.json``'s content (``parity.passed`` says whether the check passed).

    Raises:
        DataError: No inputs to check parity on.
        ConfigError: The installed exporter cannot write the opset.
    """
    import torch

    threads = request.threads
    if threads:
        torch.set_num_threads(threads)
    threads = threads or torch.get_num_threads()
    inputs = spec.inputs
    if not len(inputs):
        raise DataError(f"nothing to check parity on ({spec.dataset}); pass --parity-data")
    torch_runner = TorchRunner(spec.model)
    singles = list(range(min(SINGLE_CHECKS, len(inputs))))
    reference = require_finite(batched_logits(torch_runner, inputs, BATCH),
                               model=run.paths.model, inputs=f"parity inputs ({spec.dataset})")
    reference_one = np.concatenate([torch_runner(inputs[i:i + 1]) for i in singles])
    two = inputs[:2] if len(inputs) >= 2 else np.repeat(inputs, 2, axis=0)
    example = {spec.input_name: torch.from_numpy(np.ascontiguousarray(two))}
    destination = request.destination
    started = time.perf_counter()
    with staged_bundle(destination) as work:
        target = work / "model.onnx"
        opset = request.opset if request.opset is not None else onnx_format.DEFAULT_OPSET
        if request.quantize:
            full = work / "full-precision-model.onnx"
            info = onnx_format.export_onnx_batched(spec.model, example, full, opset=opset)
            info.update(onnx_format.quantize_int8(full, target))
            full.unlink()
            info["file"] = target.name
        else:
            info = onnx_format.export_onnx_batched(spec.model, example, target, opset=opset)
        runner = onnx_format.OnnxRunner(target, threads)
        exported = batched_logits(runner, inputs, BATCH)
        exported_one = np.concatenate([runner(inputs[i:i + 1]) for i in singles])
        check = value_parity_report if spec.values else parity_report
        parity = check(reference, exported, spec.labels,
                       quantized=request.quantize is not None, thresholds=request.thresholds,
                       also_compare=(reference_one, exported_one))
        parity["dataset"] = spec.dataset
        parity["batch_sizes"] = sorted({min(BATCH, len(inputs)), 1})
        if spec.values:
            log.info("parity: max |Δvalue| %.2e (target units), max relative %.2e: %s",
                     parity["max_abs_diff"], parity["max_rel_diff"],
                     "passed" if parity["passed"] else "FAILED")
        else:
            log.info("parity: max |Δlogit| %.2e, label agreement %.4f: %s",
                     parity["max_abs_diff"], parity["label_agreement"],
                     "passed" if parity["passed"] else "FAILED")
        latency = row_latency([runner, torch_runner], inputs, request.latency_calls)
        latency["threads"] = threads
        latency["inputs"] = (f"{spec.latency_inputs}; {request.latency_calls} timed calls per "
                             "engine after 3 warm-up calls, the engines taking turns "
                             f"({spec.not_timed} not timed)")
        for name, text in spec.files.items():
            (work / name).write_text(text, encoding="utf-8")
        manifest: dict[str, Any] = {
            "format": "onnx", "quantize": request.quantize, **info,
            "export_time_s": time.perf_counter() - started,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "run": str(run.paths.root.resolve()), "task": run.meta.get("task"),
            "versions": versions(), **spec.manifest,
            "parity": parity, "latency": latency,
            "size_bytes": {"model_file": target.stat().st_size, "bundle": 0,
                           "pytorch_weights": sum(p.stat().st_size
                                                  for p in run.paths.model.iterdir()
                                                  if p.suffix in (".safetensors", ".pt"))},
        }
        finish_bundle(work, destination, manifest, spec.card)
    return manifest
