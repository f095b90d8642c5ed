"""Export and prediction for tabular runs: an ONNX MLP plus the fitted preprocessing as JSON.

The bundle holds ``model.onnx`` (input ``features`` (B, F) float32, output ``logits``
(B, C)), ``preprocessing.json`` (the imputation, scaling and encoding fitted on the training
rows: :mod:`entrena.data.preprocessing`), ``entrena_model.json`` (task, labels, the raw
columns a row needs), ``export.json`` and ``MODEL_CARD.md``. Raw rows become features with
:func:`entrena.data.preprocessing.transform` in training, in the parity check and in
``entrena predict`` alike; the ONNX file holds the network only.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from entrena.core.files import dumps_strict
from entrena.data.preprocessing import as_numbers, style_of, transform
from entrena.data.sources import read_table
from entrena.errors import DataError
from entrena.exporting.bundle import META_FILE, ExportRequest, RunModel, parity_source
from entrena.exporting.card import data_lines, metric_rows, num, pct
from entrena.exporting.checks import (
    MAX_PARITY_EXAMPLES,
    label_index,
)
from entrena.exporting.fixed_bundle import FixedInputExport, write_fixed_input_bundle

__all__ = ["PREPROCESSING_FILE", "TableRows", "table_rows", "write_table_bundle"]

log = logging.getLogger("entrena")

PREPROCESSING_FILE = "preprocessing.json"
BATCH = 32


class TableRows:
    """Rows (and labels) for the parity check.

    Attributes:
        frame: The rows, raw values (N, columns).
        labels: Label indices (N,), or ``None`` without a label column.
        dataset: Where they come from (``test``, ``validation``, ``train`` or a path).
    """

    def __init__(self, frame: pd.DataFrame, labels: np.ndarray | None, dataset: str):
        self.frame, self.labels, self.dataset = frame, labels, dataset


def feature_columns_of(meta: dict[str, Any]) -> list[str]:
    return [*meta.get("numeric", []), *meta.get("categorical", [])]


def table_rows(run: RunModel, parity_data: str | Path | None,
               limit: int | None = MAX_PARITY_EXAMPLES, *,
               numeric_target: bool = False) -> TableRows:
    """The rows to check parity on: ``parity_data``, else the run's test file (validation,
    train when it had none); the first ``limit`` rows in file order.

    ``numeric_target``: a regressor's rows: ``labels`` are the label column's values as
    float64 (read in the target's number style when training chose one; NaN where empty or
    not a number), and no row is dropped for its label.

    Raises:
        DataError: The file cannot be read or lacks a feature column the model needs.
    """
    label_column = run.config.get("data", {}).get("label_column", "label")
    path, dataset = parity_source(run, parity_data, "a file with the run's feature columns")
    frame = read_table(path, role="parity")
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in feature_columns_of(run.meta) if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: the parity data lacks the feature column(s) "
                        f"{', '.join(map(repr, missing))} the model was trained on (its columns: "
                        f"{', '.join(map(repr, frame.columns)) or 'none'}); pass --parity-data "
                        "with a file that has them")
    codes = None
    if numeric_target:
        if label_column in frame.columns:
            codes = as_numbers(frame[label_column], _target_style(run, label_column))
    elif label_column in frame.columns:
        codes = label_index(frame[label_column], list(run.meta["labels"]))
        frame, codes = frame.loc[codes >= 0], codes[codes >= 0]
    if limit is not None and len(frame) > limit:
        frame, codes = frame.iloc[:limit], (codes[:limit] if codes is not None else None)
        dataset = f"{dataset} (first {limit} rows)"
    return TableRows(frame.reset_index(drop=True), codes, dataset)


def _target_style(run: RunModel, label_column: str) -> str | None:
    """The number style training read the regression target in (saved in the model's
    ``preprocessing.json`` as ``number_styles``), or ``None``: plain numbers."""
    if run.paths is None:
        return None
    try:
        params = json.loads((run.paths.model / PREPROCESSING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return style_of(params, label_column)


def write_table_bundle(run: RunModel, request: ExportRequest, rows: TableRows) -> dict[str, Any]:
    """Export a tabular run's MLP as ``request`` asks and return ``export.json``'s content:
    ``model.onnx`` (input ``features`` (B, F) float32) beside ``preprocessing.json``.

    Args:
        run: The finished tabular run.
        request: Format, quantisation, opset, destination, parity criteria, latency calls.
        rows: Rows for the parity check and the latency inputs.

    Raises:
        DataError: No rows to check parity on.
    """
    from entrena.tasks.tabular.model import load_mlp

    model, meta = load_mlp(run.paths.model)
    if not len(rows.frame):
        raise DataError(f"no rows to check parity on ({rows.dataset}); pass --parity-data FILE")
    data = run.config.get("data", {})
    meta_out = {k: v for k, v in meta.items() if k != "preprocessing"}
    meta_out["label_column"] = data.get("label_column", "label")
    meta_out["on_bad_rows"] = data.get("on_bad_rows", "skip")
    spec = FixedInputExport(
        model=model, input_name="features",
        inputs=transform(rows.frame, meta["preprocessing"]), labels=rows.labels,
        dataset=rows.dataset,
        files={PREPROCESSING_FILE: dumps_strict(meta["preprocessing"], indent=2) + "\n",
               META_FILE: dumps_strict(meta_out, indent=2) + "\n"},
        manifest={"preprocessing": {"labels": meta["labels"], "file": PREPROCESSING_FILE,
                                    "numeric": meta.get("numeric", []),
                                    "categorical": meta.get("categorical", [])},
                  "inputs": {"features": f"float32 (batch, {meta['in_features']}), the rows "
                                         "after preprocessing.json",
                             "logits": "float32 (batch, classes), classes in labels order"}},
        card=lambda m: table_card(run, m),
        latency_inputs="the first parity rows in file order, preprocessed")
    return write_fixed_input_bundle(run, spec, request)


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
{chr(10).join(data_lines(run))}

## Metrics
| metric | value |
|---|---|
{chr(10).join(metric_rows(metrics))}

Boosted trees (scikit-learn `HistGradientBoostingClassifier`, the baseline) on test: accuracy
{num(trees.get('accuracy'))}, macro-F1 {num(trees.get('macro_f1'))} (this model:
{num(test.get('accuracy'))}, {num(test.get('macro_f1'))}).

## This export
- `model.onnx` ({manifest['program']}{', int8' if manifest.get('quantize') else ''}), opset
  {manifest.get('opset')}; made by {manifest['exporter']}
- Parity with the PyTorch model on {parity['examples']} {parity['dataset']} rows: max |Δlogit|
  {parity['max_abs_diff']:.2e}, label agreement {pct(parity['label_agreement'])}:
  **{'passed' if parity['passed'] else 'FAILED'}**

## Limits
- Every row gets one of the labels above; probabilities are softmax outputs, not calibrated.
- Figures come from one data source; no check for bias or fairness across groups of people
  was run: do not use the labels for decisions about people without one.
"""
