"""Write a bundle from a finished run: export, check parity, time, describe.

The bundle is built in a temporary folder beside its destination and moved into place at the
end, so an interrupted export never leaves half a bundle. A failed parity check still moves
the bundle into place (with ``parity.passed: false``); the caller decides what that means.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from entrena.core.files import dumps_strict, plain_mode
from entrena.data.labels import LabelCleanup
from entrena.data.sources import read_table, require_columns
from entrena.data.tables import empty_values
from entrena.data.text_fields import describe_text_columns, join_text_columns, text_columns
from entrena.errors import ConfigError, DataError
from entrena.exporting import onnx_format
from entrena.exporting.bundle import (
    META_FILE,
    Preprocessing,
    RunModel,
    finish_bundle,
    parity_source,
    versions,
)
from entrena.exporting.checks import (
    MAX_PARITY_EXAMPLES,
    Thresholds,
    label_index,
    parity_report,
    percentiles_ms,
    time_calls,
    value_parity_report,
)
from entrena.exporting.formats import ExportFormat, load_runner
from entrena.exporting.inference import (
    Runner,
    TextEncoder,
    TorchRunner,
    batch_inputs,
    predict_logits,
    require_finite,
)
from entrena.tasks.text_classification.card import text_card

__all__ = ["ParityExamples", "parity_examples", "write_bundle", "EXAMPLE_TEXTS"]

log = logging.getLogger("entrena")

EXAMPLE_TEXTS = ("A short example.",
                 "A longer example sentence, so that the traced batch holds some padding.")
"""Traced once to export: two lengths, so batch and sequence axes are not specialised."""

BATCH_ONE_CHECKS = 8
"""Examples also run one at a time in the parity check (a second batch shape)."""


class ParityExamples:
    """Labelled texts for the parity check.

    Attributes:
        texts: The texts.
        labels: Label indices (N,), or ``None`` when the texts carry no labels.
        dataset: Where they come from (``test``, ``validation`` or a file path).
    """

    def __init__(self, texts: list[str], labels: np.ndarray | None, dataset: str):
        self.texts, self.labels, self.dataset = texts, labels, dataset


def parity_examples(run: RunModel, parity_data: str | Path | None,
                    limit: int | None = MAX_PARITY_EXAMPLES) -> ParityExamples:
    """Texts (and labels) to check parity on: the rows of ``parity_data``, else of the run's
    test file (its validation file, its training file when it had neither).

    Rows with an empty text are left out (as training leaves them out); rows whose label the
    model does not know are left out when the file has the label column; the first ``limit``
    rows in file order are kept.

    Raises:
        DataError: The file cannot be read or lacks the text column; the message suggests
            ``--parity-data``.
    """
    data = run.config.get("data", {})
    text_column, label_column = data.get("text_column", "text"), data.get("label_column", "label")
    labels = list(run.meta["labels"])
    path, dataset = parity_source(run, parity_data, "a file with the run's text column")
    try:
        frame = read_table(path, role="parity")
        names = text_columns(text_column)
        require_columns(frame, {("data.text_column" if len(names) == 1
                                 else f"data.text_column[{i}]"): c for i, c in enumerate(names)},
                        path=path, role="parity")
    except DataError as exc:
        hint = "" if parity_data is not None else (
            f"; the parity check reads the run's {dataset} file: pass --parity-data FILE (a "
            f"file with the {describe_text_columns(text_column)} column, and "
            f"{label_column!r} for accuracy)")
        raise DataError(f"{exc}{hint}") from None
    texts = join_text_columns(frame, text_column)
    keep = ~empty_values(texts).to_numpy()
    frame, texts = frame.loc[keep], texts.loc[keep]
    codes = None
    if run.meta.get("target"):  # a regressor: the true values (NaN where not a number)
        if label_column in frame.columns:
            codes = pd.to_numeric(frame[label_column], errors="coerce").to_numpy(np.float64)
    elif label_column in frame.columns and not run.meta.get("multi_label"):
        # (a multi-label model's parity is checked on its outputs alone)
        cleanup = LabelCleanup(dict(data.get("label_map") or {}), data.get("normalise_labels"))
        values = frame[label_column]
        if cleanup.active:  # the parity file's labels cleaned as training's were
            known = label_index(values, labels) >= 0
            values = [v if ok else cleanup.to_known([str(v).strip()], labels)[0]
                      for v, ok in zip(values, known, strict=True)]
        codes = label_index(values, labels)
        texts, codes = texts.loc[codes >= 0], codes[codes >= 0]
    if limit is not None and len(texts) > limit:
        texts = texts.iloc[:limit]
        codes = codes[:limit] if codes is not None else None
        dataset = f"{dataset} (first {limit} rows)"
    return ParityExamples([str(t) for t in texts], codes, dataset)


def _latency(runners: list[Runner], encoded: Any, prep: Preprocessing, pad_id: int,
             calls: int) -> dict[str, Any]:
    """p50/p95 per runner at batch 1 and 32, on the same real inputs (file order), the
    runners taking turns call by call."""
    n = len(encoded)
    report: dict[str, Any] = {}
    for size in (1, 32):
        inputs = []
        for call in range(calls):
            index = [(call * size + k) % n for k in range(size)]
            inputs.append(batch_inputs(encoded, index, prep.max_length, pad_id))
        times = time_calls({r.name: (lambda x, r=r: r(*x)) for r in runners}, inputs)
        for name, seconds in times.items():
            report.setdefault(name, {})[f"batch_{size}"] = percentiles_ms(seconds)
    return report


def write_bundle(run: RunModel, fmt: ExportFormat, *, quantize: str | None, opset: int | None,
                 destination: Path, examples: ParityExamples, thresholds: Thresholds,
                 latency_calls: int = 50, threads: int | None = None) -> dict[str, Any]:
    """Export the run's model into ``destination`` and return ``export.json``'s content.

    Args:
        run: The finished run.
        fmt: The format.
        quantize: ``"int8"`` or ``None``.
        opset: ONNX opset (ONNX only; default :data:`onnx_format.DEFAULT_OPSET`).
        destination: The bundle folder; replaced if it exists.
        examples: Texts (and labels) for the parity check and the latency inputs.
        thresholds: Parity criteria.
        latency_calls: Timed calls per engine and batch size.
        threads: CPU threads for PyTorch and ONNX Runtime (default: PyTorch's current count).

    Raises:
        ConfigError: The installed exporter cannot write the opset.
    """
    import torch

    from entrena.tasks.text_classification.model import load_classifier, model_length_limit

    if threads:
        torch.set_num_threads(threads)
    threads = threads or torch.get_num_threads()
    model, tokenizer, meta = load_classifier(run.paths.model)
    prep = run.preprocessing(model_length_limit(model.encoder.config, tokenizer))
    values = bool(meta.get("target"))  # a regressor: export it answering in target units
    if values:
        from entrena.tasks.regression import TargetScaler
        from entrena.tasks.target_units import TokensInTargetUnits

        model = TokensInTargetUnits(model, TargetScaler.from_dict(meta["target"])).eval()
    encoder = TextEncoder(tokenizer, prep)
    if not examples.texts:
        raise DataError(f"no non-empty texts to check parity on ({examples.dataset}); pass "
                        "--parity-data FILE")
    encoded = encoder.encode(examples.texts)
    first = list(range(min(BATCH_ONE_CHECKS, len(encoded))))

    def logits_of(runner: Runner, shapes: set[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """Logits of every example batched by 32 (sorted by length), and of the first few
        run one at a time: more than one batch shape, as a deployed model sees them."""
        batched = predict_logits(runner, encoded, max_length=prep.max_length,
                                 pad_id=encoder.pad_id, batch_size=32, shapes=shapes)
        singles = [runner(*batch_inputs(encoded, [i], prep.max_length, encoder.pad_id))
                   for i in first]
        shapes.update((1, int(encoded.lengths(prep.max_length)[i])) for i in first)
        return batched, np.concatenate(singles) if singles else batched[:0]

    torch_runner = TorchRunner(model)
    log.info("parity data: %d %s examples; running the PyTorch model", len(encoded),
             examples.dataset)
    reference = logits_of(torch_runner, set())
    require_finite(reference[0], model=run.paths.model,
                   inputs=f"parity texts ({examples.dataset})")
    ids, mask = batch_inputs(encoder.encode(EXAMPLE_TEXTS), [0, 1], prep.max_length,
                             encoder.pad_id)
    example = (torch.from_numpy(ids), torch.from_numpy(mask))

    destination.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.tmp-"))
    plain_mode(work, folder=True)
    try:
        tokenizer.save_pretrained(work)
        meta_out = {**meta, **prep.to_json(), "pad_token_id": encoder.pad_id}
        (work / META_FILE).write_text(dumps_strict(meta_out, indent=2) + "\n", encoding="utf-8")
        info, parity, exported_runner, fallback = _export_attempts(
            fmt, model, example, work, quantize=quantize,
            opset=opset if opset is not None else onnx_format.DEFAULT_OPSET,
            length_limit=prep.length_limit, threads=threads, reference=reference,
            labels=examples.labels, logits_of=logits_of, thresholds=thresholds,
            check=value_parity_report if values else parity_report)
        parity["dataset"] = examples.dataset
        export_s = time.perf_counter() - started
        log.info("parity: max |Δ| %.2e, %s: %s", parity["max_abs_diff"],
                 f"max relative {parity['max_rel_diff']:.2e}" if values else
                 f"label agreement {parity['label_agreement']:.4f}",
                 "passed" if parity["passed"] else "FAILED")
        log.info("timing %d calls per engine at batch 1 and 32", latency_calls)
        latency = _latency([exported_runner, torch_runner], encoded, prep, encoder.pad_id,
                           latency_calls)
        latency["threads"] = threads
        latency["inputs"] = (f"the first parity examples in file order, cut to "
                             f"{prep.max_length} tokens, each batch padded to its longest; "
                             f"{latency_calls} timed calls per engine after 3 warm-up calls, "
                             "the engines taking turns")
        manifest: dict[str, Any] = {
            "format": fmt.name, "quantize": quantize, **info, "export_time_s": export_s,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "run": str(run.paths.root.resolve()),
            "preprocessing": prep.to_json(),
            "inputs": {"input_ids": "int64 (batch, sequence)",
                       "attention_mask": "int64 (batch, sequence), 1 = real token",
                       "logits": "float32 (batch, 1): the predicted value in the target's units"
                                 if values else "float32 (batch, classes), classes in "
                                 "preprocessing.labels order"},
            "parity": parity, "latency": latency, "versions": versions(),
        }
        if fallback:
            manifest["fallback_reason"] = fallback
        pytorch_bytes = sum((run.paths.model / n).stat().st_size
                            for n in ("model.safetensors", "head.safetensors"))
        manifest["size_bytes"] = {"model_file": (work / info["file"]).stat().st_size,
                                  "bundle": 0, "pytorch_weights": pytorch_bytes}
        finish_bundle(work, destination, manifest, lambda m: text_card(run, m))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest


def _export_attempts(fmt: ExportFormat, model: Any, example: tuple[Any, Any], work: Path, *,
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
            if quantize:
                full = work / f"full-precision-{attempt.file_name}"
                info = attempt.export(model, example, full, opset=opset, length_limit=length_limit)
                info.update(onnx_format.quantize_int8(full, target))
                full.unlink()
                info["file"] = target.name
            else:
                info = attempt.export(model, example, target, opset=opset,
                                      length_limit=length_limit)
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

