"""Pure helpers of ``benchmarks/bench.py``: summaries, A/B order, time to accuracy.

No torch, no files: ``tests/test_bench.py`` checks them on plain lists.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

ACCURACY_TOLERANCE = 1e-9
"""Accuracies are fractions of a whole test set (multiples of 1/N); equal means reached."""


def summary(values: Sequence[float], fmt: str = "{:.2f}", unit: str = "") -> str:
    """``"median (min–max)"`` of ``values``; one value is shown alone with "(1 run)".

    Args:
        values: The measurements (at least one).
        fmt: Format of each number (``"{:.3f}"``, ``"{:,.0f}"`` …).
        unit: Appended to the median and to the max (``" s"``, ``"×"``).

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("summary() needs at least one value, got none")
    if len(values) == 1:
        return f"{fmt.format(values[0])}{unit} (1 run)"
    median = statistics.median(values)
    return (f"{fmt.format(median)}{unit} ({fmt.format(min(values))}–"
            f"{fmt.format(max(values))}{unit})")


def ab_order(pairs: int, first: str = "A", second: str = "B") -> list[str]:
    """The run order of ``pairs`` A/B pairs in one invocation: A B A B … (``2 * pairs`` names).

    Raises:
        ValueError: ``pairs`` is below 1.
    """
    if pairs < 1:
        raise ValueError(f"pairs must be at least 1, got {pairs}")
    return [first, second] * pairs


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-pair ratios ``numerators[i] / denominators[i]`` (pairs ran side by side).

    Raises:
        ValueError: The sequences differ in length, or a denominator is not positive.
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"ratios of paired runs need as many numerators as denominators, got "
                         f"{len(numerators)} and {len(denominators)}")
    if any(d <= 0 for d in denominators):
        raise ValueError(f"denominators must be positive, got {list(denominators)}")
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


def first_reaching(points: Sequence[dict[str, Any]], target: float,
                   key: str = "accuracy") -> dict[str, Any] | None:
    """The first evaluation point whose ``key`` reaches ``target`` (or ``None``).

    Args:
        points: Evaluation points in the order they happened, each with ``key`` and
            ``time_s`` (seconds since the start of the run, test-evaluation time excluded).
        target: The accuracy to reach.

    Raises:
        ValueError: The points are not in time order.
    """
    times = [p["time_s"] for p in points]
    if times != sorted(times):
        raise ValueError(f"evaluation points must be in time order, got times {times}")
    for point in points:
        if point[key] >= target - ACCURACY_TOLERANCE:
            return point
    return None


def goal_text(value: float, goal: float, what: str = "") -> str:
    """``"met"`` or ``"missed by X%"`` for a higher-is-better ratio against its goal.

    ``missed by 20%`` means the value is 20% below the goal (``value / goal = 0.80``).
    """
    if value >= goal:
        return f"met ({value:.2f}{what} ≥ {goal:g}{what})"
    return f"missed by {1 - value / goal:.0%} ({value:.2f}{what} < {goal:g}{what})"
