"""A bundle for a model that reads token sequences: ``(input_ids, attention_mask)``, both
``(batch, sequence)`` int64, with batch and sequence axes free (a text classifier or
regressor).

What a task gives (:class:`SequenceInputExport`): the model, its parity examples already
tokenized as in training, the files inference needs besides the model, and its own manifest
entries and model card. What is the same for every such task is here: the format's export
attempts in order (the first that exports and passes parity wins: TorchScript, then
``torch.export``, …), parity batched by length and one example at a time (more than one batch
shape, as a deployed model sees them), latency of both engines at batch 1 and 32 taking
turns, sizes and ``export.json`` and the card, all written in a temporary folder beside the
destination and moved into place at the end (an interrupted export leaves no half bundle).
The counterpart of :mod:`entrena.exporting.fixed_bundle` for inputs whose length varies.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from entrena.errors import ConfigError, DataError
from entrena.exporting import onnx_format
from entrena.exporting.bundle import (
    ExportRequest,
    RunModel,
    finish_bundle,
    staged_bundle,
    versions,
)
from entrena.exporting.checks import (
    Thresholds,
    parity_report,
    percentiles_ms,
    time_calls,
    value_parity_report,
)
from entrena.exporting.formats import ExportFormat, load_runner
from entrena.exporting.inference import (
    Runner,
    TorchRunner,
    batch_inputs,
    predict_logits,
    require_finite,
)

__all__ = ["SequenceInputExport", "write_sequence_input_bundle", "BATCH", "BATCH_ONE_CHECKS"]

log = logging.getLogger("entrena")

BATCH = 32
"""Examples per call in the batched parity pass (sorted by length) and the larger latency
batch."""
BATCH_ONE_CHECKS = 8
"""Examples also run one at a time in the parity check (a second batch shape)."""


@dataclass
class SequenceInputExport:
    """What a task hands :func:`write_sequence_input_bundle`.

    Attributes:
        model: The trained model in eval mode; ``model(input_ids, attention_mask)`` returns
            (B, C) logits, or (B, 1) values in the target's units when ``values``.
        encoded: The parity examples' token ids (an
            :class:`~entrena.exporting.inference.EncodedTexts` of N examples), cut as in
            training.
        labels: Their true class indices (N,), true values (N,) float, or ``None``.
        dataset: Where the parity examples come from (``test``, a path …).
        max_length: Truncation length in tokens.
        length_limit: The longest input the model accepts (bounds the exported sequence
            axis).
        pad_id: The padding token id.
        trace_example: ``(input_ids, attention_mask)``, each (2, T) int64: traced once to
            export (two lengths, so neither axis is specialised).
        save_files: ``folder -> None``: writes the files inference needs besides the model
            (the tokenizer, ``entrena_model.json``).
        manifest: The task's own ``export.json`` entries (``preprocessing``, ``inputs``),
            placed after ``run``.
        card: Renders ``MODEL_CARD.md`` from the finished manifest.
        pytorch_bytes: Size of the PyTorch weights the bundle replaces (for the manifest).
        values: A regressor: parity compares values
            (:func:`~entrena.exporting.checks.value_parity_report`) instead of labels.
    """

    model: Any
    encoded: Any
    labels: np.ndarray | None
    dataset: str
    max_length: int
    length_limit: int
    pad_id: int
    trace_example: tuple[np.ndarray, np.ndarray]
    save_files: Callable[[Path], None]
    manifest: dict[str, Any]
    card: Callable[[dict[str, Any]], str]
    pytorch_bytes: int
    values: bool = False


def write_sequence_input_bundle(run: RunModel, spec: SequenceInputExport,
                                request: ExportRequest) -> dict[str, Any]:
    """Export ``spec.model`` in ``request.format`` into ``request.destination`` and check it.

    Returns:
        ``export.json``'s content (``parity.passed`` says whether the check passed; a failed
        check still moves the bundle into place, the caller decides what that means).

    Raises:
        DataError: No examples to check parity on.
        ConfigError: The installed exporter cannot write the opset.
    """
    import torch

    threads = request.threads
    if threads:
        torch.set_num_threads(threads)
    threads = threads or torch.get_num_threads()
    if not len(spec.encoded):
        raise DataError(f"no non-empty texts to check parity on ({spec.dataset}); pass "
                        "--parity-data FILE")
    logits_of = _logits_of(spec)
    torch_runner = TorchRunner(spec.model)
    log.info("parity data: %d %s examples; running the PyTorch model", len(spec.encoded),
             spec.dataset)
    reference = logits_of(torch_runner, set())
    require_finite(reference[0], model=run.paths.model,
                   inputs=f"parity texts ({spec.dataset})")
    example = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in spec.trace_example)
    destination = request.destination
    started = time.perf_counter()
    with staged_bundle(destination) as work:
        spec.save_files(work)
        info, parity, exported_runner, fallback = _export_attempts(
            request.format, spec.model, example, work, quantize=request.quantize,
            opset=request.opset if request.opset is not None else onnx_format.DEFAULT_OPSET,
            length_limit=spec.length_limit, threads=threads, reference=reference,
            labels=spec.labels, logits_of=logits_of, thresholds=request.thresholds,
            check=value_parity_report if spec.values else parity_report)
        parity["dataset"] = spec.dataset
        export_s = time.perf_counter() - started
        log.info("parity: max |Δ| %.2e, %s: %s", parity["max_abs_diff"],
                 f"max relative {parity['max_rel_diff']:.2e}" if spec.values else
                 f"label agreement {parity['label_agreement']:.4f}",
                 "passed" if parity["passed"] else "FAILED")
        manifest: dict[str, Any] = {
            "format": request.format.name, "quantize": request.quantize, **info,
            "export_time_s": export_s,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "run": str(run.paths.root.resolve()), **spec.manifest,
            "parity": parity, "latency": _latency_report(spec, [exported_runner, torch_runner],
                                                         request.latency_calls, threads),
            "versions": versions(),
        }
        if fallback:
            manifest["fallback_reason"] = fallback
        manifest["size_bytes"] = {"model_file": (work / info["file"]).stat().st_size,
                                  "bundle": 0, "pytorch_weights": spec.pytorch_bytes}
        finish_bundle(work, destination, manifest, spec.card)
    return manifest


def _logits_of(spec: SequenceInputExport) -> Callable[[Runner, set[tuple[int, int]]],
                                                      tuple[np.ndarray, np.ndarray]]:
    """``(runner, shapes) -> (batched, singles)``: the logits of every example batched by
    :data:`BATCH` (sorted by length), and of the first :data:`BATCH_ONE_CHECKS` run one at a
    time; every batch shape run is added to ``shapes``."""
    encoded, max_length, pad_id = spec.encoded, spec.max_length, spec.pad_id
    first = list(range(min(BATCH_ONE_CHECKS, len(encoded))))

    def logits_of(runner: Runner, shapes: set[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        batched = predict_logits(runner, encoded, max_length=max_length, pad_id=pad_id,
                                 batch_size=BATCH, shapes=shapes)
        singles = [runner(*batch_inputs(encoded, [i], max_length, pad_id)) for i in first]
        shapes.update((1, int(encoded.lengths(max_length)[i])) for i in first)
        return batched, np.concatenate(singles) if singles else batched[:0]

    return logits_of


def _latency_report(spec: SequenceInputExport, runners: list[Runner], calls: int,
                    threads: int) -> dict[str, Any]:
    """p50/p95 per runner at batch 1 and :data:`BATCH`, on the same real inputs (file
    order), the runners taking turns call by call."""
    log.info("timing %d calls per engine at batch 1 and %d", calls, BATCH)
    n = len(spec.encoded)
    report: dict[str, Any] = {}
    for size in (1, BATCH):
        inputs = []
        for call in range(calls):
            index = [(call * size + k) % n for k in range(size)]
            inputs.append(batch_inputs(spec.encoded, index, spec.max_length, spec.pad_id))
        times = time_calls({r.name: (lambda x, r=r: r(*x)) for r in runners}, inputs)
        for name, seconds in times.items():
            report.setdefault(name, {})[f"batch_{size}"] = percentiles_ms(seconds)
    report["threads"] = threads
    report["inputs"] = (f"the first parity examples in file order, cut to {spec.max_length} "
                        f"tokens, each batch padded to its longest; {calls} timed calls per "
                        "engine after 3 warm-up calls, the engines taking turns")
    return report


def _export_attempts(fmt: ExportFormat, model: Any, example: tuple[Any, ...], work: Path, *,
                     quantize: str | None, opset: int, length_limit: int, threads: int,
                     reference: tuple[np.ndarray, np.ndarray], labels: np.ndarray | None,
                     logits_of: Any, thresholds: Thresholds,
                     check: Any = None) -> tuple[dict[str, Any], dict[str, Any], Runner,
                                                 str | None]:
    """Try the format's attempts in order; the first that exports and passes parity wins (the
    last one's result stands when none passes)."""
    reasons: list[str] = []
    for number, attempt in enumerate(fmt.attempts):
        last = number == len(fmt.attempts) - 1
        target = work / attempt.file_name
        try:
            info = _export_one(attempt, model, example, work, target, quantize=quantize,
                               opset=opset, length_limit=length_limit)
            if not fmt.takes_opset:
                info["opset"] = None
            runner = load_runner(work, info, threads)
            shapes: set[tuple[int, int]] = set()
            exported = logits_of(runner, shapes)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed attempt falls back to the next one
            if last:
                raise
            reasons.append(f"{attempt.program}: {type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
            log.warning("%s export failed (%s); trying %s", attempt.program, reasons[-1],
                        fmt.attempts[number + 1].program)
            target.unlink(missing_ok=True)
            continue
        parity = (check or parity_report)(reference[0], exported[0], labels,
                                          quantized=quantize is not None,
                                          thresholds=thresholds,
                                          also_compare=(reference[1], exported[1]))
        parity["batch_shapes"] = len(shapes)
        parity["batch_sizes"] = sorted({b for b, _ in shapes})
        if parity["passed"] or last:
            return info, parity, runner, "; ".join(reasons) or None
        reasons.append(f"{attempt.program}: parity failed (max |Δlogit| "
                       f"{parity['max_abs_diff']:.2e}, {parity['criteria']})")
        log.warning("%s failed the parity check; trying %s", attempt.program,
                    fmt.attempts[number + 1].program)
        target.unlink(missing_ok=True)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _export_one(attempt: Any, model: Any, example: tuple[Any, ...], work: Path, target: Path,
                *, quantize: str | None, opset: int, length_limit: int) -> dict[str, Any]:
    """One attempt's export into ``target`` (int8 through a full-precision file first)."""
    if not quantize:
        return attempt.export(model, example, target, opset=opset, length_limit=length_limit)
    full = work / f"full-precision-{attempt.file_name}"
    info = attempt.export(model, example, full, opset=opset, length_limit=length_limit)
    info.update(onnx_format.quantize_int8(full, target))
    full.unlink()
    info["file"] = target.name
    return info
