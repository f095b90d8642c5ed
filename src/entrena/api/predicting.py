"""``entrena.predict``: batch inference on a file, streamed chunk by chunk."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError, DataError

__all__ = ["PredictResult", "load_predictor", "predict"]

log = logging.getLogger("entrena")

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
        DataError: No model in ``run`` for the backend, a model whose recorded task is not
            installed, an unreadable input, a missing text column, empty texts under
            ``on_bad_rows: error``, or ``output`` equal to ``data``.
            Nothing is written then (an existing output file is left as it was).
    """
    from entrena.exporting.prediction import (
        BACKENDS,
        PredictOptions,
        locate_model,
        model_meta_file,
        model_task_name,
    )
    from entrena.tasks.registry import model_files, recorded_task

    if batch_size < 1:
        raise ConfigError(f"--batch-size {batch_size}: give at least 1 row per model call "
                          "(the default is 32)")
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows={chunk_rows}: give at least 1 row per chunk (the "
                          "default is 1000)")
    if on_bad_rows is not None and on_bad_rows not in ("skip", "error"):
        raise ConfigError(f"--on-bad-rows {on_bad_rows!r}: use skip or error")
    if backend is not None and backend not in BACKENDS:
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
    task = recorded_task(model_task_name(run), model_meta_file(run))
    location = locate_model(run, backend, model_files=model_files,
                            formats=task.export_formats)
    options = PredictOptions(input_column=text_column, on_bad_rows=on_bad_rows, threads=threads,
                             batch_size=batch_size, chunk_rows=chunk_rows, progress=progress,
                             console=console)
    return PredictResult(output, task.predict(location, data, output, options))


def load_predictor(source: str | Path, *, backend: str | None = None,
                   threads: int | None = None, on_bad_rows: str | None = None,
                   batch_size: int = 32) -> Any:
    """A run's model (or an export bundle) loaded once, answering DataFrames in memory.

    ``predictor.predict(frame)`` takes a ``pandas.DataFrame`` of N rows with the input
    columns (the label may be there; other columns are ignored) and returns N rows, in
    order, with the columns ``entrena predict`` adds (:attr:`columns_added`:
    ``predicted_label``, ``prob_<label>``… or ``predicted_value``; and ``status``). It reads
    and writes no file per call and is safe to call from several threads (calls are
    serialised). The MLflow ``pyfunc`` model and ``entrena predict`` run the same task code.

    Args:
        source: A finished run directory or an export bundle.
        backend: ``torch`` or ``onnx`` (as ``entrena predict --backend``); default: what the
            source holds.
        threads: CPU threads for PyTorch / ONNX Runtime.
        on_bad_rows: ``skip`` (an unusable row gets ``status: skipped: …``) or ``error``;
            default the run's ``data.on_bad_rows`` (texts) or ``skip``.
        batch_size: Rows per model call (memory stays bounded whatever N).

    Returns:
        A :class:`~entrena.exporting.prediction.FramePredictor`.

    Raises:
        ConfigError: Unknown backend or policy, or a batch size below 1.
        DataError: No model in ``source``, or a task whose models cannot answer in memory
            (an LLM: serve its GGUF bundle instead).
    """
    from entrena.exporting.prediction import (
        BACKENDS,
        PredictOptions,
        locate_model,
        model_meta_file,
        model_task_name,
    )
    from entrena.tasks.registry import model_files, recorded_task

    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size}: give at least 1 row per model call")
    if on_bad_rows is not None and on_bad_rows not in ("skip", "error"):
        raise ConfigError(f"on_bad_rows={on_bad_rows!r}: use skip or error")
    if backend is not None and backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is not a backend; use one of: "
                          f"{', '.join(BACKENDS)}")
    task = recorded_task(model_task_name(source), model_meta_file(source))
    opener = getattr(task, "frame_predictor", None)
    if opener is None:
        raise DataError(f"{source}: a {task.name} model does not answer tables in memory; "
                        "use entrena predict on a file (an LLM: entrena chat, or serve its "
                        "GGUF export)")
    location = locate_model(source, backend, model_files=model_files,
                            formats=task.export_formats)
    return opener(location, PredictOptions(on_bad_rows=on_bad_rows, threads=threads,
                                           batch_size=batch_size, progress=False))
