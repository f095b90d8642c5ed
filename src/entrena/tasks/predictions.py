"""Per-row predictions of a run's evaluation splits, the part every classification task shares.

After the fit, the run scores validation (and test) with the weights it keeps; a task that has
``prediction_table(prepared, role, outputs, targets)`` returns those rows as a table, which
the recipe writes to ``predictions/<role>.csv``. For a classifier the table is
:func:`classification_table`: the row's number in its file, the task's input columns, the
label, the predicted label, each class's probability and whether the prediction is correct.
:func:`most_confident_mistakes` picks the wrong rows the model was surest of, for
``metrics.json`` and the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported where used: a training run imports it only after the fit
    import pandas as pd

__all__ = ["MISTAKES_LISTED", "classification_table", "most_confident_mistakes",
           "multi_label_table", "softmax_rows"]

MISTAKES_LISTED = 10
"""Wrong rows listed per split in ``metrics.json`` and the report (the CSV holds every row)."""
SHOWN_CHARS = 200
"""Characters of an input value kept in ``metrics.json``'s list (the CSV keeps them all)."""


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Class probabilities (N, C) from logits (N, C), computed in float64."""
    shifted = np.asarray(logits, dtype=np.float64)
    shifted = shifted - shifted.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def classification_table(inputs: Mapping[str, Sequence[Any]], labels: Sequence[str],
                         outputs: np.ndarray, targets: np.ndarray,
                         row_ids: Sequence[int]) -> pd.DataFrame:
    """One row per example: ``row``, the inputs, ``label``, ``predicted_label``,
    ``prob_<label>`` per class, ``correct`` (``yes``/``no``).

    Args:
        inputs: Input column name → values (N,), in example order (a text, a file path, a
            table's feature values).
        labels: Class names in index order.
        outputs: Logits (N, C).
        targets: True class indices (N,).
        row_ids: Each example's row number in its file (1-based; a validation split taken
            from training counts training rows).
    """
    import pandas as pd

    probs = softmax_rows(outputs)
    predicted = probs.argmax(axis=1)
    names = np.asarray(labels, dtype=object)
    frame = pd.DataFrame({"row": np.asarray(row_ids, dtype=np.int64)})
    for column, values in inputs.items():
        frame[column] = list(values)
    frame["label"] = names[np.asarray(targets, dtype=np.int64)]
    frame["predicted_label"] = names[predicted]
    for j, label in enumerate(labels):
        frame[f"prob_{label}"] = probs[:, j]
    frame["correct"] = np.where(predicted == np.asarray(targets), "yes", "no")
    return frame


def multi_label_table(inputs: Mapping[str, Sequence[Any]], tags: Sequence[str],
                      outputs: np.ndarray, targets: np.ndarray, row_ids: Sequence[int], *,
                      thresholds: Any, separator: str) -> pd.DataFrame:
    """:func:`classification_table` of a multi-label model: ``label`` and
    ``predicted_label`` are tag sets (sorted, joined by ``separator``), ``prob_<tag>`` the
    sigmoid of each output, ``correct`` whether the whole set is right, and ``confidence``
    the probability behind the surest wrong decision (a tag predicted or left out).

    Args:
        outputs: Logits (N, K).
        targets: Multi-hot truth (N, K).
        thresholds: Per-tag thresholds (K,) (``None``: 0.5).
    """
    import pandas as pd

    from entrena.tasks.metrics import sigmoid

    probs = sigmoid(outputs)
    cut = np.full(len(tags), 0.5) if thresholds is None else np.asarray(thresholds)
    guess, truth = probs >= cut, np.asarray(targets) > 0.5
    names = np.asarray(tags, dtype=object)

    def joined(rows: np.ndarray) -> list[str]:
        return [separator.join(sorted(names[r])) for r in rows]

    frame = pd.DataFrame({"row": np.asarray(row_ids, dtype=np.int64)})
    for column, values in inputs.items():
        frame[column] = list(values)
    frame["label"] = joined(truth)
    frame["predicted_label"] = joined(guess)
    for j, tag in enumerate(tags):
        frame[f"prob_{tag}"] = probs[:, j]
    wrong = guess != truth
    sure = np.where(guess, probs, 1 - probs)
    frame["confidence"] = np.where(wrong, sure, 0.0).max(axis=1)
    frame["correct"] = np.where(wrong.any(axis=1), "no", "yes")
    return frame


def most_confident_mistakes(frame: pd.DataFrame, limit: int = MISTAKES_LISTED
                            ) -> list[dict[str, Any]]:
    """The wrong rows of a :func:`classification_table` with the highest probability on the
    predicted label, highest first: ``row``, the inputs (cut to 200 characters), ``label``,
    ``predicted_label``, ``confidence``, ``label_probability``."""
    if "correct" not in frame.columns or not len(frame):
        return []
    wrong = frame.loc[frame["correct"] == "no"]
    if not len(wrong):
        return []
    if "confidence" in frame.columns:  # a multi-label table says it
        confidence = wrong["confidence"].to_numpy(dtype=float)
        truth = np.full(len(wrong), np.nan)
    else:
        confidence = np.array([wrong.at[i, f"prob_{p}"] for i, p in
                               zip(wrong.index, wrong["predicted_label"], strict=True)],
                              dtype=float)
        truth = np.array([wrong.at[i, f"prob_{t}"] for i, t in
                          zip(wrong.index, wrong["label"], strict=True)], dtype=float)
    order = np.argsort(-confidence, kind="stable")[:limit]
    inputs = [c for c in frame.columns
              if c not in ("row", "label", "predicted_label", "correct", "confidence")
              and not c.startswith("prob_")]
    listed = []
    for k in order:
        at = wrong.index[k]
        entry: dict[str, Any] = {"row": int(wrong.at[at, "row"])}
        for column in inputs:
            value = wrong.at[at, column]
            entry[column] = (value[:SHOWN_CHARS] + "…" if isinstance(value, str)
                             and len(value) > SHOWN_CHARS else
                             value.item() if isinstance(value, np.generic) else value)
        entry.update(label=str(wrong.at[at, "label"]),
                     predicted_label=str(wrong.at[at, "predicted_label"]),
                     confidence=round(float(confidence[k]), 4))
        if not np.isnan(truth[k]):
            entry["label_probability"] = round(float(truth[k]), 4)
        listed.append(entry)
    return listed
