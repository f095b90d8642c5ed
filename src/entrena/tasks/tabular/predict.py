"""``entrena predict`` for tabular models: the saved preprocessing, then the MLP.

A row becomes features with :func:`entrena.data.preprocessing.transform`, as in training and
in the parity check; a run's PyTorch MLP or an ONNX bundle maps them to class probabilities.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from entrena.data.preprocessing import invalid_numbers, transform, unseen_categories
from entrena.data.reading import format_rows
from entrena.errors import DataError
from entrena.exporting import onnx_format, prediction
from entrena.exporting.bundle import META_FILE
from entrena.exporting.inference import (
    TorchRunner,
    batched_logits,
    require_finite,
    softmax,
)
from entrena.exporting.prediction import FramePredictor, ModelLocation, PredictOptions
from entrena.tasks.tabular.export import PREPROCESSING_FILE, feature_columns_of

if TYPE_CHECKING:
    from torch import nn

__all__ = ["SKIPPED_EMPTY_ROW", "TablePredictor", "predict_table", "table_frame_predictor"]

log = logging.getLogger("entrena")

SKIPPED_EMPTY_ROW = "skipped: empty row"
BATCH = 32


def predict_table(location: ModelLocation, data: Path, output: Path,
                  options: PredictOptions) -> dict[str, Any]:
    """Predict every row of a table into ``output`` (the saved preprocessing, then the MLP).

    Returns:
        The summary (the ``--json`` document).

    Raises:
        ConfigError: ``--text-column`` given (a tabular model reads its feature columns).
        DataError: The input lacks a feature column (named), or has empty rows or
            non-numbers in a numeric column under ``on_bad_rows: error``.
    """
    from entrena.data.streaming import TableWriter, table_columns
    from entrena.errors import ConfigError

    start = time.perf_counter()
    if options.input_column is not None:
        raise ConfigError(f"--text-column {options.input_column}: {location.path} holds a "
                          "tabular model, which reads the feature columns it was trained on; "
                          "leave --text-column out")
    predictor = TablePredictor(location.folder, location.kind, location.manifest,
                               options.threads, source=str(data))
    columns = table_columns(data, role="input")
    predictor.check_columns(columns, data)
    prediction.warn_replaced(data, columns, predictor.labels)
    policy = options.on_bad_rows or "skip"
    TableWriter(output).abort()
    summary = prediction.stream_predictions(
        predictor, data, output, columns=columns, policy=policy, options=options,
        model=str(location.folder), started=start)
    summary.update({"task": location.meta.get("task"), "unseen_categories": predictor.unseen,
                    "invalid_numbers": predictor.invalid})
    log.info("categories never seen in training: %s",
             ", ".join(f"{c} {n}" for c, n in predictor.unseen.items()) or "none")
    for column, entry in predictor.invalid.items():
        log.warning("%s: %d value(s) of numeric column %r are not finite numbers (rows %s): "
                    "given the training median; fix them, or pass --on-bad-rows error to refuse "
                    "them", data, entry["count"], column, ", ".join(map(str, entry["rows"])))
    return summary


def table_frame_predictor(location: ModelLocation, options: PredictOptions) -> FramePredictor:
    """The model at ``location`` and its preprocessing loaded once, answering DataFrames of
    the feature columns (:class:`~entrena.exporting.prediction.FramePredictor`); ``options``:
    threads, batch size and the bad-row policy (default ``skip``)."""
    predictor = TablePredictor(location.folder, location.kind, location.manifest,
                               options.threads, source="the input")
    return FramePredictor(predictor,
                          lambda columns: predictor.check_columns(columns, Path("the input")),
                          on_bad_rows=options.on_bad_rows or "skip",
                          batch_size=options.batch_size)


class TablePredictor:
    """A tabular model (a run's PyTorch MLP or an ONNX bundle) and its preprocessing.

    Args:
        folder: The run's ``model/`` folder or a bundle.
        kind: ``run`` or ``bundle``.
        manifest: The bundle's ``export.json`` (bundles only).
        threads: CPU threads.
        source: The input file, for messages.
    """

    skip_reason = "empty row"

    def __init__(self, folder: Path, kind: str, manifest: dict[str, Any] | None = None,
                 threads: int | None = None, source: str = "input"):
        if kind == "run":
            from entrena.tasks.tabular.model import load_mlp

            if threads:
                import torch

                torch.set_num_threads(threads)
            model, meta = load_mlp(folder)
            network: nn.Module = model
            if meta.get("target"):  # a regressor: answer in the target's units
                from entrena.tasks.regression import TargetScaler
                from entrena.tasks.target_units import FeaturesInTargetUnits

                network = FeaturesInTargetUnits(model, TargetScaler.from_dict(meta["target"]))
            self.runner: TorchRunner | onnx_format.OnnxRunner = TorchRunner(network)
            self.params = meta["preprocessing"]
        else:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            self.params = json.loads((folder / PREPROCESSING_FILE).read_text())
            self.runner = onnx_format.OnnxRunner(folder / (manifest or {}).get("file",
                                                                              "model.onnx"),
                                                 threads)
        self.labels: list[str] = list(meta["labels"])
        self.values = bool(meta.get("target"))
        """A regressor: ``predicted_value`` in the target's units (no labels)."""
        self.folder = folder
        self.columns = feature_columns_of(meta)
        self.na_columns = self.columns
        self.source = source
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
                            f"input's columns are: {', '.join(map(repr, columns)) or 'none'}; "
                            "add them (empty cells are read as missing values), or retrain "
                            "with them in data.drop_columns")

    def annotate(self, frame: pd.DataFrame, *, first_row: int, on_bad_rows: str,
                 batch_size: int = BATCH, missing: dict[str, np.ndarray] | None = None
                 ) -> tuple[pd.DataFrame, np.ndarray]:
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

        Raises:
            DataError: ``on_bad_rows == "error"`` and the chunk has empty rows or cells that
                are not numbers in a numeric column (named).
        """
        source = self.source
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
        outputs = np.full((len(frame), len(self.labels) if not self.values else 1), np.nan)
        kept = values.loc[~empty]
        if len(kept):
            for column, count in unseen_categories(kept, self.params).items():
                self.unseen[column] = self.unseen.get(column, 0) + count
            # exporting.inference.Runner names its parameters (input_ids, attention_mask)
            # where every runner takes *inputs: wrong in exporting, to be fixed there.
            logits = batched_logits(self.runner,  # type: ignore[arg-type]
                                    transform(kept, self.params), batch_size)
            require_finite(logits, model=self.folder, inputs=f"rows of {source}")
            outputs[~empty] = logits[:, :1] if self.values else softmax(logits)
        status = np.where(empty, SKIPPED_EMPTY_ROW, "ok")
        if self.values:
            return prediction.value_frame(frame, outputs[:, 0], status), empty
        return prediction.labelled_frame(frame, self.labels, outputs, status), empty
