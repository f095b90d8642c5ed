"""Deciding whether a monitored metric improved (shared by early stopping, checkpoints, plateau)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from entrena.core.metrics import higher_is_better

__all__ = ["Monitor"]


@dataclass(frozen=True)
class Monitor:
    """A metric to watch and which direction is better.

    Args:
        key: Dotted metric key, e.g. ``"validation.loss"``; the value is read from the latest
            evaluation as ``state.eval_metrics[key.split(".")[-1]]``.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (from the metric-key table).
        min_delta: Smallest change that counts as an improvement.
    """

    key: str = "validation.loss"
    mode: str = "auto"
    min_delta: float = 0.0

    @property
    def maximize(self) -> bool:
        if self.mode == "auto":
            return higher_is_better(self.key)
        return self.mode == "max"

    def value(self, eval_metrics: dict[str, float]) -> float:
        """The watched value from one evaluation's metrics.

        Raises:
            KeyError: The evaluation did not produce the metric.
        """
        return float(eval_metrics[self.key.split(".", 1)[1]])

    def improved(self, value: float, best: float | None) -> bool:
        """Whether ``value`` beats ``best`` by more than ``min_delta`` (any value beats None)."""
        if best is None:
            return math.isfinite(value)  # NaN or an infinite value never improves
        if self.maximize:
            return value > best + self.min_delta
        return value < best - self.min_delta
