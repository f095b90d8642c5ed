"""Cheap baselines beside every tabular model: the majority class and gradient-boosted trees
(scikit-learn's ``HistGradientBoostingClassifier``), trained on the model's training split and
scored on its validation and test sets.

On small tables boosted trees are often as good as a neural network or better (Grinsztajn et
al., 2022, "Why do tree-based models still outperform deep learning on tabular data?"); when
they win or tie, a CPU and the trees are enough, and the run says so.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from entrena.data.preprocessing import as_numbers, category_values, style_of
from entrena.tasks.metrics import classification_metrics
from entrena.tasks.significance import with_rows

__all__ = ["ordinal_table", "tabular_baselines", "TIE_MARGIN"]

TIE_MARGIN = 0.005
"""A model ahead of the trees by less than this (accuracy or macro-F1) ties with them."""
ONE_THREAD_ROWS = 50_000
"""Below this many training rows the trees run on one OpenMP thread: in a process where
PyTorch has run, scikit-learn's OpenMP threads contend with PyTorch's (measured here, 2 cores,
300 rows: 2.9 s with 2 threads against 0.03 s with 1)."""


def ordinal_table(frame: pd.DataFrame, params: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Rows as the trees take them: numbers (NaN missing; read in the column's style,
    ``params["number_styles"]``), categories as codes.

    Args:
        frame: Raw feature values, (N, columns).
        params: Fitted preprocessing (:func:`entrena.data.preprocessing.fit_preprocessing`):
            its category lists number the categories; a category training never saw is NaN.

    Returns:
        ``(values (N, K) float64, categorical mask (K,) bool)``, K = numeric + categorical
        columns.
    """
    columns, mask = [], []
    for column in params["numeric"]:
        columns.append(as_numbers(frame[column["name"]], style_of(params, column["name"])))
        mask.append(False)
    for column in params["categorical"]:
        index = {v: float(i) for i, v in enumerate(column["categories"])}
        index.update({v: float(len(column["categories"])) for v in column["infrequent"]})
        values = category_values(frame[column["name"]])
        columns.append(np.array([index.get(v, np.nan) for v in values], dtype=float))
        mask.append(True)
    if not columns:
        return np.zeros((len(frame), 0)), np.zeros(0, dtype=bool)
    return np.stack(columns, axis=1), np.array(mask, dtype=bool)


def tabular_baselines(frames: dict[str, pd.DataFrame], labels: dict[str, np.ndarray],
                      names: list[str], params: dict[str, Any], *,
                      seed: int = 0) -> dict[str, dict[str, Any]]:
    """Fit the baselines on the training split and score them on each evaluation split.

    Args:
        frames: Raw feature values per split (``train``, ``validation``, ``test``).
        labels: Label indices per split, (N,) int64.
        names: Class names in index order.
        params: The fitted preprocessing (category numbering).
        seed: Random state of the trees.

    Returns:
        ``{"majority": {...}, "boosted_trees": {...}}``, each with ``time_s`` (fitting and
        scoring, seconds) and per evaluation split ``{"accuracy", "macro_f1", …}``.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier

    train_labels = np.asarray(labels["train"], dtype=np.int64)
    evaluation = [role for role in frames if role != "train"]
    result: dict[str, dict[str, Any]] = {}

    started = time.perf_counter()
    majority = int(np.bincount(train_labels).argmax())
    constant = {role: np.full(len(labels[role]), majority, dtype=np.int64)
                for role in evaluation}
    result["majority"] = {role: with_rows(classification_metrics(
        labels[role], constant[role], names), labels[role], constant[role])
        for role in evaluation}
    result["majority"]["time_s"] = time.perf_counter() - started

    from threadpoolctl import threadpool_limits

    started = time.perf_counter()
    x_train, categorical = ordinal_table(frames["train"], params)
    trees = HistGradientBoostingClassifier(
        categorical_features=categorical if categorical.any() else None, random_state=seed)
    scores: dict[str, Any] = {}
    threads = 1 if len(train_labels) < ONE_THREAD_ROWS else None
    with threadpool_limits(limits=threads, user_api="openmp"):
        trees.fit(x_train, train_labels)
        for role in evaluation:
            x, _ = ordinal_table(frames[role], params)
            guess = trees.predict(x)
            scores[role] = with_rows(classification_metrics(labels[role], guess, names),
                                     labels[role], guess)
    result["boosted_trees"] = {**scores, "time_s": time.perf_counter() - started,
                               "iterations": int(trees.n_iter_)}
    return result
