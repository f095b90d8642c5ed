"""Early stopping: end the fit when the monitored metric stops improving."""

from __future__ import annotations

from typing import Any

from entrena.callbacks.monitor import Monitor
from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["EarlyStopping"]


class EarlyStopping(Callback):
    """Stop after ``patience`` evaluations without improvement.

    Args:
        monitor: The metric and its direction.
        patience: Evaluations without improvement tolerated; 0 stops at the first one.
    """

    def __init__(self, monitor: Monitor, patience: int):
        self.monitor = monitor
        self.patience = patience
        self.best: float | None = None
        self.wait = 0
        self.stopped_at_step: int | None = None

    def on_eval_end(self, state: TrainState) -> None:
        value = self.monitor.value(state.eval_metrics)
        if self.monitor.improved(value, self.best):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait > self.patience and not state.should_stop:
            state.should_stop = True
            state.stop_reason = "early_stopping"
            self.stopped_at_step = state.step

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "wait": self.wait, "stopped_at_step": self.stopped_at_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.wait = state["wait"]
        self.stopped_at_step = state.get("stopped_at_step")
