"""The numbers every tracker logs, named as ``metrics.json`` and ``events.jsonl`` name them
(``train.loss``, ``validation.accuracy``, ``efficiency.mfu`` …), so that TensorBoard, W&B and
MLflow show the same series under the same names (the metric-key table,
:data:`entrena.core.metrics.METRIC_KEYS`, gives their units)."""

from __future__ import annotations

import math
from typing import Any

from entrena.core.state import TrainState

__all__ = ["StepScalars", "numeric", "final_scalars", "hyperparameters"]


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a flat ``{name: value}`` (booleans, ``None``, NaN, text left
    out), as floats."""
    return {key: float(value) for key, value in metrics.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value)}


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


class StepScalars:
    """The step and evaluation scalars of a fit, as the loop's events bring them.

    Every ``every_steps`` optimizer steps (at the last micro-batch): ``train.loss`` and
    ``train.learning_rate``; and the figures of the efficiency monitor's window that closed
    at this step (the same interval), as ``efficiency.<name>``:
    ``throughput_samples_per_s``, ``throughput_tokens_per_s``, ``mfu``,
    ``peak_memory_bytes``, ``data_wait_fraction`` … At each evaluation:
    ``validation.<metric>``.

    Args:
        every_steps: The interval, in optimizer steps (``train.log_every_steps``).
    """

    def __init__(self, every_steps: int):
        self.every_steps = max(1, every_steps)

    def at_batch_end(self, state: TrainState) -> dict[str, float] | None:
        """The step scalars, or ``None`` when this batch is not a logging point."""
        if not state.extras.get("last_micro", True) or state.step % self.every_steps:
            return None
        found: dict[str, Any] = {"train.loss": state.loss,
                                 "train.learning_rate": state.learning_rate}
        window = state.extras.get("efficiency_window") or {}
        if window.get("step") == state.step:
            found.update({f"efficiency.{k}": v for k, v in window.items() if k != "step"})
        return numeric(found)

    @staticmethod
    def at_eval_end(state: TrainState) -> dict[str, float]:
        return numeric({f"validation.{k}": v for k, v in state.eval_metrics.items()})


def final_scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """``metrics.json`` (without ``history``) flattened to its finite numbers:
    ``test.accuracy``, ``fit.peak_memory_bytes``, ``efficiency.mfu`` …"""
    return numeric(flatten({k: v for k, v in metrics.items() if k != "history"}))


def hyperparameters(params: dict[str, Any]) -> dict[str, float | str | bool]:
    """The resolved config flattened to values a hyperparameter table takes: numbers and
    booleans as they are, anything else (``None``, lists, paths) as text."""
    out: dict[str, float | str | bool] = {}
    for key, value in flatten(params).items():
        if isinstance(value, bool | int | float) and not (
                isinstance(value, float) and not math.isfinite(value)):
            out[key] = value
        else:
            out[key] = str(value)
    return out
