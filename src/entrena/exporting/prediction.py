"""Batch prediction, the parts every task shares: which model runs, the columns prediction
adds, and the chunked read → annotate → write loop with its summary.

A task's predictor (``entrena/tasks/<name>/predict.py``) turns a chunk of input rows into
class probabilities; :func:`stream_predictions` reads the input ``chunk_rows`` rows at a
time, has the predictor annotate each chunk and appends it to the output, so memory stays
bounded whatever the file size.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from entrena.core.rundir import RunPaths
from entrena.errors import DataError
from entrena.exporting.bundle import (
    META_FILE,
    check_model_files,
    find_run_bundle,
    is_bundle,
    locate_run,
    read_manifest,
)
from entrena.exporting.formats import FORMATS

__all__ = ["BACKENDS", "SKIPPED_ROWS_LISTED", "VALUE_COLUMNS", "value_frame", "ModelLocation",
           "locate_model", "model_meta_file", "model_task_name",
           "PredictOptions",
           "output_columns", "output_format", "labelled_frame", "multi_label_frame",
           "ChunkPredictor", "FramePredictor", "missing_columns_error", "Progress",
           "stream_predictions", "warn_replaced"]

log = logging.getLogger("entrena")

BACKENDS = ("torch", "onnx")
"""``--backend`` values: a run's PyTorch model (or a TorchScript bundle), or ONNX Runtime."""
SKIPPED_ROWS_LISTED = 100
"""Row numbers of skipped rows kept in the summary (the count is always exact)."""


@dataclass
class ModelLocation:
    """What ``entrena predict`` will run, found without loading the model.

    Attributes:
        path: The run directory or bundle folder the user gave (a run's ONNX bundle when
            ``backend == "onnx"`` was asked of a run).
        folder: The folder holding the model: a run's ``model/`` or the bundle.
        kind: ``run`` (the PyTorch model in ``model/``) or ``bundle``.
        backend: ``torch`` or ``onnx``.
        manifest: The bundle's ``export.json`` (empty for a run).
        meta: The model's ``entrena_model.json`` (labels, task, preprocessing).
        config: The run's resolved ``config.yaml`` (empty for a bundle given as such).
    """

    path: Path
    folder: Path
    kind: str
    backend: str
    manifest: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class PredictOptions:
    """``entrena predict``'s options, as a task's ``predict`` receives them.

    Attributes:
        input_column: ``--text-column``: the input's text (or image path) column; ``None``:
            the training data's.
        on_bad_rows: ``skip`` or ``error``; ``None``: the run's ``data.on_bad_rows``.
        threads: CPU threads for PyTorch / ONNX Runtime.
        batch_size: Inputs per model call.
        chunk_rows: Rows read and written at a time.
        progress: Show a progress bar (stderr).
        console: A ``rich.console.Console`` for the bar (default: one on stderr).
    """

    input_column: str | None = None
    on_bad_rows: str | None = None
    threads: int | None = None
    batch_size: int = 32
    chunk_rows: int = 1000
    progress: bool = True
    console: Any = None


def _meta(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def model_meta_file(path: str | Path) -> Path:
    """The ``entrena_model.json`` of a run's model or of a bundle (which may not exist)."""
    path = Path(path)
    return (path if is_bundle(path) else RunPaths(path).model) / META_FILE


def model_task_name(path: str | Path) -> str | None:
    """The ``task`` a run's model or a bundle records (``None`` when it records none, as text
    bundles written before tasks were recorded)."""
    return _meta(model_meta_file(path).parent).get("task")


def locate_model(source: str | Path, backend: str | None, *, model_files: Any = None,
                 formats: tuple[str, ...] = tuple(FORMATS)) -> ModelLocation:
    """Find the model to run: a bundle as exported, or a run's PyTorch model (``torch``) or
    its ONNX bundle under ``export/`` (``onnx``).

    Args:
        source: A finished run directory or an export bundle.
        backend: ``torch``, ``onnx`` or ``None`` (what the source holds).
        model_files: Passed to :func:`~entrena.exporting.bundle.locate_run` for a run.
        formats: The export formats the model's task writes (named in the advice when a
            bundle runs on another backend).

    Raises:
        DataError: ``source`` is neither a finished run nor a bundle, holds no model for the
            backend, or is a bundle of another backend; the message says which command makes
            one.
    """
    path = Path(source)
    if is_bundle(path):
        manifest = read_manifest(path)
        check_model_files(path, [META_FILE], f"export it again: entrena export "
                          f"{manifest.get('run', 'RUN')}")
        runs_on = FORMATS[manifest["format"]].runs_on if manifest.get("format") in FORMATS \
            else "onnx"
        if backend is not None and backend != runs_on:
            other = [name for name in formats if FORMATS[name].runs_on == backend]
            also = f" or a bundle exported with --format {other[0]}" if other else ""
            article = "an" if str(manifest.get("format", "x"))[0] in "aeiou" else "a"
            raise DataError(f"{path}: this bundle holds {article} {manifest.get('format')} "
                            f"model, which "
                            f"runs with --backend {runs_on}; for --backend {backend} give the run "
                            f"directory ({manifest.get('run', 'runs/<name>')}){also}")
        return ModelLocation(path, path, "bundle", runs_on, manifest, _meta(path))
    run = locate_run(path, verb="predict with", model_files=model_files)
    if backend == "onnx":
        bundle = find_run_bundle(run.paths.root, "onnx")
        if bundle is None:
            raise DataError(f"{path}: no ONNX export under {path / 'export'}; make one with: "
                            f"entrena export {path}  (or use --backend torch)")
        log.info("using the ONNX bundle %s", bundle)
        return ModelLocation(bundle, bundle, "bundle", "onnx", read_manifest(bundle),
                             _meta(bundle), run.config)
    return ModelLocation(path, run.paths.model, "run", "torch", {}, run.meta, run.config)


def output_columns(labels: list[str]) -> list[str]:
    """The columns prediction adds, in order."""
    return ["predicted_label", *(f"prob_{label}" for label in labels), "status"]


def labelled_frame(frame: pd.DataFrame, labels: list[str], probs: np.ndarray,
                   status: np.ndarray | list[str]) -> pd.DataFrame:
    """``frame`` (every column kept, in order; a column named like one prediction adds is
    replaced) with ``predicted_label``, ``prob_<label>`` and ``status`` added.

    Args:
        probs: Class probabilities (N, K), NaN rows for skipped inputs.
        status: Per row ``ok`` or ``skipped: <reason>``.
    """
    ok = np.asarray([s == "ok" for s in status], dtype=bool)
    predicted = np.full(len(frame), None, dtype=object)
    if ok.any():
        predicted[ok] = np.asarray(labels, dtype=object)[probs[ok].argmax(1)]
    out = frame.drop(columns=[c for c in output_columns(labels) if c in frame.columns])
    out["predicted_label"] = predicted
    for j, label in enumerate(labels):
        out[f"prob_{label}"] = probs[:, j]
    out["status"] = np.asarray(status, dtype=object)
    return out


VALUE_COLUMNS = ["predicted_value", "status"]
"""The columns prediction adds for a regressor (a number in the target's units)."""


def value_frame(frame: pd.DataFrame, values: np.ndarray,
                status: np.ndarray | list[str]) -> pd.DataFrame:
    """``frame`` (every column kept; a column named like one prediction adds is replaced) with
    ``predicted_value`` (N,) float64 in the target's units (NaN for skipped rows) and
    ``status`` added."""
    out = frame.drop(columns=[c for c in VALUE_COLUMNS if c in frame.columns])
    out["predicted_value"] = np.asarray(values, dtype=np.float64)
    out["status"] = np.asarray(status, dtype=object)
    return out


def multi_label_frame(frame: pd.DataFrame, tags: list[str], probs: np.ndarray,
                      status: np.ndarray | list[str], thresholds: Any,
                      separator: str) -> pd.DataFrame:
    """:func:`labelled_frame` of a multi-label model: ``predicted_label`` is the set of tags
    whose probability reaches its threshold (sorted, joined by ``separator``; empty when none
    does), ``prob_<tag>`` each tag's sigmoid probability (N, K)."""
    out = labelled_frame(frame, tags, probs, status)
    ok = out["status"].to_numpy() == "ok"
    cut = np.asarray(thresholds, dtype=np.float64)
    names = np.asarray(tags, dtype=object)
    predicted = np.full(len(frame), None, dtype=object)
    for i in np.flatnonzero(ok):
        predicted[i] = separator.join(sorted(names[probs[i] >= cut]))
    out["predicted_label"] = predicted
    return out


def warn_replaced(data: Path, columns: list[str], labels: list[str]) -> None:
    """Warn when input columns share a name with the columns predict adds (``status``, a
    common label or feature name): the output holds predict's values under that name."""
    clash = [c for c in (output_columns(labels) if labels else VALUE_COLUMNS) if c in columns]
    if clash:
        log.warning("%s: the input's column(s) %s are replaced in the output by the columns "
                    "predict adds under the same name(s); rename them in the input to keep them",
                    data, ", ".join(map(repr, clash)))


class ChunkPredictor(Protocol):
    """What :func:`stream_predictions` needs of a task's predictor."""

    labels: list[str]
    """Class names in index order (empty for a regressor, whose output is
    ``predicted_value``)."""
    runner: Any
    """What runs the model (``runner.name``: ``torch``, ``onnx`` …)."""
    na_columns: list[str]
    """Input columns whose missing cells the reader should report (``missing`` below)."""
    skip_reason: str
    """Why a skipped row was skipped (``empty text``, ``empty row``), for the summary."""

    def annotate(self, frame: pd.DataFrame, *, first_row: int, on_bad_rows: str,
                 batch_size: int, missing: dict[str, np.ndarray]
                 ) -> tuple[pd.DataFrame, np.ndarray]:
        """The chunk with the prediction columns, and the mask (N,) of skipped rows."""
        ...


class _ValueSummary:
    """Count, mean, min and max of a regressor's predictions, chunk by chunk."""

    def __init__(self) -> None:
        self.count, self.total = 0, 0.0
        self.low, self.high = math.inf, -math.inf

    def add(self, values: np.ndarray) -> None:
        if len(values):
            self.count += len(values)
            self.total += float(values.sum())
            self.low, self.high = min(self.low, float(values.min())), max(self.high,
                                                                          float(values.max()))

    def as_dict(self) -> dict[str, float | None]:
        if not self.count:
            return {"mean": None, "min": None, "max": None}
        return {"mean": self.total / self.count, "min": self.low, "max": self.high}


class Progress:
    """A Rich bar on a terminal, a log line every 10% elsewhere."""

    def __init__(self, console: Any, enabled: bool):
        self.console, self.enabled = console, enabled
        self.bar: Any = None
        self.task: Any = None
        self._next_log = 0.1

    def __enter__(self) -> Progress:
        if self.enabled and self.console is not None and self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("[bold]predict"), BarColumn(),
                                TextColumn("{task.percentage:>3.0f}%"),
                                TextColumn("{task.fields[rows]} rows"), TimeElapsedColumn(),
                                console=self.console, transient=False)
            self.bar.start()
            self.task = self.bar.add_task("predict", total=1.0, rows=0)
        return self

    def update(self, fraction: float, rows: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=fraction, rows=rows)
        elif self.enabled and fraction >= self._next_log:
            log.info("predict: %d rows (%.0f%% of the file)", rows, 100 * fraction)
            self._next_log = (int(fraction * 10) + 1) / 10

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()


def output_format(data: Path, output: Path) -> Any:
    """How a ``.csv`` or ``.tsv`` output is written: a ``.csv`` output of a ``.csv`` input
    takes the input's delimiter and encoding (a ``;``-separated Windows-1252 export opens in
    the same spreadsheet as its input); a ``.tsv`` output, or a ``.csv`` one of a ``.tsv``
    input, takes its encoding; other inputs give UTF-8. ``None`` for JSONL and Parquet
    outputs (:class:`~entrena.data.streaming.TextFormat`)."""
    from entrena.data.streaming import TextFormat, text_format

    suffix = output.suffix.lower()
    if suffix not in (".csv", ".tsv"):
        return None
    found = text_format(data) if data.suffix.lower() in (".csv", ".tsv") else None
    if found is None:
        return TextFormat()
    same = suffix == ".csv" and data.suffix.lower() == ".csv"
    return TextFormat(found.delimiter if same else ",", found.encoding)


class FramePredictor:
    """A model loaded once that answers DataFrames in memory: the MLflow ``pyfunc`` model's
    ``predict`` (and any server) calls :meth:`predict` per request, with no file read or
    written per call.

    It wraps a task's :class:`ChunkPredictor` (the object ``entrena predict`` streams a file
    through), so both answer with the same code. Calls are serialised by a lock: the model
    call itself uses every CPU thread PyTorch / ONNX Runtime are given, and a Hugging Face
    fast tokenizer is not safe to call from two threads at once.

    Args:
        predictor: The task's chunk predictor, model loaded.
        check_columns: ``columns -> None``, raising :class:`~entrena.errors.DataError` when
            the frame lacks a column the model reads.
        on_bad_rows: ``skip`` (an unusable row gets ``status: skipped: …`` and null
            predictions) or ``error``.
        batch_size: Rows per model call.
    """

    def __init__(self, predictor: ChunkPredictor, check_columns: Any, *,
                 on_bad_rows: str = "skip", batch_size: int = 32):
        import threading

        self.predictor = predictor
        self.check_columns = check_columns
        self.on_bad_rows = on_bad_rows
        self.batch_size = batch_size
        self.columns_added = (output_columns(predictor.labels) if predictor.labels
                              else list(VALUE_COLUMNS))
        """The columns :meth:`predict` returns, in order."""
        self._lock = threading.Lock()

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """One row per row of ``frame`` (N rows of the input columns; others are ignored),
        in order: :attr:`columns_added`. Probabilities and values of a skipped row are NaN.

        Raises:
            DataError: A column the model reads is missing, a cell is a list or an object
                where a text belongs, or a bad row under ``on_bad_rows == "error"``.
        """
        frame = pd.DataFrame(frame).reset_index(drop=True)
        self.check_columns([str(c) for c in frame.columns])
        missing = {c: frame[c].isna().to_numpy() for c in self.predictor.na_columns
                   if c in frame.columns}
        with self._lock:
            annotated, _ = self.predictor.annotate(frame, first_row=1,
                                                   on_bad_rows=self.on_bad_rows,
                                                   batch_size=self.batch_size,
                                                   missing=missing)
        return annotated[self.columns_added].reset_index(drop=True)


def missing_columns_error(where: str, wanted: list[str], columns: list[str],
                          what: str = "column") -> DataError | None:
    """A one-line :class:`~entrena.errors.DataError` naming the ``wanted`` columns absent from
    ``columns`` (and listing those), or ``None`` when all are there."""
    absent = [c for c in wanted if c not in columns]
    if not absent:
        return None
    return DataError(f"{where} lacks the {what}(s) {', '.join(map(repr, absent))} the model "
                     f"reads; its columns are: {', '.join(map(repr, columns)) or 'none'}; "
                     "add them (an empty cell is a missing value)")


def stream_predictions(predictor: ChunkPredictor, data: Path, output: Path, *,
                       columns: list[str], policy: str, options: PredictOptions, model: str,
                       started: float | None = None) -> dict[str, Any]:
    """Annotate ``data`` chunk by chunk into ``output`` and return the summary.

    Args:
        predictor: The task's predictor (its ``runner`` names the backend).
        columns: The input's columns (a header-only input still gets a header).
        policy: ``skip`` or ``error`` for bad rows.
        options: Batch size, chunk size, progress bar.
        model: The model as the summary names it.
        started: ``time.perf_counter()`` when the caller began (model loading counts).

    Returns:
        ``input``, ``output``, ``model``, ``backend``, ``on_bad_rows``, ``columns_added``,
        ``rows`` (read, predicted, skipped), ``skipped`` (``{reason: {count, rows}}``, the
        first :data:`SKIPPED_ROWS_LISTED` row numbers), ``predicted_label_counts``,
        ``time_s`` and ``throughput_rows_per_s``.
    """
    from entrena.data.streaming import TableWriter, iter_table

    start = time.perf_counter() if started is None else started
    text = output_format(data, output)
    log.info("predicting %s with %s (%s) into %s", data, model, predictor.runner.name, output)
    console = options.console
    if console is None:
        from entrena.core.console import stderr_console

        console = stderr_console()
    counts: Counter[str] = Counter()
    added = output_columns(predictor.labels) if predictor.labels else VALUE_COLUMNS
    values = _ValueSummary()
    skipped_rows: list[int] = []
    rows = predicted = 0
    with TableWriter(output, text=text) as writer, Progress(console, options.progress) as bar:
        for chunk in iter_table(data, chunk_rows=options.chunk_rows,
                                na_columns=predictor.na_columns, role="input"):
            annotated, skipped = predictor.annotate(chunk.frame, first_row=chunk.first_row,
                                                    on_bad_rows=policy,
                                                    batch_size=options.batch_size,
                                                    missing=chunk.missing)
            writer.write(annotated)
            rows += len(annotated)
            predicted += int((~skipped).sum())
            if predictor.labels:
                predicted_now = annotated.loc[~skipped, "predicted_label"].tolist()
                separator = getattr(predictor, "separator", None)
                if separator:  # a multi-label model counts tags, not sets
                    predicted_now = [t for v in predicted_now if v for t in v.split(separator)]
                counts.update(predicted_now)
            else:
                values.add(annotated.loc[~skipped, "predicted_value"].to_numpy(float))
            room = SKIPPED_ROWS_LISTED - len(skipped_rows)
            if room > 0:
                skipped_rows += [chunk.first_row + int(i) for i in skipped.nonzero()[0][:room]]
            bar.update(chunk.fraction_done, rows)
        if rows == 0:  # a header-only input still gets a header
            writer.write(pd.DataFrame(columns=[*columns, *added]))
    elapsed = time.perf_counter() - start
    log.info("predicted %d rows, skipped %d (%s) in %.1fs", predicted, rows - predicted,
             predictor.skip_reason, elapsed)
    return {
        "input": str(data), "output": str(output), "model": model,
        "output_format": ({"delimiter": text.delimiter, "encoding": text.encoding}
                          if text is not None else None),
        "backend": predictor.runner.name, "on_bad_rows": policy,
        "columns_added": added,
        "rows": {"read": rows, "predicted": predicted, "skipped": rows - predicted},
        "skipped": {predictor.skip_reason: {"count": rows - predicted, "rows": skipped_rows}},
        **({"predicted_label_counts": {label: counts.get(label, 0)
                                       for label in predictor.labels}}
           if predictor.labels else {"predicted_value": values.as_dict()}),
        "time_s": elapsed, "throughput_rows_per_s": rows / elapsed if elapsed > 0 else 0.0,
    }
