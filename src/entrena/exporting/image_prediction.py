"""``entrena predict`` for image models: a folder of images or a CSV of paths → a table.

Files become ``pixel_values`` exactly as in training (:mod:`entrena.data.image_batches`:
decode, convert to the training mode, resize, normalise); a run's PyTorch model or an ONNX
bundle (:mod:`entrena.exporting.image_export`) maps them to class probabilities.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from entrena.data.image_batches import ImageTransforms, decode_resized
from entrena.data.images import decode_failure
from entrena.errors import DataError
from entrena.exporting import onnx_format
from entrena.exporting.bundle import META_FILE
from entrena.exporting.inference import Runner, TorchRunner, require_finite, softmax

__all__ = ["ImagePredictor", "predict_images"]

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


def predict_images(folder: Path, kind: str, manifest: dict[str, Any], data: Path,
                   output: Path, *, image_column: str | None, on_bad_rows: str | None,
                   threads: int | None, batch_size: int) -> dict[str, Any]:
    """Label every image of a folder (or a CSV of paths) and write the output table.

    The output holds the input's rows (a folder: a ``path`` column) plus ``predicted_label``,
    ``prob_<label>`` per class and ``status`` (``ok`` or ``skipped: <reason>``), written through
    a temporary file (an error leaves no half output).

    Args:
        folder, kind, manifest: The model (a run's ``model/`` or a bundle) as
            :class:`ImagePredictor` takes it.
        data: A folder of images or a CSV of paths.
        output: The output table (its suffix picks the format).
        image_column: The CSV's path column; default the training data's.
        on_bad_rows: ``skip`` or ``error`` for files that are not readable images; default the
            run's.
        threads: CPU threads.
        batch_size: Images per model call.

    Returns:
        The summary (``--json``): rows read, predicted, skipped with reasons, label counts.

    Raises:
        DataError: An unreadable input or a missing column; a bad file under ``error``.
    """
    from entrena.data.streaming import TableWriter
    from entrena.exporting.prediction import output_columns

    started = time.perf_counter()
    predictor = ImagePredictor(folder, kind, manifest, threads)
    column = image_column or predictor.meta.get("image_column") or "image"
    policy = on_bad_rows or predictor.meta.get("on_bad_rows", "skip")
    frame, paths = _prediction_frame(data, column)
    TableWriter(output).abort()  # an unsupported output fails before any work
    log.info("predicting %d images of %s with %s (%s) into %s", len(paths), data, folder,
             predictor.runner.name, output)
    probs, status = predictor.predict(paths, on_bad_rows=policy, batch_size=batch_size)
    labels = predictor.labels
    ok = np.array([s == "ok" for s in status], dtype=bool)
    predicted = np.full(len(paths), None, dtype=object)
    if ok.any():
        predicted[ok] = np.asarray(labels, dtype=object)[probs[ok].argmax(1)]
    out = frame.drop(columns=[c for c in output_columns(labels) if c in frame.columns])
    out["predicted_label"] = predicted
    for j, label in enumerate(labels):
        out[f"prob_{label}"] = probs[:, j]
    out["status"] = status
    with TableWriter(output) as writer:
        writer.write(out)
    reasons: dict[str, int] = {}
    for s in status:
        if s != "ok":
            reasons[s.removeprefix("skipped: ")] = reasons.get(s.removeprefix("skipped: "), 0) + 1
    elapsed = time.perf_counter() - started
    log.info("predicted %d images, skipped %d in %.1fs", int(ok.sum()), int((~ok).sum()),
             elapsed)
    return {"input": str(data), "output": str(output), "model": str(folder),
            "backend": predictor.runner.name, "task": "image-classification",
            "on_bad_rows": policy, "columns_added": output_columns(labels),
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
            from entrena.tasks.image_model import load_image_classifier

            if threads:
                import torch

                torch.set_num_threads(threads)
            model, meta = load_image_classifier(folder)
            self.runner: Runner = TorchRunner(model)
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
