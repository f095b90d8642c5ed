"""``entrena.predict``: batch inference on a file, streamed chunk by chunk."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError, DataError

__all__ = ["PredictResult", "predict"]

log = logging.getLogger("entrena")

SKIPPED_ROWS_LISTED = 100
"""Row numbers of skipped rows kept in the summary (the count is always exact)."""


@dataclass
class PredictResult:
    """What a prediction run wrote.

    Attributes:
        output: The output file.
        summary: Rows read, predicted and skipped (with reasons and row numbers), label
            counts, backend, time (the ``--json`` document).
    """

    output: Path
    summary: dict[str, Any] = field(default_factory=dict)


def _default_output(data: Path) -> Path:
    if data.is_dir():  # a folder of images
        return data.with_name(f"{data.name}.predictions.csv")
    return data.with_name(f"{data.stem}.predictions{data.suffix}")


class _Progress:
    """A Rich bar on a terminal, a log line every 10% elsewhere."""

    def __init__(self, console: Any, enabled: bool):
        self.console, self.enabled = console, enabled
        self.bar: Any = None
        self.task: Any = None
        self._next_log = 0.1

    def __enter__(self) -> _Progress:
        if self.enabled and self.console.is_terminal:
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


def predict(run: str | Path, data: str | Path, *, output: str | Path | None = None,
            backend: str | None = None, text_column: str | None = None, batch_size: int = 32,
            chunk_rows: int = 1000, on_bad_rows: str | None = None, threads: int | None = None,
            progress: bool = True, console: Any = None) -> PredictResult:
    """Predict a label and class probabilities for every row of a file.

    The input is read ``chunk_rows`` rows at a time and each annotated chunk is appended to
    the output, so memory stays bounded whatever the file size. Every input row is written,
    in order, with all its columns, plus ``predicted_label``, ``prob_<label>`` per class and
    ``status`` (``ok`` or ``skipped: empty text``). Texts are preprocessed as in training.

    Args:
        run: A finished run directory or an export bundle.
        data: The input file (CSV, TSV, JSONL or Parquet).
        output: The output file (its suffix picks the format); default
            ``<input stem>.predictions<suffix>`` beside the input.
        backend: ``torch`` (a run's PyTorch model, or a TorchScript bundle) or ``onnx`` (an
            ONNX bundle, or the run's ``export/onnx``); default: what the source holds.
        text_column: The input's text column; default the training data's.
        batch_size: Texts per model call.
        chunk_rows: Rows read and written at a time.
        on_bad_rows: ``skip`` or ``error`` for rows with an empty text; default the run's
            ``data.on_bad_rows``.
        threads: CPU threads for PyTorch / ONNX Runtime.
        progress: Show a progress bar (stderr).
        console: A ``rich.console.Console`` for the bar (default: one on stderr).

    Returns:
        The :class:`PredictResult`.

    Raises:
        ConfigError: Unknown backend or policy, or a batch/chunk size below 1.
        DataError: No model in ``run`` for the backend, an unreadable input, a missing text
            column, empty texts under ``on_bad_rows: error``, or ``output`` equal to ``data``.
            Nothing is written then (an existing output file is left as it was).
    """
    from entrena.data.streaming import TableWriter, iter_table, table_columns
    from entrena.exporting.prediction import Predictor, output_columns, resolve_source

    start = time.perf_counter()
    if batch_size < 1 or chunk_rows < 1:
        raise ConfigError(f"batch size and chunk rows must be >= 1; got {batch_size} and "
                          f"{chunk_rows}")
    if on_bad_rows is not None and on_bad_rows not in ("skip", "error"):
        raise ConfigError(f"--on-bad-rows {on_bad_rows!r}: use skip or error")
    from entrena.exporting.prediction import BACKENDS

    if backend is not None and backend not in BACKENDS:  # before the image/table models too
        raise ConfigError(f"--backend {backend!r} is not a backend; use one of: "
                          f"{', '.join(BACKENDS)}")
    data = Path(data)
    output = Path(output) if output is not None else _default_output(data)
    if output.is_dir():
        raise DataError(f"--output {output} is a folder; give a file name (its suffix picks the "
                        "format: .csv, .tsv, .jsonl, .parquet)")
    if output.resolve() == data.resolve():
        raise DataError(f"--output {output} is the input file; write the predictions to "
                        "another file")
    image = _task_model(Path(run), backend, "image-classification")
    if image is not None:  # a folder of images or a CSV of paths
        from entrena.exporting.image_prediction import predict_images

        return PredictResult(output, predict_images(
            *image, data, output, image_column=text_column or _run_image_column(Path(run)),
            on_bad_rows=on_bad_rows, threads=threads, batch_size=batch_size))
    table = _table_model(Path(run), backend)
    if table is not None and text_column is not None:
        raise ConfigError(f"--text-column {text_column}: {run} holds a tabular model, which "
                          "reads the feature columns it was trained on; leave --text-column out")
    if table is not None:
        return _predict_table(table, data, output, on_bad_rows=on_bad_rows, threads=threads,
                              batch_size=batch_size, chunk_rows=chunk_rows, progress=progress,
                              console=console, start=start)
    source = resolve_source(run, backend)
    prep = source.preprocessing
    column = text_column or prep.text_column
    policy = on_bad_rows or prep.on_bad_rows
    columns = table_columns(data, role="input")
    if column not in columns:
        origin = "--text-column" if text_column else \
            f"the text column the model was trained on (data.text_column = {column!r})"
        present = ", ".join(repr(c) for c in columns) or "none"
        raise DataError(f"{data}: no column {column!r} ({origin}); the input's columns are: "
                        f"{present}; rename the column or pass --text-column COLUMN")
    _warn_replaced(data, columns, prep.labels)
    TableWriter(output).abort()  # an unwritable or unsupported output fails before loading

    predictor = Predictor(source, threads)
    log.info("predicting %s with %s (%s) into %s", data, source.path, predictor.runner.name,
             output)
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    counts: Counter[str] = Counter()
    skipped_rows: list[int] = []
    rows = predicted = 0
    with TableWriter(output) as writer, _Progress(console, progress) as bar:
        for chunk in iter_table(data, chunk_rows=chunk_rows, na_columns=[column], role="input"):
            annotated, skipped = predictor.annotate(chunk.frame, column,
                                                    first_row=chunk.first_row,
                                                    on_bad_rows=policy, batch_size=batch_size,
                                                    missing=chunk.missing.get(column))
            writer.write(annotated)
            rows += len(annotated)
            predicted += int((~skipped).sum())
            counts.update(annotated.loc[~skipped, "predicted_label"].tolist())
            room = SKIPPED_ROWS_LISTED - len(skipped_rows)
            if room > 0:
                skipped_rows += [chunk.first_row + int(i) for i in skipped.nonzero()[0][:room]]
            bar.update(chunk.fraction_done, rows)
        if rows == 0:  # a header-only input still gets a header
            import pandas as pd

            writer.write(pd.DataFrame(columns=[*columns, *output_columns(prep.labels)]))
    elapsed = time.perf_counter() - start
    summary = {
        "input": str(data), "output": str(output), "model": str(source.path),
        "backend": predictor.runner.name, "text_column": column, "on_bad_rows": policy,
        "columns_added": output_columns(prep.labels),
        "rows": {"read": rows, "predicted": predicted, "skipped": rows - predicted},
        "skipped": {"empty text": {"count": rows - predicted, "rows": skipped_rows}},
        "predicted_label_counts": {label: counts.get(label, 0) for label in prep.labels},
        "time_s": elapsed, "throughput_rows_per_s": rows / elapsed if elapsed > 0 else 0.0,
    }
    log.info("predicted %d rows, skipped %d (empty text) in %.1fs", predicted, rows - predicted,
             elapsed)
    return PredictResult(output, summary)


def _table_model(path: Path, backend: str | None) -> tuple[Path, str, dict[str, Any]] | None:
    """``(folder, kind, manifest)`` when ``path`` holds a tabular model (a run's ``model/``,
    its ONNX bundle for ``backend="onnx"``, or a bundle), else ``None``.

    Raises:
        DataError: An ONNX backend asked of a run without an ONNX export.
    """
    return _task_model(path, backend, "tabular-classification")


def _run_image_column(path: Path) -> str | None:
    """A run directory's ``data.image_column`` (``None`` for a bundle or when unreadable)."""
    import yaml

    try:
        config = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, ValueError):
        return None
    return (config.get("data") or {}).get("image_column")


def _warn_replaced(data: Path, columns: list[str], labels: list[str]) -> None:
    """Warn when input columns share a name with the columns predict adds (``status``, a
    common label or feature name): the output holds predict's values under that name."""
    from entrena.exporting.prediction import output_columns

    clash = [c for c in output_columns(labels) if c in columns]
    if clash:
        log.warning("%s: the input's column(s) %s are replaced in the output by the columns "
                    "predict adds under the same name(s); rename them in the input to keep them",
                    data, ", ".join(map(repr, clash)))


def _task_model(path: Path, backend: str | None,
                task: str) -> tuple[Path, str, dict[str, Any]] | None:
    """``(folder, kind, manifest)`` when ``path`` holds a model of ``task`` (its
    ``entrena_model.json`` says so): a run's ``model/``, its ONNX bundle for
    ``backend="onnx"``, or a bundle; else ``None``.

    Raises:
        DataError: An ONNX backend asked of a run without an ONNX export.
    """
    import json

    from entrena.exporting.bundle import (
        META_FILE,
        find_run_bundle,
        is_bundle,
        locate_run,
        read_manifest,
    )

    def holds(folder: Path) -> bool:
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return meta.get("task") == task

    if is_bundle(path):
        if not holds(path):
            return None
        manifest = read_manifest(path)
        if backend == "torch":  # these bundles hold ONNX only
            raise DataError(f"{path}: this bundle holds an onnx model, which runs with --backend "
                            f"onnx; for --backend torch give the run directory "
                            f"({manifest.get('run', 'runs/<name>')})")
        return path, "bundle", manifest
    if not holds(path / "model"):
        return None
    run = locate_run(path, verb="predict with")
    if backend == "onnx":
        bundle = find_run_bundle(run.paths.root, "onnx")
        if bundle is None:
            raise DataError(f"{path}: no ONNX export under {path / 'export'}; make one with: "
                            f"entrena export {path}  (or use --backend torch)")
        return bundle, "bundle", read_manifest(bundle)
    return run.paths.model, "run", {}


def _predict_table(table: tuple[Path, str, dict[str, Any]], data: Path, output: Path, *,
                   on_bad_rows: str | None, threads: int | None, batch_size: int,
                   chunk_rows: int, progress: bool, console: Any, start: float) -> PredictResult:
    """:func:`predict` for a tabular model: the saved preprocessing, then the MLP."""
    from entrena.data.streaming import TableWriter, iter_table, table_columns
    from entrena.exporting.prediction import output_columns
    from entrena.exporting.table_export import SKIPPED_EMPTY_ROW, TablePredictor

    folder, kind, manifest = table
    predictor = TablePredictor(folder, kind, manifest, threads)
    columns = table_columns(data, role="input")
    predictor.check_columns(columns, data)
    _warn_replaced(data, columns, predictor.labels)
    policy = on_bad_rows or "skip"
    TableWriter(output).abort()
    log.info("predicting %s with %s (%s) into %s", data, folder, predictor.runner.name, output)
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    counts: Counter[str] = Counter()
    skipped_rows: list[int] = []
    rows = predicted = 0
    with TableWriter(output) as writer, _Progress(console, progress) as bar:
        for chunk in iter_table(data, chunk_rows=chunk_rows, na_columns=predictor.columns,
                                role="input"):
            annotated, skipped = predictor.annotate(chunk.frame, first_row=chunk.first_row,
                                                    on_bad_rows=policy, batch_size=batch_size,
                                                    missing=chunk.missing, source=str(data))
            writer.write(annotated)
            rows += len(annotated)
            predicted += int((~skipped).sum())
            counts.update(annotated.loc[~skipped, "predicted_label"].tolist())
            room = SKIPPED_ROWS_LISTED - len(skipped_rows)
            if room > 0:
                skipped_rows += [chunk.first_row + int(i) for i in skipped.nonzero()[0][:room]]
            bar.update(chunk.fraction_done, rows)
        if rows == 0:
            import pandas as pd

            writer.write(pd.DataFrame(columns=[*columns, *output_columns(predictor.labels)]))
    elapsed = time.perf_counter() - start
    summary = {
        "input": str(data), "output": str(output), "model": str(folder),
        "backend": predictor.runner.name, "task": "tabular-classification",
        "on_bad_rows": policy, "columns_added": output_columns(predictor.labels),
        "rows": {"read": rows, "predicted": predicted, "skipped": rows - predicted},
        "skipped": {SKIPPED_EMPTY_ROW.removeprefix("skipped: "):
                    {"count": rows - predicted, "rows": skipped_rows}},
        "unseen_categories": predictor.unseen,
        "invalid_numbers": predictor.invalid,
        "predicted_label_counts": {label: counts.get(label, 0) for label in predictor.labels},
        "time_s": elapsed, "throughput_rows_per_s": rows / elapsed if elapsed > 0 else 0.0,
    }
    log.info("predicted %d rows, skipped %d (empty row) in %.1fs; categories never seen in "
             "training: %s", predicted, rows - predicted, elapsed,
             ", ".join(f"{c} {n}" for c, n in predictor.unseen.items()) or "none")
    for column, entry in predictor.invalid.items():
        log.warning("%s: %d value(s) of numeric column %r are not finite numbers (rows %s): "
                    "given the training median; fix them, or pass --on-bad-rows error to refuse "
                    "them", data, entry["count"], column, ", ".join(map(str, entry["rows"])))
    return PredictResult(output, summary)
