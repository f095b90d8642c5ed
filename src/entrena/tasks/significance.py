"""Whether a model's lead over its baseline is larger than the test set's noise.

A paired bootstrap (Efron & Tibshirani, 1993, "An Introduction to the Bootstrap", ch. 13;
the paired form for comparing two systems on one test set: Koehn, 2004, EMNLP, "Statistical
Significance Tests for Machine Translation Evaluation"): the split's rows are resampled with
replacement, both predictors are scored on the *same* resample, and the 2.5th and 97.5th
percentiles of the score differences are a 95% interval of the difference. Pairing matters:
the two predictors err on many of the same hard rows, so the difference varies far less than
either score, and a real 1-point lead on 1,000 rows can be resolved where two independent
intervals would overlap.

Rows are what each task's predictions and truths are per example (a class index, a multi-hot
row, a value in the target's units, an exact-match flag), and each metric is a function of
``(y_true, y_pred)`` arrays (:data:`METRICS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RESAMPLES", "SEED", "LEVEL", "METRICS", "ROWS", "paired_bootstrap",
           "bootstrap_interval", "interval_outcome", "with_rows"]

RESAMPLES = 1000
"""Bootstrap resamples: the percentile interval's ends move by well under a tenth of its
width between seeds at this count (Efron & Tibshirani recommend ≥ 1,000 for percentiles)."""
SEED = 0
"""The resampling's seed: the same rows give the same interval."""
LEVEL = 0.95
"""Coverage of the interval."""


def _accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Share of rows right (a multi-hot row: every tag right)."""
    same = np.asarray(y_true) == np.asarray(y_pred)
    return float(np.mean(same.all(axis=1) if same.ndim > 1 else same))


def _macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    classes = np.union1d(y_true, y_pred)
    scores = []
    for c in classes:
        tp = float(np.sum((y_true == c) & (y_pred == c)))
        fp = float(np.sum((y_true != c) & (y_pred == c)))
        fn = float(np.sum((y_true == c) & (y_pred != c)))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores)) if scores else 0.0


def _micro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Micro-F1 of multi-hot rows (N, K): every (row, tag) decision pooled."""
    truth, guess = y_true > 0.5, y_pred > 0.5
    tp = float(np.sum(truth & guess))
    denominator = 2 * tp + float(np.sum(~truth & guess)) + float(np.sum(truth & ~guess))
    return 2 * tp / denominator if denominator else 0.0  # scikit-learn's zero_division=0


def _rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(y_true, float) - np.asarray(y_pred, float)) ** 2)))


def _mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(y_true, float) - np.asarray(y_pred, float))))


def _r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    y = np.asarray(y_true, float)
    total = float(np.sum((y - y.mean()) ** 2))
    residual = float(np.sum((y - np.asarray(y_pred, float)) ** 2))
    return 1.0 - residual / total if total > 0 else 0.0


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": _accuracy, "exact_match": _accuracy, "macro_f1": _macro_f1,
    "micro_f1": _micro_f1, "rmse": _rmse, "mae": _mae, "r2": _r2}
"""Metric name → ``score(y_true, y_pred)``: the same definitions as the tasks' metrics
(``exact_match`` compares per-row match flags with ones)."""


ROWS = "_rows"
"""Key of a baseline split's scores that holds the rows they came from (dropped before
``metrics.json`` is written)."""


def with_rows(scores: dict[str, Any], y_true: Any, y_pred: Any,
              index: Any = None) -> dict[str, Any]:
    """``scores`` with the rows they were computed from, for the paired comparison.

    Args:
        scores: A split's metrics.
        y_true: Truths, (N,) or (N, K).
        y_pred: Predictions shaped as ``y_true``.
        index: The split positions of the N rows when they are a subset (a sampled
            baseline), else None (every row of the split, in order).
    """
    return {**scores, ROWS: {"y_true": np.asarray(y_true), "y_pred": np.asarray(y_pred),
                             "index": None if index is None else np.asarray(index)}}


_VALUES = ("rmse", "mae", "r2")
"""Metrics of numbers (the arrays are read as floats)."""


def _checked(metric: str, *arrays: Any, resamples: int = RESAMPLES,
             level: float = LEVEL) -> tuple[Callable[..., float], list[np.ndarray]]:
    """The metric's function and the arrays, refused (ValueError, one line) when the metric
    is unknown, the arrays' shapes differ, there are fewer than 2 rows, a value is missing or
    not finite, the metric does not fit the arrays' shape (micro-F1 needs multi-hot rows
    (N, K); macro-F1 class indices (N,)), or ``resamples``/``level`` are out of range."""
    if metric not in METRICS:
        raise ValueError(f"bootstrap: no row-wise definition of {metric!r}; one of "
                         f"{', '.join(sorted(METRICS))}")
    if int(resamples) < 1 or not 0.0 < float(level) < 1.0:
        raise ValueError(f"bootstrap: {resamples} resamples at level {level}; give at least "
                         "1 resample and a level between 0 and 1 (0.95)")
    found = []
    for a in arrays:
        values = np.asarray(a)
        if values.ndim == 0:
            raise ValueError("bootstrap: a single value where rows were expected")
        if values.dtype.kind == "O" or metric in _VALUES:
            try:
                values = values.astype(np.float64) if metric in _VALUES else values
            except (TypeError, ValueError):
                raise ValueError(f"bootstrap: {metric} needs numbers; a truth or prediction "
                                 "is not one") from None
            if values.dtype.kind == "O" and any(v is None for v in values.ravel()):
                raise ValueError("bootstrap: a truth or prediction is missing (None)")
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            raise ValueError("bootstrap: a truth or prediction is not a finite number")
        found.append(values)
    if len({a.shape for a in found}) != 1:
        raise ValueError(f"bootstrap: shapes {' vs '.join(str(a.shape) for a in found)}; the "
                         "truths and every prediction must cover the same rows")
    if len(found[0]) < 2:
        raise ValueError(f"bootstrap: {len(found[0])} row(s); at least 2 are needed")
    if metric == "micro_f1" and found[0].ndim != 2:
        raise ValueError("bootstrap: micro_f1 is for multi-hot rows (N, K); single-label "
                         "rows are compared on accuracy or macro_f1")
    if metric == "macro_f1" and found[0].ndim != 1:
        raise ValueError("bootstrap: macro_f1 here is for class indices (N,); multi-hot rows "
                         "are compared on micro_f1")
    return METRICS[metric], found


def paired_bootstrap(metric: str, y_true: Any, model_pred: Any, baseline_pred: Any, *,
                     resamples: int = RESAMPLES, seed: int = SEED,
                     level: float = LEVEL) -> dict[str, Any]:
    """The model's score minus the baseline's on the same rows, with its bootstrap interval.

    Args:
        metric: A key of :data:`METRICS`.
        y_true: Truths, (N,) or (N, K).
        model_pred: The model's predictions, shaped as ``y_true``.
        baseline_pred: The baseline's, the same rows in the same order.
        resamples: Bootstrap resamples.
        seed: The resampling's seed.
        level: The interval's coverage.

    Returns:
        ``{"difference", "difference_ci": [low, high], "rows", "resamples", "seed",
        "level"}``: the difference on all rows, and the percentile interval over resamples.

    Raises:
        ValueError: An unknown metric, fewer than 2 rows, or arrays of different lengths.
    """
    score, (y, a, b) = _checked(metric, y_true, model_pred, baseline_pred,
                                resamples=resamples, level=level)
    rng = np.random.default_rng(seed)
    differences = np.empty(resamples)
    for r in range(resamples):
        pick = rng.integers(0, len(y), len(y))
        differences[r] = score(y[pick], a[pick]) - score(y[pick], b[pick])
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(differences, [tail, 100 - tail])
    return {"difference": score(y, a) - score(y, b), "difference_ci": [float(low), float(high)],
            "rows": int(len(y)), "resamples": int(resamples), "seed": int(seed),
            "level": float(level)}


def bootstrap_interval(metric: str, y_true: Any, y_pred: Any, *, resamples: int = RESAMPLES,
                       seed: int = SEED, level: float = LEVEL) -> list[float]:
    """The percentile bootstrap interval ``[low, high]`` of one predictor's ``metric``.

    Raises:
        ValueError: As :func:`paired_bootstrap`.
    """
    score, (y, p) = _checked(metric, y_true, y_pred, resamples=resamples, level=level)
    rng = np.random.default_rng(seed)
    values = np.empty(resamples)
    for r in range(resamples):
        pick = rng.integers(0, len(y), len(y))
        values[r] = score(y[pick], p[pick])
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return [float(low), float(high)]


def interval_outcome(low: float, high: float, higher_is_better: bool) -> str:
    """``beats`` when the whole interval of model − baseline favours the model, ``loses`` when
    it all favours the baseline, else ``ties`` (the gap is within the noise)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        raise ValueError(f"interval_outcome: interval {low}..{high} is not finite")
    if low > 0 and high > 0:
        return "beats" if higher_is_better else "loses"
    if low < 0 and high < 0:
        return "loses" if higher_is_better else "beats"
    return "ties"
