"""``entrena predict`` for text models: a table with a text column, streamed chunk by chunk.

Texts are encoded exactly as in training (:class:`~entrena.exporting.inference.TextEncoder`:
tokenized at the model's length limit, cut to ``max_length`` keeping the end marker); a run's
PyTorch model or a bundle (ONNX, TorchScript) maps them to class probabilities.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from entrena.data.tables import empty_values
from entrena.data.text_fields import describe_text_columns, join_text_columns, text_columns
from entrena.errors import DataError
from entrena.exporting.bundle import Preprocessing
from entrena.exporting.inference import (
    Runner,
    TextEncoder,
    predict_logits,
    require_finite,
    softmax,
)
from entrena.exporting.prediction import (
    FramePredictor,
    ModelLocation,
    PredictOptions,
    labelled_frame,
    missing_columns_error,
    multi_label_frame,
    stream_predictions,
    value_frame,
    warn_replaced,
)
from entrena.tasks.metrics import sigmoid

if TYPE_CHECKING:
    from torch import nn

__all__ = ["SKIPPED_EMPTY", "TextPredictor", "predict_texts", "preprocessing_of",
           "text_frame_predictor"]

log = logging.getLogger("entrena")

SKIPPED_EMPTY = "skipped: empty text"


def preprocessing_of(location: ModelLocation) -> Preprocessing:
    """How the model at ``location`` turns texts into inputs (its ``entrena_model.json``,
    and for a run the data section of its ``config.yaml``). A run's ``length_limit`` needs the
    tokenizer; it is filled in when the model is loaded."""
    meta, data = location.meta, location.config.get("data", {})
    return Preprocessing(labels=list(meta["labels"]), max_length=int(meta["max_length"]),
                         length_limit=int(meta.get("length_limit", 0)),
                         text_column=meta.get("text_column", data.get("text_column", "text")),
                         label_column=meta.get("label_column",
                                               data.get("label_column", "label")),
                         on_bad_rows=meta.get("on_bad_rows", data.get("on_bad_rows", "skip")))


def predict_texts(location: ModelLocation, data: Path, output: Path,
                  options: PredictOptions) -> dict[str, Any]:
    """Predict every row of a table with a text column into ``output``.

    Returns:
        The summary (the ``--json`` document).

    Raises:
        DataError: The input lacks the text column (named, with the input's columns), or has
            empty texts under ``on_bad_rows: error``.
    """
    from entrena.data.streaming import TableWriter, table_columns

    start = time.perf_counter()
    prep = preprocessing_of(location)
    trained = text_columns(prep.text_column)
    policy = options.on_bad_rows or prep.on_bad_rows
    columns = table_columns(data, role="input")
    wanted = trained
    if options.input_column:  # "a,b" names several columns, unless one column is so named
        wanted = ([options.input_column] if options.input_column in columns
                  else [c.strip() for c in options.input_column.split(",")])
    if options.input_column and len(wanted) != len(trained):
        raise DataError(f"--text-column {options.input_column!r} names {len(wanted)} "
                        f"column(s) but the model was trained on {len(trained)} joined text "
                        f"columns ({describe_text_columns(trained)}); name as many, in that "
                        "order, separated by commas")
    for column in wanted:
        if column not in columns:
            origin = "--text-column" if options.input_column else (
                f"a text column the model was trained on (data.text_column = "
                f"{prep.text_column!r})")
            present = ", ".join(repr(c) for c in columns) or "none"
            several = " (several: A,B)" if len(trained) > 1 else ""
            raise DataError(f"{data}: no column {column!r} ({origin}); the input's columns "
                            f"are: {present}; rename the column or pass --text-column "
                            f"COLUMN{several}")
    warn_replaced(data, columns, prep.labels)
    TableWriter(output).abort()  # an unwritable or unsupported output fails before loading
    # The input's columns go by the trained names, so that the texts carry the markers the
    # model was trained with ("subject: …"), whatever the input calls those columns.
    predictor = TextPredictor(location, prep, wanted if len(wanted) > 1 else wanted[0],
                              options.threads, markers=trained)
    summary = stream_predictions(predictor, data, output, columns=columns, policy=policy,
                                 options=options, model=str(location.path), started=start)
    return {**summary, "text_column": wanted[0] if len(wanted) == 1 else wanted}


def text_frame_predictor(location: ModelLocation, options: PredictOptions) -> FramePredictor:
    """The model at ``location`` loaded once, answering DataFrames with the training text
    column(s) (:class:`~entrena.exporting.prediction.FramePredictor`); ``options``: threads,
    batch size and the bad-row policy (default the run's ``data.on_bad_rows``)."""
    prep = preprocessing_of(location)
    trained = text_columns(prep.text_column)
    predictor = TextPredictor(location, prep, trained if len(trained) > 1 else trained[0],
                              options.threads, markers=trained)

    def check(columns: list[str]) -> None:
        error = missing_columns_error("the input", trained, columns, "text column")
        if error is not None:
            raise error

    return FramePredictor(predictor, check, on_bad_rows=options.on_bad_rows or prep.on_bad_rows,
                          batch_size=options.batch_size)


class TextPredictor:
    """Loads a text model and annotates chunks of rows (a
    :class:`~entrena.exporting.prediction.ChunkPredictor`).

    Args:
        location: What to run.
        preprocessing: How texts become inputs (:func:`preprocessing_of`).
        text_column: The input column holding the texts, or the columns joined into one
            text (:func:`~entrena.data.text_fields.join_text_columns`).
        threads: CPU threads (PyTorch and ONNX Runtime); ``None`` keeps their defaults.
        markers: For several columns: the names the model was trained with, in the same
            order (the markers of the joined text); default ``text_column``.
    """

    skip_reason = "empty text"

    def __init__(self, location: ModelLocation, preprocessing: Preprocessing,
                 text_column: str | list[str], threads: int | None = None,
                 markers: list[str] | None = None):
        from entrena.tasks.text.model import (
            build_tokenizer,
            load_classifier,
            model_length_limit,
        )

        self.location = location
        if location.kind == "run":
            from entrena.exporting.inference import TorchRunner

            if threads:
                import torch

                torch.set_num_threads(threads)
            model, tokenizer, meta = load_classifier(location.folder)
            preprocessing.length_limit = model_length_limit(model.encoder.config, tokenizer)
            network: nn.Module = model
            if meta.get("target"):  # a regressor: answer in the target's units
                from entrena.tasks.regression import TargetScaler
                from entrena.tasks.target_units import TokensInTargetUnits

                network = TokensInTargetUnits(model, TargetScaler.from_dict(meta["target"]))
            # exporting.inference.Runner names its parameters (input_ids, attention_mask)
            # where every runner takes *inputs: wrong in exporting, to be fixed there.
            self.runner: Runner = TorchRunner(network)  # type: ignore[assignment]
        else:
            from entrena.exporting.formats import load_runner

            tokenizer = build_tokenizer(str(location.folder))
            self.runner = load_runner(location.folder, location.manifest, threads)
        self.preprocessing = preprocessing
        self.labels = preprocessing.labels
        self.values = bool(location.meta.get("target"))
        """A regressor: ``predicted_value`` in the target's units (no labels)."""
        multi = location.meta.get("multi_label") or {}
        self.separator: str | None = multi.get("separator")
        self.thresholds = multi.get("thresholds")
        self.text_column = text_column
        self.na_columns = text_columns(text_column)
        self.markers = markers or self.na_columns
        self.encoder = TextEncoder(tokenizer, self.preprocessing)

    def annotate(self, frame: pd.DataFrame, *, first_row: int, on_bad_rows: str,
                 batch_size: int = 32, missing: dict[str, np.ndarray] | None = None
                 ) -> tuple[pd.DataFrame, np.ndarray]:
        """``frame`` with ``predicted_label``, ``prob_<label>`` and ``status`` added.

        Args:
            frame: A chunk of input rows (every column is kept, in order).
            first_row: 1-based row number of the chunk's first row in its file.
            on_bad_rows: ``skip`` (an empty text gets ``status: skipped: empty text``) or
                ``error``.
            batch_size: Texts per model call.
            missing: Per column, the rows the reader found missing (``NA`` in a CSV …), on
                top of the missing or blank cells of ``frame``.

        Returns:
            The annotated rows and the boolean mask of skipped rows.

        Raises:
            DataError: ``on_bad_rows == "error"`` and the chunk has empty texts (named).
        """
        labels, columns = self.preprocessing.labels, self.na_columns
        described = describe_text_columns(columns)
        nested = sorted({i for c in columns for i, t in enumerate(frame[c].to_numpy())
                         if isinstance(t, list | dict)})
        if nested:
            rows = ", ".join(str(i + first_row) for i in nested[:10])
            raise DataError(f"input rows {rows}: {described} is a JSON list or object, not "
                            "a text; write one string per row")
        if len(columns) == 1:
            values = frame[columns[0]]
            empty = empty_values(values).to_numpy()
            if missing is not None and missing.get(columns[0]) is not None:
                empty = empty | missing[columns[0]]
        else:
            renamed = frame[columns].set_axis(self.markers, axis=1)
            values = join_text_columns(
                renamed, self.markers,
                missing={m: (missing or {}).get(c) for m, c in zip(self.markers, columns,
                                                                  strict=True)})
            empty = (values == "").to_numpy()
        if on_bad_rows == "error" and empty.any():
            empty_rows = (np.flatnonzero(empty) + first_row).tolist()
            shown = ", ".join(map(str, empty_rows[:10])) + (
                f" and {len(empty_rows) - 10} more" if len(empty_rows) > 10 else "")
            raise DataError(f"empty {described} in input rows {shown}; fix or remove them, "
                            "or pass --on-bad-rows skip to predict the rest")
        texts = [str(t) for t in values.to_numpy()[~empty]]
        outputs = np.full((len(frame), 1 if self.values else len(labels)), np.nan)
        if texts:
            encoded = self.encoder.encode(texts)
            logits = predict_logits(self.runner, encoded, max_length=self.preprocessing.max_length,
                                    pad_id=self.encoder.pad_id, batch_size=batch_size)
            require_finite(logits, model=self.location.path, inputs="input rows")
            outputs[~empty] = (logits[:, :1] if self.values else
                               sigmoid(logits) if self.separator else softmax(logits))
        status = np.where(empty, SKIPPED_EMPTY, "ok")
        if self.values:
            return value_frame(frame, outputs[:, 0], status), empty
        if self.separator:
            return multi_label_frame(frame, labels, outputs, status, self.thresholds,
                                     self.separator), empty
        return labelled_frame(frame, labels, outputs, status), empty
