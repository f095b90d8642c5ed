"""Export of tabular regressors: an ONNX MLP answering in the target's units, beside the
fitted preprocessing as JSON.

The bundle holds ``model.onnx`` (input ``features`` (B, F) float32, output ``logits``
(B, 1): the predicted value in the target's units — the standardisation and any
``log1p`` are inverted inside the graph), ``preprocessing.json``, ``entrena_model.json``
(task, target scaling, the raw columns a row needs), ``export.json`` and ``MODEL_CARD.md``.
Parity compares the exported values with the PyTorch model's (relative difference).
"""

from __future__ import annotations

from typing import Any

from entrena.core.files import dumps_strict
from entrena.data.preprocessing import transform
from entrena.errors import DataError
from entrena.exporting.bundle import META_FILE, ExportRequest, RunModel
from entrena.exporting.card import data_lines, metric_rows, num
from entrena.exporting.fixed_bundle import FixedInputExport, write_fixed_input_bundle
from entrena.tasks.tabular.export import PREPROCESSING_FILE, table_rows

__all__ = ["write_regression_table_bundle", "regression_table_card"]


def write_regression_table_bundle(run: RunModel, request: ExportRequest) -> dict[str, Any]:
    """Export a tabular-regression run's MLP as ``request`` asks; ``export.json``'s content.

    Raises:
        DataError: No rows to check parity on, or the parity file lacks a feature column.
    """
    from entrena.tasks.regression import TargetScaler
    from entrena.tasks.tabular.model import load_mlp
    from entrena.tasks.target_units import FeaturesInTargetUnits

    rows = table_rows(run, request.parity_data, numeric_target=True)
    if not len(rows.frame):
        raise DataError(f"no rows to check parity on ({rows.dataset}); pass --parity-data FILE")
    network, meta = load_mlp(run.paths.model)
    scaler = TargetScaler.from_dict(meta["target"])
    model = FeaturesInTargetUnits(network, scaler).eval()
    data = run.config.get("data", {})
    meta_out = {k: v for k, v in meta.items() if k != "preprocessing"}
    meta_out["label_column"] = data.get("label_column", "label")
    meta_out["on_bad_rows"] = data.get("on_bad_rows", "skip")
    meta_out["outputs"] = 1
    spec = FixedInputExport(
        model=model, input_name="features",
        inputs=transform(rows.frame, meta["preprocessing"]), labels=rows.labels,
        dataset=rows.dataset,
        files={PREPROCESSING_FILE: dumps_strict(meta["preprocessing"], indent=2) + "\n",
               META_FILE: dumps_strict(meta_out, indent=2) + "\n"},
        manifest={"preprocessing": {"target": scaler.as_dict(), "file": PREPROCESSING_FILE,
                                    "numeric": meta.get("numeric", []),
                                    "categorical": meta.get("categorical", [])},
                  "inputs": {"features": f"float32 (batch, {meta['in_features']}), the rows "
                                         "after preprocessing.json",
                             "logits": "float32 (batch, 1): the predicted "
                                       f"{meta_out['label_column']!r} in its own units"}},
        card=lambda m: regression_table_card(run, m),
        latency_inputs="the first parity rows in file order, preprocessed", values=True)
    return write_fixed_input_bundle(run, spec, request)


def regression_table_card(run: RunModel, manifest: dict[str, Any]) -> str:
    """``MODEL_CARD.md`` of a tabular-regression bundle."""
    meta, metrics = run.meta, run.metrics
    parity = manifest["parity"]
    target = meta.get("target", {})
    trees = metrics.get("baseline", {}).get("boosted_trees", {}).get("test", {})
    test = metrics.get("test", {})
    label = run.config.get("data", {}).get("label_column", "label")
    return f"""# Model card: {run.config.get('name', run.paths.root.name)}

## Task
Tabular regression: predicts `{label}` (a number, in its own units{
        '; learned as log(1 + value)' if target.get('transform') == 'log' else ''}).
Inputs: numeric columns {', '.join(f'`{c}`' for c in meta.get('numeric', [])) or 'none'};
categorical columns {', '.join(f'`{c}`' for c in meta.get('categorical', [])) or 'none'}.
Missing numbers take the training median, numbers are standardised, categories one-hot
encoded, all fitted on the training rows only (`preprocessing.json`); the target is
standardised with the training mean and standard deviation, inverted inside `model.onnx`.
Model: an MLP, hidden sizes {meta.get('hidden_sizes')}.

## Data
{chr(10).join(data_lines(run))}

## Metrics
| metric | value |
|---|---|
{chr(10).join(metric_rows(metrics))}

Boosted trees (scikit-learn `HistGradientBoostingRegressor`, the baseline) on test: RMSE
{num(trees.get('rmse'))}, R² {num(trees.get('r2'))} (this model: {num(test.get('rmse'))},
{num(test.get('r2'))}).

## This export
- `model.onnx` ({manifest['program']}{', int8' if manifest.get('quantize') else ''}), opset
  {manifest.get('opset')}; made by {manifest['exporter']}
- Parity with the PyTorch model on {parity['examples']} {parity['dataset']} rows: max
  |Δvalue| {parity['max_abs_diff']:.2e} (target units), max relative difference
  {parity['max_rel_diff']:.2e}: **{'passed' if parity['passed'] else 'FAILED'}**

## Limits
- Predictions outside the training range of `{label}` are extrapolations; the data report
  counts test targets outside it.
- Figures come from one data source; no check for bias or fairness across groups of people
  was run: do not use the predictions for decisions about people without one.
"""
