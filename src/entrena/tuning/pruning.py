"""The pruning callback: reports the validation metric at every evaluation and stops an
unpromising trial by raising Optuna's ``TrialPruned`` out of the loop.

The pruner compares trials at equal reported steps. When the search space changes how many
samples an optimizer step holds (``train.batch_size``, ``train.gradient_accumulation_steps``,
``train.devices``), step 100 of one trial has seen twice the data of another's, so the
callback reports the position in the data instead (:func:`data_position`: thousandths of an
epoch, snapped to the evaluation points), and trials are compared at equal samples seen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["DATA_POSITION_KEYS", "PruningCallback", "Reporter", "data_position"]

log = logging.getLogger("entrena")

Reporter = Callable[[float, int], bool]
"""``report(value, step) -> should_prune``: hands a trial's intermediate value to the study."""


DATA_POSITION_KEYS = ("train.batch_size", "train.gradient_accumulation_steps",
                      "train.devices")
"""Search-space keys that change the samples in one optimizer step: with any of them in the
space, trials are compared at equal data seen (:func:`data_position`), not at equal steps."""


def data_position(epoch: int, batch_in_epoch: int, batches_per_epoch: int,
                  evals_per_epoch: int) -> int:
    """Where in the data an evaluation sits, in thousandths of an epoch, snapped to the
    evaluation points (``train.evals_per_epoch`` a epoch), so that trials of any batch size
    report the same value at the same share of the data seen.

    Args:
        epoch: Completed epochs (0-based current epoch).
        batch_in_epoch: Micro-batches consumed in the current epoch.
        batches_per_epoch: Micro-batches in one epoch (depends on the batch size).
        evals_per_epoch: Evaluations per epoch.

    Returns:
        ``round(1000 × k / evals_per_epoch)`` with ``k`` the evaluation point nearest to the
        data seen: 500 is half an epoch, 2000 two epochs, whatever the batch size.
    """
    evals = max(1, evals_per_epoch)
    seen = epoch + (batch_in_epoch / batches_per_epoch if batches_per_epoch else 0.0)
    return round(1000 * round(seen * evals) / evals)


class PruningCallback(Callback):
    """Reports ``metric`` after each evaluation; raises ``optuna.TrialPruned`` when told to.

    Args:
        report: The study's reporter for this trial.
        metric: ``validation.loss``, ``validation.accuracy`` or ``validation.macro_f1``.
        by_data: Report at :func:`data_position` (equal samples seen) instead of the
            optimizer step (the space varies the samples a step holds).
        evals_per_epoch: The trial's ``train.evals_per_epoch`` (for ``by_data``).
    """

    def __init__(self, report: Reporter, metric: str, *, by_data: bool = False,
                 evals_per_epoch: int = 1):
        self.report = report
        self.key = metric.split(".", 1)[1]
        self.by_data = by_data
        self.evals_per_epoch = evals_per_epoch

    def position(self, state: TrainState) -> int:
        """The step this evaluation is reported at."""
        if not self.by_data:
            return state.step
        return data_position(state.epoch, state.batch_in_epoch, state.batches_per_epoch,
                             self.evals_per_epoch)

    def on_eval_end(self, state: TrainState) -> None:
        value = state.eval_metrics.get(self.key)
        if value is None:
            return
        at = self.position(state)
        if self.report(float(value), at):
            import optuna

            where = (f"{at / 1000:g} epochs of data" if self.by_data
                     else f"step {state.step}")
            log.info("trial pruned at %s (%s = %.4f)", where, self.key, value)
            raise optuna.TrialPruned(f"pruned at {where}: {self.key} = {value:.4f}")
