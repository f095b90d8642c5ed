"""Findings the recipe adds about a finished run's scores (``entrena.recipes.verdicts``)."""

from __future__ import annotations

from entrena.callbacks.diagnosis import group_of
from entrena.recipes.verdicts import one_class_finding


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
