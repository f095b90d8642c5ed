"""Findings the recipe adds about a finished run's scores (``entrena.recipes.verdicts``)."""

from __future__ import annotations

import pytest

from entrena.callbacks.diagnosis import group_of
from entrena.recipes.verdicts import baseline_finding, one_class_finding


def _metrics(matrix, labels=("yes", "no"), role="test"):
    return {role: {"accuracy": 0.0, "confusion_matrix": {"labels": list(labels),
                                                         "matrix": matrix}}}


def test_a_classifier_that_predicts_one_class_is_named():
    found = one_class_finding(_metrics([[0, 30], [0, 70]]))  # rows true, columns predicted
    assert found is not None and found["code"] == "one_class"
    assert group_of("one_class") == "model"
    assert "100% of 100 rows predicted 'no' (70% are)" in found["figure"]
    assert "train.learning_rate" in found["change"] and "train.max_epochs" in found["change"]


def test_validation_is_read_without_a_test_split():
    found = one_class_finding(_metrics([[50, 0], [49, 1]], role="validation"))
    assert found is not None and found["figure"].startswith("validation: 99% of 100 rows")


def test_no_finding_for_a_model_that_spreads_its_predictions_or_a_real_majority():
    assert one_class_finding(_metrics([[20, 10], [5, 65]])) is None
    assert one_class_finding(_metrics([[0, 5], [0, 95]])) is None  # 95% of rows are 'no'
    assert one_class_finding({"test": {"rmse": 1.0}}) is None  # a regressor: no matrix
    assert one_class_finding(_metrics([[0, 0], [0, 0]])) is None  # no rows scored


def test_a_collapsed_run_reports_it_in_its_diagnosis(tmp_path):
    import entrena
    from conftest import EXAMPLES

    # The tiny config at a learning rate too low to move it: every review gets one label.
    result = entrena.train(EXAMPLES / "tiny" / "config.yaml", run_dir=tmp_path / "run",
                           overrides=["data.max_train_samples=64", "data.max_eval_samples=64",
                                      "train.max_epochs=1", "train.learning_rate=1e-7",
                                      "tracking.enabled=false", "train.num_threads=1"])
    codes = [f["code"] for f in result.metrics["diagnosis"]]
    assert codes[0] == "one_class", codes


# --- the noise-aware comparison (issue 42) --------------------------------------------------

def _rows(right: int, y, seed: int):
    """Predictions of truths ``y`` right on ``right`` rows drawn at random (seeded)."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(y))
    guess = 1 - y
    guess[order[:right]] = y[order[:right]]
    return guess


def _verdict(model_right: int, baseline_right: int, n: int = 300, rows: bool = True):
    import numpy as np

    from entrena.recipes.verdicts import baseline_verdict
    from entrena.tasks.significance import with_rows

    y = np.random.default_rng(0).integers(0, 2, n)
    model, baseline = _rows(model_right, y, seed=1), _rows(baseline_right, y, seed=2)
    scores = {"accuracy": float(np.mean(baseline == y))}
    found = {"tfidf_logreg": {"test": with_rows(scores, y, baseline), "time_s": 0.1}}
    metrics = {"test": {"accuracy": float(np.mean(model == y))}}
    return found, baseline_verdict(found, metrics, None, (y, model) if rows else None)


def test_a_lead_inside_the_noise_is_a_tie_with_its_interval(caplog):
    """4 more of 300 rows right (1.3 points, about half a standard error): "ties"."""
    found, result = _verdict(244, 240)
    verdict = result["comparison"]
    assert verdict["outcome"] == "ties" and verdict["within_noise"] is True
    assert verdict["model_beats_baseline"] is False
    low, high = verdict["difference_ci"]
    assert low < 0 < high and verdict["difference"] == pytest.approx(4 / 300)
    assert (verdict["rows"], verdict["resamples"], verdict["seed"]) == (300, 1000, 0)
    assert "_rows" not in found["tfidf_logreg"]["test"]  # metrics.json keeps scores only
    finding = baseline_finding(verdict)
    assert finding["code"] == "baseline_ties" and "within the noise" in finding["message"]
    assert "interval" in finding["figure"]


def test_a_lead_beyond_the_noise_beats_and_a_deficit_loses():
    _, result = _verdict(270, 210)
    assert result["comparison"]["outcome"] == "beats"
    assert result["comparison"]["difference_ci"][0] > 0
    _, result = _verdict(200, 260)
    assert result["comparison"]["outcome"] == "loses"
    assert result["comparison"]["difference_ci"][1] < 0


def test_without_the_models_rows_the_scores_are_compared_as_they_are():
    _, result = _verdict(244, 240, rows=False)
    assert result["comparison"]["outcome"] == "beats"
    assert result["comparison"]["difference_ci"] is None


def test_a_sampled_baseline_is_compared_on_its_own_rows():
    """The zero-shot LLM baseline scores a random subset: the model is resampled on those."""
    import numpy as np

    from entrena.recipes.verdicts import baseline_verdict
    from entrena.tasks.significance import with_rows

    flags = np.zeros(300, dtype=np.int64)
    flags[:240] = 1  # the model: 240 of 300 right
    index = np.arange(0, 300, 6)  # 50 rows drawn, 40 of them among the model's right ones
    found = {"zero_shot": {"test": with_rows({"exact_match": 0.0}, np.ones(50, np.int64),
                                             np.zeros(50, np.int64), index=index),
                           "time_s": 1.0}}
    metrics = {"test": {"exact_match": 0.8}}
    task = type("T", (), {"comparison_metric": "exact_match",
                          "higher_is_better": {"exact_match": True}})()
    verdict = baseline_verdict(found, metrics, task, (np.ones(300, np.int64), flags))
    verdict = verdict["comparison"]
    assert verdict["rows"] == 50 and verdict["outcome"] == "beats"
    assert verdict["difference"] == pytest.approx(40 / 50)


def test_a_regressor_whose_r2_interval_holds_zero_is_no_better_than_the_mean():
    """Predictions that hug the mean with a faint trend: R² a little above 0 on the test
    rows, but its interval reaches 0 — the finding says so; a real fit gets none."""
    import numpy as np

    from entrena.recipes.verdicts import baseline_verdict, mean_finding
    from entrena.tasks.significance import with_rows

    rng = np.random.default_rng(0)
    y = rng.normal(size=200)
    faint = 0.01 * y + np.random.default_rng(1).normal(scale=0.05, size=200)
    mean = np.zeros(200)
    task = type("T", (), {"comparison_metric": "rmse", "higher_is_better": {"rmse": False}})()
    for model, expect in ((faint, True), (y + rng.normal(scale=0.3, size=200), False)):
        found = {"mean": {"test": with_rows({"rmse": float(np.sqrt(np.mean(y ** 2)))}, y, mean),
                          "time_s": 0.0}}
        rmse = float(np.sqrt(np.mean((y - model) ** 2)))
        r2 = 1 - float(np.sum((y - model) ** 2) / np.sum((y - y.mean()) ** 2))
        metrics = {"test": {"rmse": rmse, "r2": r2}}
        verdict = baseline_verdict(found, metrics, task, (y, model))["comparison"]
        finding = mean_finding(verdict, metrics)
        assert (finding is not None) is expect, (verdict["model_r2_ci"], r2)
        if expect:
            assert finding["code"] == "no_better_than_mean"
            assert finding["figure"].startswith("test R² ")


def test_rows_that_do_not_match_the_scores_fall_back_to_them_loudly(caplog):
    """A task whose rows disagree with its reported scores, or a sampled baseline whose
    positions are not rows of the split: the interval is left out and the log says why."""
    import numpy as np

    from entrena.recipes.verdicts import baseline_verdict
    from entrena.tasks.significance import with_rows

    y = np.array([0, 1] * 50)
    found = {"majority": {"test": with_rows({"accuracy": 0.9}, y, y), "time_s": 0.0}}
    verdict = baseline_verdict(found, {"test": {"accuracy": 1.0}}, None, (y, y))["comparison"]
    assert verdict["difference_ci"] is None and verdict["outcome"] == "beats"
    assert "do not reproduce the reported scores" in caplog.text
    for index in (np.array([-1, 0]), np.array([0, 500]), np.array([0.0, 1.0])):
        found = {"zero_shot": {"test": with_rows({"accuracy": 0.0}, np.ones(2), np.zeros(2),
                                                 index=index), "time_s": 0.0}}
        verdict = baseline_verdict(found, {"test": {"accuracy": 0.5}}, None, (y, y))
        assert verdict["comparison"]["difference_ci"] is None
    assert "are not positions of the 100 scored rows" in caplog.text


def test_a_regressor_that_answers_one_value_for_every_row_is_named():
    """Issue 42: predictions hugging the mean (spread under a tenth of the targets') get the
    ``near_constant`` finding; a model that follows the targets, and class rows, get none."""
    import numpy as np

    from entrena.recipes.verdicts import constant_value_finding

    rng = np.random.default_rng(0)
    y = rng.normal(1950, 40, 300)
    hugging = 1950 + 0.05 * (y - 1950) + rng.normal(0, 0.5, 300)
    finding = constant_value_finding((y, hugging), "test")
    assert finding is not None and finding["code"] == "near_constant"
    assert finding["figure"].startswith("test: predictions' spread ")
    assert constant_value_finding((y, y + rng.normal(0, 10, 300)), "test") is None
    assert constant_value_finding((np.array([0, 1, 1]), np.array([1, 1, 1])), "test") is None
    assert constant_value_finding(None, "test") is None
