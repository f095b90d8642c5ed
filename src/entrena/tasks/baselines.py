"""How a model compares with the cheap baselines its task fits beside it (each task's own
``baselines.py``): the model's score against the best baseline's, as ``beats``, ``ties`` or
``loses``.

A model that does not beat a bag of words is not worth its training cost; the comparison is
written next to the model's scores in ``metrics.json`` under ``baseline``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TIE_DECIMALS", "compare_with_baseline"]

TIE_DECIMALS = 4
"""A model and a baseline equal at this many decimals (as logged and reported) tie."""


def compare_with_baseline(model_scores: dict[str, Any], baselines: dict[str, dict[str, Any]],
                          split: str, metric: str = "accuracy",
                          higher_is_better: bool = True) -> dict[str, Any]:
    """Whether the model beats every baseline on ``split``'s ``metric``.

    Args:
        model_scores: The model's metrics on ``split``.
        baselines: ``{name: {split: metrics, ...}}``.
        split: ``validation`` or ``test``.
        metric: What is compared (``accuracy``; a regression task's ``rmse``).
        higher_is_better: The metric's direction (the task declares it).

    Returns:
        ``{"split", "metric", "higher_is_better", "model", "best", "best_score",
        "model_beats_baseline", "outcome"}``; ``outcome`` is ``beats``, ``ties`` (equal at the
        4 decimals the logs and the report show, :data:`TIE_DECIMALS`) or ``loses``;
        ``model_beats_baseline`` is ``outcome == "beats"``.
    """
    pick = max if higher_is_better else min
    name, best = pick(((n, b[split][metric]) for n, b in baselines.items() if split in b),
                      key=lambda item: item[1])
    model = float(model_scores[metric])
    better = model > best if higher_is_better else model < best
    outcome = ("ties" if round(model, TIE_DECIMALS) == round(float(best), TIE_DECIMALS)
               else "beats" if better else "loses")
    return {"split": split, "metric": metric, "higher_is_better": higher_is_better,
            "model": model, "best": name, "best_score": float(best),
            "model_beats_baseline": outcome == "beats", "outcome": outcome}
