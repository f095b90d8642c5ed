"""``entrena predict`` for image models: a folder of images or a CSV of paths → a table.

Files become ``pixel_values`` exactly as in training (:mod:`entrena.data.image_batches`:
decode, convert to the training mode, resize, normalise); a run's PyTorch model or an ONNX
bundle (:mod:`entrena.tasks.image_classification.export`) maps them to class probabilities.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from entrena.data.image_batches import ImageTransforms, decode_resized
from entrena.data.images import decode_failure
from entrena.errors import DataError
from entrena.exporting import onnx_format
from entrena.exporting.bundle import META_FILE
from entrena.exporting.inference import TorchRunner, require_finite, softmax
from entrena.exporting.prediction import (
    FramePredictor,
    ModelLocation,
    PredictOptions,
    labelled_frame,
    missing_columns_error,
    output_columns,
    output_format,
)

__all__ = ["ImagePredictor", "image_frame_predictor", "predict_images"]

log = logging.getLogger("entrena")

BATCH = 32


def _prediction_frame(source: Path, image_column: str) -> tuple[Any, list[Path]]:
    """The rows to write and the files to label: for a folder, one row per file under it
    (sorted, hidden ones left out; column ``path``, relative to the folder); for a CSV, its
    rows as they are (paths in ``image_column``, relative to the CSV)."""
    import pandas as pd

    if source.is_dir():
        paths = sorted(p for p in source.rglob("*") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(source).parts))
        return pd.DataFrame({"path": [str(p.relative_to(source)) for p in paths]}), paths
    if not source.is_file():
        raise DataError(f"--input {source}: no such folder or file; give a folder of images or "
                        "a CSV of image paths")
    try:
        frame = pd.read_csv(source, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"--input {source}: cannot read it as a CSV of image paths ({exc}); "
                        "give a folder of images or a CSV") from exc
    if image_column not in frame.columns:
        raise DataError(f"--input {source}: no column {image_column!r} of image paths "
                        f"(columns: {', '.join(map(str, frame.columns))}); pass --text-column "
                        "with the column that holds them")
    paths = [Path(v) if Path(v).is_absolute() else source.parent / v
             for v in frame[image_column].astype(str).str.strip()]
    return frame, paths


def predict_images(location: ModelLocation, data: Path, output: Path,
                   options: PredictOptions) -> dict[str, Any]:
    """Label every image of a folder (or a CSV of paths) and write the output table.

    The output holds the input's rows (a folder: a ``path`` column) plus ``predicted_label``,
    ``prob_<label>`` per class and ``status`` (``ok`` or ``skipped: <reason>``), written through
    a temporary file (an error leaves no half output).

    Args:
        location: The model (a run's ``model/`` or an ONNX bundle).
        data: A folder of images or a CSV of paths.
        output: The output table (its suffix picks the format).
        options: ``input_column`` is the CSV's path column (default the training data's
            ``data.image_column``); ``on_bad_rows`` (``skip`` or ``error``) is for files that
            are not readable images (default the run's).

    Returns:
        The summary (``--json``): rows read, predicted, skipped with reasons, label counts.

    Raises:
        DataError: An unreadable input or a missing column; a bad file under ``error``; a
            TorchScript backend (image bundles hold ONNX).
    """
    from entrena.data.streaming import TableWriter

    started = time.perf_counter()
    predictor = ImagePredictor(location.folder, location.kind, location.manifest,
                               options.threads)
    column = (options.input_column or location.config.get("data", {}).get("image_column")
              or predictor.meta.get("image_column") or "image")
    policy = options.on_bad_rows or predictor.meta.get("on_bad_rows", "skip")
    frame, paths = _prediction_frame(data, column)
    TableWriter(output).abort()  # an unsupported output fails before any work
    log.info("predicting %d images of %s with %s (%s) into %s", len(paths), data,
             location.folder, predictor.runner.name, output)
    probs, status = predictor.predict(paths, on_bad_rows=policy, batch_size=options.batch_size)
    labels = predictor.labels
    out = labelled_frame(frame, labels, probs, status)
    text = output_format(data, output)
    with TableWriter(output, text=text) as writer:
        writer.write(out)
    ok = np.array([s == "ok" for s in status], dtype=bool)
    reasons = Counter(s.removeprefix("skipped: ") for s in status if s != "ok")
    elapsed = time.perf_counter() - started
    log.info("predicted %d images, skipped %d in %.1fs", int(ok.sum()), int((~ok).sum()),
             elapsed)
    predicted = out["predicted_label"].to_numpy()
    return {"input": str(data), "output": str(output), "model": str(location.folder),
            "backend": predictor.runner.name, "task": location.meta.get("task"),
            "on_bad_rows": policy, "columns_added": output_columns(labels),
            "output_format": ({"delimiter": text.delimiter, "encoding": text.encoding}
                              if text is not None else None),
            "rows": {"read": len(paths), "predicted": int(ok.sum()),
                     "skipped": int((~ok).sum())},
            "skipped": {reason: {"count": n} for reason, n in reasons.items()},
            "predicted_label_counts": {label: int(np.sum(predicted[ok] == label))
                                       for label in labels},
            "time_s": elapsed,
            "throughput_rows_per_s": len(paths) / elapsed if elapsed > 0 else 0.0}


class ImagePredictor:
    """An image model (a run's PyTorch model or an ONNX bundle) and its transforms.

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
            from entrena.tasks.image_classification.model import load_image_classifier

            if threads:
                import torch

                torch.set_num_threads(threads)
            model, meta = load_image_classifier(folder)
            self.runner: TorchRunner | onnx_format.OnnxRunner = TorchRunner(model)
        else:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            self.runner = onnx_format.OnnxRunner(
                folder / (manifest or {}).get("file", "model.onnx"), threads)
        self.meta = meta
        self.labels: list[str] = list(meta["labels"])
        self.transforms = ImageTransforms.from_dict(meta["transforms"])

    def predict(self, paths: list[Path], *, on_bad_rows: str = "skip",
                batch_size: int = BATCH) -> tuple[np.ndarray, list[str]]:
        """Class probabilities of image files.

        Returns:
            ``(probabilities (N, K) float, NaN for a skipped file; status per file: "ok" or
            "skipped: <reason>")``.

        Raises:
            DataError: ``on_bad_rows == "error"`` and a file is not a readable image.
        """
        import torch

        t = self.transforms
        probs = np.full((len(paths), len(self.labels)), np.nan)
        status = ["ok"] * len(paths)
        for start in range(0, len(paths), batch_size):
            images, kept = [], []
            for i in range(start, min(start + batch_size, len(paths))):
                try:
                    images.append(decode_resized(paths[i], t.channels, t.size))
                    kept.append(i)
                except Exception as exc:  # noqa: BLE001  # any decoder failure: that file's
                    reason = decode_failure(exc)
                    if on_bad_rows == "error":
                        raise DataError(f"{paths[i]}: {reason}; remove it or pass "
                                        "--on-bad-rows skip") from exc
                    status[i] = f"skipped: {reason}"
            if kept:
                pixels = t.normalise(torch.stack(images)).numpy()
                logits = require_finite(self.runner(pixels), model=self.folder,
                                        inputs="images")
                probs[kept] = softmax(logits)
        return probs, status


class _ImageRows:
    """An :class:`ImagePredictor` as a :class:`~entrena.exporting.prediction.ChunkPredictor`
    of rows whose ``column`` holds image paths (absolute, or relative to the working
    directory)."""

    skip_reason = "unreadable image"

    def __init__(self, predictor: ImagePredictor, column: str):
        self.predictor, self.column = predictor, column
        self.labels, self.runner = predictor.labels, predictor.runner
        self.na_columns = [column]

    def annotate(self, frame: Any, *, first_row: int, on_bad_rows: str, batch_size: int = BATCH,
                 missing: dict[str, np.ndarray] | None = None) -> tuple[Any, np.ndarray]:
        """``frame`` with ``predicted_label``, ``prob_<label>`` and ``status``; the skipped
        rows' mask (an empty path is an unreadable image)."""
        paths = [Path(str(v).strip()) if v is not None and str(v).strip() else Path()
                 for v in frame[self.column].tolist()]
        probs, status = self.predictor.predict(paths, on_bad_rows=on_bad_rows,
                                               batch_size=batch_size)
        skipped = np.array([s != "ok" for s in status], dtype=bool)
        return labelled_frame(frame, self.labels, probs, status), skipped


def image_frame_predictor(location: ModelLocation, options: PredictOptions) -> FramePredictor:
    """The model at ``location`` and its transforms loaded once, answering DataFrames whose
    image column (``options.input_column``, else the training data's ``data.image_column``)
    holds paths on the serving machine
    (:class:`~entrena.exporting.prediction.FramePredictor`)."""
    predictor = ImagePredictor(location.folder, location.kind, location.manifest,
                               options.threads)
    column = (options.input_column or location.config.get("data", {}).get("image_column")
              or predictor.meta.get("image_column") or "image")

    def check(columns: list[str]) -> None:
        error = missing_columns_error("the input", [column], columns, "image path column")
        if error is not None:
            raise error

    return FramePredictor(_ImageRows(predictor, column), check,
                          on_bad_rows=options.on_bad_rows or "skip",
                          batch_size=options.batch_size)
