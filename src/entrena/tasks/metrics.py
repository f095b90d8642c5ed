"""What every classification task shares: its loss, its metrics (scikit-learn, as plain
JSON-ready values) and which of them are better higher.

A classification task composes these (``loss = staticmethod(cross_entropy_loss)`` …) rather
than inheriting them; a task of another kind (regression, language modelling) brings its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CLASSIFICATION_HIGHER_IS_BETTER", "THRESHOLD_GRID", "classification_loss",
           "classification_metrics", "classification_rows", "cross_entropy_loss",
           "evaluate_classification", "multi_label_metrics", "sigmoid", "tune_thresholds"]

CLASSIFICATION_HIGHER_IS_BETTER = {"loss": False, "accuracy": True, "macro_f1": True,
                                   "micro_f1": True}
"""An evaluation's metrics (``validation.<name>``) and whether a larger value is better."""


def cross_entropy_loss(outputs: Any, batch: dict[str, Any]) -> tuple[Any, int]:
    """Summed cross-entropy of a batch and the count it is normalised by (its examples).

    Args:
        outputs: Logits (B, C) (B batch, C classes), any float dtype (computed in float32).
        batch: Holds ``labels`` (B,) int64 class indices.

    Returns:
        ``(sum over the batch (scalar tensor), B)``; the mean loss is their ratio.
    """
    import torch.nn.functional as F

    labels = batch["labels"]
    return F.cross_entropy(outputs.float(), labels, reduction="sum"), int(labels.shape[0])


THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)
"""The per-tag thresholds :func:`tune_thresholds` tries (0.05 … 0.95)."""


def classification_loss(outputs: Any, batch: dict[str, Any]) -> tuple[Any, int]:
    """:func:`cross_entropy_loss` for class indices (B,); for multi-hot labels (B, K) (B batch,
    K tags) binary cross-entropy on the logits, averaged over the tags of each example and
    summed over the batch.

    Returns:
        ``(sum over the batch (scalar tensor), B)``.
    """
    labels = batch["labels"]
    if labels.ndim == 1:
        return cross_entropy_loss(outputs, batch)
    import torch.nn.functional as F

    per_tag = F.binary_cross_entropy_with_logits(outputs.float(), labels.float(),
                                                 reduction="none")
    return per_tag.mean(dim=1).sum(), int(labels.shape[0])


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Element-wise logistic function in float64 (no overflow warnings)."""
    x = np.asarray(logits, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -x))


def tune_thresholds(probs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each tag's threshold: the :data:`THRESHOLD_GRID` value with the best F1 of that tag on
    these rows (ties: the one closest to 0.5; a tag with no positive row keeps 0.5).

    Args:
        probs: Sigmoid outputs (N, K).
        targets: Multi-hot truth (N, K).

    Returns:
        Thresholds (K,) float64.
    """
    truth = np.asarray(targets) > 0.5
    out = np.full(probs.shape[1], 0.5)
    for j in range(probs.shape[1]):
        if not truth[:, j].any():
            continue
        predicted = probs[:, j][None, :] >= THRESHOLD_GRID[:, None]  # (G, N)
        tp = (predicted & truth[:, j]).sum(1)
        f1 = 2 * tp / np.maximum(predicted.sum(1) + truth[:, j].sum(), 1)
        best = np.flatnonzero(f1 == f1.max())
        out[j] = THRESHOLD_GRID[best[np.argmin(np.abs(THRESHOLD_GRID[best] - 0.5))]]
    return out


def multi_label_metrics(targets: np.ndarray, predicted: np.ndarray, tags: list[str],
                        detailed: bool = False) -> dict[str, Any]:
    """Subset accuracy, micro- and macro-F1 of multi-label predictions.

    Args:
        targets: Multi-hot truth (N, K).
        predicted: Multi-hot predictions (N, K).
        tags: Tag names in output order.
        detailed: Add ``per_class`` per tag (precision, recall, f1, support).

    Returns:
        ``{"accuracy" (every tag of the row right), "micro_f1", "macro_f1", ...}``.
    """
    from sklearn.metrics import f1_score, precision_recall_fscore_support

    truth, guess = np.asarray(targets) > 0.5, np.asarray(predicted) > 0.5
    result: dict[str, Any] = {
        "accuracy": float(np.mean(np.all(truth == guess, axis=1))),
        "micro_f1": float(f1_score(truth, guess, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(truth, guess, average="macro", zero_division=0)),
    }
    if detailed:
        precision, recall, f1, support = precision_recall_fscore_support(
            truth, guess, zero_division=0)
        result["per_class"] = {
            name: {"precision": float(precision[i]), "recall": float(recall[i]),
                   "f1": float(f1[i]), "support": int(support[i])}
            for i, name in enumerate(tags)}
    return result


def evaluate_classification(outputs: np.ndarray, targets: np.ndarray, prepared: Any, *,
                            detailed: bool = False) -> dict[str, Any]:
    """Metrics of one split from the model's outputs.

    Args:
        outputs: Logits (N, C) float32, in example order.
        targets: True class indices (N,), or multi-hot tags (N, K) for multi-label data.
        prepared: The task's prepared data (``prepared.splits.labels``: the class names;
            multi-label: ``prepared.tags`` and ``prepared.thresholds``).
        detailed: Add per-class figures and the confusion matrix (the test split).

    Returns:
        :func:`classification_metrics` of the arg-max predictions; for multi-label targets
        :func:`multi_label_metrics` at per-tag thresholds: tuned on this split when not
        ``detailed`` (validation; kept in ``prepared.thresholds``), the kept ones otherwise.
    """
    if np.ndim(targets) == 2:
        probs = sigmoid(outputs)
        if not detailed:
            prepared.thresholds = tune_thresholds(probs, targets)
        thresholds = getattr(prepared, "thresholds", None)
        thresholds = np.full(probs.shape[1], 0.5) if thresholds is None else thresholds
        return multi_label_metrics(targets, probs >= thresholds, list(prepared.tags),
                                   detailed=detailed)
    return classification_metrics(targets, outputs.argmax(-1), prepared.splits.labels,
                                  detailed=detailed)


def classification_rows(outputs: np.ndarray, targets: np.ndarray,
                        prepared: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(truths, predictions)`` per example, as :func:`evaluate_classification` scores them:
    class indices (N,) from the arg-max, or multi-hot tags (N, K) at the kept per-tag
    thresholds — the rows the paired comparison with a baseline resamples."""
    if np.ndim(targets) == 2:
        probs = sigmoid(outputs)
        thresholds = getattr(prepared, "thresholds", None)
        thresholds = np.full(probs.shape[1], 0.5) if thresholds is None else thresholds
        return ((np.asarray(targets) > 0.5).astype(np.int64),
                (probs >= thresholds).astype(np.int64))
    return np.asarray(targets, dtype=np.int64), np.asarray(outputs).argmax(-1)


def classification_metrics(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str],
                           detailed: bool = False) -> dict[str, Any]:
    """Accuracy and macro-F1, plus per-class figures and the confusion matrix when ``detailed``.

    Args:
        y_true: True label indices, shape (N,).
        y_pred: Predicted label indices, shape (N,).
        labels: Class names in index order.
        detailed: Add ``per_class`` ({name: precision, recall, f1, support}) and
            ``confusion_matrix`` (rows true, columns predicted, in ``labels`` order).

    Returns:
        ``{"accuracy": float, "macro_f1": float, ...}``.
    """
    from sklearn.metrics import (
        accuracy_score,
        confusion_matrix,
        f1_score,
        precision_recall_fscore_support,
    )

    index = list(range(len(labels)))
    result: dict[str, Any] = {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=index, average="macro", zero_division=0)),
    }
    if detailed:
        precision, recall, f1, support = precision_recall_fscore_support(
            y_true, y_pred, labels=index, zero_division=0)
        result["per_class"] = {
            name: {"precision": float(precision[i]), "recall": float(recall[i]),
                   "f1": float(f1[i]), "support": int(support[i])}
            for i, name in enumerate(labels)
        }
        result["confusion_matrix"] = {
            "labels": labels,
            "matrix": confusion_matrix(y_true, y_pred, labels=index).tolist(),
        }
    return result
