"""The report's first line: what happened, in one sentence with human units.

"test accuracy 86.3% vs 78.2% for the TF-IDF + logistic regression baseline; 2 epochs in
6m 37s on 2 CPU cores; cost $0" — from ``metrics.json`` (the baseline verdict, whose metric
is the task's ``comparison_metric``; ``fit``; ``cost``) and ``plan.json`` (the GPU's name).
A finding that says the model's score is hollow (:data:`HEADLINE_FINDINGS`: one class or one
answer for nearly every row, every tag, a near-constant value) follows it in the headline,
as it does in ``entrena train``'s closing table.
"""

from __future__ import annotations

from typing import Any

from entrena.core.metrics import split_scores
from entrena.reporting.formatting import baseline_name, escape, human_name, human_value
from entrena.units import format_duration, format_usd

__all__ = ["HEADLINE_FINDINGS", "headline", "headline_findings", "outcome_sentence",
           "hardware_words", "cost_words"]

HEADLINE_FINDINGS = ("one_class", "one_answer", "every_tag", "near_constant")
"""Diagnosis codes shown in the headline: the model collapsed to the data's proportions, so
its score, even one that beats a baseline, says little about what it learned."""

_VERBS = {"beats": "beats", "ties": "ties with", "loses": "does not beat"}
_STYLE = {"beats": "ok", "ties": "warn", "loses": "bad"}


def outcome_sentence(metrics: dict[str, Any]) -> tuple[str, str]:
    """``("test accuracy 86.3% vs 78.2% for the … baseline", style)``; style is ``ok``,
    ``warn`` or ``bad`` after the verdict (``""`` without a baseline)."""
    verdict = (metrics.get("baseline") or {}).get("comparison") or {}
    if verdict.get("metric") and verdict.get("split"):
        key = f"{verdict['split']}.{verdict['metric']}"
        outcome = verdict.get("outcome") or ("beats" if verdict.get("model_beats_baseline")
                                             else "loses")
        text = (f"{human_name(key)} {human_value(key, verdict.get('model'))} vs "
                f"{human_value(key, verdict.get('best_score'))} for the "
                f"{escape(baseline_name(str(verdict.get('best'))))} baseline "
                f"(the model {_VERBS.get(outcome, outcome)} it{_noise(key, verdict)})")
        return text, _STYLE.get(outcome, "")
    for split in ("test", "validation"):
        scores = split_scores(metrics.get(split))
        if scores:
            key = f"{split}.{scores[0][0]}"
            return f"{human_name(key)} {human_value(key, scores[0][1])} (no baseline)", ""
    return "no scores recorded", "warn"


def _signed(key: str, value: float) -> str:
    return ("+" if value >= 0 else "−") + human_value(key, abs(value))


def _noise(key: str, verdict: dict[str, Any]) -> str:
    """``": within the noise, 95% interval of the difference −0.4% to +1.3%"`` (a paired
    bootstrap over the scored rows), or ``""`` for a comparison of two scores alone."""
    interval = verdict.get("difference_ci")
    if not interval:
        return ""
    words = ": within the noise" if verdict.get("outcome") == "ties" else ""
    level = float(verdict.get("level") or 0.95)
    return (f"{words}{',' if words else ':'} {level:.0%} interval of the difference "
            f"{_signed(key, interval[0])} to {_signed(key, interval[1])}")


def hardware_words(fit: dict[str, Any], plan: dict[str, Any]) -> str:
    """``2 CPU cores`` or ``4x NVIDIA H100 80GB HBM3`` (the GPU's name from plan.json)."""
    device = str(fit.get("device") or "")
    world = int(fit.get("world_size") or 1)
    if device.startswith("cuda"):
        gpus = (plan.get("machine") or {}).get("gpus") or []
        name = gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else "GPU"
        return f"{world}x {name}" if world > 1 else str(name)
    if device.startswith("cpu") or not device:
        threads = int(fit.get("threads") or 0) * world
        return f"{threads:,} CPU core{'s' if threads != 1 else ''}" if threads else "CPU"
    return device


def cost_words(cost: dict[str, Any]) -> tuple[str, str]:
    """``("cost $0.42", source)``; ``$0`` for a free machine; ``cost unknown`` without a
    ``cost`` section (runs of older versions)."""
    if not isinstance(cost.get("usd"), int | float):
        return "cost unknown", "metrics.json has no cost section"
    usd = float(cost["usd"])
    text = "cost $0" if usd == 0 else f"cost {format_usd(usd)}"
    return text, str(cost.get("source") or "")


def headline_findings(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings of ``metrics["diagnosis"]`` whose code is in :data:`HEADLINE_FINDINGS`,
    in their order."""
    return [f for f in metrics.get("diagnosis") or []
            if isinstance(f, dict) and f.get("code") in HEADLINE_FINDINGS]


def headline(metrics: dict[str, Any], plan: dict[str, Any]) -> str:
    """The headline paragraph (HTML): outcome; epochs, wall time and hardware; cost (its
    source as the tooltip); then a paragraph per :func:`headline_findings` finding."""
    fit = metrics.get("fit") or {}
    cost = metrics.get("cost") or {}
    outcome, style = outcome_sentence(metrics)
    epochs = fit.get("epochs")
    wall = cost.get("wall_time_s") or fit.get("wall_time_s")
    budget = metrics.get("budget") or {}
    run = []
    if isinstance(budget.get("requested_s"), int | float):  # "1.3 epochs in 7m 42s of an 8m
        used = budget.get("used_s") or wall or 0.0          # budget"
        run.append(f"{budget.get('trained_epochs') or 0:.2g} epochs in "
                   f"{format_duration(used)} of a {format_duration(budget['requested_s'])} "
                   f"budget" + (f" (over by {format_duration(budget['overshoot_s'])})"
                                if (budget.get("overshoot_s") or 0) > 0 else ""))
    else:
        if epochs is not None:
            run.append(f"{int(epochs):,} epoch{'s' if epochs != 1 else ''}")
        if isinstance(wall, int | float):
            run.append(f"in {format_duration(wall)}")
    run.append(f"on {escape(hardware_words(fit, plan))}")
    money, source = cost_words(cost)
    warnings = "".join(
        f"<p class='headline bad'>But {escape(str(f.get('message')))} "
        f"({escape(str(f.get('figure')))}; the Diagnosis says what to change).</p>"
        for f in headline_findings(metrics))
    return (f"<p class='headline {style}'>{outcome}; {' '.join(run)}; "
            f"<span class='tip' title='{escape(source, quote=True)}'>{money}</span></p>"
            + warnings)
