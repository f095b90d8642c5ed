"""The paired bootstrap behind the model-against-baseline verdict."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score, mean_absolute_error, r2_score

from entrena.tasks.significance import METRICS, interval_outcome, paired_bootstrap


def test_row_metrics_agree_with_scikit_learn():
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    assert METRICS["accuracy"](y, p) == pytest.approx(np.mean(y == p))
    assert METRICS["macro_f1"](y, p) == pytest.approx(f1_score(y, p, average="macro"))
    tags, guess = rng.integers(0, 2, (200, 4)), rng.integers(0, 2, (200, 4))
    assert METRICS["micro_f1"](tags, guess) == pytest.approx(f1_score(tags, guess,
                                                                      average="micro"))
    assert METRICS["accuracy"](tags, guess) == pytest.approx(np.mean((tags == guess).all(1)))
    v, w = rng.normal(size=200), rng.normal(size=200)
    assert METRICS["r2"](v, w) == pytest.approx(r2_score(v, w))
    assert METRICS["mae"](v, w) == pytest.approx(mean_absolute_error(v, w))
    assert METRICS["rmse"](v, w) == pytest.approx(np.sqrt(np.mean((v - w) ** 2)))


def test_a_real_lead_is_resolved_and_a_coin_flip_is_not():
    """1,000 rows: a model right on 90% against a baseline right on 80% of the same rows
    beats it; two predictors that each get a random half right tie."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 1000)
    model = np.where(rng.random(1000) < 0.9, y, 1 - y)
    baseline = np.where(rng.random(1000) < 0.8, y, 1 - y)
    lead = paired_bootstrap("accuracy", y, model, baseline)
    low, high = lead["difference_ci"]
    assert 0 < low < lead["difference"] < high
    assert interval_outcome(low, high, higher_is_better=True) == "beats"
    coin_a = np.where(rng.random(1000) < 0.5, y, 1 - y)
    coin_b = np.where(rng.random(1000) < 0.5, y, 1 - y)
    noise = paired_bootstrap("accuracy", y, coin_a, coin_b)
    assert interval_outcome(*noise["difference_ci"], higher_is_better=True) == "ties"
    assert noise["rows"] == 1000 and noise["resamples"] == 1000 and noise["level"] == 0.95


def test_pairing_narrows_the_interval_against_independent_scores():
    """Two predictors that differ on 12 of 1,000 rows (both right on the rest's same 800):
    the paired interval of the 1.2-point lead excludes 0, though each accuracy's own 95%
    interval is ±2.5 points."""
    y = np.zeros(1000, dtype=int)
    model = np.ones(1000, dtype=int)
    model[:812] = 0  # right on 812
    baseline = np.ones(1000, dtype=int)
    baseline[:800] = 0  # right on 800, all of them rows the model also gets right
    result = paired_bootstrap("accuracy", y, model, baseline)
    assert result["difference"] == pytest.approx(0.012)
    assert result["difference_ci"][0] > 0


def test_lower_is_better_metrics_flip_the_outcome():
    rng = np.random.default_rng(3)
    y = rng.normal(size=500)
    close, far = y + rng.normal(scale=0.1, size=500), y + rng.normal(scale=1.0, size=500)
    result = paired_bootstrap("rmse", y, close, far)
    assert result["difference_ci"][1] < 0  # the model's RMSE is lower
    assert interval_outcome(*result["difference_ci"], higher_is_better=False) == "beats"
    assert interval_outcome(*result["difference_ci"], higher_is_better=True) == "loses"


def test_the_same_rows_give_the_same_interval_and_bad_input_is_named():
    y = np.arange(50) % 2
    a, b = y.copy(), 1 - y
    assert paired_bootstrap("accuracy", y, a, b) == paired_bootstrap("accuracy", y, a, b)
    with pytest.raises(ValueError, match="no row-wise definition of 'auc'"):
        paired_bootstrap("auc", y, a, b)
    with pytest.raises(ValueError, match="must cover the same rows"):
        paired_bootstrap("accuracy", y, a[:-1], b)


@pytest.mark.parametrize(("metric", "y", "a", "said"), [
    ("rmse", np.array([1.0, None, 3.0], dtype=object), np.ones(3), "not a finite number"),
    ("rmse", np.array(["a", "b"]), np.ones(2), "needs numbers"),
    ("micro_f1", np.array([1, 2, 1, 2]), np.array([2, 1, 2, 1]), "multi-hot rows"),
    ("macro_f1", np.ones((4, 2)), np.ones((4, 2)), "class indices"),
    ("accuracy", np.ones((4, 2)), np.ones(4), "shapes"),
    ("accuracy", 3, 3, "a single value"),
])
def test_rows_that_cannot_be_scored_are_refused_in_one_line(metric, y, a, said):
    with pytest.raises(ValueError, match=said):
        paired_bootstrap(metric, y, a, a)


def test_resamples_and_level_are_checked():
    y = np.arange(10) % 2
    for kwargs in ({"resamples": 0}, {"level": 0.0}, {"level": 1.5}):
        with pytest.raises(ValueError, match="give at least 1 resample and a level"):
            paired_bootstrap("accuracy", y, y, 1 - y, **kwargs)
