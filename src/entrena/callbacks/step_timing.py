"""Times the fit's own first optimizer steps for the plan: planning spends no training time.

The plan's time model ``t = α + F / R`` (:mod:`entrena.planning.timing`) needs a few timed
steps of at least two sizes in FLOPs. Rather than a probe that trains a copy of the model
and throws its steps away, the fit's steps are timed: the loop already measures each step
(``state.train_time_s``) and counts its samples and padded tokens, from which the step's
FLOPs follow. The first optimizer step is left out (it pays for kernel selection and the
optimizer's state allocation, as the probe's untimed warm-up did).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["StepTiming"]

log = logging.getLogger("entrena")


class StepTiming(Callback):
    """Records ``[samples, mean padded tokens, seconds]`` of optimizer steps 2 to ``steps + 1``
    of a fit and hands them to ``on_timed`` once (or at the fit's end, if it had fewer).

    Args:
        steps: Optimizer steps to time (after the first).
        on_timed: Called with the list of ``[samples, tokens, seconds]``; an exception it
            raises is logged and ignored (the plan must never cost the run).
    """

    def __init__(self, steps: int, on_timed: Callable[[list[list[float]]], None]):
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        self.steps = steps
        self.on_timed = on_timed
        self.shapes: list[list[float]] = []
        self.done = False
        self._last: tuple[int, float, int, int] | None = None
        self._first_step: int | None = None

    def _mark(self, state: TrainState) -> None:
        self._last = (state.step, state.train_time_s, state.samples_seen,
                      state.padded_tokens_seen)

    def on_fit_start(self, state: TrainState) -> None:
        self._first_step = state.step  # a resumed fit starts past 0
        self._mark(state)

    def on_batch_end(self, state: TrainState) -> None:
        if self.done or not state.extras.get("last_micro", True) or self._last is None:
            return
        step, seconds, samples, padded = self._last
        took, size = state.train_time_s - seconds, state.samples_seen - samples
        if (state.step == step + 1 and step > (self._first_step or 0)
                and took > 0 and size > 0):
            self.shapes.append([float(size), (state.padded_tokens_seen - padded) / size, took])
        self._mark(state)
        if len(self.shapes) >= self.steps:
            self._finish()

    def on_eval_end(self, state: TrainState) -> None:
        self._mark(state)  # an evaluation between two steps is not a step's time

    def on_fit_end(self, state: TrainState) -> None:
        if not self.done and self.shapes:
            self._finish()

    def _finish(self) -> None:
        self.done = True
        try:
            self.on_timed(self.shapes)
        except Exception as exc:  # noqa: BLE001 - the plan must never cost the run
            log.warning("could not time the plan from the first steps (%s: %s)",
                        type(exc).__name__, exc)
            log.debug("step timing failure", exc_info=True)
