"""Cheap baselines beside every tabular regressor: the training mean and gradient-boosted
trees (scikit-learn's ``HistGradientBoostingRegressor``), trained on the model's training
split and scored on its validation and test sets in the target's units.

As for classification, boosted trees are the strong baseline on small tables (Grinsztajn et
al., 2022); when they win or tie, the run says a CPU and the trees are enough.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from entrena.tasks.regression import (
    TargetScaler,
    mean_baseline,
    median_baseline,
    regression_metrics,
)
from entrena.tasks.significance import with_rows
from entrena.tasks.tabular.baselines import ONE_THREAD_ROWS, ordinal_table

__all__ = ["tabular_regression_baselines"]


def tabular_regression_baselines(frames: dict[str, pd.DataFrame], targets: dict[str, np.ndarray],
                                 params: dict[str, Any], scaler: TargetScaler, *,
                                 seed: int = 0) -> dict[str, dict[str, Any]]:
    """Fit the baselines on the training split and score them on each evaluation split.

    Args:
        frames: Raw feature values per split (``train``, ``validation``, ``test``).
        targets: True values per split, (N,) in the target's units.
        params: The fitted preprocessing (category numbering).
        scaler: The target's transform: the trees learn the transformed target (as the MLP
            does) and answer in the target's units.
        seed: Random state of the trees.

    Returns:
        ``{"mean": {...}, "boosted_trees": {...}}``, each with ``time_s`` and per evaluation
        split ``{"rmse", "mae", "r2", "median_absolute_error"}``.
    """
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    evaluation = {role: (frames[role], targets[role]) for role in frames if role != "train"}
    result = {"mean": mean_baseline(targets["train"], evaluation),
              "median": median_baseline(targets["train"], evaluation)}
    started = time.perf_counter()
    x_train, categorical = ordinal_table(frames["train"], params)
    trees = HistGradientBoostingRegressor(
        categorical_features=categorical if categorical.any() else None, random_state=seed)
    scores: dict[str, Any] = {}
    threads = 1 if len(targets["train"]) < ONE_THREAD_ROWS else None
    with threadpool_limits(limits=threads, user_api="openmp"):
        trees.fit(x_train, scaler.to_model(targets["train"]))
        for role, (frame, truth) in evaluation.items():
            x, _ = ordinal_table(frame, params)
            guess = scaler.from_model(trees.predict(x))
            scores[role] = with_rows(regression_metrics(truth, guess), truth, guess)
    result["boosted_trees"] = {**scores, "time_s": time.perf_counter() - started,
                               "iterations": int(trees.n_iter_)}
    return result
