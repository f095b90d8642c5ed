"""Export and prediction for tabular runs: an ONNX MLP plus the fitted preprocessing as JSON.

The bundle holds ``model.onnx`` (input ``features`` (B, F) float32, output ``logits``
(B, C)), ``preprocessing.json`` (the imputation, scaling and encoding fitted on the training
rows: :mod:`entrena.data.preprocessing`), ``entrena_model.json`` (task, labels, the raw
columns a row needs), ``export.json`` and ``MODEL_CARD.md``. Raw rows become features with
:func:`entrena.data.preprocessing.transform` in training, in the parity check and in
``entrena predict`` alike; the ONNX file holds the network only.
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
import pandas as pd

from entrena.core.files import dumps_strict, plain_mode
from entrena.data.preprocessing import invalid_numbers, transform, unseen_categories
from entrena.data.reading import format_rows
from entrena.data.sources import read_table
from entrena.errors import ConfigError, DataError
from entrena.exporting import onnx_format
from entrena.exporting.bundle import META_FILE, RunModel, finish_bundle
from entrena.exporting.card import _data_lines, _metric_rows, _num, _pct
from entrena.exporting.checks import Thresholds, parity_report, row_latency
from entrena.exporting.exporter import MAX_PARITY_EXAMPLES, _label_index, _versions
from entrena.exporting.inference import Runner, TorchRunner, require_finite, softmax

__all__ = ["TableRows", "table_rows", "write_table_bundle", "TablePredictor", "is_table_model",
           "SKIPPED_EMPTY_ROW"]

log = logging.getLogger("entrena")

PREPROCESSING_FILE = "preprocessing.json"
SKIPPED_EMPTY_ROW = "skipped: empty row"
BATCH = 32


def is_table_model(folder: Path) -> bool:
    """Whether a model folder or bundle holds a tabular model (its ``entrena_model.json``)."""
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return meta.get("task") == "tabular-classification"


class TableRows:
    """Rows (and labels) for the parity check.

    Attributes:
        frame: The rows, raw values (N, columns).
        labels: Label indices (N,), or ``None`` without a label column.
        dataset: Where they come from (``test``, ``validation``, ``train`` or a path).
    """

    def __init__(self, frame: pd.DataFrame, labels: np.ndarray | None, dataset: str):
        self.frame, self.labels, self.dataset = frame, labels, dataset


def _columns(meta: dict[str, Any]) -> list[str]:
    return [*meta.get("numeric", []), *meta.get("categorical", [])]


def table_rows(run: RunModel, parity_data: str | Path | None,
               limit: int | None = MAX_PARITY_EXAMPLES) -> TableRows:
    """The rows to check parity on: ``parity_data``, else the run's test file (validation,
    train when it had none); the first ``limit`` rows in file order.

    Raises:
        DataError: The file cannot be read or lacks a feature column the model needs.
    """
    label_column = run.config.get("data", {}).get("label_column", "label")
    if parity_data is not None:
        path, dataset = str(parity_data), str(parity_data)
    else:
        splits = run.data_report.get("splits", {})
        role = next((r for r in ("test", "validation", "train")
                     if splits.get(r, {}).get("file")), None)
        if role is None:
            raise DataError(f"{run.paths.data_report}: names no data file to check parity on; "
                            "pass --parity-data FILE (a file with the run's feature columns)")
        path, dataset = str(splits[role]["file"]), role
        if "://" not in path and not Path(path).exists():
            raise DataError(f"{path}: the run's {role} file, which the parity check reads, is "
                            "no longer there; pass --parity-data FILE (a file with the run's "
                            "feature columns)")
    frame = read_table(path, role="parity")
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in _columns(run.meta) if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: the parity data lacks the feature column(s) "
                        f"{', '.join(map(repr, missing))} the model was trained on (its columns: "
                        f"{', '.join(map(repr, frame.columns)) or 'none'}); pass --parity-data "
                        "with a file that has them")
    codes = None
    if label_column in frame.columns:
        codes = _label_index(frame[label_column], list(run.meta["labels"]))
        frame, codes = frame.loc[codes >= 0], codes[codes >= 0]
    if limit is not None and len(frame) > limit:
        frame, codes = frame.iloc[:limit], (codes[:limit] if codes is not None else None)
        dataset = f"{dataset} (first {limit} rows)"
    return TableRows(frame.reset_index(drop=True), codes, dataset)


def _logits(runner: Runner, features: np.ndarray, batch_size: int = BATCH) -> np.ndarray:
    """Logits (N, C) of features (N, F), ``batch_size`` rows a call."""
    parts = [runner(features[i:i + batch_size]) for i in range(0, len(features), batch_size)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def write_table_bundle(run: RunModel, fmt: Any, *, quantize: str | None, opset: int | None,
                       destination: Path, rows: TableRows, thresholds: Thresholds,
                       latency_calls: int = 50, threads: int | None = None) -> dict[str, Any]:
    """Export a tabular run's MLP into ``destination`` and return ``export.json``'s content.

    Args:
        run: The finished tabular run.
        fmt: The export format (only ``onnx``).
        quantize: ``"int8"`` or ``None``.
        opset: ONNX opset (default :data:`onnx_format.DEFAULT_OPSET`).
        destination: The bundle folder; replaced if it exists.
        rows: Rows for the parity check and the latency inputs.
        thresholds: Parity criteria.
        latency_calls: Timed calls per engine and batch size.
        threads: CPU threads for PyTorch and ONNX Runtime.

    Raises:
        ConfigError: A format other than ``onnx``.
        DataError: No rows to check parity on.
    """
    import torch

    from entrena.tasks.tabular_model import load_mlp

    if fmt.name != "onnx":
        raise ConfigError(f"--format {fmt.name}: a tabular model exports to onnx only (its "
                          "preprocessing travels as preprocessing.json); use --format onnx")
    if threads:
        torch.set_num_threads(threads)
    threads = threads or torch.get_num_threads()
    model, meta = load_mlp(run.paths.model)
    if not len(rows.frame):
        raise DataError(f"no rows to check parity on ({rows.dataset}); pass --parity-data FILE")
    features = transform(rows.frame, meta["preprocessing"])
    torch_runner = TorchRunner(model)
    reference = require_finite(_logits(torch_runner, features), model=run.paths.model,
                               inputs=f"parity rows ({rows.dataset})")
    singles_index = list(range(min(8, len(features))))
    reference_one = np.concatenate([torch_runner(features[i:i + 1]) for i in singles_index])
    example = {"features": torch.from_numpy(features[:2] if len(features) >= 2
                                            else np.repeat(features, 2, axis=0))}
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
        exported = _logits(runner, features)
        exported_one = np.concatenate([runner(features[i:i + 1]) for i in singles_index])
        parity = parity_report(reference, exported, rows.labels, quantized=quantize is not None,
                               thresholds=thresholds, also_compare=(reference_one, exported_one))
        parity["dataset"] = rows.dataset
        parity["batch_sizes"] = sorted({min(BATCH, len(features)), 1})
        log.info("parity: max |Δlogit| %.2e, label agreement %.4f: %s", parity["max_abs_diff"],
                 parity["label_agreement"], "passed" if parity["passed"] else "FAILED")
        latency = row_latency([runner, torch_runner], features, latency_calls)
        latency["threads"] = threads
        latency["inputs"] = (f"the first parity rows in file order, preprocessed; "
                             f"{latency_calls} timed calls per engine after 3 warm-up calls, "
                             "the engines taking turns (preprocessing not timed)")
        (work / PREPROCESSING_FILE).write_text(dumps_strict(meta["preprocessing"], indent=2) + "\n")
        meta_out = {k: v for k, v in meta.items() if k != "preprocessing"}
        meta_out["label_column"] = run.config.get("data", {}).get("label_column", "label")
        meta_out["on_bad_rows"] = run.config.get("data", {}).get("on_bad_rows", "skip")
        (work / META_FILE).write_text(dumps_strict(meta_out, indent=2) + "\n", encoding="utf-8")
        manifest: dict[str, Any] = {
            "format": "onnx", "quantize": quantize, **info,
            "export_time_s": time.perf_counter() - started,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "run": str(run.paths.root.resolve()), "task": "tabular-classification",
            "versions": _versions(),
            "preprocessing": {"labels": meta["labels"], "file": PREPROCESSING_FILE,
                              "numeric": meta.get("numeric", []),
                              "categorical": meta.get("categorical", [])},
            "inputs": {"features": f"float32 (batch, {meta['in_features']}), the rows after "
                                   "preprocessing.json",
                       "logits": "float32 (batch, classes), classes in labels order"},
            "parity": parity, "latency": latency,
            "size_bytes": {"model_file": target.stat().st_size, "bundle": 0,
                           "pytorch_weights": (run.paths.model / "model.safetensors")
                           .stat().st_size},
        }
        finish_bundle(work, destination, manifest, lambda m: table_card(run, m))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest




def table_card(run: RunModel, manifest: dict[str, Any]) -> str:
    """``MODEL_CARD.md`` of a tabular bundle."""
    meta, metrics = run.meta, run.metrics
    labels = meta["labels"]
    parity = manifest["parity"]
    baseline = metrics.get("baseline", {})
    trees = baseline.get("boosted_trees", {}).get("test", {})
    test = metrics.get("test", {})
    return f"""# Model card: {run.config.get('name', run.paths.root.name)}

## Task
Tabular classification into {len(labels)} classes: {', '.join(f'`{x}`' for x in labels)}.
Inputs: numeric columns {', '.join(f'`{c}`' for c in meta.get('numeric', [])) or 'none'};
categorical columns {', '.join(f'`{c}`' for c in meta.get('categorical', [])) or 'none'}.
Missing numbers take the training median, numbers are standardised, categories one-hot
encoded (a category training never saw encodes as all zeros), all fitted on the training
rows only (`preprocessing.json`). Model: an MLP, hidden sizes {meta.get('hidden_sizes')}.

## Data
{chr(10).join(_data_lines(run))}

## Metrics
| metric | value |
|---|---|
{chr(10).join(_metric_rows(metrics))}

Boosted trees (scikit-learn `HistGradientBoostingClassifier`, the baseline) on test: accuracy
{_num(trees.get('accuracy'))}, macro-F1 {_num(trees.get('macro_f1'))} (this model:
{_num(test.get('accuracy'))}, {_num(test.get('macro_f1'))}).

## This export
- `model.onnx` ({manifest['program']}{', int8' if manifest.get('quantize') else ''}), opset
  {manifest.get('opset')}; made by {manifest['exporter']}
- Parity with the PyTorch model on {parity['examples']} {parity['dataset']} rows: max |Δlogit|
  {parity['max_abs_diff']:.2e}, label agreement {_pct(parity['label_agreement'])}:
  **{'passed' if parity['passed'] else 'FAILED'}**

## Limits
- Every row gets one of the labels above; probabilities are softmax outputs, not calibrated.
- Figures come from one data source; no check for bias or fairness across groups of people
  was run: do not use the labels for decisions about people without one.
"""


class TablePredictor:
    """A tabular model (a run's PyTorch MLP or an ONNX bundle) and its preprocessing.

    Args:
        folder: The run's ``model/`` folder or a bundle.
        kind: ``run`` or ``bundle``.
        manifest: The bundle's ``export.json`` (bundles only).
        threads: CPU threads.
    """

    def __init__(self, folder: Path, kind: str, manifest: dict[str, Any] | None = None,
                 threads: int | None = None):
        self.folder = folder
        if kind == "run":
            from entrena.tasks.tabular_model import load_mlp

            if threads:
                import torch

                torch.set_num_threads(threads)
            model, meta = load_mlp(folder)
            self.runner: Runner = TorchRunner(model)
            self.params = meta["preprocessing"]
        else:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            self.params = json.loads((folder / PREPROCESSING_FILE).read_text())
            self.runner = onnx_format.OnnxRunner(folder / (manifest or {}).get("file",
                                                                              "model.onnx"),
                                                 threads)
        self.labels: list[str] = list(meta["labels"])
        self.columns = _columns(meta)
        self.unseen: dict[str, int] = {}
        self.invalid: dict[str, dict[str, Any]] = {}

    def check_columns(self, columns: list[str], path: Path) -> None:
        """Raise unless every feature column the model needs is in the input.

        Raises:
            DataError: Names the missing columns and lists the input's.
        """
        missing = [c for c in self.columns if c not in columns]
        if missing:
            raise DataError(f"{path}: the input lacks the feature column(s) "
                            f"{', '.join(map(repr, missing))} the model was trained on; the "
                            f"input's columns are: {', '.join(map(repr, columns)) or 'none'}")

    def annotate(self, frame: pd.DataFrame, *, first_row: int, on_bad_rows: str,
                 batch_size: int = BATCH, missing: dict[str, np.ndarray] | None = None,
                 source: str = "input") -> tuple[pd.DataFrame, np.ndarray]:
        """``frame`` with ``predicted_label``, ``prob_<label>`` and ``status`` added.

        A row without any feature value is skipped (``status: skipped: empty row``) or, under
        ``on_bad_rows == "error"``, refused. Categories training never saw are counted in
        ``self.unseen`` (per column) and encoded as unknown. A numeric cell that is not a
        finite number (``abc``, ``inf``) takes the training median and is counted in
        ``self.invalid`` (per column: ``count`` and the first row numbers), or is refused
        under ``on_bad_rows == "error"``.

        Args:
            missing: Per column, the cells the reader found missing (``NA`` in a CSV …):
                missing values, as training reads them.
            source: The input file, for messages.

        Raises:
            DataError: ``on_bad_rows == "error"`` and the chunk has empty rows or cells that
                are not numbers in a numeric column (named).
        """
        from entrena.exporting.prediction import output_columns

        values = frame[self.columns].copy()
        for column, mask in (missing or {}).items():
            if column in values.columns and mask is not None:
                values.loc[np.asarray(mask, dtype=bool), column] = np.nan
        blank = values.isna() | values.astype(str).apply(lambda c: c.str.strip().eq(""))
        empty = blank.all(axis=1).to_numpy()
        if on_bad_rows == "error" and empty.any():
            rows = (np.flatnonzero(empty) + first_row).tolist()
            raise DataError(f"{source}: input rows {', '.join(map(str, rows[:10]))} have no "
                            "feature value; fix or remove them, or pass --on-bad-rows skip")
        invalid = {c: rows[~empty[rows]] for c, rows in invalid_numbers(values, self.params)
                   .items()}
        invalid = {c: rows for c, rows in invalid.items() if len(rows)}
        if on_bad_rows == "error" and invalid:
            column, rows = next(iter(invalid.items()))
            shown = ", ".join(repr(str(v).strip()) for v in values[column].iloc[rows[:3]])
            raise DataError(f"{source}: input rows {format_rows((rows + first_row).tolist())}: "
                            f"numeric column {column!r} holds {shown}, not a finite number; fix "
                            "them, or pass --on-bad-rows skip to give them the training median")
        for column, rows in invalid.items():
            entry = self.invalid.setdefault(column, {"count": 0, "rows": []})
            entry["count"] += len(rows)
            entry["rows"] += (rows + first_row).tolist()[:10 - len(entry["rows"])]
        out = frame.drop(columns=[c for c in output_columns(self.labels) if c in frame.columns])
        probs = np.full((len(frame), len(self.labels)), np.nan)
        predicted = np.full(len(frame), None, dtype=object)
        kept = values.loc[~empty]
        if len(kept):
            for column, count in unseen_categories(kept, self.params).items():
                self.unseen[column] = self.unseen.get(column, 0) + count
            logits = _logits(self.runner, transform(kept, self.params), batch_size)
            require_finite(logits, model=self.folder, inputs=f"rows of {source}")
            probs[~empty] = softmax(logits)
            predicted[~empty] = np.asarray(self.labels, dtype=object)[logits.argmax(1)]
        out["predicted_label"] = predicted
        for j, label in enumerate(self.labels):
            out[f"prob_{label}"] = probs[:, j]
        out["status"] = np.where(empty, SKIPPED_EMPTY_ROW, "ok")
        return out, empty
