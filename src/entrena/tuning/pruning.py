"""The pruning callback: reports the validation metric at every evaluation and stops an
unpromising trial by raising Optuna's ``TrialPruned`` out of the loop."""

from __future__ import annotations

import logging
from collections.abc import Callable

from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["PruningCallback", "Reporter"]

log = logging.getLogger("entrena")

Reporter = Callable[[float, int], bool]
"""``report(value, step) -> should_prune``: hands a trial's intermediate value to the study."""


class PruningCallback(Callback):
    """Reports ``metric`` after each evaluation; raises ``optuna.TrialPruned`` when told to.

    Args:
        report: The study's reporter for this trial.
        metric: ``validation.loss``, ``validation.accuracy`` or ``validation.macro_f1``.
    """

    def __init__(self, report: Reporter, metric: str):
        self.report = report
        self.key = metric.split(".", 1)[1]

    def on_eval_end(self, state: TrainState) -> None:
        value = state.eval_metrics.get(self.key)
        if value is None:
            return
        if self.report(float(value), state.step):
            import optuna

            log.info("trial pruned at step %d (%s = %.4f)", state.step, self.key, value)
            raise optuna.TrialPruned(f"pruned at step {state.step}: {self.key} = {value:.4f}")
