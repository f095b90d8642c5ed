"""Batch prediction: which model runs (a run's PyTorch model or a bundle), and one chunk of
rows annotated with ``predicted_label``, ``prob_<label>`` and ``status``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from entrena.data.tables import empty_values
from entrena.errors import ConfigError, DataError
from entrena.exporting.bundle import (
    META_FILE,
    Preprocessing,
    find_run_bundle,
    is_bundle,
    locate_run,
    read_manifest,
)
from entrena.exporting.formats import FORMATS
from entrena.exporting.inference import (
    Runner,
    TextEncoder,
    predict_logits,
    require_finite,
    softmax,
)

__all__ = ["BACKENDS", "SKIPPED_EMPTY", "ModelSource", "resolve_source", "Predictor",
           "output_columns"]

log = logging.getLogger("entrena")

BACKENDS = ("torch", "onnx")
SKIPPED_EMPTY = "skipped: empty text"


@dataclass
class ModelSource:
    """What ``entrena predict`` will run, found without loading the model.

    Attributes:
        path: The run directory or bundle folder.
        kind: ``run`` (the PyTorch model in ``model/``) or ``bundle``.
        backend: ``torch`` or ``onnx``.
        preprocessing: Labels, lengths, text column and bad-row policy.
        manifest: The bundle's ``export.json`` (empty for a run).
    """

    path: Path
    kind: str
    backend: str
    preprocessing: Preprocessing
    manifest: dict[str, Any]


def _bundle_preprocessing(bundle: Path) -> Preprocessing:
    meta = json.loads((bundle / META_FILE).read_text(encoding="utf-8"))
    return Preprocessing(labels=list(meta["labels"]), max_length=int(meta["max_length"]),
                         length_limit=int(meta["length_limit"]),
                         text_column=meta.get("text_column", "text"),
                         label_column=meta.get("label_column", "label"),
                         on_bad_rows=meta.get("on_bad_rows", "skip"))


def resolve_source(source: str | Path, backend: str | None) -> ModelSource:
    """Find the model to run: a bundle as exported, or a run's PyTorch model (``torch``) or
    its ONNX bundle under ``export/`` (``onnx``).

    Raises:
        ConfigError: Unknown backend.
        DataError: ``source`` is neither a finished run nor a bundle, or holds no model for
            the backend; the message says which command makes one.
    """
    if backend is not None and backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r} is not a backend; use one of: "
                          f"{', '.join(BACKENDS)}")
    path = Path(source)
    if is_bundle(path):
        manifest = read_manifest(path)
        runs_on = FORMATS[manifest["format"]].runs_on if manifest.get("format") in FORMATS \
            else "onnx"
        if backend is not None and backend != runs_on:
            other = "onnx" if backend == "onnx" else "torchscript"
            raise DataError(f"{path}: this bundle holds a {manifest.get('format')} model, which "
                            f"runs with --backend {runs_on}; for --backend {backend} give the run "
                            f"directory ({manifest.get('run', 'runs/<name>')}) or a bundle "
                            f"exported with --format {other}")
        return ModelSource(path, "bundle", runs_on, _bundle_preprocessing(path), manifest)
    run = locate_run(path, verb="predict with")
    if backend == "onnx":
        bundle = find_run_bundle(run.paths.root, "onnx")
        if bundle is None:
            raise DataError(f"{path}: no ONNX export under {path / 'export'}; make one with: "
                            f"entrena export {path}  (or use --backend torch)")
        log.info("using the ONNX bundle %s", bundle)
        return ModelSource(bundle, "bundle", "onnx", _bundle_preprocessing(bundle),
                           read_manifest(bundle))
    # The length limit needs the tokenizer; it is filled in when the model is loaded.
    return ModelSource(path, "run", "torch", run.preprocessing(length_limit=0), {})


def output_columns(labels: list[str]) -> list[str]:
    """The columns prediction adds, in order."""
    return ["predicted_label", *(f"prob_{label}" for label in labels), "status"]


class Predictor:
    """Loads the model of a :class:`ModelSource` and annotates chunks of rows.

    Args:
        source: What to run.
        threads: CPU threads (PyTorch and ONNX Runtime); ``None`` keeps their defaults.
    """

    def __init__(self, source: ModelSource, threads: int | None = None):
        from entrena.tasks.text_classification import (
            build_tokenizer,
            load_classifier,
            model_length_limit,
        )

        self.source = source
        if source.kind == "run":
            from entrena.exporting.inference import TorchRunner

            if threads:
                import torch

                torch.set_num_threads(threads)
            model, tokenizer, _ = load_classifier(source.path / "model")
            source.preprocessing.length_limit = model_length_limit(model.encoder.config,
                                                                   tokenizer)
            self.runner: Runner = TorchRunner(model)
        else:
            from entrena.exporting.formats import load_runner

            tokenizer = build_tokenizer(str(source.path))
            self.runner = load_runner(source.path, source.manifest, threads)
        self.preprocessing = source.preprocessing
        self.encoder = TextEncoder(tokenizer, self.preprocessing)

    def annotate(self, frame: pd.DataFrame, text_column: str, *, first_row: int,
                 on_bad_rows: str, batch_size: int = 32, missing: np.ndarray | None = None
                 ) -> tuple[pd.DataFrame, np.ndarray]:
        """``frame`` with ``predicted_label``, ``prob_<label>`` and ``status`` added.

        Args:
            frame: A chunk of input rows (every column is kept, in order).
            text_column: The column holding the texts.
            first_row: 1-based row number of the chunk's first row in its file.
            on_bad_rows: ``skip`` (an empty text gets ``status: skipped: empty text``) or
                ``error``.
            batch_size: Texts per model call.
            missing: Rows whose text the reader found missing (``NA`` in a CSV …), on top
                of the missing or blank cells of ``frame``.

        Returns:
            The annotated rows and the boolean mask of skipped rows.

        Raises:
            DataError: ``on_bad_rows == "error"`` and the chunk has empty texts (named).
        """
        labels = self.preprocessing.labels
        empty = empty_values(frame[text_column]).to_numpy()
        if missing is not None:
            empty = empty | missing
        if on_bad_rows == "error" and empty.any():
            rows = (np.flatnonzero(empty) + first_row).tolist()
            shown = ", ".join(map(str, rows[:10])) + (f" and {len(rows) - 10} more"
                                                      if len(rows) > 10 else "")
            raise DataError(f"empty {text_column!r} in input rows {shown}; fix or remove them, "
                            "or pass --on-bad-rows skip to predict the rest")
        nested = [i for i, t in enumerate(frame[text_column].to_numpy())
                  if not empty[i] and isinstance(t, list | dict)]
        if nested:
            rows = ", ".join(str(i + first_row) for i in nested[:10])
            raise DataError(f"input rows {rows}: {text_column!r} is a JSON list or object, not "
                            "a text; write one string per row")
        out = frame.drop(columns=[c for c in output_columns(labels) if c in frame.columns])
        texts = [str(t) for t in frame[text_column].to_numpy()[~empty]]
        probs = np.full((len(frame), len(labels)), np.nan)
        predicted = np.full(len(frame), None, dtype=object)
        if texts:
            encoded = self.encoder.encode(texts)
            logits = predict_logits(self.runner, encoded, max_length=self.preprocessing.max_length,
                                    pad_id=self.encoder.pad_id, batch_size=batch_size)
            require_finite(logits, model=self.source.path, inputs="input rows")
            probs[~empty] = softmax(logits)
            predicted[~empty] = np.asarray(labels, dtype=object)[logits.argmax(1)]
        out["predicted_label"] = predicted
        for j, label in enumerate(labels):
            out[f"prob_{label}"] = probs[:, j]
        out["status"] = np.where(empty, SKIPPED_EMPTY, "ok")
        return out, empty
