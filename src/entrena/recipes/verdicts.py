"""What the recipe says about a finished run's scores: the comparison with the task's cheap
baselines (a lead inside the test set's noise is a tie: a paired bootstrap interval of the
difference, :mod:`entrena.tasks.significance`) and the findings it adds to the diagnosis
(``model``: a baseline ties or wins, the model predicts one class for nearly every row, or a
generative model gives one answer to nearly every prompt; ``data``: no test split)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from entrena.tasks.base import AnyTask
from entrena.tasks.baselines import compare_with_baseline
from entrena.tasks.significance import (
    METRICS,
    ROWS,
    bootstrap_interval,
    interval_outcome,
    paired_bootstrap,
)

__all__ = ["baseline_finding", "baseline_verdict", "constant_value_finding",
           "every_tag_finding", "mean_finding", "no_test_finding", "one_answer_finding",
           "one_class_finding"]

ONE_CLASS_SHARE = 0.98
"""A classifier that gives one class to at least this share of the scored rows…"""

EVERY_TAG_SHARE = 0.90
"""A multi-label model that puts at least this share of all (row, tag) pairs on…"""

EVERY_TAG_TRUE_SHARE = 0.60
"""…while at most this share of them are true tags everything instead of choosing."""

ONE_CLASS_TRUE_SHARE = 0.90
"""…while that class is at most this share of their true labels has learned the prior only
(a model that has not yet learned, or a learning rate too low or too high to)."""

ONE_ANSWER_SHARE = 0.90
"""A generative model that gives one normalised answer to at least this share of the scored
prompts…"""

ONE_ANSWER_TRUE_SHARE = 0.90
"""…while at most this share of the references are that answer gives the same answer
whatever it is asked (the LLM tuned on two-answer reviews that answered one word to 117 of
120 prompts, 0.475 exact match, below the majority answer's 0.55). Looser than
:data:`ONE_CLASS_SHARE`: a generative model can answer anything, so nine prompts in ten
answered alike is already a collapse, where a classifier's 90% can be a skewed prior."""

ONE_ANSWER_MIN_ROWS = 10
"""Prompts needed before the share is judged: with fewer, one prompt moves it by more than
the 10% between :data:`ONE_ANSWER_SHARE` and all of them."""

NEAR_CONSTANT_SPREAD = 0.1
"""A regressor whose predictions' standard deviation is below this share of the true
values' (on the compared rows) answers nearly the same value for every row: it has learned
the mean, not the inputs (a model explaining R² of the variance has a spread of about √R²
of the truth's, so 0.1 is R² ≈ 0.01)."""

log = logging.getLogger("entrena")


def _split_rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pop every baseline split's rows (:data:`~entrena.tasks.significance.ROWS`), so that
    ``metrics.json`` holds scores only: ``{baseline: {split: rows}}``."""
    found: dict[str, dict[str, Any]] = {}
    for name, scores in result.items():
        if isinstance(scores, dict):
            for split, values in scores.items():
                if isinstance(values, dict) and ROWS in values:
                    found.setdefault(name, {})[split] = values.pop(ROWS)
    return found


def _paired(verdict: dict[str, Any], model_rows: Any, rows: dict[str, Any] | None) -> None:
    """Replace ``verdict``'s point outcome by the paired bootstrap's (in place) when the model's
    and the best baseline's rows are both at hand and the metric has a row-wise definition."""
    verdict["difference_ci"] = None  # a point comparison unless the rows allow the paired one
    if model_rows is None or rows is None or verdict["metric"] not in METRICS:
        return
    metric = verdict["metric"]
    y_true, model_pred = (np.asarray(a) for a in model_rows)
    index = rows.get("index")
    why = None
    if index is not None:  # a sampled baseline: the model on the same rows
        index = np.asarray(index)
        if index.dtype.kind not in "iu" or not len(index) or index.min() < 0 \
                or index.max() >= len(y_true):
            why = f"its rows' positions are not positions of the {len(y_true):,} scored rows"
        else:
            y_true, model_pred = y_true[index], model_pred[index]
    elif len(y_true) == len(model_pred) and len(y_true) >= 2:
        try:  # the rows must reproduce the scores the verdict reports
            same = (abs(METRICS[metric](y_true, model_pred) - verdict["model"]) <= 1e-6
                    * max(1.0, abs(verdict["model"]))
                    and abs(METRICS[metric](np.asarray(rows["y_true"]), rows["y_pred"])
                            - verdict["best_score"]) <= 1e-6 * max(1.0, abs(verdict["best_score"])))
        except (ValueError, TypeError):
            same = False
        if not same:
            why = "the rows do not reproduce the reported scores"
    if why is None and not len(y_true) == len(model_pred) == len(rows["y_pred"]):
        why = (f"{len(y_true):,} truths, {len(model_pred):,} model and "
               f"{len(rows['y_pred']):,} baseline predictions")
    if why is None and len(y_true) < 2:
        why = f"{len(y_true)} row(s)"
    if why is not None:
        log.warning("baseline comparison without an interval (the scores compared as they "
                    "are): %s", why)
        return
    try:
        if metric == "rmse":  # a regressor: is it any better than the mean?
            verdict["model_r2_ci"] = bootstrap_interval("r2", y_true, model_pred)
        paired = paired_bootstrap(metric, y_true, model_pred, rows["y_pred"])
    except ValueError as exc:
        log.warning("baseline comparison without an interval (the scores compared as they "
                    "are): %s", exc)
        verdict.pop("model_r2_ci", None)
        return
    point = verdict["outcome"]
    low, high = paired["difference_ci"]
    outcome = interval_outcome(low, high, verdict["higher_is_better"])
    verdict.update(paired, outcome=outcome, model_beats_baseline=outcome == "beats",
                   within_noise=outcome == "ties" and point != "ties")


def baseline_verdict(result: dict[str, Any], metrics: dict[str, Any],
                     task: AnyTask | None = None, model_rows: Any = None) -> dict[str, Any]:
    """The task's cheap baselines (fitted on the same splits) compared with the model, and a
    loud warning when the model does not beat them (on test when there is one, else
    validation).

    The metric is the task's ``comparison_metric`` in the direction its ``higher_is_better``
    declares (a regressor: ``rmse``, lower better); without one, ``accuracy`` (multi-label:
    ``micro_f1``, as subset accuracy is harsh on many tags).

    With ``model_rows`` (the model's ``(truths, predictions)`` per example of the compared
    split, the task's ``comparison_rows``) and the best baseline's rows, the outcome is the
    paired bootstrap's: ``beats`` only when the 95% interval of model − baseline lies wholly
    on the model's side, ``loses`` when wholly on the baseline's, else ``ties`` (within the
    noise); ``difference``, ``difference_ci``, ``rows``, ``resamples``, ``seed``, ``level``
    and ``within_noise`` are added. Without rows it compares the two scores as they are."""
    rows = _split_rows(result)
    role = "test" if "test" in metrics else "validation"
    metric = getattr(task, "comparison_metric", None) or (
        "micro_f1" if "micro_f1" in metrics[role] else "accuracy")
    higher = getattr(task, "higher_is_better", {}).get(metric, True)
    verdict = compare_with_baseline(metrics[role], result, role, metric, higher)
    _paired(verdict, model_rows, rows.get(verdict["best"], {}).get(role))
    result["comparison"] = verdict
    noise = _interval_words(verdict)
    cheap = {"tfidf_logreg": "a bag of words",
             "majority_answer": "always giving the majority answer"}.get(verdict["best"],
                                                                          verdict["best"])
    if verdict["outcome"] == "ties":
        log.warning("the model ties the cheap baseline: %s %s %.4f %s %s %.4f%s; %s does as "
                    "well for a fraction of the cost (more epochs, a pretrained model or more "
                    "data may help the model pull ahead)", role, verdict["metric"],
                    verdict["model"], "=" if not verdict.get("within_noise") else "vs",
                    verdict["best"], verdict["best_score"], noise, cheap)
    elif verdict["outcome"] == "loses":
        log.warning("THE MODEL DOES NOT BEAT THE CHEAP BASELINE: %s %s %.4f vs %s %.4f%s; "
                    "%s does better for a fraction of the cost (more epochs, a "
                    "pretrained model or more data may help)", role, verdict["metric"],
                    verdict["model"], verdict["best"], verdict["best_score"], noise, cheap)
    else:
        log.info("baseline: %s %s %.4f (model %.4f%s)", verdict["best"], role,
                 verdict["best_score"], verdict["model"], noise)
    return result


def _interval_words(verdict: dict[str, Any]) -> str:
    """``", difference -0.004 (95% interval -0.021 to +0.013, within the noise)"`` or ``""``
    for a point comparison."""
    interval = verdict.get("difference_ci")
    if not interval:
        return ""
    low, high = interval
    where = ", within the noise" if verdict.get("outcome") == "ties" else ""
    return (f", difference {verdict['difference']:+.4f} ({verdict['level']:.0%} interval "
            f"{low:+.4f} to {high:+.4f} over {verdict['rows']:,} rows{where})")


def baseline_finding(verdict: dict[str, Any]) -> dict[str, str] | None:
    """A ``model`` finding when a cheap baseline ties or beats the model."""
    outcome = verdict.get("outcome")
    if outcome not in ("ties", "loses"):
        return None
    relation = "=" if outcome == "ties" else ("<" if verdict.get("higher_is_better", True)
                                              else ">")
    if verdict.get("within_noise"):
        relation = "~"
    return {"code": "baseline_ties" if outcome == "ties" else "baseline_wins",
            "figure": f"{verdict['split']} {verdict['metric']} {verdict['model']:.4f} "
                      f"{relation} {verdict['best']} {verdict['best_score']:.4f}"
                      + _interval_words(verdict),
            "message": ("the model ties the cheap baseline (the gap is within the noise of "
                        "the scored rows)" if verdict.get("within_noise")
                        else "the model ties the cheap baseline" if outcome == "ties"
                        else "the cheap baseline beats the model"),
            "change": "train longer (train.max_epochs), start from a pretrained model "
                      "(model.name), or add data; or ship the baseline"}


def mean_finding(verdict: dict[str, Any], metrics: dict[str, Any]) -> dict[str, str] | None:
    """A ``model`` finding when a regressor's R² interval (``model_r2_ci``, bootstrap over the
    compared rows) reaches 0: it is no better than predicting the training mean there."""
    interval = verdict.get("model_r2_ci")
    if not interval or interval[0] > 0:
        return None
    r2 = (metrics.get(verdict["split"]) or {}).get("r2")
    shown = f"{r2:.3f}" if isinstance(r2, int | float) else "?"
    message = ("the model is worse than predicting the training mean: its R² interval lies "
               "below 0" if interval[1] < 0 else
               "the model is no better than predicting the training mean: its R² interval "
               "holds 0")
    return {"code": "no_better_than_mean",
            "figure": f"{verdict['split']} R² {shown} (95% interval {interval[0]:+.3f} to "
                      f"{interval[1]:+.3f})",
            "message": message,
            "change": "check that the inputs carry signal about the target (the baselines on "
                      "the same inputs), transform a skewed target (data.target_transform: "
                      "log), drop or clip extreme targets (the data report's "
                      "target_outliers; data.target_outliers), or train longer"}


def every_tag_finding(model_rows: Any, split: str) -> dict[str, str] | None:
    """A ``model`` finding when a multi-label model tags (nearly) everything: the share of
    (row, tag) pairs it predicts is at least :data:`EVERY_TAG_SHARE` while the true share is
    at most :data:`EVERY_TAG_TRUE_SHARE`. ``model_rows``: the compared split's multi-hot
    ``(truths, predictions)`` (N, K); None (or single-label rows) gives no finding."""
    if model_rows is None:
        return None
    truth, guess = (np.asarray(a) for a in model_rows)
    if guess.ndim != 2 or not guess.size:
        return None
    predicted, true = float((guess > 0.5).mean()), float((truth > 0.5).mean())
    if predicted < EVERY_TAG_SHARE or true > EVERY_TAG_TRUE_SHARE:
        return None
    width = guess.shape[1]
    return {"code": "every_tag",
            "figure": f"{split}: {predicted:.0%} of row-tag pairs predicted ({true:.0%} are "
                      f"true; {float((guess > 0.5).sum(1).mean()):.1f} of {width} tags a row)",
            "message": "the model puts nearly every tag on nearly every row: its F1 comes "
                       "from recall, not from telling the tags apart (compare "
                       "baseline.every_tag)",
            "change": "train longer or at a learning rate near 1e-3 (train.max_epochs, "
                      "train.learning_rate), add data for the rare tags, or check that the "
                      "texts say which tags apply"}


def constant_value_finding(model_rows: Any, split: str) -> dict[str, str] | None:
    """A ``model`` finding when a regressor predicts nearly one value for every row: the
    predictions' standard deviation is below :data:`NEAR_CONSTANT_SPREAD` of the true
    values'. ``model_rows``: the compared split's ``(true values, predictions)`` (N,) in the
    target's units; None, tags or classes (2-D or integer rows) give no finding."""
    if model_rows is None:
        return None
    truth, guess = (np.asarray(a) for a in model_rows)
    if guess.ndim != 1 or guess.dtype.kind != "f" or len(guess) < 2:
        return None
    spread, true_spread = float(np.std(guess)), float(np.std(truth))
    if not true_spread > 0 or spread >= NEAR_CONSTANT_SPREAD * true_spread:
        return None
    return {"code": "near_constant",
            "figure": f"{split}: predictions' spread {spread:.4g} against the targets' "
                      f"{true_spread:.4g} ({spread / true_spread:.1%}; mean prediction "
                      f"{float(np.mean(guess)):.4g})",
            "message": "the model answers nearly the same value for every row: it learned "
                       "the mean, not the inputs",
            "change": "train longer or at another learning rate (train.max_epochs, "
                      "train.learning_rate), transform a skewed target (data.target_transform: "
                      "log), or check that the inputs say something about the target"}


def no_test_finding(metrics: dict[str, Any]) -> dict[str, str] | None:
    """A ``data`` finding when the run had no test split: every score is a validation one."""
    if "test" in metrics:
        return None
    return {"code": "no_test_split", "figure": "no data.test",
            "message": "no test file: the scores are validation scores, on the rows that also "
                       "chose the best weights, so they lean optimistic",
            "change": "set data.test to held-out rows (a file the run never trains or "
                      "validates on) for an unbiased score"}


def one_class_finding(metrics: dict[str, Any]) -> dict[str, str] | None:
    """A ``model`` finding when a classifier predicts (nearly) one class for every row.

    Reads the confusion matrix of ``metrics["test"]`` (else ``"validation"``): rows are the
    true labels, columns the predicted ones (:mod:`entrena.core.metrics`). ``None`` for a
    task without one (regression, multi-label) or a model that spreads its predictions.
    """
    role = "test" if "test" in metrics else "validation"
    confusion = (metrics.get(role) or {}).get("confusion_matrix")
    if not confusion:
        return None
    labels, matrix = confusion["labels"], confusion["matrix"]
    rows = sum(sum(row) for row in matrix)
    if len(labels) < 2 or rows == 0:
        return None
    predicted = [sum(row[j] for row in matrix) for j in range(len(labels))]
    top = max(range(len(labels)), key=predicted.__getitem__)
    share, true_share = predicted[top] / rows, sum(matrix[top]) / rows
    if share < ONE_CLASS_SHARE or true_share > ONE_CLASS_TRUE_SHARE:
        return None
    return {"code": "one_class",
            "figure": f"{role}: {share:.0%} of {rows} rows predicted {labels[top]!r} "
                      f"({true_share:.0%} are)",
            "message": "the model predicts one class for almost every row: it learned the "
                       "labels' proportions, not the inputs",
            "change": "train longer (train.max_epochs) and check train.learning_rate (a model "
                      "trained from random weights, such as a table's MLP, needs about 1e-3 "
                      "and tens of epochs; the default 1e-4 suits a pretrained transformer)"}


def one_answer_finding(metrics: dict[str, Any]) -> dict[str, str] | None:
    """A ``model`` finding when a generative model gives (nearly) one answer to every prompt.

    Reads ``answers`` of ``metrics["test"]`` (else ``"validation"``): the generations'
    commonest normalised answer, its share and the share of references that are it
    (``entrena.tasks.llm_sft.evaluation.answer_summary``). ``None`` for a task without it, a
    split of fewer than :data:`ONE_ANSWER_MIN_ROWS` prompts, or a model whose answers
    spread.
    """
    role = "test" if "test" in metrics else "validation"
    answers = (metrics.get(role) or {}).get("answers")
    if not isinstance(answers, dict):
        return None
    rows, share = answers.get("rows") or 0, answers.get("commonest_share")
    true_share = answers.get("reference_share")
    if rows < ONE_ANSWER_MIN_ROWS or share is None or true_share is None \
            or share < ONE_ANSWER_SHARE or true_share > ONE_ANSWER_TRUE_SHARE:
        return None
    return {"code": "one_answer",
            "figure": f"{role}: {share:.0%} of {rows} prompts answered "
                      f"{answers.get('commonest')!r} ({true_share:.0%} of the references are)",
            "message": "the model gives one answer to almost every prompt: it learned the "
                       "answers' proportions, not to read the prompt",
            "change": "train longer or at another learning rate (train.max_epochs, "
                      "train.learning_rate), balance the answers in the training data, and "
                      "check that the prompt holds what decides the answer; compare the "
                      "majority-answer baseline"}
