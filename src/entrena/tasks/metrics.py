"""What every classification task shares: its loss, its metrics (scikit-learn, as plain
JSON-ready values) and which of them are better higher.

A classification task composes these (``loss = staticmethod(cross_entropy_loss)`` …) rather
than inheriting them; a task of another kind (regression, language modelling) brings its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CLASSIFICATION_HIGHER_IS_BETTER", "classification_metrics", "cross_entropy_loss",
           "evaluate_classification"]

CLASSIFICATION_HIGHER_IS_BETTER = {"loss": False, "accuracy": True, "macro_f1": True}
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


def evaluate_classification(outputs: np.ndarray, targets: np.ndarray, prepared: Any, *,
                            detailed: bool = False) -> dict[str, Any]:
    """Metrics of one split from the model's outputs.

    Args:
        outputs: Logits (N, C) float32, in example order.
        targets: True class indices (N,).
        prepared: The task's prepared data (``prepared.splits.labels``: the class names).
        detailed: Add per-class figures and the confusion matrix (the test split).

    Returns:
        :func:`classification_metrics` of the arg-max predictions.
    """
    return classification_metrics(targets, outputs.argmax(-1), prepared.splits.labels,
                                  detailed=detailed)


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
