"""The text-regression baselines: the training mean and median, and TF-IDF + ridge
regression, scored in the target's units."""

from __future__ import annotations

from typing import Any

import numpy as np

from entrena.tasks.regression import TargetScaler, mean_baseline, median_baseline, score_baseline

__all__ = ["text_regression_baselines"]


def text_regression_baselines(train_texts: Any, train_targets: np.ndarray,
                              evaluation: dict[str, tuple[Any, np.ndarray]],
                              scaler: TargetScaler, *, seed: int = 0) -> dict[str, Any]:
    """The training mean, and TF-IDF (word 1-2 grams, sublinear TF) + ridge regression
    (alpha 1) fitted on the transformed training target, scored in the target's units.

    Args:
        train_texts: Training texts (N,).
        train_targets: Their targets (N,) in the target's units.
        evaluation: ``{split: (texts, targets)}``.
        scaler: The target's transform (the ridge learns it, as the network does).
        seed: Unused by ridge (kept for the baselines' common signature).

    Returns:
        ``{"mean": {...}, "tfidf_ridge": {...}}`` with per-split metrics and ``time_s``.
    """
    import time

    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline

    result = {"mean": mean_baseline(train_targets, evaluation),
              "median": median_baseline(train_targets, evaluation)}
    started = time.perf_counter()
    pipeline = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, max_features=200_000),
        Ridge(alpha=1.0))
    pipeline.fit(list(train_texts), scaler.to_model(train_targets))
    fitted_s = time.perf_counter() - started
    scores = score_baseline("tfidf_ridge",
                            lambda texts: scaler.from_model(pipeline.predict(list(texts))),
                            evaluation)
    scores["time_s"] += fitted_s
    result["tfidf_ridge"] = scores
    return result
