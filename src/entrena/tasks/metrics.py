"""Classification metrics (scikit-learn), as plain JSON-ready values."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["classification_metrics"]


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
