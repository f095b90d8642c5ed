"""Cheap baselines beside every text classifier: the majority class and TF-IDF + logistic
regression (scikit-learn), trained on the model's training split and scored on its validation
and test sets (the multi-label variant tunes its thresholds as the model's are tuned)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from entrena.tasks.metrics import classification_metrics, multi_label_metrics, tune_thresholds
from entrena.tasks.significance import with_rows

__all__ = ["multi_label_baselines", "text_baselines"]


def _majority(train_labels: np.ndarray) -> Any:
    majority = int(np.bincount(train_labels).argmax())
    return lambda texts: np.full(len(texts), majority, dtype=np.int64)


def _tfidf_logreg(train_texts: Sequence[str], train_labels: np.ndarray, seed: int) -> Any:
    """Word uni- and bigrams, sublinear TF, L2 logistic regression (C=1): the usual strong
    bag-of-words baseline (Wang & Manning, 2012, "Baselines and Bigrams")."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    if len(set(train_labels.tolist())) < 2:
        return _majority(train_labels)  # one class: logistic regression cannot be fitted
    pipeline = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, max_features=200_000),
        LogisticRegression(max_iter=1000, random_state=seed))
    pipeline.fit(list(train_texts), train_labels)
    return lambda texts: pipeline.predict(list(texts))


def text_baselines(train_texts: Sequence[str], train_labels: np.ndarray,
                   evaluation: dict[str, tuple[Sequence[str], np.ndarray]], labels: list[str],
                   *, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Fit the baselines on the training split and score them on each evaluation split.

    Args:
        train_texts: Training texts, the same rows the model trained on.
        train_labels: Label indices, shape (N,).
        evaluation: ``{"validation": (texts, labels), "test": (texts, labels)}``.
        labels: Class names in index order.
        seed: Random state of the solver.

    Returns:
        ``{"majority": {...}, "tfidf_logreg": {...}}``, each with ``fit_time_s`` (fitting and
        scoring, seconds) and per split ``{"accuracy", "macro_f1"}``.
    """
    train_labels = np.asarray(train_labels, dtype=np.int64)
    builders = {"majority": lambda: _majority(train_labels),
                "tfidf_logreg": lambda: _tfidf_logreg(train_texts, train_labels, seed)}
    result: dict[str, dict[str, Any]] = {}
    for name, build in builders.items():
        started = time.perf_counter()
        predict = build()
        scores = {}
        for split, (texts, y) in evaluation.items():
            guess = predict(texts)
            scores[split] = with_rows(classification_metrics(np.asarray(y), guess, labels),
                                      y, guess)
        result[name] = {**scores, "time_s": time.perf_counter() - started}
    return result


def multi_label_baselines(train_texts: Sequence[str], train_tags: np.ndarray,
                          evaluation: dict[str, tuple[Sequence[str], np.ndarray]],
                          tags: list[str], *, seed: int = 0) -> dict[str, dict[str, Any]]:
    """The multi-label baselines, scored as the model is (:func:`multi_label_metrics`), each
    given what the model gets:

    - ``majority``: every row gets the tags more than half the training rows have (often
      none);
    - ``every_tag``: every row gets every tag (micro-F1 ``2p/(1+p)`` for a tag share p: a
      model that puts nearly every tag on nearly every row scores about this);
    - ``tfidf_logreg``: one-vs-rest TF-IDF word 1-2 grams and one logistic regression per
      tag, each tag's threshold tuned on the validation rows for that tag's F1, as the
      model's are (:func:`~entrena.tasks.metrics.tune_thresholds`; 0.5 without validation).

    Args:
        train_tags: Multi-hot training tags (N, K).
        evaluation: ``{"validation": (texts, multi-hot (N, K)), "test": …}``.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline

    y = (np.asarray(train_tags) > 0.5).astype(np.int64)
    common = y.mean(axis=0) > 0.5

    def tfidf() -> Any:
        if (y.sum(axis=0) == 0).any() or (y.sum(axis=0) == len(y)).any():
            keep = [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)]
        else:
            keep = list(range(y.shape[1]))
        pipeline = make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True,
                            max_features=200_000),
            OneVsRestClassifier(LogisticRegression(max_iter=1000, random_state=seed)))
        pipeline.fit(list(train_texts), y[:, keep])

        thresholds = np.full(len(keep), 0.5)
        if "validation" in evaluation:  # tuned on validation, as the model's thresholds are
            texts, truth = evaluation["validation"]
            thresholds = tune_thresholds(pipeline.predict_proba(list(texts)),
                                         np.asarray(truth)[:, keep])

        def predict(texts: Sequence[str]) -> np.ndarray:
            out = np.tile(common, (len(texts), 1))  # a constant tag keeps its constant
            out[:, keep] = pipeline.predict_proba(list(texts)) >= thresholds
            return out
        return predict

    builders = {"majority": lambda: (lambda texts: np.tile(common, (len(texts), 1))),
                "every_tag": lambda: (lambda texts: np.ones((len(texts), y.shape[1]), bool)),
                "tfidf_logreg": tfidf}
    result: dict[str, dict[str, Any]] = {}
    for name, build in builders.items():
        started = time.perf_counter()
        predict = build()
        scores = {}
        for split, (texts, truth) in evaluation.items():
            guess = predict(texts)
            scores[split] = with_rows(multi_label_metrics(np.asarray(truth), guess, tags),
                                      (np.asarray(truth) > 0.5).astype(np.int64),
                                      np.asarray(guess).astype(np.int64))
        result[name] = {**scores, "time_s": time.perf_counter() - started}
    return result
