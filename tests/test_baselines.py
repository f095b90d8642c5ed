"""The cheap baselines (majority class, TF-IDF + logistic regression) on tiny lists."""

from __future__ import annotations

import numpy as np
import pytest

from entrena.tasks.baselines import compare_with_baseline
from entrena.tasks.text.baselines import text_baselines


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


def test_multi_label_baselines_get_what_the_model_gets():
    """An every-tag constant (micro-F1 2p/(1+p) for a tag share p) and TF-IDF thresholds
    tuned on validation: a rare tag the 0.5 cut never predicts is found at a lower one."""
    import numpy as np

    from entrena.tasks.text.baselines import multi_label_baselines

    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta"]
    texts, tags = [], []
    for i in range(240):
        row = rng.random(4) < [0.5, 0.3, 0.1, 0.05]
        texts.append(" ".join([w for w, on in zip(words, row, strict=True) if on]
                              + [f"filler{i % 17}", "common"]))
        tags.append(row.astype(np.int64))
    tags = np.array(tags)
    evaluation = {"validation": (texts[160:200], tags[160:200]),
                  "test": (texts[200:], tags[200:])}
    result = multi_label_baselines(texts[:160], tags[:160], evaluation, words)
    share = tags[200:].mean()
    assert result["every_tag"]["test"]["micro_f1"] == pytest.approx(2 * share / (1 + share))
    assert result["tfidf_logreg"]["test"]["micro_f1"] > result["every_tag"]["test"]["micro_f1"]
    assert "_rows" in result["every_tag"]["test"]  # for the paired comparison
    untuned = multi_label_baselines(texts[:160], tags[:160], {"test": evaluation["test"]},
                                    words)  # no validation rows: every threshold 0.5
    assert result["tfidf_logreg"]["test"]["macro_f1"] > \
        untuned["tfidf_logreg"]["test"]["macro_f1"] + 0.1  # the rare tags found (0.78, 0.48)


def test_a_model_that_tags_everything_is_named():
    import numpy as np

    from entrena.recipes.verdicts import every_tag_finding

    truth = (np.random.default_rng(1).random((100, 4)) < 0.3).astype(np.int64)
    found = every_tag_finding((truth, np.ones_like(truth)), "test")
    assert found is not None and found["code"] == "every_tag"
    assert found["figure"].startswith("test: 100% of row-tag pairs predicted")
    assert every_tag_finding((truth, truth), "test") is None
    assert every_tag_finding((np.zeros(5), np.ones(5)), "test") is None  # single-label rows
    assert every_tag_finding(None, "test") is None
