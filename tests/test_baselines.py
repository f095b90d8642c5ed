"""The cheap baselines (majority class, TF-IDF + logistic regression) on tiny lists."""

from __future__ import annotations

import numpy as np

from entrena.tasks.baselines import compare_with_baseline, text_baselines


def test_baselines_fit_on_train_and_score_each_split():
    train = ["good food", "great taste", "bad smell", "awful taste", "good great", "bad awful"]
    y = np.array([0, 0, 1, 1, 0, 1])
    evaluation = {"validation": (["good", "awful"], np.array([0, 1])),
                  "test": (["great food", "bad food", "good", "awful"], np.array([0, 1, 0, 1]))}
    result = text_baselines(train, y, evaluation, ["pos", "neg"])
    assert set(result) == {"majority", "tfidf_logreg"}
    assert result["majority"]["test"]["accuracy"] == 0.5
    assert result["tfidf_logreg"]["test"]["accuracy"] == 1.0
    assert result["tfidf_logreg"]["validation"]["accuracy"] == 1.0
    assert result["tfidf_logreg"]["time_s"] >= 0.0


def test_a_model_below_the_baseline_is_flagged():
    baselines = {"majority": {"test": {"accuracy": 0.6}},
                 "tfidf_logreg": {"test": {"accuracy": 0.8}}}
    verdict = compare_with_baseline({"accuracy": 0.7}, baselines, "test")
    assert verdict["best"] == "tfidf_logreg" and verdict["best_score"] == 0.8
    assert verdict["model_beats_baseline"] is False
    assert compare_with_baseline({"accuracy": 0.9}, baselines, "test")["model_beats_baseline"]


def test_one_class_training_data_falls_back_to_the_majority():
    result = text_baselines(["a", "b"], np.array([0, 0]), {"test": (["c"], np.array([0]))},
                            ["x", "y"])
    assert result["tfidf_logreg"]["test"]["accuracy"] == 1.0
